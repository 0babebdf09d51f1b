#!/usr/bin/env bash
# Makes (or reuses) the e2e/python tests' virtual environment, .cache/e2e-venv, with the
# packages pinned in e2e/python/requirements.txt (PyPI: Triton's clients, grpcio-tools, pytest;
# ~150 MB), and prints the path of its python (scripts/lib/venv.sh: reinstalled when the
# requirements file changed; python3-venv installed with apt-get where it is missing).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=scripts/lib/venv.sh
. "$root/scripts/lib/venv.sh"
make_venv e2e/python/venv.sh "$root/.cache/e2e-venv" "$root/e2e/python/requirements.txt"
