#!/usr/bin/env bash
# Soak (issue 9): a long run at ~80 % of measured capacity through the gateway, with workers
# killed (SIGKILL) and restarted on a fresh port every few minutes (they rejoin through the
# gateway's worker file), and the resident memory of every process sampled throughout. At the
# end it prints a markdown summary for benches/RESULTS.md: errors (expected 0), RSS first / last /
# max and drift per process, latency percentiles per minute.
#
#   benches/soak.sh                       # one hour
#   DURATION=120 KILL_EVERY=30 benches/soak.sh    # a short validation run
#
# Steps: release build (unless BIN_DIR is given); WORKERS workers and a gateway reading a worker
# file; capacity measured closed-loop (CAP_CONCURRENCY clients, CAP_SECONDS s) through the
# gateway; then open-loop `loadtest` at LOAD_PERCENT % of it for DURATION s. Meanwhile, every
# KILL_EVERY s, the next of workers 1..WORKERS-1 in turn is killed with SIGKILL, and after
# RESTART_DELAY s a new one is started on a new port and written into the file in its place.
# Worker 0 is never killed, so that one worker's memory is followed for the whole run. RSS of
# the gateway, every worker and the load generator is sampled every SAMPLE_EVERY s.
#
# Settings (environment variables, defaults in brackets):
#   DURATION [3600]        seconds of the open-loop run
#   WORKERS [3]            workers (one ONNX Runtime thread each: THREADS [1])
#   KILL_EVERY [180]       seconds between kills
#   RESTART_DELAY [3]      seconds a killed worker stays dead before its replacement starts
#   LOAD_PERCENT [80]      offered rate, % of the measured capacity
#   CAP_SECONDS [20]       length of the capacity measurement; CAP_CONCURRENCY [32] its clients
#   RATE [unset]           skip the measurement and offer this rate (requests/s)
#   SAMPLE_EVERY [10]      seconds between RSS samples
#   WARM_S [60]            RSS "first" is the first sample this long into the load (the
#                          allocators' and caches' warm-up is not drift); at most DURATION/4
#   INTERVAL [60s]         latency rows (loadtest's timeline interval)
#   MAX_IN_FLIGHT [64]     the load generator's outstanding requests, and so its connections, at
#                          most: a request due beyond it waits in the generator and the wait counts
#                          in its latency (no coordinated omission). Bounded so that the servers'
#                          memory is compared at a steady number of connections: unbounded, the
#                          generator opened a few hundred whenever latency rose after a kill, and
#                          per-connection buffers moved the gateway's RSS by a third (the
#                          connection floods of the fault suite bound that memory instead).
#   GATEWAY_ARGS, WORKER_ARGS [""]   more flags
#   BIN_DIR [unset]        prebuilt worker, gateway and loadtest; unset: `cargo build --release`
#
# Needs cargo, python3 and curl. Output under benches/out/soak-DATE/ (ignored): rss.csv
# (t_s,process,pid,rss_kib,threads,fds), events.log, loadtest's summary.json and report.html, each server's
# stdout/stderr, summary.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

DURATION=${DURATION:-3600}
WORKERS=${WORKERS:-3}
THREADS=${THREADS:-1}
KILL_EVERY=${KILL_EVERY:-180}
RESTART_DELAY=${RESTART_DELAY:-3}
LOAD_PERCENT=${LOAD_PERCENT:-80}
CAP_SECONDS=${CAP_SECONDS:-20}
CAP_CONCURRENCY=${CAP_CONCURRENCY:-32}
SAMPLE_EVERY=${SAMPLE_EVERY:-10}
WARM_S=${WARM_S:-60}
MAX_IN_FLIGHT=${MAX_IN_FLIGHT:-64}
INTERVAL=${INTERVAL:-60s}
GATEWAY_ARGS=${GATEWAY_ARGS:-}
WORKER_ARGS=${WORKER_ARGS:-}
[ "$WORKERS" -ge 2 ] || { echo "WORKERS must be at least 2 (worker 0 is never killed)" >&2; exit 2; }
[ $((WARM_S * 4)) -le "$DURATION" ] || WARM_S=$((DURATION / 4))

run_dir=benches/out/soak-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$run_dir"
log() { echo "[soak $(date -u +%H:%M:%S)] $*" >&2; echo "$(date +%s.%N) $*" >>"$run_dir/events.log"; }

