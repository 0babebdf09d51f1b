"""A short Markdown summary of one `benches/gpu/run.sh` output folder, for `benches/gpu/results/`.

    python3 benches/gpu/summarize.py OUT_DIR [TITLE] > benches/gpu/results/DATE-runN.md

Reads what run.sh writes: `gpu.txt` (the GPU), `NAME.jsonl` (the load generator's `--json` line per
step, direct to a worker) with `NAME-telemetry.jsonl` (medians of /v1/stats during each step),
`gateway.jsonl` with `signals.jsonl` (the gateway's scaling signal read during each step),
`pools.json` (the gateway's view of its worker at the end); from the `*.log` files, the `# ` note
lines, `telemetry c=N: {...}` lines (when `NAME-telemetry.jsonl` is missing) and the last metrics
lines printed (`worker_*`, `gateway_*`).
Raw logs stay out of git: this summary is what is kept.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def lines(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(ANSI.sub("", l)) for l in path.read_text().splitlines() if l.strip().startswith("{")]


def num(v, digits: int = 1) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and not v.is_integer() or digits > 0 and isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}"


def errors(step: dict) -> str:
    e = step.get("errors") or {}
    return str(sum(e.values())) if e else "0"


def logs(out: Path) -> list[str]:
    return [ANSI.sub("", l) for p in sorted(out.glob("*.log")) for l in p.read_text(errors="replace").splitlines()]


def telemetry_in_logs(out: Path, name: str) -> list[dict]:
    """`telemetry c=N: {...}` lines printed after the `== NAME:` header line in the logs."""
    found, current = [], None
    for l in logs(out):
        if l.startswith("== "):
            current = l[3:].split(":")[0].split(" ")[0]
        elif current == name and l.startswith("telemetry c="):
            found.append(json.loads(l.split(": ", 1)[1]))
    return found


def direct(out: Path, name: str) -> list[str]:
    steps = lines(out / f"{name}.jsonl")
    tele = lines(out / f"{name}-telemetry.jsonl") or telemetry_in_logs(out, name)
    rows = [
        f"### `{name}`: the load generator straight to the worker",
        "",
        "| clients | req/s | p50 ms | p90 ms | p99 ms | max ms | errors | mean batch rows | mean inference ms "
        "| backend busy | NVML device util % | process SM util % | queue load | power W |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for i, s in enumerate(steps):
        t = tele[i] if i < len(tele) else {}
        rows.append(
            f"| {s['concurrency']} | {s['throughput_per_s']:,.1f} | {s['p50_ms']} | {s['p90_ms']} | {s['p99_ms']} "
            f"| {s['max_ms']} | {errors(s)} | {num(t.get('mean_batch_rows'))} | {num(t.get('mean_inference_ms'))} "
            f"| {num(t.get('busy_fraction'))} | {num(t.get('gpu_device_util_pct'), 0)} "
            f"| {num(t.get('gpu_process_sm_pct'), 0)} | {num(t.get('queue_load'), 0)} | {num(t.get('power_w'))} |"
        )
    return rows + [""]


def gateway(out: Path) -> list[str]:
    steps = lines(out / "gateway.jsonl")
    if not steps:
        return []
    signals = {s["concurrency"]: s["signal"][0] for s in lines(out / "signals.jsonl") if s.get("signal")}
    rows = [
        "### The gateway in front of one GPU worker",
        "",
        "| clients | req/s | p50 ms | p90 ms | p99 ms | max ms | errors | signal (replicas) | queue term | GPU term |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in steps:
        g = signals.get(s["concurrency"], {})
        c = g.get("components", {})
        rows.append(
            f"| {s['concurrency']} | {s['throughput_per_s']:,.1f} | {s['p50_ms']} | {s['p90_ms']} | {s['p99_ms']} "
            f"| {s['max_ms']} | {errors(s)} | {num(g.get('signal'), 2)} | {num(c.get('queue'), 2)} | {num(c.get('gpu'), 2)} |"
        )
    pools = out / "pools.json"
    if pools.is_file():
        for pool in json.loads(pools.read_text()):
            for w in pool["workers"]:
                rows += [
                    "",
                    f"At the end, the gateway's view of its worker (`/v1/pools`): health {w['health']}, reported "
                    f"queue {w.get('reported_queue')}, GPU utilization {w.get('gpu_pct')} %, latency estimate "
                    f"{w.get('rtt_estimate_ms', 0):,.0f} ms.",
                ]
    return rows + [""]


def main() -> None:
    out = Path(sys.argv[1])
    title = sys.argv[2] if len(sys.argv) > 2 else out.name
    doc = [f"## {title}", ""]
    gpu = out / "gpu.txt"
    log_lines = logs(out)
    machine = [gpu.read_text().strip()] if gpu.is_file() else [l for l in log_lines if l.startswith("NVIDIA")][:1]
    machine += [l for l in log_lines if l.startswith("cpus:")][:1]
    if machine:
        doc += [f"Machine: {'; '.join(machine)}.", ""]
    notes = [l[2:] for l in log_lines if l.startswith("# ")]
    if notes:
        doc += ["Notes from the run:", ""] + [f"    {n}" for n in notes] + [""]
    names = sorted(p.name[: -len(".jsonl")] for p in out.glob("*.jsonl"))
    for name in names:
        if name in ("gateway", "signals") or name.endswith("-telemetry"):
            continue
        doc += direct(out, name)
    doc += gateway(out)
    metrics = [l for l in log_lines if re.match(r"^(worker|gateway)_[a-z_]+(\{[^}]*\})? ", l)]
    if metrics:
        doc += ["Metrics printed at the end of each part (`/metrics`):", "", "```"] + metrics + ["```", ""]
    print("\n".join(doc).rstrip() + "\n")


if __name__ == "__main__":
    main()
