#!/usr/bin/env bash
# The gateway's data plane against the cores it is given (issue 47): one gateway in front of
# WORKERS fake workers (the worker's host side, no inference), at each of THREADS runtime
# threads, `--runtime shared` (tokio's work-stealing runtime) and `--runtime per-core` (a
# single-threaded runtime a core) taking turns within each round. The gateway is pinned to the
# first T cores, the fake workers and the load generator to the others; every run is a fresh
# gateway, 2 s of warm-up, then DURATION measured, closed loop with CONC clients a gateway
# thread. Prints a row a run (req/s, p99, failed, the gateway's CPU per request from
# /proc/PID/stat, the cores it kept busy) and, per mode, its throughput at T against T times its
# own mean at the first T, per thread (the share of linear).
#
#   benches/gateway_cores.sh                                   # builds (release); THREADS="1 2"
#   BIN_DIR=.gpu/app THREADS="1 2 4 8" benches/gateway_cores.sh    # a many-core host (gpu/stage.sh)
#
# Knobs: ROUNDS (3), DURATION (8s), CONC (128 clients a gateway thread), WORKERS (4; 2 threads
# each), LOAD_THREADS (4), MODES ("shared per-core"; `MODE:LABEL` runs `$BIN_DIR/gateway-LABEL`
# in that mode, e.g. MODES="per-core per-core:base" to interleave a build against a baseline
# copied beside it; `nginx` runs nginx, $NGINX_BIN or the one on PATH, with T worker processes
# pinned as the gateway is, one listening socket each (`reuseport`), a keep-alive pool to the
# same fake workers: the peer, its CPU that of its master and workers), PROTOCOL (predict | grpc: ModelInfer is
# not served by fake workers, so grpc is `/predict` over HTTP/1 only; kept for later), OUT (a
# scratch folder, removed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
THREADS=${THREADS:-1 2}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
CONC=${CONC:-128}
WORKERS=${WORKERS:-4}
LOAD_THREADS=${LOAD_THREADS:-4}
MODES=${MODES:-shared per-core}
if [ -z "${BIN_DIR:-}" ]; then
  cargo build -q --release -p gateway -p loadtest -p worker --bin gateway --bin loadtest --example fake_worker
  BIN_DIR=${CARGO_TARGET_DIR:-target}/release
fi
fake=$BIN_DIR/fake_worker
[ -x "$fake" ] || fake=$BIN_DIR/examples/fake_worker
# shellcheck source=scripts/lib/start.sh
. scripts/lib/start.sh
scratch
ulimit -n "$(ulimit -Hn)"
cores=$(nproc)
last=$((cores - 1))

# The cores after the gateway's first T (all of them when T takes every core).
others() { if [ "$1" -ge "$cores" ]; then echo "0-$last"; else echo "$1-$last"; fi; }
max_t=0
for t in $THREADS; do [ "$t" -gt "$max_t" ] && max_t=$t; done
workers=()
worker_urls=()
for i in $(seq 1 "$WORKERS"); do
  start_listening "$work/worker$i" taskset -c "$(others "$max_t")" "$fake" --listen 127.0.0.1:0 \
    --model models/snips-minilm-l6 --runtime-threads 2 --log warn \
    --max-connections 100000 --max-connections-per-address 100000
  workers+=(--worker "$started_url")
  worker_urls+=("$started_url")
done

# CPU ticks of process $1 and its children (nginx's workers).
group_ticks() {
  local t=0 p
  for p in "$1" $(pgrep -P "$1" || true); do t=$((t + $(cpu_ticks "$p" 2>/dev/null || echo 0))); done
  echo "$t"
}

