#!/usr/bin/env python3
"""Memory drift of a soak run (benches/soak.sh) judged over windows instead of single samples.

    python3 benches/soak_rss.py benches/out/soak-DATE [WARM_S [WINDOW_S]]

A single first and last sample of a small process (the gateway holds ~20 MiB) moves by more than
5 % when a few hundred connections happen to be open at either moment: per-connection buffers
are part of its memory. This prints, for every process that lived through the run, the median
RSS of the first WINDOW_S seconds after WARM_S and of the last WINDOW_S seconds (a leak moves the
medians; a burst of connections moves neither), the largest and smallest sample, and for each
process the correlation of RSS with its open descriptors (connections, mostly) and the median
RSS of the samples taken with few descriptors open (at most the run's median count) in both
windows: memory compared at comparable load.
"""
import collections
import csv
import statistics
import sys


def main() -> None:
    run_dir = sys.argv[1]
    warm_s = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    window_s = float(sys.argv[3]) if len(sys.argv) > 3 else 600.0
    rows = collections.defaultdict(list)
    for r in csv.DictReader(open(f"{run_dir}/rss.csv")):
        fds = int(r["fds"]) if r.get("fds") else None
        rows[(r["process"], r["pid"])].append((float(r["t_s"]), int(r["rss_kib"]) / 1024, fds))
    end = max(s[-1][0] for s in rows.values())
    print(f"RSS over windows (MiB): first = median of t in [{warm_s:.0f}, {warm_s + window_s:.0f}) s, "
          f"last = median of the final {window_s:.0f} s; drift = last / first - 1.")
    print()
    print("| process | samples | first | last | drift | min | max | corr(RSS, descriptors) | few-descriptor first / last |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    verdict = []
    for (name, pid), s in sorted(rows.items(), key=lambda kv: (kv[0][0] != "gateway", kv[0][0])):
        if s[-1][0] - s[0][0] < 0.75 * end:
            continue  # restarted workers: too short-lived for a drift
        first = [x for x in s if warm_s <= x[0] < warm_s + window_s]
        last = [x for x in s if x[0] >= end - window_s]
        if not first or not last:
            continue
        m1, m2 = statistics.median(x[1] for x in first), statistics.median(x[1] for x in last)
        drift = 100 * (m2 / m1 - 1)
        corr, few = "", ""
        fds = [x[2] for x in s if x[2] is not None]
        if len(fds) == len(s) and len(set(fds)) > 1 and len({x[1] for x in s}) > 1:
            corr = f"{statistics.correlation([x[1] for x in s], fds):+.2f}"
            cut = statistics.median(fds)
            f1 = [x[1] for x in first if x[2] <= cut]
            f2 = [x[1] for x in last if x[2] <= cut]
            if f1 and f2:
                few = f"{statistics.median(f1):.1f} / {statistics.median(f2):.1f}"
        print(f"| {name} | {len(s)} | {m1:.1f} | {m2:.1f} | {drift:+.1f} % | {min(x[1] for x in s):.1f} | "
              f"{max(x[1] for x in s):.1f} | {corr} | {few} |")
        if name != "loadtest":
            verdict.append((name, drift))
    print()
    if verdict:
        worst = max(verdict, key=lambda v: abs(v[1]))
        ok = abs(worst[1]) <= 5
        print(f"Servers that lived the whole run, windowed drift: "
              f"{', '.join(f'{n} {d:+.1f} %' for n, d in verdict)}; "
              f"{'all within 5 %' if ok else 'NOT all within 5 % (' + worst[0] + ')'}.")


if __name__ == "__main__":
    main()
