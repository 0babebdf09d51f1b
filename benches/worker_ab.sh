#!/usr/bin/env bash
# Two worker builds side by side (a before/after of a change): each pinned to the same core, the
# same wrk load on another core and the same SNIPS query mix, alternating A and B at every
# concurrency for ROUNDS rounds. Prints req/s and p99 of each run and B's throughput over A's.
#
#   benches/worker_ab.sh A_BIN B_BIN
#   e.g. git stash; cargo build --release -p worker; cp target/release/worker /tmp/worker-a; ...
#
# Settings: CONCURRENCIES ["1 4 16 64"], DURATION [10] s per run (after 2 s of warm-up), ROUNDS [3],
# THREADS [1] ONNX Runtime threads, SERVER_CPU [1], LOAD_CPU [0]. Needs wrk, taskset, python3.
# Output under benches/out/worker_ab-DATE/ (ignored).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
a_bin=${1:?usage: worker_ab.sh A_BIN B_BIN}; b_bin=${2:?usage: worker_ab.sh A_BIN B_BIN}
CONCURRENCIES=${CONCURRENCIES:-"1 4 16 64"}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-1}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
run_dir=benches/out/worker_ab-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$run_dir"
ORT_DYLIB_PATH=$(scripts/fetch-ort.sh)
export ORT_DYLIB_PATH
python3 benches/lib/queries.py models/data/snips "$run_dir/queries" >&2
paths="$run_dir/queries/paths.txt"

. scripts/lib/start.sh
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

echo -e "round\tconcurrency\tbuild\treq_per_s\tp99_ms" >"$run_dir/results.tsv"
for round in $(seq 1 "$ROUNDS"); do
  for c in $CONCURRENCIES; do
    for side in A B; do
      bin=$a_bin; [ "$side" = B ] && bin=$b_bin
      start_listening "$run_dir/$side-r$round-c$c" taskset -c "$SERVER_CPU" "$bin" --listen 127.0.0.1:0 --intra-op-threads "$THREADS"
      url=$started_url pid=$started_pid
      taskset -c "$LOAD_CPU" wrk -t1 -c"$c" -d2s -s benches/lib/wrk_snips.lua "$url" -- "$paths" >/dev/null
      line=$(taskset -c "$LOAD_CPU" wrk -t1 -c"$c" -d"${DURATION}s" -s benches/lib/wrk_snips.lua "$url" -- "$paths" | grep '^WRK ')
      rps=$(sed -n 's/.*rps=\([0-9.]*\).*/\1/p' <<<"$line"); p99=$(sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p' <<<"$line")
      echo -e "$round\t$c\t$side\t$rps\t$p99" | tee -a "$run_dir/results.tsv" >&2
      kill "$pid"; wait "$pid" 2>/dev/null || true
    done
  done
done

python3 - "$run_dir/results.tsv" "$a_bin" "$b_bin" <<'PY'
import collections, csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
by = collections.defaultdict(list)
for r in rows:
    by[(int(r["concurrency"]), r["build"])].append((float(r["req_per_s"]), float(r["p99_ms"])))
print(f"A = {sys.argv[2]}, B = {sys.argv[3]}; req/s (p99 ms) per round")
print()
print("| concurrency | A | B | B/A throughput, per round |")
print("|---:|---|---|---|")
for c in sorted({k[0] for k in by}):
    a, b = by[(c, "A")], by[(c, "B")]
    fmt = lambda xs: ", ".join(f"{r:.0f} ({p:.1f})" for r, p in xs)
    ratios = ", ".join(f"{y[0] / x[0]:.2f}" for x, y in zip(a, b))
    print(f"| {c} | {fmt(a)} | {fmt(b)} | {ratios} |")
PY
