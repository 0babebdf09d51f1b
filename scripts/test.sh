#!/usr/bin/env bash
# The test command (README, .ci/run): sets up what the tests need, then format, lint and tests.
# Works on a fresh Debian machine with Rust: everything else is fetched by the project's scripts.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup component add rustfmt clippy >/dev/null 2>&1 || true
ORT_DYLIB_PATH=$(scripts/fetch-ort.sh)
export ORT_DYLIB_PATH

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== models: the GPU model's conversion, checked on CPU (pytest)"
"$(models/venv.sh)" -m pytest -q -p no:cacheprovider models/tests
