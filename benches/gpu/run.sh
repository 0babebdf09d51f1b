#!/usr/bin/env bash
# The GPU sitting (issue 14), in one invocation of about 5-7 minutes: the worker on cuda:0 with the
# fp16 model, its answers to models/sanity.json checked, then
#   1. the worker alone: one client (single-request p50), 128 and 512 clients (closed loop), with
#      the worker's host CPU per request (/proc/PID/stat over each measured step) and the GPU's
#      telemetry (/v1/stats: NVML utilization, batch rows and time);
#   2. a profile of the worker at PROFILE_CLIENTS [512] clients: `perf` when it is there (PERF=path,
#      or on PATH; PERF_FREQ [999] Hz, with call chains; the worker's user and system ticks over it),
#      and always CPU per thread group (/proc/PID/task/*/stat: runtime threads, backend threads,
#      ONNX Runtime's pool, ...), the fallback when there is no perf;
#   3. the knee: open-loop steps of rising rate (KNEE_RATES), p99 per step; the highest rate
#      answered in full with p99 under 10 ms and under 50 ms, and its ratio to the GPU-bound
#      ceiling at the batches the worker ran (rows / batch time, from /v1/stats);
#   4. the gateway in front of the same worker: 1, 128 and 512 clients;
#   5. the worker with the fake backend (no GPU) at 128 and 512 clients, when its binary is there:
#      the host side's own ceiling and CPU per request on this machine;
#   6. worker variants at 512 clients (VARIANTS: other ONNX Runtime flags), each a fresh worker
#      (last: a variant that fails to start ends the run, with the summary of what was measured).
# Ends with a compact Markdown summary (benches/gpu/summary.py) on stdout and in OUT_DIR/summary.md.
#
#   bash benches/gpu/run.sh [APP_DIR [MODEL_DIR [OUT_DIR]]]      (from the repository root)
#
#   APP_DIR    worker, gateway, loadtest and (optional) fake_worker binaries [target/release]:
#              benches/gpu/stage.sh builds them and copies them, stripped, to .gpu/app (ignored;
#              carry that folder), or cargo build --release -p worker -p gateway -p loadtest and
#              cargo build --release -p worker --example fake_worker (-> target/release/examples/)
#   MODEL_DIR  the fp16 model [models/build/gpu] (scripts/setup-gpu.sh makes it)
#   OUT_DIR    [benches/out/gpu-UTC-DATE]
#
# Needs no cargo: only the binaries, the model directory, models/sanity.json, this folder and
# scripts/lib/start.sh; python3 and curl. ONNX Runtime's CUDA build: ORT_DYLIB_PATH (with
# libonnxruntime_providers_cuda.so beside it), or `scripts/fetch-ort.sh gpu` fetches it. CUDA 13 and
# cuDNN 9 libraries on LD_LIBRARY_PATH or found on disk (looked up below).
# Settings: CLIENTS ["1 128 512"] (the closed-loop steps of the worker and gateway sections),
# DURATION [8s] per closed-loop step (after WARMUP [2s]), KNEE_RATES [20000 40000 60000
# 80000 100000 120000 150000 180000] (STEP [5s] each, after KNEE_WARMUP [1s] at the first rate), VARIANTS (';'-separated worker flag sets,
# default "--io-binding;--intra-op-threads 16 --ort-spinning on" (the second is about the old defaults:
# ONNX Runtime's pool of one thread per core, spinning); empty: none), WORKER_FLAGS (the main worker's flags,
# default below), EXTRA_WORKER_FLAGS (appended to them, replacing any flag of the same name), GATEWAY_FLAGS (more gateway flags, e.g. `--runtime-threads 8`), LOADTEST_THREADS [0: one per CPU], PERF [perf], ONLY (comma list of the sections
# worker,knee,gateway,variants,fake to run; default all), DEVICE [cuda:0] (`cpu` for a dry run
# without a GPU). The figures set against issue 14's goals (benches/RESULTS.md, GPU sittings 7-10)
# were taken with CLIENTS="1 640 896" (768 for the gateway), EXTRA_WORKER_FLAGS="--runtime-threads 8"
# and GATEWAY_FLAGS="--runtime-threads 8": at 512 clients the worker's batches do not fill.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
app=${1:-target/release}; model=${2:-models/build/gpu}
out=${3:-benches/out/gpu-$(date -u +%Y%m%dT%H%M%SZ)}
DURATION=${DURATION:-8s}
WARMUP=${WARMUP:-2s}
KNEE_RATES=${KNEE_RATES:-"20000 40000 60000 80000 100000 120000 150000 180000"}
STEP=${STEP:-5s}
KNEE_WARMUP=${KNEE_WARMUP:-1s}
VARIANTS=${VARIANTS---io-binding;--intra-op-threads 16 --ort-spinning on}
WORKER_FLAGS=${WORKER_FLAGS:---max-batch-rows 256 --max-batch-tokens 16384 --max-queue-delay 1ms --queue-capacity 8192}
# A flag in EXTRA_WORKER_FLAGS replaces the same flag of WORKER_FLAGS (each of these takes one
# value; the worker refuses a flag given twice).
for f in ${EXTRA_WORKER_FLAGS:-}; do
  [[ $f == --* ]] || continue
  WORKER_FLAGS=$(sed -E "s/(^| )$f( [^-][^ ]*)?( |\$)/ /" <<<"$WORKER_FLAGS")
