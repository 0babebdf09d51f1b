#!/usr/bin/env bash
# The 10-million-case property run (issue 9) on a machine with many cores and no cargo: the
# release test binaries that benches/proptest_long.sh builds, each property run as JOBS processes
# of CASES/JOBS cases (proptest draws a random seed per process unless PROPTEST_RNG_SEED is set,
# so the processes try different cases), all JOBS at once, one property after another.
#
#   benches/proptest_parallel.sh MANIFEST BIN_DIR [OUT_DIR]
#
# MANIFEST: lines `suite|binary|test name|env var for the cases`, BIN_DIR the test binaries by
# those names (from `cargo test --release --no-run`; the run of RESULTS.md used
# benches/proptest/manifest.txt, binaries named by their crate). Settings: CASES [10000000] per
# property, JOBS [nproc]. Prints a markdown table: property, cases, processes, seconds, failed.
# Exit status 1 if any process failed (its output is in OUT_DIR).
set -euo pipefail
manifest=${1:?usage: proptest_parallel.sh MANIFEST BIN_DIR [OUT_DIR]}
bin_dir=${2:?usage: proptest_parallel.sh MANIFEST BIN_DIR [OUT_DIR]}
out=${3:-benches/out/proptest_parallel-$(date -u +%Y%m%dT%H%M%SZ)}
CASES=${CASES:-10000000}
JOBS=${JOBS:-$(nproc)}
ONLY=${ONLY:-}
mkdir -p "$out"
per=$(((CASES + JOBS - 1) / JOBS))
echo "| property | cases | processes | seconds | failed |"
echo "|---|---:|---:|---:|---:|"
failed_any=0
while IFS='|' read -r suite binary name var; do
  [ -n "$suite" ] || continue
  [ -z "$ONLY" ] || case " $ONLY " in *" $suite "*) ;; *) continue ;; esac
  start=$EPOCHREALTIME
  pids=()
  for j in $(seq 1 "$JOBS"); do
    log="$out/$(printf '%s' "$suite-$name-$j" | tr -c 'A-Za-z0-9_.-' '_').log"
    env "$var=$per" "$bin_dir/$binary" --exact "$name" --test-threads 1 >"$log" 2>&1 &
    pids+=($!)
  done
  failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
  # a filter that matched nothing passes with "0 passed": count it as a failure
  ran=$(cat "$out/$(printf '%s' "$suite-$name-" | tr -c 'A-Za-z0-9_.-' '_')"*.log | grep -c "^test result: ok. 1 passed" || true)
  [ "$ran" = "$JOBS" ] || failed=$((failed + JOBS - ran))
  secs=$(awk "BEGIN { print $EPOCHREALTIME - $start }")
  [ "$failed" = 0 ] || failed_any=1
  printf '| %s: `%s` | %s | %s | %.1f | %s |\n' "$suite" "$name" "$((per * JOBS))" "$JOBS" "$secs" "$failed"
  # keep the logs of failures only
  [ "$failed" != 0 ] || rm -f "$out/$(printf '%s' "$suite-$name-" | tr -c 'A-Za-z0-9_.-' '_')"*.log
done <"$manifest"
exit "$failed_any"
