#!/usr/bin/env bash
# Makes (or reuses) the e2e/python tests' virtual environment, .cache/e2e-venv, with the
# packages pinned in e2e/python/requirements.txt (PyPI: Triton's clients, grpcio-tools, pytest;
# ~150 MB), and prints the path of its python. Reinstalls when the requirements file changed. Where `python3 -m venv`
# is missing (Debian without python3-venv) it installs python3-venv with apt-get, as root.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv="$root/.cache/e2e-venv"
req="$root/e2e/python/requirements.txt"
if ! cmp -s "$req" "$venv/.requirements.txt" 2>/dev/null; then
  echo "e2e/python/venv.sh: installing $req into $venv" >&2
  rm -rf "$venv"
  mkdir -p "$root/.cache"
  if ! python3 -m venv "$venv" >&2 2>/dev/null; then
    rm -rf "$venv"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
      python3 -m venv "$venv" >&2
    else
      echo "e2e/python/venv.sh: python3 -m venv failed; install python3-venv" >&2
      exit 1
    fi
  fi
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
  cp "$req" "$venv/.requirements.txt"
fi
echo "$venv/bin/python"
