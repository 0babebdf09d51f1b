#!/usr/bin/env bash
# The long run of the property tests (issue 9): every property of the parsers that face the
# network, in release mode, with CASES cases each (10 million by default), one at a time,
# timed. Prints a markdown table (property, cases, seconds, cases/s, and the time 10 million
# cases would take at that rate) suitable for benches/RESULTS.md.
#
#   benches/proptest_long.sh                  # 10,000,000 cases per property: hours, see RESULTS.md
#   CASES=20000 benches/proptest_long.sh      # a quick pass, and the rate to plan the long one
#   ONLY=listener CASES=1000 benches/proptest_long.sh
#
# The properties (found with `grep -rn proptest`; a suite whose tests are not in this checkout
# is reported as absent, not failed):
#   listener  request head parser and connection handling: listener/tests/fuzz.rs
#             (LISTENER_FUZZ_CASES; arbitrary and mutated requests, split and paused writes)
#   worker    query string and JSON body parsing: worker/src/http/predict.rs (unit) and
#             worker/tests/parse_props.rs (the whole predict route; needs ONNX Runtime)
#   http1-client  the HTTP/1 answer parser of the gateway's upstream and the load generator:
#             http1-client/src/head.rs (PROPTEST_CASES)
#   gateway   the latency estimate's bound: gateway/src/pool/{ewma,endpoint}.rs (PROPTEST_CASES)
#
# Settings (environment variables, defaults in brackets):
#   CASES [10000000]   cases per property
#   ONLY [all]         a space-separated subset of: listener worker http1-client gateway
#   TIMEOUT [0]        seconds allowed per property (0: no limit; `timeout` ends it, reported)
#
# Output: the table on stdout; each property's test output under benches/out/proptest_long-DATE/
# (ignored). Exit status 1 if any property failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

CASES=${CASES:-10000000}
ONLY=${ONLY:-listener worker http1-client gateway}
TIMEOUT=${TIMEOUT:-0}
run_dir=benches/out/proptest_long-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$run_dir"
log() { echo "[proptest_long] $*" >&2; }

ORT_DYLIB_PATH=$(scripts/fetch-ort.sh)
export ORT_DYLIB_PATH

# suite | cargo target selection | test-name filter | env var for the number of cases
suites=(
  "listener|-p listener --test fuzz||LISTENER_FUZZ_CASES"
  "worker|-p worker --lib|http::predict::tests::|PROPTEST_CASES"
  "worker|-p worker --test parse_props||PROPTEST_CASES"
  "http1-client|-p http1-client --lib|head::proptests::|PROPTEST_CASES"
  "gateway|-p gateway --lib|pool::ewma::|PROPTEST_CASES"
  "gateway|-p gateway --lib|pool::endpoint::|PROPTEST_CASES"
)

# Whether unit test $2 under directory $1 is a property: its parameter list (up to the opening
# brace) has `x in STRATEGY`, as a function in a proptest! block has.
is_property() {
  local f
  for f in $(grep -rlE "fn $2\(" --include=*.rs "$1"/); do
    awk -v name="$2" '
      $0 ~ "fn " name "\\(" { on = 1; sig = "" }
      on { sig = sig " " $0 }
      on && /\{/ { on = 0; if (sig ~ / in /) found = 1 }
      END { exit found ? 0 : 1 }' "$f" && return 0
  done
  return 1
}

selected() { case " $ONLY " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

pkgs=()
for s in "${suites[@]}"; do
  IFS='|' read -r suite _ _ _ <<<"$s"
  if selected "$suite"; then pkgs+=(-p "$suite"); fi
done
log "building the tests (release): ${pkgs[*]}"
cargo test --release --locked "${pkgs[@]}" --lib --tests --no-run >&2 2>"$run_dir/build.log" || {
  cat "$run_dir/build.log" >&2
  exit 1
}

rows=()
failed=0
total_s=0
for s in "${suites[@]}"; do
  IFS='|' read -r suite target filter var <<<"$s"
  selected "$suite" || continue
  # shellcheck disable=SC2086
  names=$(cargo test --release --locked -q $target -- --list --format terse 2>/dev/null |
    sed -n 's/: test$//p' | grep -F -- "$filter" || true)
  if [ -z "$names" ]; then
    rows+=("| $suite: \`${target} ${filter}\` | absent in this checkout | | | |")
    continue
  fi
  for name in $names; do
    # Unit modules mix properties and examples: keep the properties (integration targets here
    # hold properties only).
    case "$target" in *--lib*) is_property "$suite" "${name##*::}" || continue ;; esac
    out="$run_dir/$(printf '%s' "$suite-$name" | tr -c 'A-Za-z0-9_.-' '_').log"
    log "$suite $name: $CASES cases"
    start=$(date +%s.%N)
    status=0
    limit=()
    [ "$TIMEOUT" != 0 ] && limit=(timeout "$TIMEOUT")
    # shellcheck disable=SC2086
    env "$var=$CASES" "${limit[@]}" cargo test --release --locked -q $target -- --exact "$name" --test-threads 1 \
      >"$out" 2>&1 || status=$?
    end=$(date +%s.%N)
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    total_s=$(awk -v a="$total_s" -v b="$secs" 'BEGIN { printf "%.1f", a + b }')
    if [ "$status" = 0 ] && grep -q "1 passed" "$out"; then
      verdict="passed"
    elif [ "$status" = 124 ]; then
      verdict="TIMEOUT after ${TIMEOUT}s"; failed=1
    else
      verdict="FAILED (see $out)"; failed=1
    fi
    rate=$(awk -v n="$CASES" -v s="$secs" 'BEGIN { if (s > 0) printf "%.0f", n / s; else print "-" }')
    est=$(awk -v n="$CASES" -v s="$secs" 'BEGIN {
      t = s * 10000000 / n; if (t < 120) printf "%.0f s", t; else if (t < 7200) printf "%.0f min", t / 60;
      else printf "%.1f h", t / 3600 }')
    rows+=("| $suite: \`$name\` | $CASES, $verdict | $secs | $rate | $est |")
  done
done

echo
echo "Property tests, release build, \`CASES=$CASES benches/proptest_long.sh\` ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, commit $(git rev-parse --short HEAD)):"
echo
echo "| property | cases, result | seconds | cases/s | 10M cases would take |"
echo "|---|---|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo
echo "Total: ${total_s} s. Logs: $run_dir/"
exit "$failed"
