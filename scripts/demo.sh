#!/usr/bin/env bash
# The main job: the product's story on one machine, no cluster (docs/demo.md).
#
# Fetches ONNX Runtime, builds (release), makes certificates, starts a gateway whose worker set is
# a worker file and whose external metrics API (external.metrics.k8s.io, HTTPS, client
# certificates) serves the scaling signal, and a local scaler that reads that API exactly as the
# HPA does and decides with the HPA's algorithm and the chart's behavior (shorter windows:
# scripts/demo-behavior.yaml), starting and stopping CPU workers between 1 and DEMO_MAX.
# Classifies the sample queries, shows a JSON error, then loads the gateway in steps up and back
# down with loadtest (live: load, latency, signal, replicas, and the scaler's decisions), and ends
# with the HTML report and a summary: replicas 1 -> N -> 1, failed requests 0.
#
#   scripts/demo.sh                        # about 3 minutes after the build
#   DEMO_STEP_S=6 DEMO_TAIL_S=30 scripts/demo.sh
#   DEMO_MIN=0 scripts/demo.sh             # from zero: replicas 0 -> 1 -> N -> 1 -> 0
#
# With DEMO_MIN=0 the pool starts empty (the scaler's --min 0): the first requests are held at
# the gateway (--cold-start-hold) while the scaler starts a worker, and answered once it is
# ready; the summary prints the cold start (first request sent to first answer), and the run
# waits for the pool to go back to zero after the load.
#
# Knobs: DEMO_STEP_S (15) seconds per load step; DEMO_TAIL_S (45) low load at the end, for the
# scale-down; DEMO_RATES ("R1 R2 ...": requests/s of the steps; default: from one worker's
# measured capacity, peaking at 1.2x it, which needs 2 replicas at the gateway's default target
# utilization of 0.7); DEMO_MAX (4) most workers, a ceiling the run should not reach; DEMO_MIN
# (1) fewest workers, 0 to start from and go back to zero;
# DEMO_STEPS ("0.15 0.4 0.9 1.2 0.9 0.4") the steps as fractions of the measured capacity (0.9 C
# asks for a second replica before 1.2 C would overload one);
# DEMO_PROBE_CLIENTS (64) the probe's closed-loop clients (two full batches of the worker);
# DEMO_LOADTEST_ARGS ("--threads 1") the load generator's own flags;
# DEMO_SYNC (2s) the scaler's sync period; DEMO_GATEWAY_ARGS extra gateway flags (none: the
# signal runs on its defaults);
# DEMO_OUT (target/demo) where the report goes; DEMO_BIN_DIR: take the binaries from there and do
# not build (the test uses target/debug); DEMO_WORKER_ARGS ("--intra-op-threads 1") the workers' arguments;
# DEMO_WORKER_DEVICES: place each worker on a device of its own (`gpus`: one worker per GPU of
# the host, `--device cuda:N`; the GPU variant: DEMO_WORKER_DEVICES=gpus
# DEMO_WORKER_ARGS="--model models/build/gpu", ORT_DYLIB_PATH set to the CUDA build: docs/demo.md).
set -euo pipefail
cd "$(dirname "$0")/.."
step_s=${DEMO_STEP_S:-15}
tail_s=${DEMO_TAIL_S:-45}
max=${DEMO_MAX:-4}
min=${DEMO_MIN:-1}
sync=${DEMO_SYNC:-2s}
read -r -a gateway_args <<<"${DEMO_GATEWAY_ARGS:-}"
read -r -a loadtest_args <<<"${DEMO_LOADTEST_ARGS:---threads 1}"
steps=${DEMO_STEPS:-0.15 0.4 0.9 1.2 0.9 0.4}
probe_clients=${DEMO_PROBE_CLIENTS:-64}
devices=()
[ -n "${DEMO_WORKER_DEVICES:-}" ] && devices=(--worker-devices "$DEMO_WORKER_DEVICES")
out=${DEMO_OUT:-target/demo}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# A GPU run brings its own (DEMO_WORKER_ARGS="--device cuda:0 ...", docs/demo.md).
ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/fetch-ort.sh)}
export ORT_DYLIB_PATH
read -r -a worker_args <<<"${DEMO_WORKER_ARGS:---intra-op-threads 1}"
if [ -n "${DEMO_BIN_DIR:-}" ]; then
  bin=$DEMO_BIN_DIR
