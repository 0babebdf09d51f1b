#!/usr/bin/env bash
# The worker's host CPU per request, this tree against another revision (main by default), side by
# side in one run. Both are built as the worker with the fake backend (worker/examples/
# fake_worker.rs: the whole host side, listener to answer, and no inference), so the figure is the
# worker's own cost, not the model's. Each runs pinned to SERVER_CPU and is driven by the bundled
# load generator (pinned to LOAD_CPU) at fixed open-loop rates; the worker's CPU time (user +
# system, /proc/PID/stat) over the measured run, divided by the requests answered, is its CPU per
# request. Rounds alternate base and current at every rate.
#
#   benches/host_cost.sh [BASE_REF]        (from anywhere in the repository; BASE_REF [main])
#
# Settings: RATES ["2000 8000"] requests/s, DURATION [10s] measured per run (after WARMUP [2s] at
# the same rate), ROUNDS [3], SERVER_CPU [1], LOAD_CPU [0], WORKER_ARGS [""] (extra flags for both
# workers), BASE_WORKER / CURRENT_WORKER (prebuilt fake_worker binaries: no build).
# Output under benches/out/host_cost-DATE/ (ignored): results.tsv and the workers' logs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
base_ref=${1:-main}
RATES=${RATES:-"2000 8000"}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
ROUNDS=${ROUNDS:-3}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
WORKER_ARGS=${WORKER_ARGS:-}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
out=benches/out/host_cost-$(date -u +%Y%m%dT%H%M%SZ)

. benches/lib/fake_workers.sh
build_fake_workers "$out" "$base_ref"

. scripts/lib/start.sh
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
hz=$(getconf CLK_TCK)

echo -e "round\trate\tbuild\tok\treq_per_s\tp99_ms\tcpu_s\tcpu_us_per_req" >"$out/results.tsv"
for round in $(seq 1 "$ROUNDS"); do
  for rate in $RATES; do
    for side in base current; do
      bin=$BASE_WORKER; [ "$side" = current ] && bin=$CURRENT_WORKER
      # shellcheck disable=SC2086
      start_listening "$out/$side-r$round-$rate" taskset -c "$SERVER_CPU" "$bin" --listen 127.0.0.1:0 \
        --queue-capacity 8192 $WORKER_ARGS
      url=$started_url pid=$started_pid
      taskset -c "$LOAD_CPU" "$loadtest" --url "$url" --rate "$rate" --duration "$WARMUP" --warmup 0s --json >/dev/null
      before=$(cpu_ticks "$pid")
      line=$(taskset -c "$LOAD_CPU" "$loadtest" --url "$url" --rate "$rate" --duration "$DURATION" --warmup 0s --json | tail -n 1)
      after=$(cpu_ticks "$pid")
      kill "$pid"; wait "$pid" 2>/dev/null || true
      python3 - "$round" "$rate" "$side" "$((after - before))" "$hz" "$line" <<'PY' | tee -a "$out/results.tsv"
import json, sys
round_, rate, side, ticks, hz, line = sys.argv[1:]
r = json.loads(line)
cpu = int(ticks) / int(hz)
ok = r["ok"]
print(f"{round_}\t{rate}\t{side}\t{ok}\t{r['throughput_per_s']:.0f}\t{r['p99_ms']:.2f}\t{cpu:.2f}\t{cpu * 1e6 / max(ok, 1):.1f}")
PY
    done
  done
done

python3 - "$out/results.tsv" "$base_ref" <<'PY'
import collections, csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
by = collections.defaultdict(list)
for r in rows:
    by[(int(r["rate"]), r["build"])].append(r)
print()
print(f"Worker host CPU per request (fake backend), base = {sys.argv[2]}, current = this tree; per round")
print()
print("| rate (req/s) | base µs/req | current µs/req | base range | current range | current/base | p99 ms base, current |")
print("|---:|---|---|---|---|---:|---|")
for rate in sorted({k[0] for k in by}):
    b, c = by[(rate, "base")], by[(rate, "current")]
    bu = [float(r["cpu_us_per_req"]) for r in b]
    cu = [float(r["cpu_us_per_req"]) for r in c]
    ratio = sorted(x / y for x, y in zip(cu, bu))
    p99 = ", ".join(f"{x['p99_ms']} / {y['p99_ms']}" for x, y in zip(b, c))
    print(f"| {rate} | {', '.join(f'{x:.1f}' for x in bu)} | {', '.join(f'{x:.1f}' for x in cu)} | "
          f"{min(bu):.1f}-{max(bu):.1f} | {min(cu):.1f}-{max(cu):.1f} | {ratio[0]:.2f}-{ratio[-1]:.2f} | {p99} |")
PY
echo "raw: $out/results.tsv"
