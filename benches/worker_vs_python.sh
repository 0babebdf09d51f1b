#!/usr/bin/env bash
# Worker vs a Python baseline (ONNX Runtime + FastAPI/uvicorn), same model file, same thread count,
# same pinned core, same load generator and query mix. Prints a side-by-side table of throughput
# and latency at fixed concurrencies; benches/RESULTS.md records a run.
#
#   benches/worker_vs_python.sh
#
# Settings (environment variables, defaults in brackets):
#   CONCURRENCIES ["1 4 16 64"]  closed-loop connections, one wrk run per value and server
#   DURATION [15]                seconds measured per run
#   WARMUP [2]                   seconds of unmeasured load before each measured run (plus 5 s
#                                per server before the sweep)
#   THREADS [1]                  ONNX Runtime intra-op threads, both servers
#   SERVER_CPU [1], LOAD_CPU [0] cores for the server under test and for wrk (taskset -c)
#   MAX_BATCH_ROWS [32], MAX_QUEUE_DELAY [0]   the worker's dynamic batching (a duration: 0, 1ms;
#                                0: no waiting while idle)
#   PY_HANDLER [sync]            the baseline's FastAPI endpoint style (see server.py)
#   MODEL_DIR [models/snips-minilm-l6]
#   WORKER_BIN [unset]           a prebuilt worker binary; unset: `cargo build --release -p worker`
#
# Needs: cargo, python3 (3.10+, with venv), taskset, curl, and wrk (apt-get installed if missing).
# Everything it makes goes under benches/out/ (ignored): the venv, the query files, one folder per
# run with the servers' logs, wrk's output, results.tsv and table.md.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

CONCURRENCIES=${CONCURRENCIES:-"1 4 16 64"}
DURATION=${DURATION:-15}
WARMUP=${WARMUP:-2}
THREADS=${THREADS:-1}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
MAX_BATCH_ROWS=${MAX_BATCH_ROWS:-32}
MAX_QUEUE_DELAY=${MAX_QUEUE_DELAY:-0}
PY_HANDLER=${PY_HANDLER:-sync}
MODEL_DIR=${MODEL_DIR:-models/snips-minilm-l6}

out_root=benches/out
run_dir="$out_root/worker_vs_python-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$run_dir"
log() { echo "[bench] $*" >&2; }

# ---------------------------------------------------------------- prerequisites
for f in model.onnx tokenizer.json config.json; do
  [ -f "$MODEL_DIR/$f" ] || { echo "missing $MODEL_DIR/$f" >&2; exit 1; }
done
data_dir=""
for d in models/data/snips ../shared/data/snips; do
  if ls "$d"/validate_*.json >/dev/null 2>&1; then data_dir=$d; break; fi
done
[ -n "$data_dir" ] || { echo "no SNIPS test data in models/data/snips/ or ../shared/data/snips/" >&2; exit 1; }

if ! command -v wrk >/dev/null; then
  log "installing wrk"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq wrk >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq wrk >/dev/null; fi
fi
command -v taskset >/dev/null || { echo "taskset (util-linux) is needed" >&2; exit 1; }

if [ -n "${WORKER_BIN:-}" ]; then
  worker_bin=$WORKER_BIN
  log "using the prebuilt $worker_bin (WORKER_BIN); not building"
else
  log "building the worker (release)"
  cargo build --release -p worker >&2
  worker_bin="${CARGO_TARGET_DIR:-$root/target}/release/worker"
fi
ort_lib=$(scripts/fetch-ort.sh)

venv="$out_root/venv"
req=benches/python_baseline/requirements.txt
if ! cmp -s "$req" "$venv/.requirements.txt" 2>/dev/null; then
  log "creating the baseline's venv in $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
  cp "$req" "$venv/.requirements.txt"
fi
py="$venv/bin/python"

"$py" benches/lib/queries.py "$data_dir" "$out_root/queries" >&2
paths="$out_root/queries/paths.txt"

# ---------------------------------------------------------------- servers
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

. scripts/lib/start.sh
# start NAME CMD...: runs CMD pinned to SERVER_CPU until it listens; sets $started_pid and
# $started_url.
start() {
  local name=$1; shift
  start_listening "$run_dir/$name" taskset -c "$SERVER_CPU" "$@"
  log "$name (pid $started_pid) on $started_url"
}

# The worker: ONNX Runtime with THREADS intra-op threads. Batching: a batch holds at most
# MAX_BATCH_ROWS queries; a query waits at most MAX_QUEUE_DELAY for companions when the backend
# is idle (while the backend is busy, arrivals queue and leave together as the next batch anyway).
start worker "$worker_bin" --listen 127.0.0.1:0 --model "$MODEL_DIR" --ort-lib "$ort_lib" \
  --intra-op-threads "$THREADS" --max-batch-rows "$MAX_BATCH_ROWS" --max-queue-delay "$MAX_QUEUE_DELAY"
worker_pid=$started_pid worker_url=$started_url
start python "$py" benches/python_baseline/server.py --model "$MODEL_DIR" --threads "$THREADS" \
  --port 0 --handler "$PY_HANDLER"
python_pid=$started_pid python_url=$started_url

