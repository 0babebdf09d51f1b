#!/usr/bin/env bash
# The external metrics API's benchmark (benches/metrics_api/main.rs): time from a load step at
# the worker to a moved value at the API, and the API's latency under 100 concurrent
# authenticated clients. Real CPU worker, the gateway binary with TLS, a client CA and
# SubjectAccessReviews (to an in-process mocked kube-apiserver), RUNS runs; prints every run and
# the ranges. The readings of every step go to $OUT/step-RUN.jsonl (an HPA replay's input).
#
#   benches/metrics_api.sh     # RUNS=3 STEP_CLIENTS=64 STEPS=2 LOAD_S=8 CLIENTS=100 DURATION_S=10
#
# Pinning (2 cores): the gateway alone on GATEWAY_CORE (1); the worker, the load and the API
# clients on LOAD_CORE (0). RT=1 runs the gateway, the worker and the clients at real-time
# priority (chrt -f 10), so that other tenants of a shared machine cannot preempt them: the
# figures then show this code rather than its neighbours (RESULTS.md has both).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
RUNS=${RUNS:-3}
LOAD_CORE=${LOAD_CORE:-0}
export GATEWAY_CORE=${GATEWAY_CORE:-1} WORKER_CORE=${WORKER_CORE:-$LOAD_CORE}
export OUT=${OUT:-$root/benches/out/metrics_api}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
export ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/fetch-ort.sh)}
export WORKER_MODEL=${WORKER_MODEL:-$root/models/snips-minilm-l6}
export WORKER_BIN=${WORKER_BIN:-$CARGO_TARGET_DIR/release/worker}

cargo build -q --release -p worker --bin worker
cargo bench -q -p gateway --bench metrics_api --no-run
mkdir -p "$OUT"
wrap=()
if [ "${RT:-0}" = 1 ]; then
  wrap=(chrt -f 10)
  export WRAP="chrt -f 10"
fi
for run in $(seq 1 "$RUNS"); do
  echo "== run $run of $RUNS" >&2
  RUN=$run "${wrap[@]}" taskset -c "$LOAD_CORE" cargo bench -q -p gateway --bench metrics_api >/dev/null
done

python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
s = [json.load(open(f"{out}/summary-{r}.json")) for r in range(1, runs + 1)]
f2 = lambda v: "-" if v is None or v != v else f"{v:.2f}"
rng = lambda v: f"{min(v):.0f}-{max(v):.0f}" if v else "-"
print("| load step sent to | steps | moved (+0.25 replica) ms, range | median | 90 % of the new level ms, range | median | level (replicas) |")
print("| :--- | ---: | ---: | ---: | ---: | ---: | ---: |")
for target in ("worker", "gateway"):
    st = [x for r in s for x in r["steps"] if x["target"] == target]
    moved = [x["moved_ms"] for x in st if x["moved_ms"] is not None]
    ninety = [x["ninety_ms"] for x in st if x["ninety_ms"] is not None]
    levels = [x["level"] for x in st]
    if not moved:
        continue
    print(f"| {target} | {len(st)} | {rng(moved)} | {statistics.median(moved):.0f} | {rng(ninety)} | "
          f"{statistics.median(ninety):.0f} | {min(levels):.2f}-{max(levels):.2f} |")
print()
print("| run | clients | each sends | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | errors | server p99 (bucket) ms | client wake lag p99 ms | gateway core: gateway / others % | SubjectAccessReviews (total) |")
print("| ---: | ---: | :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for mode in ("paced", "closed"):
    for r in s:
        l = r[mode]
        each = f"every {l['pace_ms']} ms" if l["pace_ms"] else "back to back"
        print(f"| {l['run']} | {l['clients']} | {each} | {l['req_per_s']:.0f} | {l['p50_ms']:.2f} | {l['p90_ms']:.2f} | "
              f"{l['p99_ms']:.2f} | {l['p999_ms']:.2f} | {l['max_ms']:.1f} | {l['errors']} | <= {f2(l['server_p99_le_ms'])} | "
              f"{f2(l['client_wake_lag_p99_ms'])} | {l['gateway_core_gateway_pct']:.0f} / {l['gateway_core_others_pct']:.0f} | {l['subject_access_reviews']} |")
for mode in ("paced", "closed"):
    p99 = [r[mode]["p99_ms"] for r in s]
    rps = [r[mode]["req_per_s"] for r in s]
    print(f"{mode}: p99 {min(p99):.2f}-{max(p99):.2f} ms, {min(rps):.0f}-{max(rps):.0f} req/s over {runs} runs")
PY
