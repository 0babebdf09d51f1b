#!/usr/bin/env bash
# The Open Inference Protocol through the gateway beside /predict (issue 30): throughput and p99
# of one query a request, sent as `POST /predict` `{"query": ...}`, as OIP REST
# (`POST /v2/models/M/infer`, a BYTES tensor of one text) and as OIP gRPC (`ModelInfer` on h2c,
# GRPC_CONNS connections, default 1), by the load generator's `--protocol`. Beside each run: the
# CPU time the gateway and the worker spent per request (from /proc/PID/stat), to tell where a
# difference goes.
#
#   benches/oip_protocols.sh   # DURATION=10s REPEAT=3 CONC=32 by default
#
# The worker is the fake backend's (worker/examples/fake_worker.rs: the whole worker but the
# inference), so the figures are the gateway's and the protocols' own cost, not the model's.
# Pinning (a 2-core machine): the gateway alone on PROXY_CORE (default 1); the fake worker and
# the load generator (one thread) share LOAD_CORE (default 0). Each round runs the three
# protocols back to back (interleaved: a neighbour's disturbance hits all three alike). The CPU
# each process spent per request is printed beside it (the gateway's core and the shared core
# are each near saturation or not: that says which side bounds a protocol's throughput), and the
# share of the requests the gateway sent to the worker merged with others (`routing::coalesce`,
# from its `gateway_coalesced_requests_total`), the worker exchanges a request (merges and
# requests sent alone), and how busy each core was (/proc/stat: a core not near 100 % while the
# other is waits on it, as when the processes take turns instead of overlapping).
# Goals: OIP REST within 10 % of /predict's throughput, gRPC at least /predict's; each row says
# how far it is from the same round's /predict (`vs /predict`).
#
#   CLIENT=h2load benches/oip_protocols.sh   # the same rows, sent by nghttp2's h2load instead
#
# h2load (Debian's nghttp2-client, installed when missing) is a peer load generator nobody here
# wrote: /predict and OIP REST over HTTP/1.1 on CONC connections, gRPC as CONC streams over
# GRPC_CONNS HTTP/2 connections, one text a request (the same for all three). It reports no
# percentiles (p50 and p99 print as "-"), and it counts an HTTP 200 whatever its `grpc-status`:
# a request counts as served only when the gateway's own outcome counter says ok too (the lower
# of the two counts).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
DURATION=${DURATION:-10s}
REPEAT=${REPEAT:-3}
CONC=${CONC:-32}
GRPC_CONNS=${GRPC_CONNS:-1}
CLIENT=${CLIENT:-loadtest}
PROXY_CORE=${PROXY_CORE:-1}
LOAD_CORE=${LOAD_CORE:-0}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}

case $CLIENT in
  loadtest) ;;
  h2load)
    command -v h2load >/dev/null ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nghttp2-client; } ;;
  *) echo "CLIENT is loadtest or h2load, not $CLIENT" >&2; exit 2 ;;
esac

. benches/lib/protocols.sh
bench_setup
model=snips-minilm-l6  # the bundled model's name, the load generator's default
[ "$CLIENT" = h2load ] && h2load_bodies "$out" "$model"
start_fake_worker "$LOAD_CORE"
GATEWAY_ADMIN_LISTEN=127.0.0.1:0 start_listening "$out/gateway" taskset -c "$PROXY_CORE" "$bin/gateway" \
  --listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --worker "$worker" --log warn
gateway=$started_url
gateway_pid=$started_pid
grpc=$(sed -n 's/^grpc listening on //p' "$out/gateway.stdout" | head -n 1)
admin=$(sed -n 's/^admin listening on //p' "$out/gateway.stdout" | head -n 1)

