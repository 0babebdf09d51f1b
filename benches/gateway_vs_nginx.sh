#!/usr/bin/env bash
# Gateway vs nginx and haproxy as a reverse proxy in front of the same upstream, in one run.
#
#   benches/gateway_vs_nginx.sh   # DURATION=10s REPEAT=3 LIGHT_CONN=4 HEAVY_CONN=64 MAX_CONN=1024 UPSTREAM=fake
#
# UPSTREAM: `fake` (default) is the worker's own host side with the fake backend
# (`worker/examples/fake_worker.rs`: listener, HTTP, parsing, admission, tokenizing, batching,
# answers; no inference), the upstream the gateway really has; `trivial` is a fixed-answer hyper
# server (`gateway/examples/trivial_upstream.rs`), which measures the proxies' own cost alone.
# PLAIN=1 (default) also runs a second gateway with `--no-coalesce` (`gateway-nc`), so that what
# coalescing the worker hop buys shows beside the rest.
#
# Pinning (this machine has 2 cores): the proxy under test runs alone on PROXY_CORE (default
# core 1; a taskset list such as 2-3 also works); the load generator (wrk, 1 thread) and the
# upstream share LOAD_CORE (default 0). Every proxy gets exactly the same cores, the same upstream
# and the same load: nginx runs one worker process per proxy core, haproxy one thread per proxy
# core, the gateway sizes its runtime from its affinity mask (one core: a single-threaded
# runtime); no `worker_cpu_affinity auto` for nginx: it ignores the taskset mask and binds
# worker 0 to CPU 0, i.e. onto the load core (the script checks the processes' masks). All keep
# a keep-alive pool to the upstream. "direct" is wrk straight to the upstream (no proxy). Three
# loads: LIGHT_CONN connections (latency: the proxy is far from saturated), HEAVY_CONN and
# MAX_CONN connections (throughput; latency there is mostly queueing). Each round runs every
# target back to back (interleaved, so that a disturbance from a neighbour hits all alike);
# each cell is the median over REPEAT rounds, and every round's figures are printed too.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
DURATION=${DURATION:-10s}
REPEAT=${REPEAT:-3}
LIGHT_CONN=${LIGHT_CONN:-4}
HEAVY_CONN=${HEAVY_CONN:-64}
MAX_CONN=${MAX_CONN:-1024}
PROXY_CORE=${PROXY_CORE:-1}
LOAD_CORE=${LOAD_CORE:-0}
UPSTREAM=${UPSTREAM:-fake}
PLAIN=${PLAIN:-1}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}

need=()
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v wrk >/dev/null || need+=(wrk)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
# wrk holds MAX_CONN sockets, each proxy twice that.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

cargo build -q --release -p gateway --bin gateway --example trivial_upstream
[ "$UPSTREAM" = fake ] && cargo build -q --release -p worker --example fake_worker
bin=$CARGO_TARGET_DIR/release
GATEWAY_BIN=${GATEWAY_BIN:-$bin/gateway}   # another build of the gateway, for before/after

out=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$out"; }
trap cleanup EXIT

. scripts/lib/start.sh
case $UPSTREAM in
  fake)
    start_listening "$out/upstream" taskset -c "$LOAD_CORE" "$bin/examples/fake_worker" --listen 127.0.0.1:0 \
      --calibration-time 0s --max-outstanding 8192 --max-connections 20000 --max-connections-per-address 20000 ;;
  trivial)
    start_listening "$out/upstream" taskset -c "$LOAD_CORE" "$bin/examples/trivial_upstream" 127.0.0.1:0 ;;
  *) echo "UPSTREAM is fake or trivial, not $UPSTREAM" >&2; exit 1 ;;
