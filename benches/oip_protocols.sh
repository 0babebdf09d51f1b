#!/usr/bin/env bash
# The Open Inference Protocol through the gateway beside /predict (issue 30): throughput and p99
# of one query a request, sent as `POST /predict` `{"query": ...}`, as OIP REST
# (`POST /v2/models/M/infer`, a BYTES tensor of one text) and as OIP gRPC (`ModelInfer` on h2c,
# one connection), by the load generator's `--protocol`.
#
#   benches/oip_protocols.sh   # DURATION=10s REPEAT=3 CONC=32 by default
#
# The worker is the fake backend's (worker/examples/fake_worker.rs: the whole worker but the
# inference), so the figures are the gateway's and the protocols' own cost, not the model's.
# Pinning (a 2-core machine): the gateway alone on PROXY_CORE (default 1); the fake worker and
# the load generator (one thread) share LOAD_CORE (default 0). Each round runs the three
# protocols back to back (interleaved: a neighbour's disturbance hits all three alike).
# Goals: OIP REST within 10 % of /predict's throughput, gRPC at least /predict's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
DURATION=${DURATION:-10s}
REPEAT=${REPEAT:-3}
CONC=${CONC:-32}
PROXY_CORE=${PROXY_CORE:-1}
LOAD_CORE=${LOAD_CORE:-0}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}

cargo build -q --release -p gateway -p loadtest -p worker --bin gateway --bin loadtest --example fake_worker
bin=$CARGO_TARGET_DIR/release
out=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$out"' EXIT

. scripts/lib/start.sh
start_listening "$out/worker" taskset -c "$LOAD_CORE" "$bin/examples/fake_worker" --listen 127.0.0.1:0 \
  --model models/snips-minilm-l6 --runtime-threads 1
worker=$started_url
GATEWAY_ADMIN_LISTEN=127.0.0.1:0 start_listening "$out/gateway" taskset -c "$PROXY_CORE" "$bin/gateway" \
  --listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --worker "$worker" --log warn
gateway=$started_url
grpc=$(sed -n 's/^grpc listening on //p' "$out/gateway.stdout" | head -n 1)

run() {  # PROTOCOL ROUND
  local proto=$1 url=$gateway args=(--method post)
  case $proto in
    oip) args=(--protocol oip) ;;
    grpc) args=(--protocol grpc); url=$grpc ;;
  esac
  taskset -c "$LOAD_CORE" "$bin/loadtest" --url "$url" "${args[@]}" -c "$CONC" -d "$DURATION" --warmup 2s \
    --threads 1 --progress never --summary "$out/$proto-$2.json" >/dev/null
  python3 - "$out/$proto-$2.json" "$proto" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["total"]
bad = s["requests"] - s["ok"]
print(f"| {sys.argv[3]} | {sys.argv[2]} | {s['throughput_per_s']:.0f} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | {bad} |")
PY
}

echo "gateway on core $PROXY_CORE; fake worker and loadtest on core $LOAD_CORE; -c $CONC, $DURATION a run"
echo "| round | protocol | req/s | p50 ms | p99 ms | failed |"
echo "|---|---|---|---|---|---|"
for round in $(seq 1 "$REPEAT"); do
  for proto in predict oip grpc; do
    run "$proto" "$round"
  done
done
