# shellcheck shell=bash disable=SC2034  # sets its caller's variables
# Sourced by benches/host_cost.sh and benches/allocs_per_request.sh: the worker with the fake
# backend (worker/examples/fake_worker.rs) built for a base revision and for this tree, and the
# load generator. Expects CARGO_TARGET_DIR, and the current directory at the repository root.
#
#   build_fake_workers OUT_DIR BASE_REF
#
# Sets BASE_WORKER and CURRENT_WORKER (unless already set: prebuilt binaries, no build) to
# binaries copied into OUT_DIR/bin, and loadtest to the release load generator.
build_fake_workers() {
  local out=$1 base_ref=$2 src
  mkdir -p "$out/bin"
  # The base revision in a worktree of its own, with this tree's example copied in under another
  # name (so both build into one target directory, sharing the dependencies, without clobbering).
  if [ -z "${BASE_WORKER:-}" ]; then
    src=$PWD/benches/out/host_cost-base-src
    git worktree remove --force "$src" 2>/dev/null || rm -rf "$src"
    git worktree add --detach "$src" "$base_ref" >/dev/null
    mkdir -p "$src/worker/examples"
    cp worker/examples/fake_worker.rs "$src/worker/examples/fake_worker_base.rs"
    (cd "$src" && cargo build -q --release -p worker --example fake_worker_base)
    cp "$CARGO_TARGET_DIR/release/examples/fake_worker_base" "$out/bin/base-worker"
    git worktree remove --force "$src"
    BASE_WORKER=$out/bin/base-worker
  fi
  if [ -z "${CURRENT_WORKER:-}" ]; then
    cargo build -q --release -p worker --example fake_worker
    cp "$CARGO_TARGET_DIR/release/examples/fake_worker" "$out/bin/current-worker"
    CURRENT_WORKER=$out/bin/current-worker
  fi
  cargo build -q --release -p loadtest
  loadtest=$CARGO_TARGET_DIR/release/loadtest
}
