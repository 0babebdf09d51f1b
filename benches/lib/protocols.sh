# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # variables set for, and by, the caller
# Sourced by benches/oip_protocols.sh, gateway_ab.sh, gateway_instructions.sh and
# gpu/protocols.sh (its `children_cpu` only): their set-up, the fake worker behind the gateway,
# the load generator's arguments for a protocol, and the CPU this shell's children spent (a
# process's: start.sh's `cpu_ticks`). Expects $CARGO_TARGET_DIR, and the repository root as the
# current directory.

# Builds the gateway, the load generator and the fake worker (release); sets $bin (the build),
# $out (a scratch folder) and $pids (the processes started), both cleaned up at exit
# (scripts/lib/start.sh's `scratch`, which this sources).
bench_setup() {
  cargo build -q --release -p gateway -p loadtest -p worker --bin gateway --bin loadtest --example fake_worker
  bin=$CARGO_TARGET_DIR/release
  # shellcheck source=scripts/lib/start.sh
  . scripts/lib/start.sh
  scratch
  out=$work
}

# Starts the fake worker (the worker's whole host side, no inference) on core $1; sets $worker
# (its URL) and $worker_pid.
start_fake_worker() {
  start_listening "$out/worker" taskset -c "$1" "$bin/examples/fake_worker" --listen 127.0.0.1:0 \
    --model models/snips-minilm-l6 --runtime-threads 1
  worker=$started_url
  worker_pid=$started_pid
}

# Sets $args to the load generator's arguments for protocol $1 (predict, oip or grpc; gRPC over
# $2 HTTP/2 connections).
protocol_args() {
  case $1 in
    predict) args=(--method post) ;;
    oip) args=(--protocol oip) ;;
    grpc) args=(--protocol grpc --h2-connections "$2") ;;
    *) echo "a protocol is predict, oip or grpc, not $1" >&2; exit 2 ;;
  esac
}

# CPU seconds (user + system) of this shell's reaped children, from what `times` wrote to file
# $1. Run `times` in the measuring shell itself, not a subshell, whose children would be its own.
children_cpu() { awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, t, "m"); s += t[1] * 60 + t[2] } print s }' "$1"; }

# Requests the gateway at admin URL $1 has sent merged with others (its
# `gateway_coalesced_requests_total`, 0 when none).
merged() { curl -sf "$1/metrics" | awk '/^gateway_coalesced_requests_total/ { s += $2 } END { print s + 0 }'; }

# The merged exchanges the gateway at admin URL $1 has sent (its
# `gateway_coalesced_exchanges_total`, 0 when none).
merges() { curl -sf "$1/metrics" | awk '/^gateway_coalesced_exchanges_total/ { s += $2 } END { print s + 0 }'; }

# Core $1's busy and idle jiffies so far (/proc/stat: user, nice, system, irq, softirq, steal
# busy; idle and iowait idle), as "BUSY IDLE".
core_jiffies() { awk -v c="cpu$1" '$1 == c { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }

# Requests the gateway at admin URL $1 has answered with outcome ok (its
# `gateway_requests_total{outcome="ok"}`), 0 when none.
served() { curl -sf "$1/metrics" | awk '/^gateway_requests_total\{.*outcome="ok"/ { s += $2 } END { print s + 0 }'; }

# Writes h2load's request bodies into folder $1, for model $2, one text each: predict.json
# (`{"query": ...}`), oip.json (a BYTES tensor of shape [1]) and grpc.bin (a `ModelInferRequest`
# framed as a gRPC message, the text in raw contents as the load generator sends it).
h2load_bodies() {
  python3 - "$1" "$2" <<'PY'
import json, sys
out, model = sys.argv[1], sys.argv[2].encode()
text = "play some music by the beatles"
def varint(n):
    b = b""
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return b + bytes([low])
        b += bytes([low | 0x80])
def field(tag, value):  # a length-delimited field
    return bytes([tag]) + varint(len(value)) + value
tensor = field(0x0A, b"text") + field(0x12, b"BYTES") + field(0x1A, varint(1))
raw = len(text.encode()).to_bytes(4, "little") + text.encode()
msg = field(0x0A, model) + field(0x2A, tensor) + field(0x3A, raw)
open(f"{out}/grpc.bin", "wb").write(b"\0" + len(msg).to_bytes(4, "big") + msg)
json.dump({"query": text}, open(f"{out}/predict.json", "w"))
json.dump({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [text]}]}, open(f"{out}/oip.json", "w"))
PY
}

# Sets $h2load_args for protocol $1 to URL $2 (the gateway's HTTP or gRPC listener): $3 clients,
# gRPC as $3 streams over $4 connections; bodies from folder $5 (`h2load_bodies`), model $6.
h2load_protocol_args() {
  local json=(-H 'content-type: application/json')
  case $1 in
    predict) h2load_args=(--h1 -c "$3" -m 1 -d "$5/predict.json" "${json[@]}" "$2/predict") ;;
    oip) h2load_args=(--h1 -c "$3" -m 1 -d "$5/oip.json" "${json[@]}" "$2/v2/models/$6/infer") ;;
    grpc) h2load_args=(-c "$4" -m "$(( ($3 + $4 - 1) / $4 ))" -d "$5/grpc.bin" -H 'content-type: application/grpc'
      -H 'te: trailers' "$2/inference.GRPCInferenceService/ModelInfer") ;;
  esac
}

# The load generator's summary (its `total`: requests, ok, throughput_per_s; no percentiles) from
# h2load's output in file $1, $2 the requests the gateway answered ok meanwhile.
h2load_summary() {
  python3 - "$1" "$2" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
done = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded", text)
codes = re.search(r"status codes: (\d+) 2xx", text)
took = re.search(r"finished in ([\d.]+)(m?s),", text)
if not (done and codes and took):
    sys.exit(f"h2load's output unread:\n{text}")
requests = int(done.group(2))
ok = min(int(done.group(3)), int(codes.group(1)), int(sys.argv[2]))
print(json.dumps({"total": {"requests": requests, "ok": ok, "throughput_per_s": ok / (float(took.group(1)) / (1000 if took.group(2) == "ms" else 1)),
                            "p50_ms": None, "p99_ms": None}}))
PY
}
