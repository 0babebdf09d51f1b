"""Renders benches/worker_vs_python.sh's results.tsv as side-by-side Markdown tables.

    python report.py RESULTS_TSV
"""

import csv
import sys


def main() -> None:
    rows = list(csv.DictReader(open(sys.argv[1], encoding="utf-8"), delimiter="\t"))
    by = {(r["server"], int(r["concurrency"])): r for r in rows}
    concs = sorted({int(r["concurrency"]) for r in rows})
    f = lambda r, k: float(r[k])  # noqa: E731

    print("| concurrency | worker req/s | python req/s | throughput ratio (w/p) | worker p50 ms | python p50 ms "
          "| worker p99 ms | python p99 ms | p99 ratio (w/p) | non-200 (w/p) | worker wins? |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :--- |")
    for c in concs:
        w, p = by.get(("worker", c)), by.get(("python", c))
        if not (w and p):
            continue
        tr = f(w, "rps") / f(p, "rps")
        lr = f(w, "p99_ms") / f(p, "p99_ms")
        bad_w = int(w["non200"]) + int(w["socket_errors"])
        bad_p = int(p["non200"]) + int(p["socket_errors"])
        wins = "yes" if tr > 1 and lr <= 1 else ("no (throughput)" if tr <= 1 else "no (p99)")
        print(f"| {c} | {f(w, 'rps'):.1f} | {f(p, 'rps'):.1f} | **{tr:.2f}x** | {f(w, 'p50_ms'):.2f} | "
              f"{f(p, 'p50_ms'):.2f} | {f(w, 'p99_ms'):.2f} | {f(p, 'p99_ms'):.2f} | **{lr:.2f}** | "
              f"{bad_w} / {bad_p} | {wins} |")
    print()
    print("Details (per run): requests, mean and p90 latency, the server's CPU time as a share of the run "
          "(one pinned core = 100 %), the CPU time other processes took on the server's core during the run "
          "(interference: above a few % the run is suspect), and for the worker the mean rows per batch run.")
    print()
    print("| server | concurrency | requests | mean ms | p90 ms | max ms | server CPU % | others on its core % | rows/batch |")
    print("| :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in concs:
        for s in ("worker", "python"):
            r = by.get((s, c))
            if r:
                print(f"| {s} | {c} | {r['requests']} | {f(r, 'mean_ms'):.2f} | {f(r, 'p90_ms'):.2f} | "
                      f"{f(r, 'max_ms'):.1f} | {f(r, 'server_cpu_pct'):.0f} | "
                      f"{max(0.0, f(r, 'core_busy_pct') - f(r, 'server_cpu_pct')):.0f} | "
                      f"{r['rows_per_batch']} |")


if __name__ == "__main__":
    main()
