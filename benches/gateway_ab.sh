#!/usr/bin/env bash
# Two gateway builds side by side (a before/after of a change) under one protocol: both in front
# of the same fake worker, each pinned to PROXY_CORE in turn, the bundled load generator and the
# fake worker on LOAD_CORE, alternating A and B for ROUNDS rounds. Prints each run's req/s, p99,
# failed requests and the gateway's CPU per request (from /proc/PID/stat): on a 2-core machine
# the throughput may be bound by the shared core, the gateway's CPU per request is its own.
#
#   benches/gateway_ab.sh A_BIN B_BIN                 # PROTOCOL=predict|oip|grpc [grpc]
#   e.g. git stash; cargo build --release -p gateway; cp target/release/gateway /tmp/gateway-a; ...
#   AB=loadtest benches/gateway_ab.sh A_BIN B_BIN     # two load generator builds instead, in
#                                                     # front of one gateway (this tree's)
#
# Each row also gives the fake worker's and the load generator's CPU per request (the latter from
# its times, as a child of this shell).
#
# Settings: PROTOCOL [grpc], ROUNDS [4], DURATION [8s] a run (after 2 s unmeasured), CONC [32]
# clients, GRPC_CONNS [1] HTTP/2 connections, PROXY_CORE [1], LOAD_CORE [0].
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
usage="usage: gateway_ab.sh A_BIN B_BIN"
a_bin=$(realpath "${1:?$usage}"); b_bin=$(realpath "${2:?$usage}")
PROTOCOL=${PROTOCOL:-grpc}
ROUNDS=${ROUNDS:-4}
DURATION=${DURATION:-8s}
CONC=${CONC:-32}
GRPC_CONNS=${GRPC_CONNS:-1}
PROXY_CORE=${PROXY_CORE:-1}
LOAD_CORE=${LOAD_CORE:-0}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
AB=${AB:-gateway}
. benches/lib/protocols.sh
bench_setup
protocol_args "$PROTOCOL" "$GRPC_CONNS"
start_fake_worker "$LOAD_CORE"
declare -A url pid lt_bin
for v in a b; do
  gw_bin=$a_bin; [ "$v" = b ] && gw_bin=$b_bin
  lt_bin[$v]=$bin/loadtest
  if [ "$AB" = loadtest ]; then
    lt_bin[$v]=$gw_bin
    gw_bin=$bin/gateway
  fi
  GATEWAY_ADMIN_LISTEN=127.0.0.1:0 start_listening "$out/gateway-$v" taskset -c "$PROXY_CORE" "$gw_bin" \
    --listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --worker "$worker" --log warn
  pid[$v]=$started_pid
  url[$v]=$started_url
  [ "$PROTOCOL" = grpc ] && url[$v]=$(sed -n 's/^grpc listening on //p' "$out/gateway-$v.stdout" | head -n 1)
done
load() {  # VARIANT DURATION [SUMMARY]
  local summary=(); [ -n "${3:-}" ] && summary=(--summary "$3")
  taskset -c "$LOAD_CORE" "${lt_bin[$1]}" --url "${url[$1]}" "${args[@]}" -c "$CONC" -d "$2" --warmup 0s \
    --threads 1 --progress never "${summary[@]}" >/dev/null
}
for v in a b; do load "$v" 2s; done
echo "$PROTOCOL, -c $CONC, $DURATION a run; A $a_bin, B $b_bin; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | build | req/s | p99 ms | failed | gateway CPU us/req | worker CPU us/req | loadtest CPU us/req |"
echo "|---|---|---|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  for v in a b; do
    g0=$(cpu_ticks "${pid[$v]}"); w0=$(cpu_ticks "$worker_pid")
    times >"$out/times0"
    load "$v" "$DURATION" "$out/summary.json"
    times >"$out/times1"
    g1=$(cpu_ticks "${pid[$v]}"); w1=$(cpu_ticks "$worker_pid")
    python3 - "$out/summary.json" "$r" "${v^^}" "$((g1 - g0))" "$(getconf CLK_TCK)" "$((w1 - w0))" \
      "$(children_cpu "$out/times0")" "$(children_cpu "$out/times1")" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["total"]
n = max(s["requests"], 1)
per = lambda ticks: int(ticks) / int(sys.argv[5]) / n * 1e6
lt = (float(sys.argv[8]) - float(sys.argv[7])) / n * 1e6
print(f"| {sys.argv[2]} | {sys.argv[3]} | {s['throughput_per_s']:.0f} | {s['p99_ms']:.2f} | {s['requests'] - s['ok']} | {per(sys.argv[4]):.1f} | {per(sys.argv[6]):.1f} | {lt:.1f} |")
PY
  done
done
