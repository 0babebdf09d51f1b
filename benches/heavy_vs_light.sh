#!/usr/bin/env bash
# Cheap requests beside expensive ones (issue 9): the throughput of light clients (one SNIPS query
# per request) alone, then while heavy clients post 64 maximum-length queries per request (a
# 131 KB body, ~8,200 tokens, seconds of CPU each), each sending the next as soon as the last is
# answered (after Retry-After when refused, as HTTP clients should; HEAVY_IGNORE_RETRY_AFTER=1
# resends at once). Prints both runs side by side, the ratio, and what the heavy clients got. The
# worker is pinned to one core.
#
#   benches/heavy_vs_light.sh
#   WORKER_BIN=/tmp/worker-before benches/heavy_vs_light.sh    # another build, for a before/after
#
# Settings (environment variables, defaults in brackets):
#   LIGHT_CLIENTS [4], HEAVY_CLIENTS [24]   closed-loop clients of each kind
#   DURATION [15]                           seconds measured per run (the heavy clients start 5 s
#                                           before the second run)
#   THREADS [1]                             ONNX Runtime intra-op threads
#   SERVER_CPU [1], LOAD_CPU [0]            cores for the worker and for the load (taskset -c)
#   WORKER_ARGS [""]                        more worker flags
#   HEAVY_IGNORE_RETRY_AFTER [0]            1: heavy clients resend a refused request at once
#   WORKER_BIN [unset]                      a prebuilt worker; unset: `cargo build --release -p worker`
#
# Needs cargo, python3, taskset and curl. Output goes under benches/out/heavy_vs_light-DATE/
# (ignored).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

LIGHT_CLIENTS=${LIGHT_CLIENTS:-4}
HEAVY_CLIENTS=${HEAVY_CLIENTS:-24}
DURATION=${DURATION:-15}
THREADS=${THREADS:-1}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
WORKER_ARGS=${WORKER_ARGS:-}
run_dir=benches/out/heavy_vs_light-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$run_dir"
log() { echo "[bench] $*" >&2; }

ORT_DYLIB_PATH=$(scripts/fetch-ort.sh)
export ORT_DYLIB_PATH
if [ -z "${WORKER_BIN:-}" ]; then
  log "building the worker and the load generator (release)"
  cargo build --release --locked -p worker -p loadtest >&2
  WORKER_BIN=target/release/worker
fi
[ -x target/release/loadtest ] || cargo build --release --locked -p loadtest >&2

# 64 queries of 2,048 bytes of real words: each is cut at the model's 128 tokens.
python3 - "$run_dir/heavy.json" <<'PY'
import json, sys
words = "play some jazz music by miles davis in the living room tonight please ".split()
query = " ".join(words[i % len(words)] for i in range(1000))[:2048]
json.dump({"queries": [query] * 64}, open(sys.argv[1], "w"))
PY
log "heavy body: $(wc -c <"$run_dir/heavy.json") bytes"

. scripts/lib/start.sh
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
# shellcheck disable=SC2086
start_listening "$run_dir/worker" taskset -c "$SERVER_CPU" "$WORKER_BIN" --listen 127.0.0.1:0 --intra-op-threads "$THREADS" $WORKER_ARGS
url=$started_url
log "worker $WORKER_BIN on $url (core $SERVER_CPU)"

light() { # label -> one JSON line
  taskset -c "$LOAD_CPU" target/release/loadtest --url "$url" --concurrency "$LIGHT_CLIENTS" \
    --duration-s "$DURATION" --warmup-s 1 --timeout-s 60 --json | tee "$run_dir/light-$1.json"
}

log "light clients alone"
light alone >/dev/null
log "heavy clients start"
taskset -c "$LOAD_CPU" python3 - "$url" "$run_dir/heavy.json" "$HEAVY_CLIENTS" "$((DURATION + 8))" \
  "${HEAVY_IGNORE_RETRY_AFTER:-0}" >"$run_dir/heavy.json.out" <<'PY' &
import collections, http.client, json, sys, threading, time, urllib.parse
url, body_file, clients, seconds, ignore = sys.argv[1:6]
body = open(body_file, "rb").read()
u = urllib.parse.urlsplit(url)
end = time.time() + float(seconds)
counts = collections.Counter()
lock = threading.Lock()
def client():
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    while time.time() < end:
        try:
            conn.request("POST", "/predict", body, {"content-type": "application/json"})
            resp = conn.getresponse(); resp.read()
            status, retry = resp.status, resp.getheader("retry-after")
        except Exception as e:
            status, retry = type(e).__name__, None
            conn.close(); conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        with lock:
            counts[str(status)] += 1
        if retry and ignore != "1":
            time.sleep(float(retry))
threads = [threading.Thread(target=client) for _ in range(int(clients))]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(counts))
PY
heavy_pid=$!
pids+=("$heavy_pid")
sleep 5
log "light clients beside the heavy ones"
light beside >/dev/null
curl -s "$url/v1/stats" >"$run_dir/stats-under-heavy.json"
wait "$heavy_pid" || true

python3 - "$run_dir" "$LIGHT_CLIENTS" "$HEAVY_CLIENTS" "$WORKER_BIN" <<'PY'
import json, sys
d, lc, hc, binary = sys.argv[1:5]
a = json.load(open(f"{d}/light-alone.json"))
b = json.load(open(f"{d}/light-beside.json"))
codes = json.load(open(f"{d}/heavy.json.out"))
q = json.load(open(f"{d}/stats-under-heavy.json"))["queue"]
print(f"worker: {binary}; {lc} light clients, {hc} heavy clients (64 x 2 KB queries per request)")
print()
print("| light clients | req/s | p50 ms | p99 ms | non-200 |")
print("|---|---:|---:|---:|---:|")
for name, r in (("alone", a), ("beside the heavy ones", b)):
    print(f"| {name} | {r['throughput_per_s']:.1f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {sum((r.get('errors') or {}).values())} |")
print()
print(f"light throughput kept: {100 * b['throughput_per_s'] / a['throughput_per_s']:.0f} %")
print(f"heavy requests: {', '.join(f'{n} x {c}' for c, n in sorted(codes.items())) or 'none answered'}")
print(f"queue while heavy: {q.get('queued', 0) + q.get('in_flight', 0)} queries, "
      f"{q.get('queued_tokens', 0) + q.get('in_flight_tokens', 0)} tokens (heavy: {q.get('heavy_queries', '-')} queries)")
PY
