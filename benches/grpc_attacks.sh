#!/usr/bin/env bash
# The gRPC ports against hostile HTTP/2 clients at the scale of issue 46 (release builds,
# loopback): each attack for SECONDS (default 20) against a fresh gateway (its gRPC port, a
# worker behind it) or a fresh worker (its own gRPC port, the bundled model on the CPU), with a
# well-behaved client beside it (loadtest's `grpc_attack`: a call every 50 ms on a connection it
# keeps, one on a new connection every 500 ms, from 127.0.0.1; the attackers come from
# 127.0.0.2). Prints one row an attack: the target's RSS before and at its peak, what the attack
# got, the well-behaved client's calls served and lost, and the goal.
#
#   benches/grpc_attacks.sh            # SECONDS_EACH=20 ROUNDS=1
#   BIN_DIR=target/debug SECONDS_EACH=3 benches/grpc_attacks.sh   # a quick run of the script
#   ONLY="worker unread --conns 200" ROUNDS=3 benches/grpc_attacks.sh   # the attacks matching it
#
# Needs ORT_DYLIB_PATH (the worker loads ONNX Runtime) and the bundled model (models/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
SECONDS_EACH=${SECONDS_EACH:-20}
ROUNDS=${ROUNDS:-1}
MODEL=${MODEL:-models/snips-minilm-l6}
if [ -z "${BIN_DIR:-}" ]; then
  cargo build -q --release -p gateway -p worker -p loadtest --bin gateway --bin worker --bin grpc_attack
fi
bin=${BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}
# shellcheck source=scripts/lib/start.sh
. scripts/lib/start.sh
scratch
# Room for 10,001 connections and more.
ulimit -n "$(ulimit -Hn)"

start_worker() {
  start_listening "$work/w" "$bin/worker" --listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --model "$MODEL"
  worker_url=$started_url
  worker_pid=$started_pid
  worker_grpc=$(sed -n 's|^grpc listening on http://||p' "$work/w.stdout" | head -n 1)
}
start_gateway() {
  start_listening "$work/g" "$bin/gateway" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
    --grpc-listen 127.0.0.1:0 --worker "$worker_url"
  gateway_pid=$started_pid
  gateway_grpc=$(sed -n 's|^grpc listening on http://||p' "$work/g.stdout" | head -n 1)
}
stop() { kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# attack TARGET(gateway|worker) GOAL ATTACK ARGS...
attack() {
  local target=$1 goal=$2; shift 2
  # ONLY="worker unread --conns 200": the attacks whose "TARGET ARGS" contain it.
  [[ -n ${ONLY:-} && "$target $*" != *"$ONLY"* ]] && return 0
  local pid addr
  if [ "$target" = gateway ]; then
    start_gateway; pid=$gateway_pid; addr=$gateway_grpc
  else
    stop "$worker_pid"; start_worker; pid=$worker_pid; addr=$worker_grpc
  fi
  local row
  row=$("$bin/grpc_attack" "$@" --addr "$addr" --pid "$pid" --seconds "$SECONDS_EACH" | tail -n 1)
  echo "| $target | $* | $(echo "$row" | tr ' ' '\n' | sed -n 's/^\(rss_start_mb\|rss_peak_mb\|calls_sent\|refused\|slowest_refusal_ms\|good_ok\|good_failed\)=//p' | paste -sd'|' | sed 's/|/ | /g') | $goal |"
  if [ "$target" = gateway ]; then stop "$gateway_pid"; fi
}

echo "# grpc_attacks: $(git rev-parse --short HEAD), ${SECONDS_EACH}s each, $(nproc) cores"
echo "| target | attack | RSS before MB | RSS peak MB | calls sent | refused | slowest refusal ms | good calls | good lost | goal |"
echo "|---|---|---|---|---|---|---|---|---|---|"
start_worker
for _ in $(seq 1 "$ROUNDS"); do
  attack gateway "RSS < 300 MB" bodies --conns 4 --streams 1000
  attack gateway "refused < 10 s" trickle --streams 50
  attack gateway "good lost 0" bare --conns 10001
  attack gateway "RSS < 300 MB" unread --conns 200 --streams 1024 --model snips-minilm-l6
  attack gateway "RSS < 300 MB" keda --conns 50 --streams 1000
  attack worker "RSS < 450 MB" bodies --conns 4 --streams 1000
  attack worker "refused < 10 s" trickle --streams 50
  attack worker "RSS < 450 MB" unread --conns 1 --streams 20000 --model snips-minilm-l6
  attack worker "RSS < 450 MB" unread --conns 200 --streams 1024 --model snips-minilm-l6
done
