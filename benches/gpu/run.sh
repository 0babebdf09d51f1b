#!/usr/bin/env bash
# The GPU run: the worker on cuda:0 with the fp16 model, its answers checked, then driven by the
# bundled load generator at several fixed concurrencies while /v1/stats is sampled (NVML device
# utilization, process SM utilization, backend busy fraction, batch rows); then the int8 model on
# the CPU execution provider of the same machine, for reference; then the gateway in front of one
# GPU worker, loaded while its scaling signal is read. Ends with a Markdown summary
# (benches/gpu/summarize.py) to commit as benches/gpu/results/DATE-runN.md; raw output stays in
# OUT_DIR.
#
#   bash benches/gpu/run.sh [APP_DIR [MODEL_DIR [OUT_DIR]]]      (from the repository root)
#
#   APP_DIR    the worker, gateway and loadtest binaries [target/release]
#              (cargo build --release -p worker -p gateway -p loadtest)
#   MODEL_DIR  the fp16 model [models/build/gpu] (scripts/setup-gpu.sh makes it, with ONNX
#              Runtime's CUDA build)
#   OUT_DIR    [benches/out/gpu-UTC-DATE]
#
# Needs an NVIDIA driver, CUDA 13 and cuDNN 9 libraries on LD_LIBRARY_PATH (or in a Python
# environment's nvidia-* wheels, which are looked up below), and onnxruntime-gpu's library with its
# CUDA provider: ORT_DYLIB_PATH, or `scripts/fetch-ort.sh gpu` fetches it into .cache/ort/gpu/.
# Settings: CONCURRENCY [1,8,32,128,512], DURATION_S [8], GATEWAY_CONCURRENCY [32,512],
# INT8_MODEL [models/snips-minilm-l6] (the CPU reference; empty: none), ONLY_GATEWAY=1 (the
# gateway part only).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
app=${1:-target/release}; model=${2:-models/build/gpu}
out=${3:-benches/out/gpu-$(date -u +%Y%m%dT%H%M%SZ)}
. scripts/lib/start.sh
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
for b in worker gateway loadtest; do
  [ -x "$app/$b" ] || { echo "$app/$b missing: cargo build --release -p worker -p gateway -p loadtest" >&2; exit 1; }
done
ls "$model"/*.onnx >/dev/null 2>&1 || { echo "no model in $model: scripts/setup-gpu.sh makes the fp16 model" >&2; exit 1; }
ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/fetch-ort.sh gpu)}
export ORT_DYLIB_PATH
# The CUDA provider loads CUDA 13's cuBLAS/cudart and cuDNN 9 by name: add the folders of any that
# the dynamic linker cannot find already (system-wide, or in Python's nvidia-* wheels).
for name in libcublasLt.so.13 libcudart.so.13 libcudnn.so.9 libcurand.so.10 libcufft.so.12; do
  ldconfig -p 2>/dev/null | grep -q "$name" && continue
  found=$(find / -name "$name" -not -path '/proc/*' 2>/dev/null | head -n 1 || true)
  if [ -n "$found" ]; then LD_LIBRARY_PATH=$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  else echo "warning: $name not found; the CUDA execution provider may not load" >&2; fi
done
export LD_LIBRARY_PATH=$(dirname "$ORT_DYLIB_PATH")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$out"
exec > >(tee -a "$out/run.log") 2>&1
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
  python3 -c 'import json; [print(q["text"]) for q in json.load(open("models/sanity.json"))["queries"]]' |
    while IFS= read -r q; do curl -s -G --data-urlencode "query=$q" "$addr/predict"; echo "  <- $q"; done
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

summary() {
  python3 benches/gpu/summarize.py "$out" "GPU run, $(date -u '+%Y-%m-%d %H:%M UTC'), at $(git rev-parse --short HEAD)" \
    >"$out/summary.md"
  echo "summary: $out/summary.md (commit it as benches/gpu/results/DATE-runN.md, linked from benches/RESULTS.md)"
}

if [ "${ONLY_GATEWAY:-0}" = 1 ]; then via_gateway "${GATEWAY_CONCURRENCY:-32,512}"; summary; exit 0; fi
bench gpu-fp16 "$conc" --model "$model" --device cuda:0 --max-batch-rows 256 --max-batch-tokens 16384 \
  --max-queue-delay 1ms --queue-capacity 8192
int8=${INT8_MODEL-models/snips-minilm-l6}
if [ -n "$int8" ] && [ -f "$int8/model.onnx" ]; then
  bench cpu-int8 64 --model "$int8" --device cpu --max-batch-rows 32 --max-queue-delay 1ms
fi
via_gateway "${GATEWAY_CONCURRENCY:-32,512}"
summary
