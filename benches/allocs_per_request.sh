#!/usr/bin/env bash
# Heap allocations per request in the worker, this tree against another revision (main by default),
# side by side in one run. Both are built as the worker with the fake backend
# (worker/examples/fake_worker.rs: the whole host side, no inference), as benches/host_cost.sh
# builds them, and driven by the bundled load generator; uprobes on mimalloc's entry points
# (`perf probe`) count every allocation, reallocation and free the process makes while it answers
# a fixed number of requests. Counts hardly depend on the machine's noise, unlike CPU time; with
# more than one client they move a little with how requests fall into batches.
#
#   benches/allocs_per_request.sh [BASE_REF]       (as root; needs `perf` and uprobes)
#
# Settings: REQUESTS [20000] measured per client count, CLIENTS ["1 4 64"] (a batch's own
# allocations are shared by its queries: more clients, fuller batches), BASE_WORKER /
# CURRENT_WORKER (prebuilt fake_worker binaries: no build). Output: a table on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
base_ref=${1:-main}
REQUESTS=${REQUESTS:-20000}
CLIENTS=${CLIENTS:-"1 4 64"}
command -v perf >/dev/null || { echo "no perf here: apt-get install linux-perf" >&2; exit 1; }
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
out=benches/out/allocs-$(date -u +%Y%m%dT%H%M%SZ)
# uprobes need tracefs; mount it where the kernel has it but nothing mounted it.
if [ ! -e /sys/kernel/tracing/uprobe_events ] && [ -d /sys/kernel/tracing ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi

. benches/lib/fake_workers.sh
build_fake_workers "$out" "$base_ref"

. scripts/lib/start.sh
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; perf probe -q -d "probe_allocs_*" 2>/dev/null || true' EXIT
funcs="mi_malloc_aligned mi_zalloc_aligned mi_realloc_aligned mi_free"

# count SIDE BIN CLIENTS: prints "malloc realloc free" per request.
count() {
  local side=$1 bin=$2 clients=$3 group=probe_allocs_$1 events=""
  perf probe -q -d "$group:*" 2>/dev/null || true
  for f in $funcs; do
    perf probe -q -x "$bin" --add "$group:$f=$f" >/dev/null
    events="$events${events:+,}$group:$f"
  done
  start_listening "$out/$side-c$clients" "$bin" --listen 127.0.0.1:0 --queue-capacity 8192
  pid=$started_pid
  "$loadtest" --url "$started_url" -c "$clients" --duration 1s --warmup 0s --json >/dev/null
  perf stat -x, -e "$events" -p "$pid" -o "$out/$side-c$clients.stat" -- \
    "$loadtest" --url "$started_url" -c "$clients" -n "$REQUESTS" --warmup 0s --json >"$out/$side-c$clients.json"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  perf probe -q -d "$group:*"
  python3 - "$out/$side-c$clients.stat" "$out/$side-c$clients.json" <<'PY'
import json, sys
counts = {}
for line in open(sys.argv[1]):
    parts = line.strip().split(",")
    if len(parts) > 2 and parts[0].isdigit():
        counts[parts[2].split(":")[-1]] = int(parts[0])
ok = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])["ok"]
m = counts.get("mi_malloc_aligned", 0) + counts.get("mi_zalloc_aligned", 0)
print(f"{m / ok:.2f} {counts.get('mi_realloc_aligned', 0) / ok:.2f} {counts.get('mi_free', 0) / ok:.2f}")
PY
}

echo "Heap allocations per request (fake backend, $REQUESTS requests per step), base = $base_ref, current = this tree"
echo
echo "| clients | base allocs | current allocs | base reallocs | current reallocs | base frees | current frees |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for c in $CLIENTS; do
  read -r bm br bf < <(count base "$BASE_WORKER" "$c")
  read -r cm cr cf < <(count current "$CURRENT_WORKER" "$c")
  echo "| $c | $bm | $cm | $br | $cr | $bf | $cf |"
done
echo
echo "raw: $out"
