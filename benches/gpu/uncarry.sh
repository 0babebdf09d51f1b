#!/usr/bin/env bash
# On the GPU machine, after every part of benches/gpu/carry.sh is in /tmp/gpu: unpacks ONNX
# Runtime's CUDA build into /tmp/gpu/ort, the binaries into .gpu/app and the fp16 model into
# models/build/gpu (of the current directory: the repository's copy), and writes /tmp/gpu/env.sh.
set -euo pipefail
# Idempotent: a later call on the same machine only unpacks what its working copy lacks.
[ -f /tmp/gpu/app.tar.xz ] || cat /tmp/gpu/part.* | tar -C /tmp/gpu -xf -
[ -d /tmp/gpu/ort ] || xz -d -T0 </tmp/gpu/ort.tar.xz | tar -C /tmp/gpu -xf -
[ -x .gpu/app/worker ] && [ -f models/build/gpu/model.onnx ] || xz -d -T0 </tmp/gpu/app.tar.xz | tar -xf -
libs=""
for name in libcublasLt.so.13 libcudart.so.13 libcudnn.so.9 libcurand.so.10 libcufft.so.12; do
  p=$(find / -name "$name" -not -path '/proc/*' 2>/dev/null | head -n 1 || true)
  if [ -n "$p" ]; then
    d=$(dirname "$p")
    case ":$libs:" in *":$d:"*) ;; *) libs="$libs:$d" ;; esac
  else echo "missing $name"; fi
done
cat >/tmp/gpu/env.sh <<ENV
export ORT_DYLIB_PATH=$(ls /tmp/gpu/ort/libonnxruntime.so.1.*)
export LD_LIBRARY_PATH=/tmp/gpu/ort${libs}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
ENV
cat /tmp/gpu/env.sh
