#!/usr/bin/env bash
# Per-request cost of the listener (timeouts, cap, body budget) against a plain hyper accept loop
# (the gateway's before the listener), same trivial service, one core each, in one run.
#
#   benches/listener_overhead.sh   # DURATION=5s REPEAT=4 CONN=64 SERVER_CORE=1 LOAD_CORE=0
#
# The server (single-threaded runtime) runs alone on SERVER_CORE, wrk (1 thread) on LOAD_CORE.
# Each round runs plain then listener back to back, GET then a 200-byte POST (the POST goes
# through `BodyReader::collect` on the listener, `Limited::collect` on the plain loop). Prints
# requests/s and the server's CPU time per request (user + system, from /proc, microseconds) per
# run, and the listener/plain ratio of CPU per request: on a shared machine throughput follows
# the neighbours' load, CPU per request much less.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
DURATION=${DURATION:-5s}
REPEAT=${REPEAT:-4}
CONN=${CONN:-64}
SERVER_CORE=${SERVER_CORE:-1}
LOAD_CORE=${LOAD_CORE:-0}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}

if ! command -v wrk >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk
fi
cargo build -q --release -p listener --example hello
bin=$CARGO_TARGET_DIR/release/examples/hello

out=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$out"' EXIT
# shellcheck source=scripts/lib/start.sh
. scripts/lib/start.sh

cat >"$out/post.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.body = string.rep("x", 200)
EOF

# Prints "requests/s cpu_us_per_request" for one wrk run against the server $started_pid.
run() { # URL [wrk args...]
  local url=$1; shift
  local before after
  before=$(cpu_ticks "$started_pid")
  taskset -c "$LOAD_CORE" wrk -t1 -c"$CONN" -d"$DURATION" "$@" "$url" >"$out/wrk"
  after=$(cpu_ticks "$started_pid")
  awk -v ticks=$((after - before)) -v hz="$(getconf CLK_TCK)" '
    /requests in/ {n = $1} /Requests\/sec/ {rps = int($2)}
    END {printf "%d %.2f", rps, ticks / hz * 1e6 / n}' "$out/wrk"
}

printf '%-6s %-5s %18s %18s %9s\n' round load "plain rps us/req" "listener rps us/req" "cpu ratio"
for round in $(seq 1 "$REPEAT"); do
  for load in GET POST; do
    declare -A r=()
    for which in plain listener; do
      start_listening "$out/$which-$round-$load" taskset -c "$SERVER_CORE" "$bin" "$which" 127.0.0.1:0
      if [ "$load" = POST ]; then r[$which]=$(run "$started_url/" -s "$out/post.lua"); else r[$which]=$(run "$started_url/"); fi
      kill "$started_pid"; wait "$started_pid" 2>/dev/null || true
    done
    printf '%-6s %-5s %18s %18s %9.3f\n' "$round" "$load" "${r[plain]}" "${r[listener]}" \
      "$(awk -v a="${r[listener]#* }" -v b="${r[plain]#* }" 'BEGIN { print a / b }')"
  done
done