esac
upstream=${started_url#http://}
upstream_pid=$started_pid
# The admin port by env, not flag: a GATEWAY_BIN from before --admin-listen ignores it.
GATEWAY_ADMIN_LISTEN=127.0.0.1:0 start_listening "$out/gateway" taskset -c "$PROXY_CORE" "$GATEWAY_BIN" \
  --listen 127.0.0.1:0 --worker "http://$upstream" --log warn
gateway=${started_url#http://}
gateway_pid=$started_pid
if [ "$PLAIN" = 1 ]; then
  GATEWAY_ADMIN_LISTEN=127.0.0.1:0 start_listening "$out/gateway-nc" taskset -c "$PROXY_CORE" "$GATEWAY_BIN" \
    --listen 127.0.0.1:0 --worker "http://$upstream" --log warn --no-coalesce
  gateway_nc=${started_url#http://}
  gateway_nc_pid=$started_pid
fi

proxy_cores=$(taskset -c "$PROXY_CORE" python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
nginx_port=$(free_port)
cat >"$out/nginx.conf" <<CONF
worker_processes $proxy_cores;
worker_rlimit_nofile 65536;
daemon off;
pid $out/nginx.pid;
error_log $out/nginx.err warn;
events { worker_connections 8192; }
http {
  access_log off;
  upstream workers { server $upstream; keepalive $MAX_CONN; }
  server {
    listen 127.0.0.1:$nginx_port backlog=4096;
    location / {
      proxy_pass http://workers;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
CONF
taskset -c "$PROXY_CORE" "$NGINX" -c "$out/nginx.conf" -e "$out/nginx.err" &
pids+=($!)
haproxy_port=$(free_port)
cat >"$out/haproxy.cfg" <<CONF
global
  nbthread $proxy_cores
  maxconn 8000
  log stderr format raw local0 err
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  http-reuse always
frontend proxy
  bind 127.0.0.1:$haproxy_port backlog 4096
  default_backend workers
backend workers
  server w1 $upstream
CONF
taskset -c "$PROXY_CORE" "$HAPROXY" -f "$out/haproxy.cfg" -db 2>"$out/haproxy.err" &
haproxy_pid=$!
pids+=("$haproxy_pid")
for url in "http://127.0.0.1:$nginx_port" "http://127.0.0.1:$haproxy_port" "http://$gateway" ${gateway_nc:+"http://$gateway_nc"}; do
  for _ in $(seq 1 100); do curl -fs "$url/predict?query=hi" >/dev/null 2>&1 && break; sleep 0.05; done
  curl -fs "$url/predict?query=hi" >/dev/null || { echo "$url does not answer" >&2; exit 1; }
done
nginx_workers=$(pgrep -f "nginx: worker process" -P "$(cat "$out/nginx.pid")" | tr '\n' ' ')
# Every proxy process must be on the proxy cores only.
want=$(taskset -c "$PROXY_CORE" sh -c 'taskset -p $$' | awk '{print $NF}')
# shellcheck disable=SC2086
for p in $nginx_workers "$haproxy_pid" "$gateway_pid" ${gateway_nc_pid:-}; do
  got=$(taskset -p "$p" | awk '{print $NF}')
  [ "$got" = "$want" ] || { echo "process $p has CPU mask $got, not $want" >&2; exit 1; }
done

# "user system" CPU time (clock ticks) of processes, summed.
cpu_ticks() {
  local user=0 sys=0 p
  for p in "$@"; do
    read -r u s < <(awk '{print $14, $15}' "/proc/$p/stat")
    user=$((user + u)); sys=$((sys + s))
  done
  echo "$user $sys"
}

# wrk -> "rps p50_ms p99_ms errors user_us sys_us": the CPU the given proxy processes spent per
# request in their own code (user) and in the kernel (system: mostly loopback TCP, alike for
# every proxy). At saturation user + system = 1 / throughput per core; the user part is what
# the proxy's own code costs.
measure() {
  local url=$1 conns=$2; shift 2
  local before after
  before=$(cpu_ticks "$@")
  taskset -c "$LOAD_CORE" wrk -t1 -c"$conns" -d"$DURATION" --latency "$url" >"$out/wrk.txt"
  after=$(cpu_ticks "$@")
  python3 - "$out/wrk.txt" "$before" "$after" "$(getconf CLK_TCK)" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
(u0, s0), (u1, s1) = (map(int, a.split()) for a in sys.argv[2:4])
hz = int(sys.argv[4])
total = int(re.search(r"(\d+) requests in", t).group(1))
def ms(v, u):
    return float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[u]
p = {k: ms(v, u) for k, v, u in re.findall(r"^\s+(50|99)(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", t, re.M)}
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
err = sum(int(x) for x in re.findall(r"(?:Non-2xx or 3xx responses|Socket errors:.*?timeout)\D+(\d+)", t))
per = lambda ticks: ticks / hz * 1e6 / total if total else 0.0
print(f"{rps:.0f} {p['50']:.3f} {p['99']:.3f} {err} {per(u1 - u0):.2f} {per(s1 - s0):.2f}")
PY
}

targets=(direct nginx haproxy gateway)
[ "$PLAIN" = 1 ] && targets+=(gateway-nc)
load_before=$(cut -d" " -f1-3 /proc/loadavg)
mkdir -p "$out/res"
for conns in "$LIGHT_CONN" "$HEAVY_CONN" "$MAX_CONN"; do
  for _ in $(seq 1 "$REPEAT"); do
    for t in "${targets[@]}"; do
      # shellcheck disable=SC2086
      case $t in
        direct) r=$(measure "http://$upstream/predict?query=hello" "$conns" "$upstream_pid") ;;
        nginx) r=$(measure "http://127.0.0.1:$nginx_port/predict?query=hello" "$conns" $nginx_workers) ;;
        haproxy) r=$(measure "http://127.0.0.1:$haproxy_port/predict?query=hello" "$conns" "$haproxy_pid") ;;
        gateway) r=$(measure "http://$gateway/predict?query=hello" "$conns" "$gateway_pid") ;;
        gateway-nc) r=$(measure "http://$gateway_nc/predict?query=hello" "$conns" "$gateway_nc_pid") ;;
      esac
      echo "$r" >>"$out/res/$conns.$t"
    done
  done
done
load_after=$(cut -d" " -f1-3 /proc/loadavg)

python3 - "$out/res" "$DURATION" "$REPEAT" "$proxy_cores" "$UPSTREAM" "$load_before" "$load_after" \
  "$LIGHT_CONN" "$HEAVY_CONN" "$MAX_CONN" "${targets[@]}" <<'PY'
import os, statistics, sys
res, dur, rep, cores, upstream, lb, la = sys.argv[1:8]
loads = sys.argv[8:11]
targets = sys.argv[11:]
def rounds(conns, t):
    with open(os.path.join(res, f"{conns}.{t}")) as f:
        return [list(map(float, l.split())) for l in f if l.strip()]
print(f"wrk -t1, {dur} per cell, median of {rep} interleaved rounds; upstream: {upstream}; proxy alone on"
      f" {cores} core(s), wrk + upstream on another")
print(f"load average (1/5/15 min) before: {lb}, after: {la}")
print("user/sys us/req: the proxy's CPU per request (for direct: the upstream's)")
for conns in loads:
    print(f"\n{conns} connections")
    print(f"{'target':10} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} {'user us/req':>11} {'sys us/req':>10}"
          f"   rounds req/s | rounds p99 ms")
    med = {}
    for t in targets:
        rs = rounds(conns, t)
        m = [statistics.median(c) for c in zip(*rs)]
        med[t] = m
        per_rps = " ".join(f"{r[0]:.0f}" for r in rs)
        per_p99 = " ".join(f"{r[2]:.2f}" for r in rs)
        print(f"{t:10} {m[0]:9.0f} {m[1]:8.3f} {m[2]:8.3f} {int(m[3]):6d} {m[4]:11.2f} {m[5]:10.2f}   {per_rps} | {per_p99}")
    g = med["gateway"]
    for peer in [t for t in targets if t not in ("direct", "gateway")]:
        p = med[peer]
        print(f"gateway/{peer}: throughput x{g[0]/p[0]:.2f}, p99 x{g[2]/p[2]:.2f}", end="")
        rg, rp = rounds(conns, "gateway"), rounds(conns, peer)
        ahead = sum(b[0] >= a[0] for a, b in zip(rp, rg))
        print(f"; throughput ratio by round {' '.join(f'x{b[0]/a[0]:.2f}' for a, b in zip(rp, rg))},"
              f" ahead in {ahead}/{len(rg)}")
    print(f"gateway/direct: throughput x{g[0]/med['direct'][0]:.2f}")
PY
