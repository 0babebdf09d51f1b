#!/usr/bin/env bash
# The bundled load generator against wrk, oha and hey, side by side in one run.
#
#   benches/loadtest_vs_peers.sh          # DURATION=10 ROUNDS=3 by default
#   SOAK=300 benches/loadtest_vs_peers.sh # a longer memory soak
#
# Three parts:
# 1. Capacity: each tool alone on LOAD_CORE (default 0, `taskset`), the upstream alone on
#    UPSTREAM_CORE (default 1), CONNS connections (default 64), DURATION seconds; ROUNDS rounds,
#    the tools in a different order each round. Requests/s per round, the median and the range,
#    and the CPU time each tool spent per request (user + system, from getrusage): on a shared
#    machine the CPU per request is steadier than requests/s, and it is the tool's own cost.
# 2. Latency against an upstream that holds every request DELAY (default 10ms): what each tool
#    reports at DELAY_CONNS connections (default 16), next to how long the upstream really held
#    the requests (it measures that itself: tokio's 1 ms timer makes a 10 ms sleep 10-11 ms).
#    Also loadtest's open loop at DELAY_RATE/s (default 1000), latency from each request's due
#    time.
# 3. Memory: loadtest's resident set size over a SOAK-second open-loop run (default 60) at
#    SOAK_RATE/s (default 20000), sampled every 5 s: constant, as nothing is kept per request.
#
# The upstream is `loadtest/examples/upstream.rs` (single-threaded, httparse, a fixed 35-byte
# JSON answer). Peers: wrk and hey from Debian (installed when missing), oha from crates.io
# (`cargo install oha`, into cargo's bin directory, when missing).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export DURATION=${DURATION:-10} ROUNDS=${ROUNDS:-3} CONNS=${CONNS:-64} LOAD_CORE=${LOAD_CORE:-0}
export UPSTREAM_CORE=${UPSTREAM_CORE:-1} DELAY=${DELAY:-10ms} DELAY_CONNS=${DELAY_CONNS:-16}
export DELAY_RATE=${DELAY_RATE:-1000} SOAK=${SOAK:-60} SOAK_RATE=${SOAK_RATE:-20000}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v hey >/dev/null || need+=(hey)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
export PATH="$PATH:${CARGO_HOME:-$HOME/.cargo}/bin"
command -v oha >/dev/null || cargo install --locked oha

cargo build -q --release -p loadtest --bin loadtest --example upstream
bin=$CARGO_TARGET_DIR/release
export LOADTEST_BIN=${LOADTEST_BIN:-$bin/loadtest}   # another build, for before/after

out=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$out"; }
trap cleanup EXIT

. scripts/lib/start.sh
start_listening "$out/fast" taskset -c "$UPSTREAM_CORE" "$bin/examples/upstream" 127.0.0.1:0
export FAST_URL=$started_url
start_listening "$out/slow" taskset -c "$UPSTREAM_CORE" "$bin/examples/upstream" --delay "$DELAY" 127.0.0.1:0
export SLOW_URL=$started_url

echo "wrk $(wrk -v 2>&1 | head -n 1 | awk '{print $2}'), $(oha --version), hey (Debian $(dpkg-query -W -f='${Version}' hey 2>/dev/null || echo '?')), loadtest $("$LOADTEST_BIN" --version | awk '{print $2}') at $(git rev-parse --short HEAD)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 benches/lib/peers.py
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