# ---------------------------------------------------------------- environment record
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "machine: nproc $(nproc), $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n1), $(free -g | awk '/^Mem:/{print $2}') GiB, kernel $(uname -r)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "worker: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- worker wire Cargo.lock || echo '+dirty'), $(rustc --version), ONNX Runtime $(basename "$ort_lib" | sed 's/libonnxruntime.so.//')"
  echo "python: $("$py" -c 'import sys, onnxruntime, tokenizers, fastapi, uvicorn, numpy; print(f"Python {sys.version.split()[0]}, onnxruntime {onnxruntime.__version__}, tokenizers {tokenizers.__version__}, fastapi {fastapi.__version__}, uvicorn {uvicorn.__version__}, numpy {numpy.__version__}")')"
  echo "load generator: $(wrk --version 2>&1 | head -n1 | cut -d' ' -f1-2), 1 thread, closed loop, ${DURATION} s per run after ${WARMUP} s warm-up"
  echo "pinning: servers on core $SERVER_CPU (taskset -c $SERVER_CPU), wrk and checks on core $LOAD_CPU (taskset -c $LOAD_CPU)"
  echo "settings: ONNX Runtime intra-op threads $THREADS (both); worker --max-batch-rows $MAX_BATCH_ROWS --max-queue-delay $MAX_QUEUE_DELAY; python handler $PY_HANDLER"
  echo "query mix: $(wc -l <"$paths") SNIPS test utterances from $data_dir/validate_*.json, cycled"
} | tee "$run_dir/env.txt" >&2

# ---------------------------------------------------------------- correctness
log "checking answers"
taskset -c "$LOAD_CPU" "$py" benches/lib/check.py "$out_root/queries/utterances.jsonl" \
  worker="$worker_url" python="$python_url" | tee "$run_dir/check.txt" >&2

# ---------------------------------------------------------------- load
hz=$(getconf CLK_TCK)
core_busy() { awk -v c="cpu$SERVER_CPU" '$1 == c {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
metric() { curl -s "$worker_url/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

wrk_run() { # URL CONC SECONDS
  taskset -c "$LOAD_CPU" wrk -t1 -c"$2" -d"$3"s --timeout 30s -s benches/lib/wrk_snips.lua "$1" -- "$paths"
}

for name in worker python; do
  url=${name}_url
  log "warming up $name: 5 s at concurrency 16"
  wrk_run "${!url}" 16 5 >/dev/null
done

printf 'server\tconcurrency\trequests\tduration_s\trps\tmean_ms\tp50_ms\tp90_ms\tp99_ms\tmax_ms\tnon200\tsocket_errors\tserver_cpu_pct\tcore_busy_pct\trows_per_batch\n' \
  >"$run_dir/results.tsv"
for c in $CONCURRENCIES; do
  for name in worker python; do
    url_var=${name}_url pid_var=${name}_pid
    url=${!url_var} pid=${!pid_var}
    wrk_run "$url" "$c" "$WARMUP" >/dev/null
    [ "$name" = worker ] && { rows0=$(metric worker_batch_rows_sum); batches0=$(metric worker_batch_rows_count); }
    t0=$(cpu_ticks "$pid") b0=$(core_busy)
    wrk_run "$url" "$c" "$DURATION" | tee "$run_dir/wrk-$name-c$c.txt" >/dev/null
    t1=$(cpu_ticks "$pid") b1=$(core_busy)
    rpb=-
    if [ "$name" = worker ]; then
      rows1=$(metric worker_batch_rows_sum); batches1=$(metric worker_batch_rows_count)
      rpb=$(awk -v a="$rows0" -v b="$rows1" -v x="$batches0" -v y="$batches1" 'BEGIN{printf "%.2f", (b-a)/((y-x)>0?(y-x):1)}')
    fi
    line=$(grep '^WRK ' "$run_dir/wrk-$name-c$c.txt") || { echo "no result line from wrk" >&2; exit 1; }
    kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" ${line#WRK }"; }
    secs=$(kv duration_s)
    sock=$(( $(kv connect_err) + $(kv read_err) + $(kv write_err) + $(kv timeouts) ))
    scpu=$(awk -v d=$((t1 - t0)) -v hz="$hz" -v s="$secs" 'BEGIN{printf "%.1f", 100*d/hz/s}')
    busy=$(awk -v d=$((b1 - b0)) -v hz="$hz" -v s="$secs" 'BEGIN{printf "%.1f", 100*d/hz/s}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$c" "$(kv requests)" "$secs" \
      "$(kv rps)" "$(kv mean_ms)" "$(kv p50_ms)" "$(kv p90_ms)" "$(kv p99_ms)" "$(kv max_ms)" "$(kv non200)" \
      "$sock" "$scpu" "$busy" "$rpb" >>"$run_dir/results.tsv"
    log "$name c=$c: $(kv rps) req/s, p50 $(kv p50_ms) ms, p99 $(kv p99_ms) ms, non-200 $(kv non200), socket errors $sock, server CPU $scpu %, core busy $busy %, rows/batch $rpb"
  done
done

"$py" benches/lib/report.py "$run_dir/results.tsv" >"$run_dir/table.md"
echo
cat "$run_dir/env.txt"
echo
cat "$run_dir/table.md"
echo
echo "(raw results: $run_dir/)"
