#!/usr/bin/env bash
# How long from exec to a worker that answers, without and with a capacity carried over from
# the last calibration (`--capacity-cache`)? Starts the worker binary RUNS times per case with
# default flags, the two cases taking turns, and prints for each run:
#   ready      exec -> `listening on` (the port opens only once the worker can answer);
#   answer     exec -> the answer to a `GET /predict` sent as soon as it listens;
#   capacity   exec -> a capacity in `/v1/stats` (carried over, or calibrated before listening);
#   calibrated exec -> this start's own calibration in `/v1/stats` (with a carried-over
#              capacity it runs while the worker serves).
# Case `no cache` runs without `--capacity-cache` (today's first start); case `carried over`
# with a cache directory written by one untimed start before the runs.
#
#   benches/cold_start.sh                                        # CPU, the bundled model
#   DEVICE=cuda:0 MODEL=models/build/gpu ORT_DYLIB_PATH=... benches/cold_start.sh   # one GPU
#
# Knobs: RUNS (3); DEVICE (cpu); MODEL (models/snips-minilm-l6); WORKER_ARGS (flags added to
# both cases; none: the defaults); BIN (the worker binary; target/release/worker, built unless
# BIN is set); OUT (benches/out/cold-start). The table goes to stdout and OUT/DEVICE-TIME.txt,
# each run's log to OUT/.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
device=${DEVICE:-cpu}
model=${MODEL:-models/snips-minilm-l6}
out=${OUT:-benches/out/cold-start}
mkdir -p "$out"
stamp=$(date -u +%Y%m%dT%H%M%S)
report=$out/${device//:/}-$stamp.txt

ORT_DYLIB_PATH=${ORT_DYLIB_PATH:-$(scripts/fetch-ort.sh)}
export ORT_DYLIB_PATH
if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  cargo build --release --locked -p worker >&2
  bin=${CARGO_TARGET_DIR:-target}/release/worker
fi
cache=$out/cache-$stamp
rm -rf "$cache"

RUNS=$runs BIN=$bin DEVICE=$device MODEL=$model CACHE=$cache LOGS=$out/$stamp \
  WORKER_ARGS=${WORKER_ARGS:-} python3 - <<'PY' | tee "$report"
import http.client, json, os, shlex, signal, subprocess, sys, time

runs, bin_, device, model = int(os.environ["RUNS"]), os.environ["BIN"], os.environ["DEVICE"], os.environ["MODEL"]
cache, logs = os.environ["CACHE"], os.environ["LOGS"]
base = [bin_, "--listen", "127.0.0.1:0", "--device", device, "--model", model] + shlex.split(os.environ["WORKER_ARGS"])
LIMIT = 180.0

def get(addr, path):
    host, port = addr.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=LIMIT)
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body

def start(args, log):
    """One start: (ready, answer, capacity, calibrated) in seconds from exec, None where not seen."""
    t0 = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)
    try:
        addr = None
        for line in proc.stdout:
            if line.startswith("listening on http://"):
                addr = line.strip().removeprefix("listening on http://")
                break
        if addr is None:
            sys.exit(f"the worker exited without listening; see {log}")
        ready = time.monotonic() - t0
        capacity = calibrated = None
        # Known at once? (a carried-over capacity, or the calibration before listening)
        if json.loads(get(addr, "/v1/stats")[1]).get("capacity"):
            capacity = time.monotonic() - t0
        status, _ = get(addr, "/predict?query=play%20some%20jazz")
        if status != 200:
            sys.exit(f"first answer: HTTP {status}; see {log}")
        answer = time.monotonic() - t0
        while calibrated is None and time.monotonic() - t0 < LIMIT:
            c = json.loads(get(addr, "/v1/stats")[1]).get("capacity")
            now = time.monotonic() - t0
            if c and capacity is None:
                capacity = now
            if c and not c.get("carried_over", False):
                calibrated = now
            else:
                time.sleep(0.01)
        return ready, answer, capacity, calibrated
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

cases = [("no cache", base), ("carried over", base + ["--capacity-cache", cache])]
start(cases[1][1], f"{logs}-warm-cache.log")  # writes the cache; untimed
rows = {name: [] for name, _ in cases}
fmt = lambda x: "-" if x is None else f"{x:.2f}"
print(f"# {' '.join(base)}")
print(f"{'run':>3}  {'case':<13} {'ready_s':>8} {'answer_s':>9} {'capacity_s':>11} {'calibrated_s':>13}")
for run in range(1, runs + 1):
    for name, args in cases:
        r = start(args, f"{logs}-{run}-{name.replace(' ', '-')}.log")
        rows[name].append(r)
        print(f"{run:>3}  {name:<13} {fmt(r[0]):>8} {fmt(r[1]):>9} {fmt(r[2]):>11} {fmt(r[3]):>13}", flush=True)
print()
for name, rs in rows.items():
    span = lambda i: f"{min(r[i] for r in rs):.2f}-{max(r[i] for r in rs):.2f}" if all(r[i] is not None for r in rs) else "-"
    print(f"{name:<13} ready {span(0)} s, first answer {span(1)} s, capacity {span(2)} s, own calibration {span(3)} s ({len(rs)} runs)")
PY
rm -rf "$cache"
