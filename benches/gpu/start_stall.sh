#!/usr/bin/env bash
# The first few hundred milliseconds of load generator runs against a warm server (GPU sitting 37 in
# benches/RESULTS.md): each run is a new invocation, with new connections; each prints its phases
# and the first intervals of its 100 ms timeline (p50, p99, max, in flight, connections open,
# answers). First the worker with the fake backend (no GPU), then the worker on cuda:0.
#
#   bash benches/gpu/start_stall.sh [APP_DIR [MODEL_DIR [OUT_DIR]]]   (from the repository root;
#                                      APP_DIR [.gpu/app], as benches/gpu/run.sh; ORT_DYLIB_PATH set)
set -euo pipefail
cd "$(dirname "$0")/../.."
app=${1:-.gpu/app} model=${2:-models/build/gpu} out=${3:-benches/out/start-stall-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
flags=(--max-batch-rows 256 --max-batch-tokens 16384 --max-queue-delay 1ms --queue-capacity 8192 --runtime-threads 8)
. scripts/lib/start.sh
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
run() { # name, loadtest args...
  local name=$1; shift
  "$app/loadtest" --url "$url" --warmup 0s --interval 100ms --json --summary "$out/$name.json" "$@" >/dev/null 2>>"$out/loadtest.stderr"
  python3 - "$out/$name.json" "$name $*" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(sys.argv[2], "| opened", r["connections_opened"], [(p["label"], p["p99_ms"], p["max_ms"]) for p in r["phases"]])
for x in r["timeline"][:6]:
    l = x["latency"]
    print("  t %.2f p50 %s p99 %s max %s in flight %d connections %d ok %d"
          % (x["t"], l["p50_ms"], l["p99_ms"], l["max_ms"], x["in_flight"], x["connections"], x["ok"]))
PY
}
if [ -x "$app/fake_worker" ]; then
  start_listening "$out/fake" "$app/fake_worker" --listen 127.0.0.1:0 --model "$model" "${flags[@]}"
  url=$started_url
  run fake-c896 -c 896 --duration 2s
  run fake-open40k --rate 'steps(40000,40000, 2s)' --max-outstanding 8192
  kill "$started_pid"; wait "$started_pid" 2>/dev/null || true
fi
start_listening "$out/worker" "$app/worker" --listen 127.0.0.1:0 --model "$model" --device cuda:0 \
  --ort-lib "$ORT_DYLIB_PATH" "${flags[@]}"
url=$started_url
run gpu-c896 -c 896 --duration 2s
run gpu-open40k --rate 'steps(40000,40000, 2s)' --max-outstanding 8192
run gpu-open40k-again --rate 'steps(40000,40000, 2s)' --max-outstanding 8192
run gpu-c896x2 -c 896,896 --duration 2s
run gpu-open40k-cap256 --rate 'steps(40000,40000, 2s)' --max-outstanding 256
run gpu-c64 -c 64 --duration 2s
