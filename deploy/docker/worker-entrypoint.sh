#!/bin/sh
# Entrypoint of the worker images: checks the layout the worker needs, then execs it with the
# container's arguments. A missing piece is a clear message and exit 78 (EX_CONFIG) instead of a
# worker that dies later inside ONNX Runtime's loader.
#
#   worker-entrypoint [--check] [WORKER ARGS...]     (--check: check the layout, print it, exit)
#
# Checked:
# - the worker binary ($WORKER_BIN, default /usr/local/bin/worker);
# - ONNX Runtime: $ORT_DYLIB_PATH (default /opt/ort/lib/libonnxruntime.so.1.31.1);
# - the model directory (--model or $WORKER_MODEL, default /opt/model): config.json,
#   tokenizer.json and an .onnx file;
# - with a CUDA device (--device cuda[:N] or $WORKER_DEVICE): ONNX Runtime's CUDA providers next
#   to its library, and CUDA 13 / cuDNN 9 libraries on $LD_LIBRARY_PATH or in the loader cache.
set -eu

bin=${WORKER_BIN:-/usr/local/bin/worker}
ort=${ORT_DYLIB_PATH:-/opt/ort/lib/libonnxruntime.so.1.31.1}
model=${WORKER_MODEL:-/opt/model}
device=${WORKER_DEVICE:-cpu}
check_only=0
if [ "${1:-}" = "--check" ]; then
  check_only=1
  shift
fi

# The worker's own flags win over the environment, as in clap.
prev=""
for arg in "$@"; do
  case "$prev" in
    --model) model=$arg ;;
    --device) device=$arg ;;
  esac
  case "$arg" in
    --model=*) model=${arg#--model=} ;;
    --device=*) device=${arg#--device=} ;;
  esac
  prev=$arg
done

fail() {
  echo "worker-entrypoint: $*" >&2
  exit 78
}

# A shared library by file name: in $LD_LIBRARY_PATH, else in the loader's cache.
find_lib() {
  old_ifs=$IFS
  IFS=:
  for dir in ${LD_LIBRARY_PATH:-}; do
    if [ -n "$dir" ] && [ -e "$dir/$1" ]; then
      IFS=$old_ifs
      echo "$dir/$1"
      return 0
    fi
  done
  IFS=$old_ifs
  if command -v ldconfig >/dev/null 2>&1; then
    ldconfig -p 2>/dev/null | awk -v lib="$1" '$1 == lib { print $NF; found = 1; exit } END { exit !found }'
    return $?
  fi
  return 1
}

[ -x "$bin" ] || fail "worker binary $bin is missing or not executable (set WORKER_BIN)"
[ -f "$ort" ] || fail "ONNX Runtime library $ort is missing (set ORT_DYLIB_PATH)"
[ -d "$model" ] || fail "model directory $model is missing (--model or WORKER_MODEL)"
for f in config.json tokenizer.json; do
  [ -f "$model/$f" ] || fail "model directory $model has no $f"
done
onnx=""
for f in "$model"/*.onnx; do
  [ -f "$f" ] && onnx=$f && break
done
[ -n "$onnx" ] || fail "model directory $model has no .onnx file"

case "$device" in
  cpu) ;;
  cuda | cuda:*)
    ort_dir=$(dirname "$ort")
    for f in libonnxruntime_providers_shared.so libonnxruntime_providers_cuda.so; do
      [ -f "$ort_dir/$f" ] || fail "device $device: ONNX Runtime's $f is not next to $ort (the onnxruntime-gpu build is needed)"
    done
    # What ONNX Runtime's CUDA provider links (deploy/test/entrypoint_test.sh compares), and
    # cuDNN, which it opens at run time. libcuda.so.1 is the driver's: the NVIDIA container
    # runtime mounts it into GPU pods.
    for lib in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcudnn.so.9; do
      find_lib "$lib" >/dev/null || fail "device $device: $lib not found on LD_LIBRARY_PATH or in the loader cache (the image needs the CUDA 13 runtime with cuDNN 9; libcuda.so.1 comes from the NVIDIA driver through the container runtime)"
    done
    ;;
  *) fail "device $device: expected cpu or cuda:N" ;;
esac

if [ "$check_only" = 1 ]; then
  echo "worker-entrypoint: ok: worker $bin, ONNX Runtime $ort, model $onnx, device $device"
  exit 0
fi
export ORT_DYLIB_PATH="$ort"
export WORKER_MODEL="$model"
export WORKER_DEVICE="$device"
exec "$bin" "$@"
