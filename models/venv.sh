#!/usr/bin/env bash
# Makes (or reuses) the conversion scripts' virtual environment, .cache/models-venv, with the
# packages pinned in models/requirements-convert.txt (PyPI; no PyTorch, ~250 MB), and prints the
# path of its python (scripts/lib/venv.sh: reinstalled when the requirements file changed;
# python3-venv installed with apt-get where it is missing).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib/venv.sh
. "$root/scripts/lib/venv.sh"
make_venv models/venv.sh "$root/.cache/models-venv" "$root/models/requirements-convert.txt"
