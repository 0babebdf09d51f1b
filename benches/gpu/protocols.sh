#!/usr/bin/env bash
# The Open Inference Protocol through one gateway in front of one GPU worker (the real model),
# beside `/predict`: `/predict` (`POST {"query": ...}`), OIP REST (`POST /v2/models/M/infer`,
# one text) and OIP gRPC (`ModelInfer` on h2c), back to back in each of ROUNDS rounds (a
# neighbour's disturbance hits all three alike), closed loop. Per run: throughput, p99, its
# ratio to the same round's `/predict`, and the gateway's and the worker's CPU per request
# (/proc/PID/stat over the run). The 2-core VM's `benches/oip_protocols.sh` on a GPU host.
#
#   bash benches/gpu/protocols.sh [APP_DIR [MODEL_DIR]]   (repository root, on the GPU host,
#                                                          after ../shared/gpu/'s uncarry.sh and env.sh)
#
# Settings: MODEL_NAME (snips-minilm-l6), ROUNDS (3), CLIENTS (512), DURATION_S (6, after WARMUP_S 2), LOADTEST_THREADS (4),
# H2_CONNECTIONS (2 a load generator thread), WORKER_FLAGS ("--runtime-threads 4"),
# GATEWAY_FLAGS ("--runtime-threads 6"). Output: a table on stdout.
set -euo pipefail
cd "$(dirname "$0")/../.."
app=${1:-.gpu/app}
model=${2:-models/build/gpu}
rounds=${ROUNDS:-3}
clients=${CLIENTS:-512}
duration_s=${DURATION_S:-6}
warmup_s=${WARMUP_S:-2}
lt_threads=${LOADTEST_THREADS:-4}
h2_conns=${H2_CONNECTIONS:-2}
read -r -a worker_flags <<<"${WORKER_FLAGS:---runtime-threads 4}"
read -r -a gateway_flags <<<"${GATEWAY_FLAGS:---runtime-threads 6}"
. scripts/lib/start.sh
scratch
# children_cpu: the load generator's CPU, from `times`.
# shellcheck source=benches/lib/protocols.sh
. benches/lib/protocols.sh
tck=$(getconf CLK_TCK)

# The model's name is its directory's unless given: the GPU build's directory is not the model's.
name=${MODEL_NAME:-snips-minilm-l6}
start_listening "$work/w" "$app/worker" --listen 127.0.0.1:0 --model "$model" --model-name "$name" --device cuda:0 \
  "${worker_flags[@]}"
wpid=$started_pid
start_listening "$work/gw" "$app/gateway" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --grpc-listen 127.0.0.1:0 "${gateway_flags[@]}" --worker "$started_url"
gpid=$started_pid
gurl=$started_url
grpc=$(sed -n 's/^grpc listening on //p' "$work/gw.stdout" | head -n 1)
sleep 2
echo "# protocols: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1), $(nproc) cores," \
  "$(cat "$app/commit.txt" 2>/dev/null); $clients clients, $lt_threads load generator threads," \
  "gRPC on $((lt_threads * h2_conns)) connections"
echo "| round | protocol | req/s | vs /predict | p99 ms | failed | gateway CPU µs/req | worker CPU µs/req | loadtest CPU µs/req |"
echo "|---|---|---|---|---|---|---|---|---|"
for round in $(seq 1 "$rounds"); do
  for proto in predict oip grpc; do
    url=$gurl
    case $proto in
      predict) args=(--method post) ;;
      oip) args=(--protocol oip --model-name "$name") ;;
      grpc) args=(--protocol grpc --model-name "$name" --h2-connections "$h2_conns"); url=$grpc ;;
    esac
    g0=$(cpu_ticks "$gpid"); w0=$(cpu_ticks "$wpid")
    # The load generator's CPU: this shell's reaped children's times before and after it.
    times >"$work/times0"
    "$app/loadtest" --url "$url" "${args[@]}" -c "$clients" -d "${duration_s}s" --warmup "${warmup_s}s" \
      --threads "$lt_threads" --json >"$work/lt.json" 2>/dev/null
    times >"$work/times1"
    g1=$(cpu_ticks "$gpid"); w1=$(cpu_ticks "$wpid")
    python3 - "$round" "$proto" "$tck" $((g1 - g0)) $((w1 - w0)) "$((duration_s + warmup_s))" "$work" \
      "$(children_cpu "$work/times0")" "$(children_cpu "$work/times1")" <<'EOF'
import json, sys
rnd, proto, work = sys.argv[1], sys.argv[2], sys.argv[7]
lt = float(sys.argv[9]) - float(sys.argv[8])
tck, gt, wt, wall = (float(a) for a in sys.argv[3:7])
r = json.loads(open(f"{work}/lt.json").readline())
rps = r["throughput_per_s"]
# CPU over the whole run (warm-up included) against the requests of the whole run, estimated
# as the measured rate times the run's length.
n = max(rps * wall, 1)
if proto == "predict":
    open(f"{work}/predict.rate", "w").write(str(rps))
    vs = "-"
else:
    vs = f"{(rps / float(open(f'{work}/predict.rate').read()) - 1) * 100:+.1f} %"
bad = r["requests"] - r["ok"]
print(f"| {rnd} | {proto} | {rps:.0f} | {vs} | {r['p99_ms']:.2f} | {bad} | {gt / tck / n * 1e6:.1f} | {wt / tck / n * 1e6:.1f} | {lt / n * 1e6:.1f} |")
EOF
  done
done
