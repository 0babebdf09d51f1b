#!/usr/bin/env bash
# The gateway's instructions per request, by protocol and by build: a count that does not move
# with the machine's load, where the CPU time of `oip_protocols.sh` and `gateway_ab.sh` moves by
# 5-20 % from one run to the next on a shared 2-core VM. Each gateway build runs under
# valgrind's callgrind in front of the fake worker; the load generator sends WARMUP requests
# (uncounted), the counters are zeroed (`callgrind_control -z`), it sends REQUESTS more, and the
# instructions the gateway executed (`callgrind_control -d`, its totals) are divided by them.
#
#   benches/gateway_instructions.sh [GATEWAY_BIN...]   # this tree's release build by default
#   e.g. benches/gateway_instructions.sh /tmp/gateway-before target/release/gateway
#
# Settings: PROTOCOLS [predict oip grpc], REQUESTS [20000], WARMUP [2000], CONC [32] clients,
# GRPC_CONNS [1] HTTP/2 connections.
#
# Under callgrind the gateway runs some 50x slower, so more requests wait at once than at full
# speed: more of them are merged (`routing::coalesce`), which lowers the upstream's share. The
# figures compare builds and protocols under the same conditions; they are not the cost of a
# request at full speed. The rate of merged requests is printed beside each row.
#
# What the count leaves out or overweighs: the kernel's work (a request's send and receive
# system calls are most of /predict's time on loopback, and HTTP/1.1's one write a response
# costs more there than HTTP/2's writes shared by many streams), and large copies: valgrind counts
# every byte `rep movsb` moves as one instruction, so copying a 4 KiB future counts some 4,000,
# far more than its time. Whether the compiler copies a future at all can change with unrelated
# code (its inlining): one build's /predict counted 41,500 a request, the next 31,200, the
# difference one 10 KB copy in hyper's HTTP/1 dispatcher. Read a difference in the copies
# (`callgrind_annotate --tree=caller` on a dump kept with KEEP_DUMPS=DIR) before taking it as time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
PROTOCOLS=${PROTOCOLS:-predict oip grpc}
REQUESTS=${REQUESTS:-20000}
WARMUP=${WARMUP:-2000}
CONC=${CONC:-32}
GRPC_CONNS=${GRPC_CONNS:-1}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 2; }

. benches/lib/protocols.sh
bench_setup
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=("$bin/gateway")
start_fake_worker 0

# Total instructions in callgrind's dump $1 (its `totals:` line; `summary:` in older dumps).
total_ir() { awk '/^(totals|summary):/ { print $2; exit }' "$1"; }

# Sends $1 requests to $url with the load generator's $args.
load() {
  taskset -c 0 "$bin/loadtest" --url "$url" "${args[@]}" -c "$CONC" -n "$1" --warmup 0s \
    --threads 1 --progress never --request-timeout 60s --summary "$out/s.json" >/dev/null
}

echo "$REQUESTS requests a row after $WARMUP uncounted, -c $CONC, the gateway under callgrind"
echo "| build | protocol | instructions / request | merged |"
echo "|---|---|---|---|"
for build in "${builds[@]}"; do
  for proto in $PROTOCOLS; do
    dump=$out/callgrind.$proto
    GATEWAY_ADMIN_LISTEN=127.0.0.1:0 start_listening "$out/gateway" taskset -c 1 \
      valgrind --tool=callgrind --callgrind-out-file="$dump" "$build" \
      --listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --worker "$worker" --log warn
    gw_pid=$started_pid
    admin=$(sed -n 's/^admin listening on //p' "$out/gateway.stdout" | head -n 1)
    url=$started_url
    [ "$proto" = grpc ] && url=$(sed -n 's/^grpc listening on //p' "$out/gateway.stdout" | head -n 1)
    protocol_args "$proto" "$GRPC_CONNS"
    load "$WARMUP"
    m0=$(merged "$admin")
    callgrind_control -z "$gw_pid" >/dev/null 2>&1
    load "$REQUESTS"
    m1=$(merged "$admin")
    callgrind_control -d "$gw_pid" >/dev/null 2>&1
    ok=$(python3 -c "import json; print(json.load(open('$out/s.json'))['total']['ok'])")
    [ "$ok" = "$REQUESTS" ] || { echo "only $ok of $REQUESTS requests succeeded ($build, $proto)" >&2; exit 1; }
    # The dump written by -d is part 1 (the file named alone comes at exit).
    [ -f "$dump.1" ] || { echo "callgrind wrote no dump $dump.1" >&2; exit 1; }
    ir=$(total_ir "$dump.1")
    kill "$gw_pid"; wait "$gw_pid" 2>/dev/null || true
    if [ -n "${KEEP_DUMPS:-}" ]; then cp "$dump.1" "$KEEP_DUMPS/$(basename "$build").$proto.callgrind"; fi
    rm -f "$dump" "$dump".*
    python3 -c "print(f'| $(basename "$build") | $proto | {$ir / $REQUESTS:,.0f} | {($m1 - $m0) / $REQUESTS * 100:.0f} % |')"
  done
done