done
WORKER_FLAGS=$(echo $WORKER_FLAGS${EXTRA_WORKER_FLAGS:+ $EXTRA_WORKER_FLAGS})
CLIENTS=${CLIENTS:-1 128 512}
GATEWAY_FLAGS=${GATEWAY_FLAGS:-}
LOADTEST_THREADS=${LOADTEST_THREADS:-0}
PERF=${PERF:-perf}
PROFILE_CLIENTS=${PROFILE_CLIENTS:-512}
PERF_FREQ=${PERF_FREQ:-999}
ONLY=${ONLY:-worker,knee,gateway,variants,fake}
DEVICE=${DEVICE:-cuda:0}
want() { [[ ",$ONLY," == *",$1,"* ]]; }

. scripts/lib/start.sh
pids=()
summarized=""
# On every way out (a variant whose flags ONNX Runtime refuses ends the script at its start), the
# servers stop and what was measured is summarized.
finish() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ -z "$summarized" ] && [ -s "${steps:-/nonexistent}" ]; then
    summarized=1
    echo "wall: $(( $(date +%s) - started_at )) s"
    python3 benches/gpu/summary.py "$out" | tee "$out/summary.md"
    echo "summary: $out/summary.md (record its figures, with the command, in benches/RESULTS.md; the page stays out of git)"
  fi
}
trap finish EXIT
for b in worker gateway loadtest; do
  [ -x "$app/$b" ] || { echo "$app/$b missing: cargo build --release -p worker -p gateway -p loadtest" >&2; exit 1; }
done
fake=""
for f in "$app/fake_worker" "$app/examples/fake_worker"; do [ -x "$f" ] && fake=$f && break; done
ls "$model"/*.onnx >/dev/null 2>&1 || { echo "no model in $model: scripts/setup-gpu.sh makes the fp16 model" >&2; exit 1; }
ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/fetch-ort.sh gpu)}
export ORT_DYLIB_PATH
# The CUDA provider loads CUDA 13's cuBLAS/cudart and cuDNN 9 by name: add the folders of any that
# the dynamic linker cannot find already (system-wide, or in Python's nvidia-* wheels).
for name in libcublasLt.so.13 libcudart.so.13 libcudnn.so.9 libcurand.so.10 libcufft.so.12; do
  ldconfig -p 2>/dev/null | grep -q "$name" && continue
  found=$(find / -name "$name" -not -path '/proc/*' 2>/dev/null | head -n 1 || true)
  if [ -n "$found" ]; then LD_LIBRARY_PATH=$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  else echo "warning: $name not found; the CUDA execution provider may not load" >&2; fi
done
export LD_LIBRARY_PATH=$(dirname "$ORT_DYLIB_PATH")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$out"
exec > >(tee -a "$out/run.log") 2>&1
started_at=$(date +%s)
steps=$out/steps.jsonl
: >"$steps"

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } |
  tee "$out/gpu.txt"
echo "cpus: $(nproc)" | tee -a "$out/gpu.txt"
# The host CPU, to tell machines of this type apart: the same build's CPU per request differs by
# 10-25 % between sittings (benches/RESULTS.md, sittings 25-33).
# A VM's model name is often generic ("Intel(R) Xeon(R) Processor"): family, model and stepping
# name the generation (6/207/2: Emerald Rapids).
{ field() { lscpu 2>/dev/null | sed -n "s/^$1: *//p" | head -n 1; }
  mhz=$(awk -F': *' '/^cpu MHz/ {s += $2; n++} END {if (n) printf "%.0f", s / n}' /proc/cpuinfo)
  echo "cpu: $(field 'Model name') (family $(field 'CPU family'), model $(field Model), stepping $(field Stepping)," \
    "L3 $(field 'L3 cache')), ${mhz:-?} MHz now (mean over cores), kernel $(uname -r)"
  # One core's speed, the best of five runs of a fixed loop: no network, no allocator, no GPU.
  python3 -c 'import time