else
  echo "== building (release)"
  cargo build --release --locked -p worker -p gateway -p loadtest -p scaler
  bin=${CARGO_TARGET_DIR:-target}/release
fi

work=$(mktemp -d)
pids=()
scaler_pid=
cleanup() {
  # The scaler first: it takes its workers out of the gateway, drains and stops them.
  if [ -n "$scaler_pid" ] && kill -0 "$scaler_pid" 2>/dev/null; then
    kill -TERM "$scaler_pid" 2>/dev/null || true
    wait "$scaler_pid" 2>/dev/null || true
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

. scripts/lib/start.sh

echo "== certificates: a CA, the metrics API's serving certificate, the scaler's client certificate"
"$bin/scaler" certs "$work/certs" | sed 's/^/   /'
c=$work/certs

echo "== a gateway: workers from a file the scaler writes; the external metrics API on HTTPS"
: >"$work/workers.txt"
start_listening "$work/gateway" "$bin/gateway" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --worker-file "$work/workers.txt" --worker-file-interval 250ms \
  --stats-interval 250ms --signal-fall 10s --demand-window 2s "${gateway_args[@]}" \
  --metrics-api-listen 127.0.0.1:0 --tls-cert-file "$c/server.crt" --tls-private-key-file "$c/server.key" \
  --client-ca-file "$c/ca.crt" --requestheader-client-ca-file "$c/front-proxy-ca.crt" \
  --authorization-mode AlwaysAllow
gw=$started_url
gw_admin=$(sed -n 's/^admin listening on //p' "$work/gateway.stdout")
api=$(sed -n 's/^metrics API listening on //p' "$work/gateway.stdout")
echo "   clients $gw, admin $gw_admin, metrics API $api"
echo "   (--authorization-mode AlwaysAllow: no cluster to ask; authentication by client certificate stays on)"

if [ -n "${DEMO_RATES:-}" ]; then
  rates=$DEMO_RATES
else
  echo "== one worker's capacity through a gateway, to size the load steps (a worker and a gateway of"
  echo "   their own; closed loop, $probe_clients clients: two of the worker's full batches; 4 s after 2 s of warm-up)"
  probe_device=()
  [ -n "${DEMO_WORKER_DEVICES:-}" ] && probe_device=(--device cuda:0)
  start_listening "$work/probe-worker" "$bin/worker" --listen 127.0.0.1:0 "${worker_args[@]}" "${probe_device[@]}"
  probe_worker=$started_pid
  start_listening "$work/probe-gateway" "$bin/gateway" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --worker "$started_url"
  probe_gateway=$started_pid
  cap=$("$bin/loadtest" --url "$started_url" -c "$probe_clients" -d 4s --warmup 2s --json "${loadtest_args[@]}" |
    python3 -c 'import json,sys; print(int(json.loads(sys.stdin.readline())["throughput_per_s"]))')
  kill -TERM "$probe_gateway" "$probe_worker"; wait "$probe_gateway" "$probe_worker" 2>/dev/null || true
  echo "   $cap requests/s"
  # The peak step is 1.2x the measured figure: on a small shared machine the probe can read 10 %
  # low, and a peak within the real capacity queues nothing, so nothing scales.
  rates=$(python3 -c "import sys; c=$cap; print(' '.join(str(max(1, round(c*float(f)))) for f in sys.argv[1].split()))" "$steps")
fi

echo "== the scaler: the HPA's request, algorithm and behavior (scripts/demo-behavior.yaml), $min..$max workers"
series=$out/scaler.jsonl
: >"$series"
"$bin/scaler" run --metrics-api "$api" --ca-file "$c/ca.crt" --cert-file "$c/client.crt" --key-file "$c/client.key" \
  --pool default --min "$min" --max "$max" --interval "$sync" --behavior scripts/demo-behavior.yaml \
  --worker-file "$work/workers.txt" --worker-file-interval 250ms --gateway-admin "$gw_admin" \
  --worker-bin "$bin/worker" "${worker_args[@]/#/--worker-arg=}" "${devices[@]}" --worker-log-dir "$work/workers" \
  --series "$series" >"$work/scaler.stdout" 2>"$work/scaler.stderr" &
scaler_pid=$!
cold=$out/cold-start.json
rm -f "$cold"
if [ "$min" = 0 ]; then
  for _ in $(seq 1 100); do
    grep -q '^scaler: started' "$work/scaler.stdout" 2>/dev/null && break
    kill -0 "$scaler_pid" 2>/dev/null || { echo "the scaler exited:" >&2; cat "$work/scaler.stdout" "$work/scaler.stderr" >&2; exit 1; }
    sleep 0.1
  done
  sed 's/^/   /' "$work/scaler.stdout"
else
  for _ in $(seq 1 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$gw/readyz")" = 200 ] && break
    kill -0 "$scaler_pid" 2>/dev/null || { echo "the scaler exited:" >&2; cat "$work/scaler.stdout" "$work/scaler.stderr" >&2; exit 1; }
    sleep 0.1
  done
  sed 's/^/   /' "$work/scaler.stdout"
fi

examples() {
  echo
  echo "== classifying through the gateway (the reference queries of models/sanity.json)"
  python3 -c 'import json; [print(q["text"]) for q in json.load(open("models/sanity.json"))["queries"]]' |
    while IFS= read -r q; do
      printf '%-55s -> %s\n' "$q" "$(curl -s -G --data-urlencode "query=$q" "$gw/predict")"
    done
  echo
  echo "== bad input gets a JSON error"
  curl -s -w '   (HTTP %{http_code})\n' -G --data-urlencode "query=   " "$gw/predict"
  curl -s -w '   (HTTP %{http_code})\n' -d '{"query": 42}' "$gw/predict"
}
# From zero, the pool stays empty until the load (every request, a refused one too, is demand
# that wakes it): its first requests are the ones held.
[ "$min" = 0 ] || examples

echo
echo "== the HPA's request, made with the scaler's client certificate"
echo "   GET $api/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gateway_pool_signal?labelSelector=pool%3Ddefault"
curl -s --cacert "$c/ca.crt" --cert "$c/client.crt" --key "$c/client.key" \
  "$api/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gateway_pool_signal?labelSelector=pool%3Ddefault" |
  python3 -c 'import json,sys; d=json.load(sys.stdin); print("  ", json.dumps(d["items"]))'
echo "   without a certificate: HTTP $(curl -s -o /dev/null -w '%{http_code}' --cacert "$c/ca.crt" "$api/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gateway_pool_signal")"

low=${rates%% *}
profile="steps($rates, ${step_s}s), const($low, ${tail_s}s)"
# R, the replicas each step needs at the gateway's target utilization u (0.7 unless
# DEMO_GATEWAY_ARGS sets it): load / (C x u), C the probe's measured capacity (with DEMO_RATES,
# the peak rate over the peak of DEMO_STEPS). Drawn beside the replicas in the report.
u=$(python3 -c 'import sys; a=sys.argv[1:]; print(a[a.index("--target-utilization")+1] if "--target-utilization" in a else 0.7)' "${gateway_args[@]}")
capacity=${cap:-$(python3 -c 'import sys; print(max(map(float, sys.argv[1].split())) / max(map(float, sys.argv[2].split())))' "$rates" "$steps")}
needs=$work/needs.jsonl
python3 scripts/lib/needs.py "$needs" "$rates" "$step_s" "$tail_s" "$capacity" "$u"

echo
echo "== load: $profile"
echo "   live: load and latency per second | the gateway's signal (replicas the load needs) and workers |"
echo "   the scaler's series; [scaler] lines: its decisions (time UTC, metric, current, desired, reason)"
tail -n 0 -f "$work/scaler.stdout" > >(sed -u 's/^/   [scaler] /') &
tail_pid=$!
pids+=("$tail_pid")
cold_pid=
if [ "$min" = 0 ]; then
  # Beside the load's first requests (the report's In flight chart shows them held): 8 more at
  # once, timed from sending to the first answer, the cold start.
  python3 scripts/lib/cold_start.py "$gw" 8 "$cold" >"$work/cold-start.txt" &
  cold_pid=$!
fi
"$bin/loadtest" --url "$gw" --rate "$profile" --warmup 0s "${loadtest_args[@]}" --progress always \
  --gateway-admin "$gw_admin" --pool default --series "$series" --series "$needs" \
  --report "$out/demo-report.html" --summary "$out/demo-run.json" --title "Autoscaling demo: gateway signal -> HPA algorithm -> workers" |
  cat
if [ -n "$cold_pid" ]; then
  wait "$cold_pid" || true
  echo
  echo "== from zero: the pool had no worker; the first requests were held at the gateway while the scaler started one"
  cat "$work/cold-start.txt"
  examples
fi

echo
# Back to zero takes longer: the signal decays to zero (its --signal-fall), then the scale-down
# window passes.
wait_s=90
[ "$min" = 0 ] && wait_s=240
echo "== waiting for the scale-down to reach $min worker(s) (at most $wait_s s)"
for _ in $(seq 1 $((wait_s * 10))); do
  last=$(python3 -c '
import json, sys
v = [json.loads(l)["value"] for l in open(sys.argv[1]) if l.strip() and json.loads(l)["series"] == "replicas"]
print(int(v[-1]) if v else 0)' "$series")
  [ "$last" = "$min" ] && break
  sleep 0.1
done
sleep 0.5
kill "$tail_pid" 2>/dev/null || true

echo
echo "== summary"
python3 - "$series" "$out/demo-run.json" "$out/demo-report.html" "$max" "$rates" "$capacity" "$u" "$min" "$cold" <<'EOF'
import json, math, os, sys
series, run, report, most = sys.argv[1:4] + [int(sys.argv[4])]
rates, capacity, u = [float(r) for r in sys.argv[5].split()], float(sys.argv[6]), float(sys.argv[7])
least, cold = int(sys.argv[8]), sys.argv[9]
reps = [int(json.loads(l)["value"]) for l in open(series) if l.strip() and json.loads(l)["series"] == "replicas"]
path = [r for i, r in enumerate(reps) if i == 0 or r != reps[i - 1]]
s = json.load(open(run))
t = s["total"]
failed = t["requests"] - t["ok"]
print(f"   replicas: {' -> '.join(map(str, path))} (peak {max(reps)})")
if os.path.exists(cold):
    c = json.load(open(cold))
    failed += c["requests"] - c["ok"]
    print(f"   from zero: {c['requests']} requests held, {c['ok']} answered 200; cold start (first request sent "
          f"to first answer) {c['cold_start_s']:.2f} s")
print(f"   requests: {t['requests']}, ok {t['ok']}, failed {failed}" + (f" {t['errors']}" if failed else ""))
print(f"   latency p50 {t['p50_ms']:.1f} ms, p99 {t['p99_ms']:.1f} ms, max {t['max_ms']:.1f} ms")
sig = (s.get("signal") or {}).get("samples") or []
if sig:
    peak = max(sig, key=lambda x: x["signal"])
    print(f"   signal: peak {peak['signal']:.2f} replicas")
r_peak = max(rates) / (capacity * u)
need = max(1, math.ceil(r_peak / 1.1))  # ceil(R) within the HPA's 10 % tolerance
print(f"   R at the peak: {r_peak:.2f} (C = {capacity:.0f} requests/s, u = {u}): {need} replica(s) needed; "
      f"peak replicas {max(reps)}; ceiling DEMO_MAX = {most}")
print(f"   report: {report}")
print(f"   scaler series: {series}; run: {run}")
ok = (max(reps) > 1 or most == 1) and reps[-1] == least and failed == 0 and (least > 0 or reps[0] == 0)
print("   " + (f"OK: replicas went up with the load and back down to {least}, no request failed" if ok else
             f"NOT AS EXPECTED: replicas should go up and back to {least} with no failed request"))
if most > 1 and max(reps) >= most:
    print(f"   NOTE: the run reached DEMO_MAX ({most}): the signal asked for more than the ceiling")
sys.exit(0 if ok else 1)
EOF
