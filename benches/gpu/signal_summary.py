"""Markdown summary of benches/gpu/signal.sh's output folder (standard library only).

    python3 benches/gpu/signal_summary.py OUT_DIR

A: the step load, in 3-second bins: the load generator's achieved rate and p99 per phase (from its
JSON summary), and per bin the worker's arrival rate, queue (queued + in flight), batch rows, NVML
device and per-process utilization, and the pool's signal with its queue and GPU terms.
B: the shared GPU: the same columns while another process loads the device.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(path: Path):
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def fields(rec):
    st, sig = rec.get("stats", {}), rec.get("signal", [])
    gpu = st.get("gpu", {})
    pool = sig[0] if isinstance(sig, list) and sig else {}
    comp = pool.get("components", {})
    dev = (gpu.get("device") or {}).get("utilization_pct") if gpu.get("status") == "available" else None
    proc = (gpu.get("process") or {}).get("sm_utilization_pct") if gpu.get("status") == "available" else None
    q = st.get("queue", {})
    return {
        "arrival": (st.get("rates") or {}).get("arrival_per_s"),
        "queue": (q.get("queued", 0) + q.get("in_flight", 0)) if q else None,
        "rows": (st.get("batches") or {}).get("mean_rows"),
        "batch_ms": (st.get("batches") or {}).get("mean_inference_ms"),
        "dev": dev,
        "proc": proc,
        "shared": gpu.get("shared"),
        "signal": pool.get("signal"),
        "sq": comp.get("queue"),
        "sg": comp.get("gpu"),
    }


def mean(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return sum(xs) / len(xs) if xs else None


def fmt(x, nd=1):
    return "n/a" if x is None else f"{x:,.{nd}f}"


def table(recs, bin_s=3.0):
    if not recs:
        return ["(no samples)"]
    t0 = recs[0]["t"]
    bins: dict[int, list] = {}
    for r in recs:
        bins.setdefault(int((r["t"] - t0) // bin_s), []).append(fields(r))
    out = [
        "| t (s) | worker arrivals/s | queue | batch rows | batch ms | NVML device % | own process % | shared | signal | queue term | GPU term |",
        "|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|---:|",
    ]
    for b in sorted(bins):
        fs = bins[b]
        g = lambda k: mean([f[k] for f in fs])  # noqa: E731
        shared = any(f["shared"] for f in fs)
        out.append(
            f"| {b * bin_s:.0f} | {fmt(g('arrival'), 0)} | {fmt(g('queue'), 0)} | {fmt(g('rows'))} | {fmt(g('batch_ms'), 2)} "
            f"| {fmt(g('dev'), 0)} | {fmt(g('proc'), 0)} | {'yes' if shared else 'no'} | {fmt(g('signal'), 2)} "
            f"| {fmt(g('sq'), 2)} | {fmt(g('sg'), 2)} |"
        )
    return out


def phases(summary_path: Path):
    if not summary_path.exists():
        return ["(no load generator summary)"]
    s = json.loads(summary_path.read_text())
    out = ["| phase | offered/s | achieved/s | p50 ms | p99 ms | failed |", "|---|---:|---:|---:|---:|---:|"]
    for p in s.get("phases", []) + [dict(s.get("total", {}), label="whole run")]:
        failed = p.get("requests", 0) - p.get("ok", 0)
        out.append(
            f"| {p.get('label', '?')} | {fmt(p.get('rate'), 0)} | {fmt(p.get('throughput_per_s'), 0)} "
            f"| {fmt(p.get('p50_ms'), 2)} | {fmt(p.get('p99_ms'), 2)} | {failed} {dict(p.get('errors') or {}) or ''} |"
        )
    return out


def main():
    out = Path(sys.argv[1])
    lines = ["## The signal on one H100 (benches/gpu/signal.sh)", "", "### A. Step load through the gateway", ""]
    lines += phases(out / "step-summary.json") + [""] + table(rows(out / "step-series.jsonl"))
    lines += ["", "### B. The GPU shared with another process (pool's worker at 2,000 req/s)", ""]
    lines += phases(out / "shared-summary.json") + [""] + table(rows(out / "shared-series.jsonl"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
