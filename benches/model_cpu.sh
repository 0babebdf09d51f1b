#!/usr/bin/env bash
# The CPU model: today's committed int8 model (dynamic quantization of the unfused graph) against
# the int8 model quantized after ONNX Runtime's BERT fusions (made from the committed one by
# models/scripts/fused_int8.py). Accuracy on the 700 SNIPS test utterances, then sequences per
# second on one core, side by side (benches/model_cpu.py; benches/RESULTS.md records a run).
#
#   benches/model_cpu.sh
#
# Settings (environment variables, defaults in brackets):
#   CPU [1]            the core the benchmark is pinned to (taskset -c)
#   RUNS [5]           runs; each times every model at every batch size
#   SECONDS_EACH [4]   timed seconds per model, batch size and run
#   BATCHES [1,8,32]   rows per batch (consecutive utterances of the mix, padded to the longest)
#   EXTRA [unset]      more NAME=PATH models to compare
#
# Needs python3 (with venv) and taskset; makes .cache/models-venv (models/venv.sh) and
# models/build/fused-int8/.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v taskset >/dev/null || { echo "taskset (util-linux) is needed" >&2; exit 1; }
py=$(models/venv.sh)
"$py" models/scripts/fused_int8.py --out models/build/fused-int8 >&2
# shellcheck disable=SC2086
exec taskset -c "${CPU:-1}" "$py" benches/model_cpu.py \
  today=models/snips-minilm-l6/model.onnx fused=models/build/fused-int8/model.onnx ${EXTRA:-} \
  --runs "${RUNS:-5}" --seconds "${SECONDS_EACH:-4}" --batches "${BATCHES:-1,8,32}"
