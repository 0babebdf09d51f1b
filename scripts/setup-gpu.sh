#!/usr/bin/env bash
# Everything the worker needs to run on a GPU, from a fresh clone, in a minute or two:
#
#   scripts/setup-gpu.sh [OUT]     (OUT defaults to models/build/gpu)
#
# 1. ONNX Runtime's CUDA build (the onnxruntime-gpu 1.31.1 wheel's libraries, CUDA 13) into
#    .cache/ort/gpu/ (scripts/fetch-ort.sh gpu);
# 2. the conversion's Python environment, .cache/models-venv (models/venv.sh; PyPI, no PyTorch);
# 3. the GPU model, made from the committed int8 model (models/scripts/gpu_model.py: float
#    weights, ONNX Runtime's BERT fusions, fp16) and checked on the CPU against the committed
#    model's answers on the 700 SNIPS test utterances; fails, writing nothing, if they differ.
#
# Then it prints the worker's command line. The machine needs the NVIDIA driver, CUDA 13 and
# cuDNN 9 libraries on LD_LIBRARY_PATH to run it (not to make it: this script runs on any CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-models/build/gpu}

lib=$(scripts/fetch-ort.sh gpu)
py=$(models/venv.sh)
"$py" models/scripts/gpu_model.py --out "$out"

cat <<MSG

GPU model ready in $out. Run the worker on it:

  ORT_DYLIB_PATH=$lib \\
    cargo run --release -p worker -- --model $out --device cuda:0

and check its answers against the committed model's (standard library only):

  python3 models/scripts/check_worker.py http://127.0.0.1:8081 $out/answers.json
MSG
