# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # variables set for, and by, the caller
# Sourced by benches/oip_protocols.sh, gateway_ab.sh, gateway_instructions.sh and
# gpu/protocols.sh (its `children_cpu` only): their set-up, the fake worker behind the gateway,
# the load generator's arguments for a protocol, and the CPU this shell's children spent (a
# process's: start.sh's `cpu_ticks`). Expects $CARGO_TARGET_DIR, and the repository root as the
# current directory.

# Builds the gateway, the load generator and the fake worker (release); sets $bin (the build),
# $out (a scratch folder) and $pids (the processes started), both cleaned up at exit
# (scripts/lib/start.sh's `scratch`, which this sources).
bench_setup() {
  cargo build -q --release -p gateway -p loadtest -p worker --bin gateway --bin loadtest --example fake_worker
  bin=$CARGO_TARGET_DIR/release
  # shellcheck source=scripts/lib/start.sh
  . scripts/lib/start.sh
  scratch
  out=$work
}

# Starts the fake worker (the worker's whole host side, no inference) on core $1; sets $worker
# (its URL) and $worker_pid.
start_fake_worker() {
  start_listening "$out/worker" taskset -c "$1" "$bin/examples/fake_worker" --listen 127.0.0.1:0 \
    --model models/snips-minilm-l6 --runtime-threads 1
  worker=$started_url
  worker_pid=$started_pid
}

# Sets $args to the load generator's arguments for protocol $1 (predict, oip or grpc; gRPC over
# $2 HTTP/2 connections).
protocol_args() {
  case $1 in
    predict) args=(--method post) ;;
    oip) args=(--protocol oip) ;;
    grpc) args=(--protocol grpc --h2-connections "$2") ;;
    *) echo "a protocol is predict, oip or grpc, not $1" >&2; exit 2 ;;
  esac
}

# CPU seconds (user + system) of this shell's reaped children, from what `times` wrote to file
# $1. Run `times` in the measuring shell itself, not a subshell, whose children would be its own.
children_cpu() { awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, t, "m"); s += t[1] * 60 + t[2] } print s }' "$1"; }

# Requests the gateway at admin URL $1 has sent merged with others (its
# `gateway_coalesced_requests_total`, 0 when none).
merged() { curl -sf "$1/metrics" | awk '/^gateway_coalesced_requests_total/ { s += $2 } END { print s + 0 }'; }

# The merged exchanges the gateway at admin URL $1 has sent (its
# `gateway_coalesced_exchanges_total`, 0 when none).
merges() { curl -sf "$1/metrics" | awk '/^gateway_coalesced_exchanges_total/ { s += $2 } END { print s + 0 }'; }

# Core $1's busy and idle jiffies so far (/proc/stat: user, nice, system, irq, softirq, steal
# busy; idle and iowait idle), as "BUSY IDLE".
core_jiffies() { awk -v c="cpu$1" '$1 == c { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
