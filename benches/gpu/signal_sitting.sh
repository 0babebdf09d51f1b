#!/usr/bin/env bash
# The calibrated signal on real GPUs, one section per call (each well inside the device's 10
# minutes), on a host with several GPUs, after ../shared/gpu/ has carried the build there (its
# README.md: uncarry.sh, then `. /tmp/gpu/env.sh`):
#
#   bash benches/gpu/signal_sitting.sh demo N     # the GPU main job: scripts/demo.sh with one
#                                                 # worker per GPU (DEMO_WORKER_DEVICES), up to N
#   bash benches/gpu/signal_sitting.sh sweep      # benches/signal_calibration.sh gpu, RUNS times
#   bash benches/gpu/signal_sitting.sh node       # benches/gpu/node.sh
#
# Output under OUT (default $OUT, else benches/out/gpu-signal): the demo's report, run and
# summary, the sweep's tables. The machine is recorded at the top of each.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-benches/out/gpu-signal}
mkdir -p "$out"
app=${APP:-.gpu/app}
model=${MODEL:-models/build/gpu}
gpus=$(nvidia-smi -L | wc -l)
machine() {
  echo "# $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) x $gpus, $(nproc) cores," \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(cat "$app/commit.txt" 2>/dev/null)"
}
case ${1:?demo N, sweep or node} in
  demo)
    n=${2:-$gpus}
    devs=$(seq -s, 0 $((n - 1)) | sed 's/\([0-9]\+\)/cuda:\1/g')
    # Batches of 32 rows on one session: a GPU worker of ~20k queries/s, so that the load the
    # steps need stays within what one gateway and one load generator drive on this host.
    # DEMO_WORKER_FLAGS= (set, empty): the worker's defaults. DEMO_MIN=0: from zero.
    machine | tee "$out/demo$n-summary.txt"
    DEMO_BIN_DIR=$app DEMO_OUT=$out/demo$n DEMO_MAX=$n DEMO_WORKER_DEVICES=$devs \
      DEMO_WORKER_ARGS="--model $model ${DEMO_WORKER_FLAGS---max-batch-rows 32 --sessions 1}" \
      DEMO_STEPS="${DEMO_STEPS:-0.15 0.5 1.0 1.8 1.0 0.5}" DEMO_STEP_S=${DEMO_STEP_S:-12} DEMO_TAIL_S=${DEMO_TAIL_S:-30} \
      DEMO_PROBE_CLIENTS=${DEMO_PROBE_CLIENTS:-64} DEMO_LOADTEST_ARGS="--threads 4" \
      bash scripts/demo.sh 2>&1 | grep -v '^ *[0-9.]*s ' | tail -n 40 | tee -a "$out/demo$n-summary.txt"
    cp "$out/demo$n/demo-report.html" "$out/demo$n-report.html" 2>/dev/null || true
    ;;
  sweep)
    for r in $(seq 1 "${RUNS:-3}"); do
      machine
      BIN=$app OUT=$out WORKERS=${WORKERS:-1 2 4} DEVICES="$(seq -s' ' 0 $((gpus - 1)) | sed 's/\([0-9]\+\)/cuda:\1/g')" \
        WORKER_ARGS="--model $model" FRACTIONS="${FRACTIONS:-0.05 0.25 0.5}" STEP_S=${STEP_S:-8} \
        LOADTEST_ARGS="--threads 8" bash benches/signal_calibration.sh gpu 2>&1
    done | tee "$out/sweep.txt"
    ;;
  node)
    machine | tee "$out/node.txt"
    bash benches/gpu/node.sh "$app" "$model" 2>&1 | tee -a "$out/node.txt"
    ;;
esac