start_nginx() {  # T CORES: sets started_pid and started_url
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$work/nginx.conf" <<CONF
worker_processes $1;
worker_rlimit_nofile 200000;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx.err warn;
events { worker_connections 20000; }
http {
  access_log off;
  client_body_temp_path $work/nginx-body;
  proxy_temp_path $work/nginx-proxy;
  fastcgi_temp_path $work/nginx-fastcgi;
  uwsgi_temp_path $work/nginx-uwsgi;
  scgi_temp_path $work/nginx-scgi;
  upstream workers {
$(for u in "${worker_urls[@]}"; do echo "    server ${u#http://};"; done)
    keepalive 1024;
  }
  server {
    listen 127.0.0.1:$port reuseport backlog=8192;
    location / {
      proxy_pass http://workers;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
CONF
  taskset -c "$2" "${NGINX_BIN:-nginx}" -c "$work/nginx.conf" -e "$work/nginx.err" &
  started_pid=$!
  pids+=("$started_pid")
  for _ in $(seq 1 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null && break
    kill -0 "$started_pid" 2>/dev/null || { echo "nginx exited:" >&2; cat "$work/nginx.err" >&2; exit 1; }
    sleep 0.1
  done
  started_url=http://127.0.0.1:$port
}

run() {  # MODE[:LABEL] T ROUND
  local mode=${1%%:*} bin=$BIN_DIR/gateway t=$2 gw_cores="0-$(($2 - 1))"
  [ "$mode" != "$1" ] && bin=$BIN_DIR/gateway-${1#*:}
  [ "$t" -gt "$cores" ] && gw_cores="0-$last"
  if [ "$mode" = nginx ]; then
    start_nginx "$t" "$gw_cores"
  else
    GATEWAY_ADMIN_LISTEN=127.0.0.1:0 start_listening "$work/gateway" taskset -c "$gw_cores" "$bin" \
      --listen 127.0.0.1:0 "${workers[@]}" --runtime "$mode" --runtime-threads "$t" \
      --max-connections-per-address 100000 --log warn
  fi
  local pid=$started_pid url=$started_url clients=$((CONC * t))
  local load=(taskset -c "$(others "$t")" "$BIN_DIR/loadtest" --url "$url" -c "$clients" --threads "$LOAD_THREADS"
    --progress never --warmup 0s)
  "${load[@]}" -d 2s >/dev/null
  local g0 g1 busy0 busy1
  g0=$(group_ticks "$pid")
  "${load[@]}" -d "$DURATION" --summary "$work/summary.json" >/dev/null
  g1=$(group_ticks "$pid")
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  python3 - "$work/summary.json" "$3" "$1" "$t" "$((g1 - g0))" "$(getconf CLK_TCK)" "$clients" <<'PY' | tee -a "$work/rows"
import json, sys
s = json.load(open(sys.argv[1]))["total"]
n = max(s["requests"], 1)
cpu_s = int(sys.argv[5]) / int(sys.argv[6])
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {sys.argv[7]} | {s['throughput_per_s']:.0f} | "
      f"{s['p99_ms']:.2f} | {s['requests'] - s['ok']} | {cpu_s / n * 1e6:.1f} | {cpu_s / s['seconds']:.2f} |")
PY
}

build=$(cat "$BIN_DIR/commit.txt" 2>/dev/null || git rev-parse --short HEAD)
echo "# gateway_cores: $build, $cores cores" \
  "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $WORKERS fake workers, $DURATION a run"
echo "| round | runtime | threads | clients | req/s | p99 ms | failed | gateway CPU us/req | gateway cores busy |"
echo "|---|---|---|---|---|---|---|---|---|"
: >"$work/rows"
for r in $(seq 1 "$ROUNDS"); do
  for t in $THREADS; do
    for mode in $MODES; do run "$mode" "$t" "$r"; done
  done
done
echo
python3 - "$work/rows" "$THREADS" <<'PY'
import sys
from collections import defaultdict
rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in open(sys.argv[1]) if l.startswith("|")]
threads = [int(t) for t in sys.argv[2].split()]
by = defaultdict(list)
for r in rows:
    by[(r[1], int(r[2]))].append((float(r[4]), float(r[7])))
span = lambda xs, f: f"{f(min(xs))}-{f(max(xs))}"
for mode in sorted({m for m, _ in by}):
    first = [x for x, _ in by[(mode, threads[0])]]
    base = sum(first) / len(first) / threads[0]
    parts = []
    for t in threads:
        rs = by.get((mode, t))
        if not rs:
            continue
        tput = [x for x, _ in rs]
        us = [u for _, u in rs]
        share = [x / (base * t) * 100 for x in tput]
        parts.append(f"T={t}: {span(tput, lambda v: f'{v/1000:.1f}k')} req/s, {span(us, lambda v: f'{v:.1f}')} us/req, "
                     f"{span(share, lambda v: f'{v:.0f}')} % of linear")
    print(f"{mode}: " + "; ".join(parts))
PY