ORT_DYLIB_PATH=$(scripts/fetch-ort.sh)
export ORT_DYLIB_PATH
if [ -z "${BIN_DIR:-}" ]; then
  log "building worker, gateway and loadtest (release)"
  cargo build --release --locked -p worker -p gateway -p loadtest >&2
  BIN_DIR=target/release
fi

. scripts/lib/start.sh
# start_listening reads PREFIX.stdout at once, maybe before the background process has created
# it (a failed `sed` under `set -e -o pipefail`): create it first.
start() { : >"$1.stdout"; start_listening "$@"; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# Current pid of each process by name, read by the sampler (rewritten whole, then renamed).
declare -A pid_of
publish_pids() {
  local tmp="$run_dir/pids.tmp"
  : >"$tmp"
  for name in "${!pid_of[@]}"; do echo "$name ${pid_of[$name]}" >>"$tmp"; done
  mv "$tmp" "$run_dir/pids"
}

declare -A url_of
start_worker() { # slot
  local slot=$1 n=${2:-0}
  # shellcheck disable=SC2086
  start "$run_dir/worker$slot-$n" "$BIN_DIR/worker" --listen 127.0.0.1:0 --intra-op-threads "$THREADS" $WORKER_ARGS
  url_of[$slot]=$started_url
  pid_of[worker$slot]=$started_pid
}
write_worker_file() {
  local tmp="$run_dir/workers.tmp"
  : >"$tmp"
  for ((i = 0; i < WORKERS; i++)); do echo "${url_of[$i]}" >>"$tmp"; done
  mv "$tmp" "$run_dir/workers"
}

for ((i = 0; i < WORKERS; i++)); do start_worker "$i"; done
write_worker_file
# shellcheck disable=SC2086
start "$run_dir/gateway" "$BIN_DIR/gateway" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --worker-file "$run_dir/workers" --worker-file-interval 1s $GATEWAY_ARGS
gw=$started_url
pid_of[gateway]=$started_pid
admin=$(sed -n 's/^admin listening on //p' "$run_dir/gateway.stdout" | head -n 1)
publish_pids
log "gateway $gw (admin $admin), workers ${url_of[*]}"
for _ in $(seq 1 100); do
  ready=$(curl -fsS "$admin/v1/pools" | python3 -c 'import json,sys; print(sum(w["health"] == "ready" for p in json.load(sys.stdin) for w in p["workers"]))')
  [ "$ready" -ge "$WORKERS" ] && break
  sleep 0.1
done

if [ -z "${RATE:-}" ]; then
  log "capacity: $CAP_CONCURRENCY clients, closed loop, ${CAP_SECONDS}s"
  "$BIN_DIR/loadtest" --url "$gw" --concurrency "$CAP_CONCURRENCY" --duration "${CAP_SECONDS}s" --warmup 2s \
    --progress never --json >"$run_dir/capacity.json"
  capacity=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["throughput_per_s"])' "$run_dir/capacity.json")
  RATE=$(python3 -c "print(max(1, round($capacity * $LOAD_PERCENT / 100)))")
  log "capacity $capacity req/s; offering $RATE req/s ($LOAD_PERCENT %)"
else
  capacity=""
fi

# The load, open loop.
"$BIN_DIR/loadtest" --url "$gw" --rate "$RATE" --duration "${DURATION}s" --warmup 0s --request-timeout 30s \
  --max-outstanding "$MAX_IN_FLIGHT" \
  --interval "$INTERVAL" --progress never --summary "$run_dir/summary.json" --report "$run_dir/report.html" \
  --gateway-admin "$admin" --title "soak: $RATE req/s, a worker killed every ${KILL_EVERY}s" \
  >"$run_dir/loadtest.stdout" 2>"$run_dir/loadtest.stderr" &
load_pid=$!
pids+=("$load_pid")
pid_of[loadtest]=$load_pid
publish_pids
load_start=$(date +%s.%N)
log "load started: $RATE req/s for ${DURATION}s, at most $MAX_IN_FLIGHT in flight"

