#!/usr/bin/env bash
# Fetches ONNX Runtime's shared library from the PyPI wheel into an ignored folder and prints the
# path of libonnxruntime.so. Idempotent: a second run only prints the path.
#
#   scripts/fetch-ort.sh          -> .cache/ort/cpu/libonnxruntime.so.1.31.1   (onnxruntime)
#   scripts/fetch-ort.sh gpu      -> .cache/ort/gpu/...  (onnxruntime-gpu, CUDA 13, with providers)
set -euo pipefail
ver=1.31.1
flavour=${1:-cpu}
case "$flavour" in
  cpu) pkg=onnxruntime ;;
  gpu) pkg=onnxruntime-gpu ;;
  *) echo "usage: $0 [cpu|gpu]" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.cache/ort/$flavour"
lib="$dest/libonnxruntime.so.$ver"
if [ ! -f "$lib" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching $pkg==$ver from PyPI..." >&2
  python3 -m pip download -q --no-deps --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --python-version 3.11 --implementation cp "$pkg==$ver" -d "$tmp" >&2
  (cd "$tmp" && python3 -m zipfile -e "$(ls ./*.whl | head -n 1)" x)
  mkdir -p "$dest.partial"
  cp "$tmp"/x/onnxruntime/capi/libonnxruntime.so.* "$dest.partial/"
  if [ "$flavour" = gpu ]; then
    cp "$tmp"/x/onnxruntime/capi/libonnxruntime_providers_*.so "$dest.partial/"
  fi
  rm -rf "$dest" && mv "$dest.partial" "$dest"
fi
echo "$lib"
