#!/usr/bin/env bash
# Tests deploy/docker/worker-entrypoint.sh, the worker images' entrypoint, on the layout it
# expects (no Docker engine here to build the images): a real start of the worker through it
# (CPU ONNX Runtime, the committed model), each missing piece refused with exit 78 and a message,
# the CUDA layout (providers next to ONNX Runtime, CUDA 13 / cuDNN 9 libraries), and, where
# scripts/fetch-ort.sh gpu has run, that the libraries it checks are those ONNX Runtime's CUDA
# provider links.
#
#   deploy/test/entrypoint_test.sh WORKER_BIN ORT_CPU_LIB
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
entry="$root/deploy/docker/worker-entrypoint.sh"
worker_bin=$1
ort_cpu=$2
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok: $*"; }
bad() { failed=$((failed + 1)); echo "  FAIL: $*"; }

# expect_fail NAME PATTERN ENV... -- ARGS...: exit 78 and PATTERN in stderr.
expect_fail() {
  local name=$1 pattern=$2
  shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local rc=0
  env "${envs[@]}" "$entry" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  if [ "$rc" = 78 ] && grep -q -- "$pattern" "$tmp/err"; then
    ok "$name"
  else
    bad "$name: rc $rc, stderr: $(cat "$tmp/err")"
  fi
}

expect_ok() {
  local name=$1 pattern=$2
  shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  if env "${envs[@]}" "$entry" "$@" >"$tmp/out" 2>"$tmp/err" && grep -q -- "$pattern" "$tmp/out"; then
    ok "$name"
  else
    bad "$name: stdout $(cat "$tmp/out") stderr $(cat "$tmp/err")"
  fi
}

# The image layout, CPU flavour: /opt/ort/lib, /opt/model.
mkdir -p "$tmp/ort" "$tmp/model" "$tmp/cuda"
cp "$ort_cpu" "$tmp/ort/libonnxruntime.so.1.31.1"
for f in model.onnx tokenizer.json config.json; do cp "$root/models/snips-minilm-l6/$f" "$tmp/model/"; done
base=(WORKER_BIN="$worker_bin" ORT_DYLIB_PATH="$tmp/ort/libonnxruntime.so.1.31.1" WORKER_MODEL="$tmp/model" LD_LIBRARY_PATH=)

echo "== worker entrypoint"
expect_ok "CPU layout passes --check" "ok: worker" "${base[@]}" -- --check
expect_fail "no worker binary" "worker binary" "${base[@]}" WORKER_BIN="$tmp/none" -- --check
expect_fail "no ONNX Runtime" "ONNX Runtime library" "${base[@]}" ORT_DYLIB_PATH="$tmp/ort/none.so" -- --check
expect_fail "no model directory" "model directory .*missing" "${base[@]}" -- --check --model "$tmp/nomodel"
mkdir -p "$tmp/half" && cp "$tmp/model/config.json" "$tmp/model/model.onnx" "$tmp/half/"
expect_fail "model without tokenizer.json" "no tokenizer.json" "${base[@]}" -- --check --model="$tmp/half"
mkdir -p "$tmp/noonnx" && cp "$tmp/model/config.json" "$tmp/model/tokenizer.json" "$tmp/noonnx/"
expect_fail "model without .onnx" "no .onnx file" "${base[@]}" WORKER_MODEL="$tmp/noonnx" -- --check
expect_fail "unknown device" "expected cpu or cuda" "${base[@]}" -- --check --device tpu

# CUDA: the flag wins over WORKER_DEVICE=cpu; providers, then each CUDA library, are required.
expect_fail "CUDA without ONNX Runtime's CUDA providers" "libonnxruntime_providers_shared.so" "${base[@]}" WORKER_DEVICE=cpu -- --check --device=cuda:0
touch "$tmp/ort/libonnxruntime_providers_shared.so" "$tmp/ort/libonnxruntime_providers_cuda.so"
expect_fail "CUDA without CUDA libraries" "libcuda.so.1 not found" "${base[@]}" WORKER_DEVICE=cuda:0 -- --check
cuda_libs=$(sed -n 's/^ *for lib in \(libcuda.*\); do$/\1/p' "$entry")
[ -n "$cuda_libs" ] || bad "the entrypoint's CUDA library list"
for lib in $cuda_libs; do
  touch "$tmp/cuda/$lib"
done
expect_ok "CUDA layout passes --check" "device cuda:0" "${base[@]}" WORKER_DEVICE=cuda LD_LIBRARY_PATH="/nonexistent:$tmp/cuda" -- --check --device cuda:0
for lib in $cuda_libs; do
  mv "$tmp/cuda/$lib" "$tmp/cuda/$lib.away"
  expect_fail "CUDA without $lib" "$lib not found" "${base[@]}" LD_LIBRARY_PATH="$tmp/cuda" -- --check --device=cuda:1
  mv "$tmp/cuda/$lib.away" "$tmp/cuda/$lib"
done

# The list is what ONNX Runtime's CUDA provider links (when its GPU build was fetched).
gpu_dir="$root/.cache/ort/gpu"
if [ -f "$gpu_dir/libonnxruntime_providers_cuda.so" ] && command -v readelf >/dev/null; then
  needed=$(readelf -d "$gpu_dir/libonnxruntime_providers_cuda.so" | sed -n 's/.*Shared library: \[\(lib\(cu\|nv\)[^]]*\)\].*/\1/p' | sort -u)
  missing=""
  for lib in $needed; do
    case " $cuda_libs " in *" $lib "*) ;; *) missing="$missing $lib" ;; esac
  done
  if [ -z "$missing" ]; then ok "the entrypoint checks every CUDA library the provider links: $(echo "$needed" | tr '\n' ' ')"; else bad "the provider also links:$missing"; fi
else
  echo "  (no .cache/ort/gpu: the CUDA provider's library list is not compared; scripts/fetch-ort.sh gpu fetches it)"
fi

# A real start through the entrypoint: the worker answers /readyz and a prediction.
env "${base[@]}" "$entry" --listen 127.0.0.1:0 >"$tmp/run.out" 2>"$tmp/run.err" &
pids+=($!)
url=""
for _ in $(seq 1 300); do
  url=$(sed -n 's/^listening on \(http:[^ ]*\).*/\1/p' "$tmp/run.out" | head -n 1)
  [ -n "$url" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 0.1
done
if [ -n "$url" ] && curl -fsS "$url/readyz" | grep -q ready \
   && curl -fsS -X POST "$url/predict" -H 'content-type: application/json' -d '{"query":"play some jazz"}' | grep -q PlayMusic; then
  ok "the worker starts through the entrypoint and answers ($url)"
else
  bad "the worker through the entrypoint: $(cat "$tmp/run.out" "$tmp/run.err")"
fi
echo "entrypoint: $passed passed, $failed failed"
[ "$failed" = 0 ]
