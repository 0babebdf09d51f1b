#!/usr/bin/env bash
# The main job: the whole serving path on one machine, no cluster. Fetches ONNX Runtime, builds,
# starts two CPU workers and a gateway on free ports, classifies sample queries, shows an error,
# then loads the gateway in steps while printing the scaling signal, drains one worker with
# SIGTERM under load (no request fails), and stops everything.
#
#   scripts/demo.sh            # about two minutes after the build
#   DEMO_STEP_S=5 scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
step_s=${DEMO_STEP_S:-8}

ORT_DYLIB_PATH=$(scripts/fetch-ort.sh)
export ORT_DYLIB_PATH
echo "== building (release)"
cargo build --release --locked -p worker -p gateway -p loadtest
bin=${CARGO_TARGET_DIR:-target}/release

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

. scripts/lib/start.sh
# start NAME CMD...: runs CMD in the background and waits until it listens; sets $url.
start() {
  local name=$1; shift
  start_listening "$work/$name" "$@"
  url=$started_url
  echo "$name: $url (pid $started_pid)"
}

echo "== starting two workers (CPU, int8 model) and a gateway"
start worker-a "$bin/worker" --listen 127.0.0.1:0 --threads 1; wa=$url; wa_pid=$started_pid
start worker-b "$bin/worker" --listen 127.0.0.1:0 --threads 1; wb=$url; wb_pid=$started_pid
start gateway "$bin/gateway" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --worker "$wa" --worker "$wb" \
  --target-queue 8 --stats-interval 250ms --signal-fall 10s
gw=$url
gw_admin=$(sed -n 's/^admin listening on //p' "$work/gateway.stdout")   # /metrics, /v1/signal

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

signal() {
  curl -s "$gw_admin/v1/signal" | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    c = p["components"]
    print("   signal[%s] = %.2f replicas (raw %.2f: queue %.2f, gpu %.2f, backlog %.2f; workers %d, blind %d, without GPU telemetry %d)%s" % (
        p["pool"], p["signal"], c["raw"], c["queue"], c["gpu"], c["backlog"], c["workers"], c["blind"], c["gpu_missing"],
        "  STALE" if p["stale"] else ""))'
}

echo
echo "== load steps through the gateway (the signal is in replicas: how many the load needs at target)"
echo "   (it starts near the number of workers: a worker counts as one replica until its telemetry"
echo "   arrives, and the signal falls slowly, so what the gateway cannot see never scales in)"
signal
for c in 1 8 32; do
  # The first step prints the table's header too.
  "$bin/loadtest" --url "$gw" --concurrency "$c" --duration-s "$step_s" --warmup-s 0.5 | { [ "$c" = 1 ] && cat || tail -n 1; }
  signal
done

echo
echo "== SIGTERM to one worker under load: it drains, the gateway retries elsewhere, nothing fails"
"$bin/loadtest" --url "$gw" --concurrency 16 --duration-s "$step_s" --warmup-s 0 >"$work/drain.txt" &
lt=$!
sleep 2
kill -TERM "$wb_pid"
wait "$lt"
cat "$work/drain.txt"
wait "$wb_pid" && echo "worker-b exited 0 after draining"
signal

echo
echo "== a few gateway metrics"
curl -s "$gw_admin/metrics" | grep -E '^gateway_(signal|pool|worker_pressure|retries|ejections)' | head -n 20 || true
echo
echo "done: the gateway and the remaining worker are stopped on exit."
