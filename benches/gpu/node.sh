#!/usr/bin/env bash
# A multi-GPU node: N workers, one per GPU, driven directly (one load generator per worker, all
# at once) against the same N workers through one gateway, closed loop, for N in NS; throughput,
# p99, failed requests, and the CPU per request of the gateway, the workers (/proc/PID/stat over
# the measured step) and the load generators (their own rusage), so that a limit of the
# generator cannot pass for one of the gateway. The gateway's per-address connection cap holds
# only under pressure; GATEWAY_FLAGS raises it as well, so that one generator's thousands of
# connections from 127.0.0.1 are never refused (the failed column says so).
# Then ROUNDS rounds of each, interleaved. The goal of the node-scale issue: through the gateway at
# least 90 % of the direct sum at p99 < 10 ms, the gateway's CPU per request at most a third of
# a worker's.
#
#   bash benches/gpu/node.sh [APP_DIR [MODEL_DIR]]     (from the repository root, on the GPU host)
#
# Settings: NS ("1 2 4"), ROUNDS (3), CLIENTS (896 per worker), DURATION_S (6, after WARMUP_S 2),
# WORKER_FLAGS ("--runtime-threads 8"), GATEWAY_FLAGS ("--runtime-threads 16"), LOADTEST_THREADS (8 per
# generator). Output: a table on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
app=${1:-.gpu/app}
model=${2:-models/build/gpu}
ns=${NS:-1 2 4}
rounds=${ROUNDS:-3}
clients=${CLIENTS:-896}
duration_s=${DURATION_S:-6}
warmup_s=${WARMUP_S:-2}
duration=${duration_s}s
warmup=${warmup_s}s
read -r -a worker_flags <<<"${WORKER_FLAGS:---runtime-threads 8}"
read -r -a gateway_flags <<<"${GATEWAY_FLAGS:---runtime-threads 16 --max-connections-per-address 100000}"
lt_threads=${LOADTEST_THREADS:-8}
. scripts/lib/start.sh
scratch
tck=$(getconf CLK_TCK)

# Run a command with stdout to $1, and write the CPU seconds it used (user + system) to $1.cpu.
with_cpu() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys
out = sys.argv[1]
rc = subprocess.call(sys.argv[2:], stdout=open(out, "w"), stderr=subprocess.DEVNULL)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(out + ".cpu", "w").write(f"{u.ru_utime + u.ru_stime}\n")
sys.exit(rc)
PY
}

gpus=$(nvidia-smi -L | wc -l)
echo "# node: $gpus GPUs ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)), $(nproc) cores, $(git rev-parse --short HEAD 2>/dev/null || cat "$app/commit.txt")"
printf '%-6s %-3s %-8s %10s %9s %8s %12s %12s %12s\n' round N path req_per_s p99_ms failed gw_us_per_req wk_us_per_req lt_us_per_req

for round in $(seq 1 "$rounds"); do
  for n in $ns; do
    [ "$n" -le "$gpus" ] || continue
    wpids=(); urls=()
    for i in $(seq 0 $((n - 1))); do
      start_listening "$work/w$i" "$app/worker" --listen 127.0.0.1:0 --model "$model" --device "cuda:$i" "${worker_flags[@]}"
      wpids+=("$started_pid"); urls+=("$started_url")
    done
    start_listening "$work/gw" "$app/gateway" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
      "${gateway_flags[@]}" $(printf -- '--worker %s ' "${urls[@]}")
    gpid=$started_pid; gurl=$started_url
    sleep 2
    for path in direct gateway; do
      before_w=0; for p in "${wpids[@]}"; do before_w=$((before_w + $(cpu_ticks "$p"))); done
      before_g=$(cpu_ticks "$gpid")
      lts=()
      if [ "$path" = direct ]; then
        for i in $(seq 0 $((n - 1))); do
          with_cpu "$work/lt$i.json" "$app/loadtest" --url "${urls[$i]}" -c "$clients" -d "$duration" --warmup "$warmup" --threads "$lt_threads" --json &
          lts+=($!)
        done
      else
        with_cpu "$work/lt0.json" "$app/loadtest" --url "$gurl" -c $((clients * n)) -d "$duration" --warmup "$warmup" --threads $((lt_threads * n)) --json &
        lts+=($!)
      fi
      wait "${lts[@]}"
      after_w=0; for p in "${wpids[@]}"; do after_w=$((after_w + $(cpu_ticks "$p"))); done
      after_g=$(cpu_ticks "$gpid")
      files=("$work"/lt*.json)
      [ "$path" = gateway ] && files=("$work/lt0.json")
      python3 - "$round" "$n" "$path" "$tck" $((after_w - before_w)) $((after_g - before_g)) $((duration_s + warmup_s)) "${files[@]}" <<'EOF'
import json, sys
rnd, n, path = sys.argv[1:4]
tck, wt, gt, wall = (float(a) for a in sys.argv[4:8])
runs = [json.loads(open(f).readline()) for f in sys.argv[8:]]
lt_cpu = sum(float(open(f + ".cpu").read()) for f in sys.argv[8:])
rps = sum(r["throughput_per_s"] for r in runs)
p99 = max(r["p99_ms"] for r in runs)
failed = sum(r["requests"] - r["ok"] for r in runs)
# CPU over the whole invocation (warm-up included) over the requests of that time at the measured rate.
per = lambda ticks: ticks / tck / (rps * wall) * 1e6 if rps else float("nan")
gw = f"{per(gt):12.1f}" if path == "gateway" else f"{'-':>12}"
print(f"{rnd:<6} {n:<3} {path:<8} {rps:>10.0f} {p99:>9.2f} {failed:>8} {gw} {per(wt):>12.1f} "
      f"{per(lt_cpu * tck):>12.1f}")
EOF
      rm -f "$work"/lt*.json "$work"/lt*.json.cpu
    done
    kill -TERM "$gpid" "${wpids[@]}" 2>/dev/null || true
    wait "$gpid" "${wpids[@]}" 2>/dev/null || true
    pids=()
  done
done
