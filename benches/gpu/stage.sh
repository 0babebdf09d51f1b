#!/usr/bin/env bash
# Stages what benches/gpu/run.sh needs from this machine's build into .gpu/app/ (ignored), with
# the binaries' debug sections stripped so that the folder fits one 64 MiB transfer:
# worker, gateway, loadtest and fake_worker (the worker with the fake backend).
#
#   benches/gpu/stage.sh            # builds them first (release), then copies
#   NO_BUILD=1 benches/gpu/stage.sh # copies what target/release holds
#
# Then ../shared/gpu/ (its README.md: pack.sh, carry.sh, uncarry.sh) carries .gpu/app, ONNX
# Runtime's CUDA build and the model to the GPU machine in pieces that fit a transfer.
# On the GPU machine, from the repository root (tracked files: scripts/lib/start.sh,
# models/sanity.json, benches/gpu/), with ORT_DYLIB_PATH and LD_LIBRARY_PATH set for ONNX
# Runtime's CUDA build and the fp16 model in models/build/gpu:
#   bash benches/gpu/run.sh .gpu/app models/build/gpu
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${NO_BUILD:-}" ]; then
  cargo build --release -p worker -p gateway -p loadtest -p scaler
  cargo build --release -p worker --example fake_worker
fi
mkdir -p .gpu/app
for b in worker gateway loadtest scaler examples/fake_worker; do
  objcopy --strip-debug "target/release/$b" ".gpu/app/$(basename "$b")"
done
git rev-parse --short HEAD >.gpu/app/commit.txt
du -sh .gpu/app
ls -la .gpu/app
