#!/usr/bin/env bash
# GPU run, on the H100 machine, after the ONNX Runtime GPU parts are unpacked (see
# benches/gpu/README.md). Starts the worker on cuda:0 with the fp16 model, checks its answers,
# then drives it with the bundled load generator at several fixed concurrencies while sampling
# /v1/stats (NVML device utilization, process SM utilization, backend busy fraction, batch rows).
# Ends with the int8 model on the CPU execution provider of the same machine, for reference.
#
# Then the gateway in front of one GPU worker: load through it while reading its scaling signal.
#
#   bash benches/gpu/run.sh APP_DIR MODEL_DIR OUT_DIR    (from the repository root)
set -euo pipefail
app=${1:?app dir}; model=${2:?model dir}; out=${3:?out dir}
. "$(dirname "$0")/../../scripts/lib/start.sh"
. /tmp/gpu/env.sh
mkdir -p "$out"
conc=${CONCURRENCY:-1,8,32,128,512}
dur=${DURATION_S:-8}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
nproc | sed 's/^/cpus: /'

start_worker() { # name, extra args...
  local name=$1; shift
  start_listening "$out/$name" "$app/worker" --listen 127.0.0.1:0 --ort-lib "$ORT_DYLIB_PATH" "$@"
  addr=$started_url wpid=$started_pid
}

sample_stats() { # url, file: one /v1/stats line every 250 ms until killed
  while true; do curl -s "$1/v1/stats" >>"$2" && echo >>"$2"; sleep 0.25; done
}

summarize() { # stats file -> medians of the telemetry under load
  python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r["queue"]["queued"] + r["queue"]["in_flight"] > 0 or r["batches"]["count"] > 0]
def med(f):
    v = [x for x in (f(r) for r in rows) if x is not None]
    return round(statistics.median(v), 1) if v else None
gpu = lambda r: r["gpu"].get("device", {}).get("utilization_pct") if r["gpu"]["status"] == "available" else None
proc = lambda r: r["gpu"].get("process", {}).get("sm_utilization_pct") if r["gpu"]["status"] == "available" else None
print(json.dumps({
  "samples": len(rows),
  "gpu_device_util_pct": med(gpu), "gpu_process_sm_pct": med(proc),
  "busy_fraction": med(lambda r: r["batches"]["busy_fraction"]),
  "queue_load": med(lambda r: r["queue"]["queued"] + r["queue"]["in_flight"]),
  "mean_batch_rows": med(lambda r: r["batches"]["mean_rows"]),
  "mean_inference_ms": med(lambda r: r["batches"]["mean_inference_ms"]),
  "power_w": med(lambda r: r["gpu"].get("device", {}).get("power_watts")),
  "gpu_status": rows[-1]["gpu"]["status"] if rows else None,
  "gpu_reason": rows[-1]["gpu"].get("reason") if rows else None}))
PY
}

bench() { # name, concurrencies, worker args...
  local name=$1 steps=$2; shift 2
  start_worker "$name" "$@"
  echo "== $name: $addr  ($*)"
  for q in "play some jazz music" "what's the weather like in paris tomorrow" "Music"; do
    curl -s -G --data-urlencode "query=$q" "$addr/predict"; echo "  <- $q"
  done
  IFS=, read -ra cs <<<"$steps"
  for c in "${cs[@]}"; do
    : >"$out/$name-c$c.stats"
    sample_stats "$addr" "$out/$name-c$c.stats" & spid=$!
    "$app/loadtest" --url "$addr" --concurrency "$c" --duration-s "$dur" --warmup-s 2 --json | tee -a "$out/$name.jsonl"
    kill $spid; wait $spid 2>/dev/null || true
    echo "telemetry c=$c: $(summarize "$out/$name-c$c.stats" | tee -a "$out/$name-telemetry.jsonl")"
  done
  curl -s "$addr/v1/stats" >"$out/$name-final-stats.json"; echo
  curl -s "$addr/metrics" | grep -E '^worker_gpu|^worker_requests_total' | head -20
  kill -TERM $wpid; wait $wpid; echo "worker $name exit: $?"
}

via_gateway() { # concurrencies
  start_worker gw-worker --model "$model" --device cuda:0 --max-batch-rows 256 --max-batch-tokens 16384 \
    --queue-capacity 8192
  local waddr=$addr wp=$wpid
  start_listening "$out/gateway" "$app/gateway" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --worker "$waddr" --stats-interval 250ms
  local gaddr=$started_url gp=$started_pid
  local gadmin; gadmin=$(sed -n 's/^admin listening on //p' "$out/gateway.stdout")
  echo "== gateway $gaddr -> worker $waddr (cuda:0)"
  IFS=, read -ra cs <<<"$1"
  for c in "${cs[@]}"; do
    (sleep 6; printf '{"concurrency":%s,"signal":%s}\n' "$c" "$(curl -s "$gadmin/v1/signal")" >>"$out/signals.jsonl") &
    local sampler=$!
    "$app/loadtest" --url "$gaddr" --concurrency "$c" --duration-s "$dur" --warmup-s 2 --json | tee -a "$out/gateway.jsonl"
    wait $sampler
    tail -n 1 "$out/signals.jsonl"
  done
  curl -s "$gadmin/v1/pools" >"$out/pools.json"
  curl -s "$gadmin/metrics" | grep -E '^gateway_(pool_signal|worker_gpu|worker_queue|worker_pressure)' | head -20
  kill -TERM $gp $wp; wait $gp $wp 2>/dev/null || true
}

if [ "${ONLY_GATEWAY:-0}" = 1 ]; then via_gateway "${GATEWAY_CONCURRENCY:-32,512}"; exit 0; fi
bench gpu-fp16 "$conc" --model "$model" --device cuda:0 --max-batch-rows 256 --max-batch-tokens 16384 \
  --max-queue-delay-ms 1 --queue-capacity 8192
if [ -f "$model/../int8/model.onnx" ]; then
  bench cpu-int8 64 --model "$model/../int8" --device cpu --max-batch-rows 32 --max-queue-delay-ms 1
fi
via_gateway "${GATEWAY_CONCURRENCY:-32,512}"