# RSS sampler.
# Beside RSS: threads and open descriptors (connections, mostly), to tell a step in memory that
# follows connections or threads from one that does not.
echo "t_s,process,pid,rss_kib,threads,fds" >"$run_dir/rss.csv"
(
  while kill -0 "$load_pid" 2>/dev/null; do
    now=$(date +%s.%N)
    t=$(awk -v a="$load_start" -v b="$now" 'BEGIN { printf "%.1f", b - a }')
    while read -r name pid; do
      # A process just killed has no /proc entry: nothing is written for it (and nothing fails).
      status=$(awk '/^VmRSS:/ { r = $2 } /^Threads:/ { t = $2 } END { if (r != "") print r, t }' "/proc/$pid/status" 2>/dev/null || true)
      rss=${status% *}; threads=${status#* }
      fds=$( (ls "/proc/$pid/fd" 2>/dev/null || true) | wc -l)
      [ -n "$rss" ] && echo "$t,$name,$pid,$rss,$threads,$fds" >>"$run_dir/rss.csv"
    done <"$run_dir/pids"
    sleep "$SAMPLE_EVERY"
  done
) &
pids+=("$!")

# Chaos: kill workers 1..WORKERS-1 in turn, restart each on a fresh port.
next=1
kills=0
generation=0
end=$(awk -v a="$load_start" -v d="$DURATION" 'BEGIN { printf "%d", a + d }')
while :; do
  wake=$(($(date +%s) + KILL_EVERY))
  [ "$((wake + RESTART_DELAY + 5))" -lt "$end" ] || break
  while [ "$(date +%s)" -lt "$wake" ] && kill -0 "$load_pid" 2>/dev/null; do sleep 1; done
  kill -0 "$load_pid" 2>/dev/null || break
  victim=${pid_of[worker$next]}
  log "SIGKILL worker$next (pid $victim, ${url_of[$next]})"
  kill -KILL "$victim"
  wait "$victim" 2>/dev/null || true
  kills=$((kills + 1))
  sleep "$RESTART_DELAY"
  generation=$((generation + 1))
  start_worker "$next" "$generation"
  write_worker_file
  publish_pids
  log "restarted worker$next (pid ${pid_of[worker$next]}, ${url_of[$next]})"
  next=$((next % (WORKERS - 1) + 1))
done

log "waiting for the load to finish"
wait "$load_pid" || log "loadtest exited with status $?"
curl -fsS "$admin/metrics" >"$run_dir/gateway-metrics.txt" || true
curl -fsS "$admin/v1/pools" >"$run_dir/pools.json" || true

python3 - "$run_dir" "$DURATION" "$RATE" "${capacity:-}" "$LOAD_PERCENT" "$CAP_CONCURRENCY" "$CAP_SECONDS" \
  "$KILL_EVERY" "$kills" "$WORKERS" "$WARM_S" "$(git rev-parse --short HEAD)" <<'PY' | tee "$run_dir/summary.md"
import csv, json, sys, collections, re
(run_dir, duration, rate, capacity, pct, cap_c, cap_s, kill_every, kills, workers, warm_s, commit) = sys.argv[1:]
duration, warm_s = float(duration), float(warm_s)
s = json.load(open(f"{run_dir}/summary.json"))
total = s["total"]
errors = sum(total["errors"].values())

rows = collections.defaultdict(list)  # (process, pid) -> [(t, kib)]
for r in csv.DictReader(open(f"{run_dir}/rss.csv")):
    rows[(r["process"], r["pid"])].append((float(r["t_s"]), int(r["rss_kib"])))

def mib(kib):
    return f"{kib / 1024:.1f}"

print(f"### Soak: {duration:.0f} s at {pct} % of capacity through the gateway, a worker SIGKILLed every {kill_every} s")
print()
print(f"`DURATION={duration:.0f} KILL_EVERY={kill_every} benches/soak.sh` (commit {commit}; {workers} CPU workers, one ONNX Runtime thread each; run dir `{run_dir}`)")
print()
if capacity:
    print(f"- Capacity: {float(capacity):.0f} req/s (closed loop, {cap_c} clients, {cap_s} s, through the gateway); offered {rate} req/s open loop.")
else:
    print(f"- Offered {rate} req/s open loop (RATE given).")
print(f"- Requests: {total['requests']:,}, ok {total['ok']:,}, **errors {errors}** {dict(total['errors']) if errors else ''}"
      f" (p50 {total['p50_ms']:.1f} ms, p99 {total['p99_ms']:.1f} ms, max {total['max_ms']:.0f} ms).")
print(f"- Worker kills (SIGKILL, restart on a new port after the delay): {kills}; sent again on a new connection by loadtest: {s.get('resent', 0)}.")
m = open(f"{run_dir}/gateway-metrics.txt").read() if __import__("os").path.exists(f"{run_dir}/gateway-metrics.txt") else ""
def msum(name, pred=lambda l: True):
    tot = 0.0
    for line in m.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if pred(line):
                tot += float(line.rsplit(" ", 1)[1])
    return tot
if m:
    outcomes = collections.Counter()
    for line in m.splitlines():
        mm = re.match(r'gateway_requests_total\{.*outcome="([^"]+)".*\} (\S+)', line)
        if mm:
            outcomes[mm.group(1)] += float(mm.group(2))
    print(f"- Gateway (its counters of the workers present at the end; a worker's series go when it leaves): requests by outcome {dict((k, int(v)) for k, v in outcomes.items())}, retries {msum('gateway_retries_total'):.0f}, ejections {msum('gateway_ejections_total'):.0f}.")
print()
print(f"RSS (MiB; sampled every few seconds; *first* is the first sample at least {warm_s:.0f} s into the load, drift = last / first - 1):")
print()
print("| process | pid | lifetime s | first | last | max | drift |")
print("|---|---:|---:|---:|---:|---:|---:|")
def order(k):
    name, pid = k
    return (0 if name == "gateway" else 1 if name.startswith("worker") else 2, name, rows[k][0][0])
flat = []
for k in sorted(rows, key=order):
    samples = rows[k]
    warm = [x for x in samples if x[0] >= samples[0][0] + warm_s] or samples[-1:]
    first, last, mx = warm[0][1], warm[-1][1], max(v for _, v in samples)
    life = samples[-1][0] - samples[0][0]
    drift = 100.0 * (last / first - 1) if first else 0.0
    long_lived = life >= duration * 0.75
    if long_lived and k[0] != "loadtest":
        flat.append((k[0], drift))
    label = k[0] + ("" if long_lived else " (restarted)") + (" (load generator)" if k[0] == "loadtest" else "")
    print(f"| {label} | {k[1]} | {life:.0f} | {mib(first)} | {mib(last)} | {mib(mx)} | {drift:+.1f} % |")
print()
if flat:
    worst = max(flat, key=lambda x: abs(x[1]))
    print(f"Servers that lived the whole run: drift {', '.join(f'{n} {d:+.1f} %' for n, d in flat)}; "
          f"{'all within 5 %' if abs(worst[1]) <= 5 else 'NOT all within 5 % (' + worst[0] + ')'}.")
    print()
gw = [r for r in csv.DictReader(open(f"{run_dir}/rss.csv")) if r["process"] == "gateway" and r.get("fds")]
if gw:
    print("The gateway every 5 minutes (RSS MiB, threads, open descriptors):")
    print()
    print("| t (s) | RSS | threads | descriptors |")
    print("|---:|---:|---:|---:|")
    next_t = 0.0
    for r in gw:
        if float(r["t_s"]) >= next_t:
            print(f"| {float(r['t_s']):.0f} | {mib(int(r['rss_kib']))} | {r['threads']} | {r['fds']} |")
            next_t = float(r["t_s"]) - float(r["t_s"]) % 300 + 300
    print()
print(f"Latency per {s['interval_s']:.0f} s (open loop, from each request's due time):")
print()
print("| t (s) | offered | ok | errors | p50 ms | p90 ms | p99 ms | max ms |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for t in s["timeline"]:
    lat = t.get("latency") or {}
    err = t["failed"]
    print(f"| {t['t']:.0f} | {t.get('offered') or ''} | {t['ok']} | {err}{' ' + str(t['errors']) if err else ''} | "
          f"{lat.get('p50_ms', 0):.1f} | {lat.get('p90_ms', 0):.1f} | {lat.get('p99_ms', 0):.1f} | {lat.get('max_ms', 0):.0f} |")
print()
print("Events (kills and restarts, seconds into the load):")
print()
events = [l.split(" ", 1) for l in open(f"{run_dir}/events.log")]
t0 = next((float(t) for t, e in events if e.startswith("load started")), float(events[0][0]))
for t, e in events:
    if e.startswith(("SIGKILL", "restarted")):
        print(f"- {float(t) - t0:.0f} s: {e.strip()}")
sys.exit(0)
PY
# The same RSS judged over windows (medians of the first and last 10 minutes, or a quarter of
# the run if shorter), beside RSS against open descriptors: see benches/soak_rss.py.
window=$((DURATION / 4 < 600 ? DURATION / 4 : 600))
{ echo; python3 benches/soak_rss.py "$run_dir" "$WARM_S" "$window"; } | tee -a "$run_dir/summary.md"
errors=$(python3 -c 'import json,sys; print(sum(json.load(open(sys.argv[1]))["total"]["errors"].values()))' "$run_dir/summary.json")
log "done: $errors errors; summary in $run_dir/summary.md"
[ "$errors" = 0 ]
