"""A compact Markdown summary of one `benches/gpu/run.sh` output folder.

    python3 benches/gpu/summary.py OUT_DIR > OUT_DIR/summary.md

Reads `steps.jsonl` (one line per measured step: the load generator's phases, the worker's CPU
from /proc, per-thread-group CPU, medians of /v1/stats), `gpu.txt`, `commit.txt`, `sanity.txt` and
`perf-top.txt`/`perf-dso.txt` when perf ran. Neither the logs nor this page go into git: the
figures go into `benches/RESULTS.md` with the command that made them. (The one summary script:
`summarize.py`, an older reader of the same folder, is gone; `signal_summary.py` reads
`signal.sh`'s folder.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GOALS = "goals (issue 14): worker CPU < 30 us/request; worker alone >= 150k req/s at p99 < 10 ms; " \
        "through the gateway >= 100k req/s at p99 < 10 ms; one request alone p50 < 2 ms"


def read(path: Path) -> str:
    return path.read_text().strip() if path.is_file() else ""


def fmt(v, digits: int = 1) -> str:
    if v is None:
        return ""
    if isinstance(v, (int, float)) and abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def errors(p: dict) -> int:
    return sum((p.get("errors") or {}).values())


def closed_table(rows: list[dict]) -> list[str]:
    gw = any(r.get("gateway_cores") for r in rows)
    head = "| step | req/s | p50 ms | p99 ms | max ms | errors | worker cores | worker µs/req | GPU util % | batch rows | batch ms |"
    head += " gateway cores | gateway µs/req |" * gw + " machine busy cores | steal cores |"
    out = [head, "|---|" + "---:|" * (head.count("|") - 2)]
    for r in rows:
        for p in r["phases"]:
            line = (f"| {r['label']} | {fmt(p['throughput_per_s'])} | {fmt(p['p50_ms'], 2)} | {fmt(p['p99_ms'], 2)} | "
                    f"{fmt(p['max_ms'], 1)} | {errors(p)} | {fmt(r['worker_cores'], 2)} | {fmt(r['cpu_us_per_req'])} | "
                    f"{fmt(r['gpu_util_pct'], 0)} | {fmt(r['mean_batch_rows'])} | {fmt(r['mean_inference_ms'], 2)} |")
            if gw:
                line += f" {fmt(r.get('gateway_cores'), 2)} | {fmt(r.get('gateway_us_per_req'))} |"
            out.append(line + f" {fmt(r.get('machine_busy_cores'), 2)} | {fmt(r.get('machine_steal_cores'), 2)} |")
    return out


def threads(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        if r.get("threads_cores"):
            parts = ", ".join(f"{k} {v:.2f}" for k, v in list(r["threads_cores"].items())[:8])
            out.append(f"- {r['section']} {r['label']}: cores by thread group: {parts}")
    return out


def knee(row: dict) -> list[str]:
    out = ["| offered req/s | achieved req/s | p50 ms | p99 ms | max ms | errors |", "|---:|---:|---:|---:|---:|---:|"]
    best = {10: None, 50: None}
    for p in row["phases"]:
        rate = p.get("rate") or 0
        ok_rate = p["throughput_per_s"] >= 0.97 * rate and errors(p) == 0
        out.append(f"| {fmt(rate)} | {fmt(p['throughput_per_s'])} | {fmt(p['p50_ms'], 2)} | {fmt(p['p99_ms'], 2)} | "
                   f"{fmt(p['max_ms'], 1)} | {errors(p)} |")
        for bound in best:
            if ok_rate and p["p99_ms"] < bound:
                best[bound] = rate
    out.append("")
    rows, ms = row.get("mean_batch_rows"), row.get("mean_inference_ms")
    # The bare session's ceiling (`benches/gpu` README: 290-308k sequences/s at batch 512, length
    # 16). A ceiling from the run's own batches would need each step's batches, and the worker
    # runs two sessions on a GPU whose batches overlap: one batch's rows over its time is not it.
    bare = (290_000, 308_000)
    for bound, rate in best.items():
        ratio = f", {rate / bare[1]:.0%}-{rate / bare[0]:.0%} of the bare session's ceiling" if rate else ""
        out.append(f"- knee at p99 < {bound} ms: **{fmt(rate) if rate else 'none of the steps'}** req/s{ratio}")
    out.append("- the bare session's ceiling: 290-308k sequences/s at batch 512, length 16 (`benches/gpu` README)")
    if rows and ms:
        out.append(f"- batches over the whole knee run (every step): median {rows:.1f} rows in {ms:.2f} ms")
    out.append(f"- worker CPU over the knee run: {fmt(row['cpu_us_per_req'])} µs/request, {fmt(row['worker_cores'], 2)} cores")
    return out


def main() -> None:
    d = Path(sys.argv[1])
    steps = [json.loads(l) for l in (d / "steps.jsonl").read_text().splitlines() if l.strip()] \
        if (d / "steps.jsonl").is_file() else []
    by = {}
    for s in steps:
        by.setdefault(s["section"], []).append(s)
    print(f"# GPU sitting, {read(d / 'commit.txt').splitlines()[0] if read(d / 'commit.txt') else ''}")
    print()
    print(f"Machine: {read(d / 'gpu.txt').replace(chr(10), '; ')}. Made by `benches/gpu/run.sh`, summarized by "
          "`benches/gpu/summary.py`.")
    print(GOALS + ".")
    sanity = [l for l in read(d / "sanity.txt").splitlines() if l.startswith("sanity")]
    if sanity:
        print(f"Answers to models/sanity.json: {sanity[-1]}.")
    titles = {"worker": "Worker alone (closed loop)", "gateway": "Through the gateway (closed loop; worker figures are the worker's)",
              "variants": "Worker variants at 512 clients", "fake": "Fake backend (no GPU): the host side alone"}
    for section in ["worker", "gateway", "variants", "fake"]:
        if section in by:
            print(f"\n## {titles[section]}\n")
            print("\n".join(closed_table(by[section])))
            t = threads(by[section])
            if t:
                print()
                print("\n".join(t))
    if "knee" in by:
        print("\n## The knee (open loop, rising steps)\n")
        print("\n".join(knee(by["knee"][0])))
    load = [json.loads(l) for l in read(d / "perf-load.json").splitlines() if l.startswith("{")]
    clients = load[-1]["concurrency"] if load else 512
    for name, title in [("perf-dso.txt", "perf, by shared object"), ("perf-top.txt", "perf, top symbols")]:
        text = read(d / name)
        if text:
            print(f"\n## {title} (worker at {clients} clients)\n\n```\n" + "\n".join(text.splitlines()[:25]) + "\n```")


if __name__ == "__main__":
    main()
