#!/usr/bin/env bash
# Does the signal ask for the replicas the load needs? Sweeps the offered rate from 5 % to 300 %
# of one worker's capacity C with 1, 2 and 4 workers behind one gateway on its default flags,
# and prints, per step, the gateway's signal beside R = lambda / (C x u) (u = 0.7, the default),
# and the worst error against the goal: within 15 % of R, or 0.25 where R < 1.5 (docs/signal.md).
#
#   benches/signal_calibration.sh fake   # GPU-like fake workers of known capacity (B / (T + R B))
#   benches/signal_calibration.sh cpu    # the real worker and model on the CPU (--threads 1)
#   benches/signal_calibration.sh gpu    # the real worker on CUDA (the device; WORKER_ARGS says how)
#
# C, the reference: for `fake` the analytic figure; otherwise one worker measured alone, closed
# loop at two full batches (64 clients on the CPU, 1024 on a GPU) for 5 s after 2 s of warm-up
# (what a user would call its capacity), independent of the worker's own calibration.
#
# Knobs: WORKERS ("1 2 4"); FRACTIONS ("0.05 0.25 0.5 0.9 1.5 3"); STEP_S (9) seconds per step,
# the signal read over its last 3; BIN (target/release; built unless BIN is set); WORKER_ARGS
# (cpu: "--intra-op-threads 1"; gpu: "--device cuda:0 --model models/build/gpu"); DEVICES (gpu: one
# "--device" value per worker, "cuda:0 cuda:1"); GATEWAY_ARGS; LOADTEST_ARGS ("--threads 1");
# FAKE_BASE (40ms), FAKE_ROW (2ms), FAKE_ROWS (32); OUT (benches/out/signal-calibration).
# Output: a table per worker count and a summary line, on stdout and in OUT/MODE-TIME.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-fake}
workers_list=${WORKERS:-1 2 4}
fractions=${FRACTIONS:-0.05 0.25 0.5 0.9 1.5 3}
step_s=${STEP_S:-9}
read -r -a gateway_args <<<"${GATEWAY_ARGS:-}"
read -r -a loadtest_args <<<"${LOADTEST_ARGS:---threads 1}"
base=${FAKE_BASE:-40ms}; row=${FAKE_ROW:-2ms}; rows=${FAKE_ROWS:-32}
out=${OUT:-benches/out/signal-calibration}
mkdir -p "$out"
report=$out/$mode-$(date -u +%Y%m%dT%H%M%S).txt

ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/fetch-ort.sh)}
export ORT_DYLIB_PATH
if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  cargo build --release --locked -p worker -p gateway -p loadtest --bins --examples >&2
  bin=${CARGO_TARGET_DIR:-target}/release
fi

case $mode in
  fake)
    worker_cmd=("$bin/examples/fake_worker" --batch-base-time "$base" --batch-row-time "$row"
      --max-batch-rows "$rows" --min-batch-fill 0)
    read -r -a extra <<<"${WORKER_ARGS:-}"
    worker_cmd+=("${extra[@]}")
    probe_clients=$((2 * rows)) ;;
  cpu)
    read -r -a extra <<<"${WORKER_ARGS:---intra-op-threads 1}"
    worker_cmd=("$bin/worker" "${extra[@]}")
    probe_clients=64 ;;
  gpu)
    read -r -a extra <<<"${WORKER_ARGS:---model models/build/gpu}"
    worker_cmd=("$bin/worker" "${extra[@]}")
    probe_clients=1024 ;;
  *) echo "usage: $0 fake|cpu|gpu" >&2; exit 2 ;;
esac
read -r -a devices <<<"${DEVICES:-}"

. scripts/lib/start.sh
scratch

