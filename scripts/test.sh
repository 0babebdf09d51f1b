#!/usr/bin/env bash
# The test command (README, .ci/run): sets up what the tests need, then format, lint and tests.
# Works on a fresh Debian machine with Rust: everything else is fetched by the project's scripts.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup component add rustfmt clippy >/dev/null 2>&1 || true
ORT_DYLIB_PATH=$(scripts/fetch-ort.sh)
export ORT_DYLIB_PATH
scripts/fetch-k8s-tools.sh >/dev/null  # helm for the chart_args tests, tools for deploy/test.sh

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== e2e/python: Triton's clients, Triton's perf_analyzer and a client generated from KEDA's externalscaler.proto against the built worker and gateway (pytest)"
"$(e2e/python/venv.sh)" -m pytest -q -p no:cacheprovider e2e/python
echo "== models: the GPU model's conversion, checked on CPU (pytest)"
"$(models/venv.sh)" -m pytest -q -p no:cacheprovider models/tests
echo "== deploy: chart, rules, dashboard, images' entrypoint, live metrics and Prometheus"
DEPLOY_TEST_SKIP_BUILD=1 deploy/test.sh
