#!/usr/bin/env bash
# Packs this machine's `perf` with the shared libraries it needs (not glibc's own) into
# .gpu/perfc/ (ignored), for the GPU machine, which has no perf: carry .gpu/perfc with the last
# part of benches/gpu/carry.sh, then there
#   cp .gpu/perfc/* /tmp/gpu/ && tar -C /tmp/gpu -xJf /tmp/gpu/perf.tar.xz
#   PERF=/tmp/gpu/perfw bash benches/gpu/run.sh ...        # run.sh's profile step uses it
# perfw runs perf with its own libraries only (the servers keep the machine's).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v perf >/dev/null || { echo "no perf here: apt-get install linux-perf" >&2; exit 1; }
rm -rf .gpu/perf .gpu/perfc && mkdir -p .gpu/perf/lib .gpu/perfc
cp "$(readlink -f "$(command -v perf)")" .gpu/perf/perf
ldd "$(command -v perf)" | awk '/=>/ {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*) continue ;; esac
  cp -L "$lib" .gpu/perf/lib/
done
tar -C .gpu -cf - perf | xz -T0 -6 >.gpu/perfc/perf.tar.xz
rm -rf .gpu/perf
printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/gpu/perf/lib exec /tmp/gpu/perf/perf "$@"\n' >.gpu/perfc/perfw
chmod +x .gpu/perfc/perfw
du -sh .gpu/perfc
