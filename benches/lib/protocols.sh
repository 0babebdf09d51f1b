# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # variables set for, and by, the caller
# Sourced by benches/oip_protocols.sh and benches/gateway_ab.sh: the fake worker behind the
# gateway, the load generator's arguments for a protocol, and a process's CPU ticks. Expects
# scripts/lib/start.sh sourced, $bin (the release build), $out (a scratch folder) and the
# caller's $pids array.

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

# CPU ticks (user + system) a process has used.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
