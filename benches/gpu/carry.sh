#!/usr/bin/env bash
# Cuts what a GPU sitting needs into parts small enough for the device tool, whose every call
# carries the repository's tracked files (~30 MiB) and at most 64 MiB in all:
#
#   benches/gpu/carry.sh [PART_MIB]        (default 32; after benches/gpu/stage.sh and
#                                          scripts/setup-gpu.sh)
#
# One stream, cut into .gpu/c1 .. .gpu/cN (ignored): ONNX Runtime's CUDA build (the xz tarball
# ../shared/gpu/pack.sh caches in ~/.cache/gpu-pack) and .gpu/app + models/build/gpu (xz). On the
# GPU machine, one call per part, back to back (an idle machine goes back after 30 s):
#   mkdir -p /tmp/gpu && cp .gpu/cK/* /tmp/gpu/                      # every part
#   bash benches/gpu/uncarry.sh                                      # after the last: unpacks,
#   . /tmp/gpu/env.sh                                                # writes env.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
mib=${1:-32}
ort=${XDG_CACHE_HOME:-$HOME/.cache}/gpu-pack/1.31.1/ort.tar.xz
[ -f "$ort" ] || { echo "no $ort: run ../shared/gpu/pack.sh once" >&2; exit 1; }
[ -x .gpu/app/worker ] || { echo "no .gpu/app: run benches/gpu/stage.sh" >&2; exit 1; }
[ -f models/build/gpu/model.onnx ] || { echo "no models/build/gpu: run scripts/setup-gpu.sh" >&2; exit 1; }
rm -rf .gpu/c* .gpu/stream && mkdir -p .gpu/stream
tar -cf - .gpu/app models/build/gpu | xz -T0 -3 >.gpu/stream/app.tar.xz
cp "$ort" .gpu/stream/ort.tar.xz
tar -C .gpu/stream -cf - ort.tar.xz app.tar.xz | (cd .gpu && split -b "${mib}M" -d -a 2 - part.)
rm -rf .gpu/stream
n=0
for f in .gpu/part.*; do n=$((n + 1)); mkdir -p ".gpu/c$n"; mv "$f" ".gpu/c$n/"; done
du -sh .gpu/c* | tr '\n' ' '; echo
echo "$n parts"
