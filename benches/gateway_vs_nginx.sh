#!/usr/bin/env bash
# Gateway vs nginx as a reverse proxy in front of the same trivial upstream, in one run.
#
#   benches/gateway_vs_nginx.sh   # DURATION=10s REPEAT=3 LIGHT_CONN=4 HEAVY_CONN=64 by default
#
# Pinning (this machine has 2 cores): the proxy under test runs alone on PROXY_CORE (default
# core 1; a taskset list such as 2-3 also works); the load generator (wrk, 1 thread) and the
# upstream (single-threaded hyper) share LOAD_CORE (default 0). Both proxies get exactly the
# same cores, the same upstream and the same load: nginx runs one worker process per proxy
# core, the gateway sizes its runtime from its affinity mask (one core: a single-threaded
# runtime); no `worker_cpu_affinity auto` for nginx: it ignores the taskset mask and binds
# worker 0 to CPU 0, i.e. onto the load core (the script checks the workers' masks). Both keep a keep-alive pool to the upstream. "direct" is wrk straight to the
# upstream (no proxy). Two loads: LIGHT_CONN connections (latency: the proxy is far from
# saturated) and HEAVY_CONN connections (maximum throughput; latency there is mostly queueing).
# Each round runs direct, nginx and gateway back to back (interleaved, so that a disturbance
# from a neighbour hits both proxies alike); each cell is the median over REPEAT rounds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
DURATION=${DURATION:-10s}
REPEAT=${REPEAT:-3}
LIGHT_CONN=${LIGHT_CONN:-4}
HEAVY_CONN=${HEAVY_CONN:-64}
PROXY_CORE=${PROXY_CORE:-1}
LOAD_CORE=${LOAD_CORE:-0}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}

need=()
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v wrk >/dev/null || need+=(wrk)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

cargo build -q --release -p gateway --bin gateway --example trivial_upstream
bin=$CARGO_TARGET_DIR/release
GATEWAY_BIN=${GATEWAY_BIN:-$bin/gateway}   # another build of the gateway, for before/after

out=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$out"; }
trap cleanup EXIT

