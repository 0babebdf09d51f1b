#!/usr/bin/env bash
# The scaling signal on real hardware (issue 14), in about three minutes on the GPU machine:
#
#   A. a step load through the gateway on one GPU worker (open loop, `steps(...)`): NVML's device
#      utilization stays low while the worker's queue grows, and the signal follows the queue.
#      The load generator's HTML report (offered vs achieved rate, latency, the pool's signal)
#      and its JSON summary are written beside a 0.5 s series of the worker's /v1/stats and the
#      gateway's /v1/signal.
#   B. the same GPU shared with another process: a second worker, outside the gateway's pool,
#      driven hard by its own load generator, while the pool's worker gets light load. The device
#      figure counts the other process's work; the signal's GPU term uses the worker's own
#      (per-process) SM utilization, so it stays low.
#
#   bash benches/gpu/signal.sh [APP_DIR [MODEL_DIR [OUT_DIR]]]      (from the repository root)
#
# APP_DIR holds worker, gateway and loadtest (benches/gpu/stage.sh); MODEL_DIR the fp16 model;
# ORT_DYLIB_PATH and LD_LIBRARY_PATH as for benches/gpu/run.sh. Settings: RATES (step rates,
# default "5000 20000 60000 100000 60000 20000 5000"), STEP [12s], SHARED_S [25s] at SHARED_RATE [2000], OTHER_S [40s: the
# other process's load, started 8 s before], DEVICE [cuda:0].
# Prints a Markdown summary (benches/gpu/signal_summary.py) to stdout and OUT_DIR/signal.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
app=${1:-target/release}; model=${2:-models/build/gpu}
out=${3:-benches/out/gpu-signal-$(date -u +%Y%m%dT%H%M%SZ)}
RATES=${RATES:-"5000 20000 60000 100000 60000 20000 5000"}
STEP=${STEP:-12s}
SHARED_S=${SHARED_S:-25s}
DEVICE=${DEVICE:-cuda:0}
WORKER_FLAGS=${WORKER_FLAGS:---max-batch-rows 256 --max-batch-tokens 16384 --max-queue-delay 1ms --queue-capacity 8192}
mkdir -p "$out"
. scripts/lib/start.sh
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

# shellcheck disable=SC2086
start_listening "$out/worker" "$app/worker" --listen 127.0.0.1:0 --model "$model" --device "$DEVICE" \
  --gpu-sample-interval 200ms $WORKER_FLAGS
w=$started_url; pids+=("$started_pid")
start_listening "$out/gateway" "$app/gateway" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --worker "$w" --target-queue 32 --target-gpu 70 --stats-interval 250ms --signal-fall 10s
gw=$started_url; pids+=("$started_pid")
admin=$(sed -n 's/^admin listening on //p' "$out/gateway.stdout")
echo "worker $w, gateway $gw (admin $admin)"

# sample PHASE FILE: one JSON line every 0.5 s with the worker's stats and the pool's signal;
# prints the sampler's pid.
sample() {
  python3 - "$1" "$w" "$admin" >"$2" <<'PY' &
import json, sys, time, urllib.request
phase, w, admin = sys.argv[1:4]
def get(u):
    try:
        with urllib.request.urlopen(u, timeout=1) as r: return json.load(r)
    except Exception as e: return {"error": str(e)}
while True:
    print(json.dumps({"t": time.time(), "phase": phase, "stats": get(w + "/v1/stats"),
                      "signal": get(admin + "/v1/signal")}), flush=True)
    time.sleep(0.5)
PY
  echo $!
}

echo "== A. step load through the gateway: $RATES, $STEP each"
spid=$(sample step "$out/step-series.jsonl")
"$app/loadtest" --url "$gw" --rate "steps(${RATES}, ${STEP})" --gateway-admin "$admin" --pool default \
  --title "One H100 worker behind the gateway: step load" \
  --report "$out/step-report.html" --summary "$out/step-summary.json" >"$out/step-loadtest.txt" 2>&1 || true
kill "$spid" 2>/dev/null || true
tail -n 20 "$out/step-loadtest.txt"

echo "== B. the GPU shared with another process ($SHARED_S)"
# shellcheck disable=SC2086
start_listening "$out/other" "$app/worker" --listen 127.0.0.1:0 --model "$model" --device "$DEVICE" $WORKER_FLAGS
other=$started_url; pids+=("$started_pid")
"$app/loadtest" --url "$other" -c 512 -d "${OTHER_S:-40s}" >"$out/other-loadtest.txt" 2>&1 &
olt=$!
sleep 8   # the other process reaches its steady load (a wait for a load to build, not for a state)
spid=$(sample shared "$out/shared-series.jsonl")
"$app/loadtest" --url "$gw" --rate "${SHARED_RATE:-2000}" -d "$SHARED_S" --summary "$out/shared-summary.json" \
  >"$out/shared-loadtest.txt" 2>&1 || true
kill "$spid" 2>/dev/null || true
wait "$olt" 2>/dev/null || true

python3 benches/gpu/signal_summary.py "$out" | tee "$out/signal.md"