# Starts worker $1 (0-based); sets $started_url.
start_worker() {
  local dev=()
  [ ${#devices[@]} -gt 0 ] && dev=(--device "${devices[$1 % ${#devices[@]}]}")
  start_listening "$work/worker-$1" "${worker_cmd[@]}" "${dev[@]}" --listen 127.0.0.1:0
}

stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

if [ "$mode" = fake ]; then
  cap=$(python3 -c "
import re
def ms(s): return float(re.match(r'([0-9.]+)', s).group(1)) * {'ms': 1e-3, 'us': 1e-6, 's': 1.0}[re.search(r'(ms|us|s)$', s).group(1)]
print($rows / (ms('$base') + $rows * ms('$row')))")
  cap_how="analytic: $rows rows / ($base + $rows x $row)"
else
  start_worker 0
  cap=$("$bin/loadtest" --url "$started_url" -c "$probe_clients" -d 5s --warmup 2s --json "${loadtest_args[@]}" |
    python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["throughput_per_s"])')
  cap_how="one worker alone, closed loop, $probe_clients clients"
  stop_all
fi

{
  echo "# signal calibration: $mode, C = $(printf '%.0f' "$cap") queries/s ($cap_how), u = 0.7"
  echo "# $(uname -n) $(nproc) cores, $(date -u +%FT%TZ), $(git rev-parse --short HEAD)"
  printf '%-8s %-9s %10s %10s %10s %8s %8s %8s   %s\n' workers fraction offered demand C_report R signal error \
    "load generator: sent/s ok/s p99_ms waited errors"
} | tee "$report"

worst=0
for n in $workers_list; do
  urls=()
  for i in $(seq 0 $((n - 1))); do
    start_worker "$i"
    urls+=(--worker "$started_url")
  done
  start_listening "$work/gateway" "$bin/gateway" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
    "${urls[@]}" "${gateway_args[@]}"
  gw=$started_url
  admin=$(sed -n 's/^admin listening on //p' "$work/gateway.stdout")
  # Until every worker is ready and the pool reads in capacity mode.
  for _ in $(seq 1 300); do
    ready=$(curl -s "$admin/v1/signal" | python3 -c 'import json,sys; p=json.load(sys.stdin)[0]; print(p["ready_workers"] if p["mode"]=="capacity" else 0)')
    [ "$ready" = "$n" ] && break
    sleep 0.1
  done
  for f in $fractions; do
    rate=$(python3 -c "print(max(1, round($f * $cap)))")
    "$bin/loadtest" --url "$gw" --rate "const($rate, ${step_s}s)" --warmup 0s --request-timeout 20s \
      "${loadtest_args[@]}" --progress never --summary "$work/lt.json" >/dev/null 2>&1 &
    lt=$!
    sleep $((step_s - 3))
    samples=$work/samples
    : >"$samples"
    for _ in 1 2 3 4 5 6; do
      curl -s "$admin/v1/signal" >>"$samples"; echo >>"$samples"
      sleep 0.5
    done
    wait "$lt" || true
    line=$(python3 - "$samples" "$n" "$f" "$rate" "$cap" "$work/lt.json" <<'EOF'
import json, statistics, sys
path, n, f, rate, cap = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
# What the load generator did: requests finished (sent) and answered well per second, p99,
# requests that waited for a free sender, and its errors by kind.
try:
    lt = json.load(open(sys.argv[6]))
    t = lt["total"]
    errs = ",".join(f"{k}:{v}" for k, v in t["errors"].items()) or "-"
    gen = f"{t['requests'] / t['seconds']:.0f} {t['throughput_per_s']:.0f} {t['p99_ms']:.1f} {lt.get('waited', 0)} {errs}"
except (OSError, ValueError, KeyError, ZeroDivisionError) as e:
    gen = f"(no summary: {e})"
pools = [json.loads(l)[0] for l in open(path) if l.strip()]
signal = statistics.median(p["signal"] for p in pools)
demand = statistics.median(p["demand_per_s"] for p in pools)
c_rep = statistics.median(p["capacity_per_s"] or 0 for p in pools)
r = rate / (cap * 0.7)
err = abs(signal - r) / r
ok = abs(signal - r) <= 0.25 if r < 1.5 else err <= 0.15
print(f"{n:<8} {f:<9} {rate:>10.0f} {demand:>10.0f} {c_rep:>10.0f} {r:>8.2f} {signal:>8.2f} {err * 100:>7.1f}%{'' if ok else '  MISS'}   {gen}")
EOF
)
    echo "$line" | tee -a "$report"
    e=$(echo "$line" | awk '{gsub("%","",$8); print $8}')
    rm -f "$work/lt.json"
    worst=$(python3 -c "print(max($worst, $e))")
  done
  stop_all
  # The gateway's and the workers' logs of this worker count, beside the report.
  for f in "$work"/gateway.stderr "$work"/worker-*.stderr; do
    if [ -s "$f" ]; then cp "$f" "${report%.txt}-n$n-$(basename "$f")"; fi
  done
done
echo "# worst relative error: ${worst}% (goal: 15 %, or 0.25 replicas where R < 1.5: MISS marks a step off it)" | tee -a "$report"
echo "# written to $report" >&2