def f():
    s = 0
    for i in range(2_000_000): s += i * i % 7
    return s
best = min((lambda t: (f(), time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(5))
print(f"one core: {best * 1e3:.0f} ms for a fixed Python loop (best of 5)")'; } | tee -a "$out/gpu.txt"
if [ -f "$app/commit.txt" ]; then cp "$app/commit.txt" "$out/commit.txt"  # benches/gpu/stage.sh wrote it
else git rev-parse --short HEAD 2>/dev/null >"$out/commit.txt" || echo unknown >"$out/commit.txt"; fi
"$app/worker" --version >>"$out/commit.txt" 2>/dev/null || true

busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; } # the whole machine
steal_ticks() { awk '/^cpu / {print $9}' /proc/stat; } # time the hypervisor ran something else
hz=$(getconf CLK_TCK)

# Per thread group (the thread name without its number) CPU ticks of process $1, as JSON.
thread_ticks() {
  python3 - "$1" <<'PY'
import json, os, re, sys
pid = sys.argv[1]
groups = {}
for tid in os.listdir(f"/proc/{pid}/task"):
    try:
        stat = open(f"/proc/{pid}/task/{tid}/stat").read()
    except OSError:
        continue
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    group = re.sub(r"[-_ ]?\d+$", "", name) or name
    groups[group] = groups.get(group, 0) + int(fields[11]) + int(fields[12])
print(json.dumps(groups))
PY
}

start_worker() { # name, binary, flags...
  local name=$1 bin=$2; shift 2
  start_listening "$out/$name" "$bin" --listen 127.0.0.1:0 "$@"
  addr=$started_url wpid=$started_pid
}

stop() { kill -TERM "$@" 2>/dev/null || true; wait "$@" 2>/dev/null || true; }

check_answers() { # url
  python3 - "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url, wrong = sys.argv[1], 0
for q in json.load(open("models/sanity.json"))["queries"]:
    got = json.load(urllib.request.urlopen(f"{url}/predict?query={urllib.parse.quote(q['text'])}"))
    wrong += got["intent"] != q["intent"]
    print(f"  {got['intent']:<22} {got['score']:.3f}  <- {q['text']}")
print(f"sanity: {8 - wrong if wrong <= 8 else 0} of 8 right" if wrong == 0 else f"sanity: {wrong} WRONG")
PY
}

# One measured loadtest step against $target, with the worker $wpid's CPU and, for a worker URL,
# medians of its /v1/stats; appends a JSON line to steps.jsonl. Args: section label stats_url
# duration ("-": the rate profile's own) loadtest-args... A closed-loop step is warmed up with its
# own arguments, an open-loop one at 64 clients, for WARMUP.
step() {
  local section=$1 label=$2 stats_url=$3 duration=$4; shift 4
  local t0 t1 spid="" statsf=$out/$section-${label%%:*}.stats
  local dur=(--duration "$duration"); [ "$duration" = - ] && dur=()
  local warm=("$@"); [ "$duration" = - ] && warm=(-c 64)
  # An open-loop run also warms up inside its own invocation, at its first rate: the load
  # generator's connections are new in each invocation, and the first ~100-300 ms of a run with new
  # connections answered its first step's slowest requests in 60-160 ms on the H100 (RESULTS,
  # sitting 37), which set that step's p99. The worker's CPU over such a run includes this warm-up.
  local measured_warmup=0s; [ "$duration" = - ] && measured_warmup=$KNEE_WARMUP
  "$app/loadtest" --url "$target" --threads "$LOADTEST_THREADS" --duration "$WARMUP" --warmup 0s --json "${warm[@]}" >/dev/null 2>&1 || true
  : >"$statsf"
  if [ -n "$stats_url" ]; then
    (while true; do curl -s "$stats_url/v1/stats" >>"$statsf" && echo >>"$statsf"; sleep 0.25; done) & spid=$!
  fi
  local th0; th0=$(thread_ticks "$wpid")
  local g0=0 g1=0 m0 m1 s0 s1; [ -n "${gpid:-}" ] && g0=$(cpu_ticks "$gpid")
  m0=$(busy_ticks) s0=$(steal_ticks)
  t0=$(cpu_ticks "$wpid")
  "$app/loadtest" --url "$target" --threads "$LOADTEST_THREADS" --warmup "$measured_warmup" --json "${dur[@]}" "$@" \
    >"$out/$section-${label%%:*}.json" 2>>"$out/loadtest.stderr" || true
  t1=$(cpu_ticks "$wpid")
  m1=$(busy_ticks) s1=$(steal_ticks)
  [ -n "${gpid:-}" ] && g1=$(cpu_ticks "$gpid")
  local th1; th1=$(thread_ticks "$wpid")
  [ -n "$spid" ] && { kill "$spid"; wait "$spid" 2>/dev/null || true; }
  python3 - "$section" "$label" "$((t1 - t0))" "$hz" "$out/$section-${label%%:*}.json" "$statsf" "$th0" "$th1" \
    "$((g1 - g0))" "$((m1 - m0))" "$((s1 - s0))" <<'PY' >>"$steps"
import json, statistics, sys
section, label, ticks, hz, res, statsf, th0, th1, gticks, mticks, sticks = sys.argv[1:]
phases = [json.loads(l) for l in open(res) if l.strip().startswith("{")]
stats = []
for l in open(statsf):
    try:
        r = json.loads(l)
    except ValueError:
        continue
    if r["batches"]["count"] > 0:
        stats.append(r)
def med(f):
    v = [x for x in (f(r) for r in stats) if x is not None]
    return round(statistics.median(v), 2) if v else None
gpu = lambda r: r["gpu"].get("device", {}).get("utilization_pct") if r["gpu"]["status"] == "available" else None
ok = sum(p["ok"] for p in phases)
secs = sum(p["seconds"] for p in phases) or 1
cpu = int(ticks) / int(hz)
t0, t1 = json.loads(th0), json.loads(th1)
threads = {k: round((t1.get(k, 0) - t0.get(k, 0)) / int(hz) / secs, 2) for k in t1}
print(json.dumps({
    "section": section, "label": label, "phases": phases,
    "worker_cpu_s": cpu, "worker_cores": round(cpu / secs, 2),
    "cpu_us_per_req": round(cpu * 1e6 / ok, 1) if ok else None,
    # The gateway's CPU in the gateway section; the whole machine's busy cores (load generator,
    # gateway, worker and the rest) in every step.
    "gateway_cores": round(int(gticks) / int(hz) / secs, 2) if int(gticks) else None,
    "gateway_us_per_req": round(int(gticks) / int(hz) * 1e6 / ok, 1) if int(gticks) and ok else None,
    "machine_busy_cores": round(int(mticks) / int(hz) / secs, 2),
    "machine_steal_cores": round(int(sticks) / int(hz) / secs, 2),
    "threads_cores": {k: v for k, v in sorted(threads.items(), key=lambda kv: -kv[1]) if v > 0.005},
    "gpu_util_pct": med(gpu), "mean_batch_rows": med(lambda r: r["batches"]["mean_rows"]),
    "mean_inference_ms": med(lambda r: r["batches"]["mean_inference_ms"]),
    "busy_fraction": med(lambda r: r["batches"]["busy_fraction"]),
}))
PY
  tail -n 1 "$steps" | python3 -c "$show_step"
}

# One step's line of steps.jsonl, shown in a line or two.
show_step='
import json, sys
r = json.loads(sys.stdin.read())
for p in r["phases"]:
    print("%s %s %s: %.0f req/s, p50 %s ms, p99 %s ms, errors %d" % (r["section"], r["label"], p["label"],
          p["throughput_per_s"], p["p50_ms"], p["p99_ms"], sum(p["errors"].values())))
print("  worker %s cores, %s us/request; GPU %s %%, batch %s rows in %s ms" % (r["worker_cores"],
      r["cpu_us_per_req"], r["gpu_util_pct"], r["mean_batch_rows"], r["mean_inference_ms"]))
'

profile() { # at PROFILE_CLIENTS on $target/$wpid: perf if there, per-thread CPU always (in step)
  if command -v "$PERF" >/dev/null 2>&1; then
    "$app/loadtest" --url "$target" --threads "$LOADTEST_THREADS" -c "$PROFILE_CLIENTS" --duration 9s --warmup 1s --json \
      >"$out/perf-load.json" 2>&1 &
    local lp=$! t0 t1
    sleep 2
    t0=$(awk '{print $14, $15}' "/proc/$wpid/stat")
    "$PERF" record -F "$PERF_FREQ" -g -p "$wpid" -o "$out/perf.data" -- sleep 5 >/dev/null 2>&1 || echo "perf record failed"
    t1=$(awk '{print $14, $15}' "/proc/$wpid/stat")
    echo "worker utime stime (ticks) before the record: $t0, after: $t1" >"$out/perf-ticks.txt"
    wait "$lp" || true
    report() { # file lines perf-report-args...
      local f=$1 n=$2; shift 2
      "$PERF" report -i "$out/perf.data" --stdio "$@" 2>/dev/null | grep -E '^ +[0-9.]+%' | sed -E 's/[ -]+$//' |
        cut -c1-200 | head -n "$n" >"$out/$f" || true
    }
    report perf-top.txt 40 --no-children --sort dso,symbol -g none
    report perf-symbols.txt 150 --no-children --sort dso,symbol -g none
    report perf-dso.txt 15 --no-children --sort dso
    report perf-comm-dso.txt 30 --no-children --sort comm,dso
    report perf-children-rt.txt 200 --children --comm tokio-rt-worker --sort symbol -g none
    report perf-backend.txt 40 --no-children --comm backend-light --sort dso,symbol -g none
    echo "perf: $out/perf-*.txt"
  else
    echo "no perf ($PERF): the per-thread CPU of each step stands in"
  fi
}

if want worker || want knee || want gateway; then
  # shellcheck disable=SC2086
  start_worker gpu "$app/worker" --model "$model" --device "$DEVICE" --ort-lib "$ORT_DYLIB_PATH" $WORKER_FLAGS
  echo "== worker $addr ($DEVICE) $WORKER_FLAGS, started in $(( $(date +%s) - started_at )) s"
  check_answers "$addr" | tee "$out/sanity.txt"
  target=$addr
  if want worker; then
    for c in $CLIENTS; do step worker "c$c" "$addr" "$DURATION" -c "$c"; done
    profile
  fi
  if want knee; then
    profile_arg="steps($(tr ' ' ,  <<<"$KNEE_RATES"), $STEP)"
    step knee steps "$addr" - --rate "$profile_arg" --max-outstanding 8192
  fi
  if want gateway; then
    # shellcheck disable=SC2086
    start_listening "$out/gateway" "$app/gateway" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --worker "$addr" $GATEWAY_FLAGS
    gaddr=$started_url gpid=$started_pid
    target=$gaddr
    for c in $CLIENTS; do step gateway "c$c" "$addr" "$DURATION" -c "$c"; done
    stop "$gpid"
    gpid=""
  fi
  curl -s "$addr/v1/stats" >"$out/final-stats.json" || true
  stop "$wpid"
fi

if want fake && [ -n "$fake" ]; then
  # shellcheck disable=SC2086
  start_worker fake "$fake" --model "$model" $WORKER_FLAGS
  echo "== fake backend (no GPU) $addr"
  target=$addr
  for c in 128 512; do step fake "c$c" "$addr" "$DURATION" -c "$c"; done
  stop "$wpid"
fi

if want variants && [ -n "$VARIANTS" ]; then
  IFS=';' read -ra vs <<<"$VARIANTS"
  i=0
  for v in "${vs[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    start_worker "variant$i" "$app/worker" --model "$model" --device "$DEVICE" --ort-lib "$ORT_DYLIB_PATH" $WORKER_FLAGS $v
    echo "== variant $i: $v"
    target=$addr
    step variants "v$i: $v" "$addr" "$DURATION" -c 512
    stop "$wpid"
  done
fi

finish