run() {  # PROTOCOL ROUND
  local proto=$1 url=$gateway args
  protocol_args "$proto" "$GRPC_CONNS"
  [ "$proto" = grpc ] && url=$grpc
  [ "$CLIENT" = h2load ] && h2load_protocol_args "$proto" "$url" "$CONC" "$GRPC_CONNS" "$out" "$model"
  local g0 w0 g1 w1 m0 m1 x0 x1 p0 p1 l0 l1
  g0=$(cpu_ticks "$gateway_pid"); w0=$(cpu_ticks "$worker_pid"); m0=$(merged "$admin"); x0=$(merges "$admin")
  p0=$(core_jiffies "$PROXY_CORE"); l0=$(core_jiffies "$LOAD_CORE")
  # The load generator's CPU: the shell's reaped children's times before and after it (`times`
  # run in this shell, not a subshell, whose children would be its own).
  times >"$out/times0"
  # No warm-up phase: the CPU counters then cover exactly the measured requests.
  if [ "$CLIENT" = h2load ]; then
    local ok0 ok1
    ok0=$(served "$admin")
    taskset -c "$LOAD_CORE" h2load "${h2load_args[@]}" -t 1 -D "$DURATION" >"$out/$proto-$2.txt" 2>&1
    times >"$out/times1"
    ok1=$(served "$admin")
    h2load_summary "$out/$proto-$2.txt" "$((ok1 - ok0))" >"$out/$proto-$2.json"
  else
    taskset -c "$LOAD_CORE" "$bin/loadtest" --url "$url" "${args[@]}" -c "$CONC" -d "$DURATION" --warmup 0s \
      --threads 1 --progress never --summary "$out/$proto-$2.json" >/dev/null
    times >"$out/times1"
  fi
  g1=$(cpu_ticks "$gateway_pid"); w1=$(cpu_ticks "$worker_pid"); m1=$(merged "$admin"); x1=$(merges "$admin")
  p1=$(core_jiffies "$PROXY_CORE"); l1=$(core_jiffies "$LOAD_CORE")
  python3 - "$out/$proto-$2.json" "$proto" "$2" "$((g1 - g0))" "$((w1 - w0))" "$(getconf CLK_TCK)" \
    "$(children_cpu "$out/times0")" "$(children_cpu "$out/times1")" "$out" "$((m1 - m0))" "$((x1 - x0))" \
    "$p0" "$p1" "$l0" "$l1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["total"]
n, hz = max(s["requests"], 1), int(sys.argv[6])
gw, wk = (int(t) / hz / n * 1e6 for t in sys.argv[4:6])
lt = (float(sys.argv[8]) - float(sys.argv[7])) / n * 1e6
bad = s["requests"] - s["ok"]
# Against the same round's /predict (run first in each round): the goals' measure.
rate, base = s["throughput_per_s"], sys.argv[9] + "/predict-" + sys.argv[3] + ".rate"
if sys.argv[2] == "predict":
    open(base, "w").write(str(rate))
    vs = "-"
else:
    try:
        vs = f"{(rate / float(open(base).read()) - 1) * 100:+.1f} %"
    except (OSError, ValueError, ZeroDivisionError):
        vs = "?"
merged, merges = int(sys.argv[10]), int(sys.argv[11])
# Worker exchanges a request: the merges, and each request sent alone (those not merged).
exchanges = (merges + max(n - merged, 0)) / n
def busy(before, after):
    (b0, i0), (b1, i1) = (map(int, x.split()) for x in (before, after))
    return (b1 - b0) / max((b1 - b0) + (i1 - i0), 1) * 100
proxy, load = busy(sys.argv[12], sys.argv[13]), busy(sys.argv[14], sys.argv[15])
ms = lambda v: "-" if v is None else f"{v:.2f}"
print(f"| {sys.argv[3]} | {sys.argv[2]} | {rate:.0f} | {vs} | {ms(s['p50_ms'])} | {ms(s['p99_ms'])} | {bad} | {gw:.0f} | {wk:.0f} | {lt:.0f} | {merged / n * 100:.0f} % | {exchanges:.3f} | {proxy:.0f} % | {load:.0f} % |")
PY
}

echo "gateway on core $PROXY_CORE; fake worker and $CLIENT on core $LOAD_CORE; -c $CONC, $DURATION a run"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# One unmeasured run of each first: connections, pools and caches warm.
for proto in predict oip grpc; do DURATION=2s run "$proto" 0 >/dev/null; done
echo "| round | protocol | req/s | vs /predict | p50 ms | p99 ms | failed | gateway CPU us/req | worker CPU us/req | $CLIENT CPU us/req | merged | worker exchanges/req | gateway core busy | shared core busy |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for round in $(seq 1 "$REPEAT"); do
  for proto in predict oip grpc; do
    run "$proto" "$round"
  done
done