. scripts/lib/start.sh
start_listening "$out/upstream" taskset -c "$LOAD_CORE" "$bin/examples/trivial_upstream" 127.0.0.1:0
upstream=${started_url#http://}
# The admin port by env, not flag: a GATEWAY_BIN from before --admin-listen ignores it.
GATEWAY_ADMIN_LISTEN=127.0.0.1:0 start_listening "$out/gateway" taskset -c "$PROXY_CORE" "$GATEWAY_BIN" --listen 127.0.0.1:0 --worker "http://$upstream" --log warn
gateway=${started_url#http://}
gateway_pid=$started_pid

proxy_cores=$(taskset -c "$PROXY_CORE" python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
nginx_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$out/nginx.conf" <<CONF
worker_processes $proxy_cores;
daemon off;
pid $out/nginx.pid;
error_log $out/nginx.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream workers { server $upstream; keepalive 256; }
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
for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$nginx_port/predict" >/dev/null 2>&1 && break; sleep 0.05; done
for _ in $(seq 1 100); do curl -fs "http://$gateway/predict?query=hi" >/dev/null 2>&1 && break; sleep 0.05; done
# Every proxy process must be on the proxy cores only.
want=$(taskset -c "$PROXY_CORE" sh -c 'taskset -p $$' | awk '{print $NF}')
for p in $(pgrep -f "nginx: worker process" -P "$(cat "$out/nginx.pid")") "$gateway_pid"; do
  got=$(taskset -p "$p" | awk '{print $NF}')
  [ "$got" = "$want" ] || { echo "process $p has CPU mask $got, not $want" >&2; exit 1; }
done

nginx_workers=$(pgrep -f "nginx: worker process" -P "$(cat "$out/nginx.pid")" | tr '\n' ' ')

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
# both proxies). At saturation user + system = 1 / throughput per core; the user part is what
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

# Median over rounds of each figure of one cell.
median() {
  python3 -c '
import statistics, sys
rows = [list(map(float, r.split())) for r in sys.argv[1:]]
print(" ".join(f"{statistics.median(c):.3f}" for c in zip(*rows)))' "$@"
}

load_before=$(cut -d" " -f1-3 /proc/loadavg)
declare -A R
for load in light heavy; do
  conns=$LIGHT_CONN; [ $load = heavy ] && conns=$HEAVY_CONN
  d=(); n=(); g=()
  for _ in $(seq 1 "$REPEAT"); do
    d+=("$(measure "http://$upstream/predict?query=hello" "$conns")")
    # shellcheck disable=SC2086
    n+=("$(measure "http://127.0.0.1:$nginx_port/predict?query=hello" "$conns" $nginx_workers)")
    g+=("$(measure "http://$gateway/predict?query=hello" "$conns" "$gateway_pid")")
  done
  R[direct_$load]=$(median "${d[@]}")
  R[nginx_$load]=$(median "${n[@]}")
  R[gateway_$load]=$(median "${g[@]}")
  R[rounds_$load]="$(IFS=';'; echo "${n[*]}")|$(IFS=';'; echo "${g[*]}")"
done
load_after=$(cut -d" " -f1-3 /proc/loadavg)

python3 - "${R[direct_light]}" "${R[nginx_light]}" "${R[gateway_light]}" \
  "${R[direct_heavy]}" "${R[nginx_heavy]}" "${R[gateway_heavy]}" "$LIGHT_CONN" "$HEAVY_CONN" "$DURATION" \
  "$REPEAT" "$proxy_cores" "$load_before" "$load_after" "${R[rounds_light]}" "${R[rounds_heavy]}" <<'PY'
import sys
rows = [list(map(float, a.split())) for a in sys.argv[1:7]]
light, heavy, dur, rep, cores, lb, la = sys.argv[7:14]
def rounds(arg):
    return [[list(map(float, r.split())) for r in side.split(";")] for side in arg.split("|")]
per_round = {"light load": rounds(sys.argv[14]), "max throughput": rounds(sys.argv[15])}
names = ["direct", "nginx", "gateway"]
print(f"wrk -t1, {dur} per cell, median of {rep} interleaved rounds; proxy alone on {cores} core(s),"
      f" wrk + upstream on another")
print(f"load average (1/5/15 min) before: {lb}, after: {la}")
for title, block, c in (("light load", rows[0:3], light), ("max throughput", rows[3:6], heavy)):
    d = block[0]
    print(f"\n{title} ({c} connections)")
    print(f"{'target':8} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} {'+p99 ms':>8} {'errors':>6}"
          f" {'user us/req':>11} {'sys us/req':>10}")
    for n, r in zip(names, block):
        add50 = "" if n == "direct" else f"{r[1]-d[1]:8.3f}"
        add99 = "" if n == "direct" else f"{r[2]-d[2]:8.3f}"
        user = "" if n == "direct" else f"{r[4]:11.2f}"
        sys_ = "" if n == "direct" else f"{r[5]:10.2f}"
        print(f"{n:8} {r[0]:9.0f} {r[1]:8.3f} {r[2]:8.3f} {add50:>8} {add99:>8} {int(r[3]):6d} {user:>11} {sys_:>10}")
    g, n = block[2], block[1]
    print(f"gateway/nginx: throughput x{g[0]/n[0]:.2f}, p50 x{g[1]/n[1]:.2f}, p99 x{g[2]/n[2]:.2f},"
          f" user CPU per request x{g[4]/n[4]:.2f}"
          f"  (per proxy core: nginx {n[0]/int(cores):.0f} req/s, gateway {g[0]/int(cores):.0f} req/s)")
    # Round by round (each round ran nginx then the gateway back to back): the spread, and how
    # often the gateway was ahead, which says more than one median on a noisy machine.
    rn, rg = per_round[title]
    fmt = lambda rs, i, f: " ".join(f.format(r[i]) for r in rs)
    print(f"rounds req/s: nginx {fmt(rn, 0, '{:.0f}')} | gateway {fmt(rg, 0, '{:.0f}')}")
    print(f"rounds p99 ms: nginx {fmt(rn, 2, '{:.2f}')} | gateway {fmt(rg, 2, '{:.2f}')}")
    print(f"rounds user us/req: nginx {fmt(rn, 4, '{:.2f}')} | gateway {fmt(rg, 4, '{:.2f}')}")
    more = sum(b[0] >= a[0] for a, b in zip(rn, rg))
    lower = sum(b[2] <= a[2] for a, b in zip(rn, rg))
    print(f"gateway ahead in {more}/{len(rn)} rounds on throughput, p99 no worse in {lower}/{len(rn)}")
PY
