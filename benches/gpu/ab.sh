#!/usr/bin/env bash
# Builds or flag sets compared in one GPU sitting, interleaved: each round runs benches/gpu/run.sh
# once per configuration, in the order given, so that whatever drifts on the machine during the
# sitting (clocks, another tenant, the page cache) reaches every configuration alike. Copies each
# run's summary to OUT_DIR/NAME-rROUND.md (only summaries: the device tool returns few files).
#
#   bash benches/gpu/ab.sh OUT_DIR MODEL_DIR 'NAME|APP_DIR|EXTRA WORKER FLAGS[|GATEWAY FLAGS]' ...
#
# e.g. ROUNDS=1 ONLY=worker,gateway bash benches/gpu/ab.sh "$OUT" models/build/gpu \
#        'base|.gpu/base|' 'new|.gpu/app2|' 'blocking|.gpu/app2|--cuda-sync blocking'
#
# Settings: ROUNDS [1] and FIRST_ROUND [1] (a device call lasts at most 10 minutes: one round per
# call), and run.sh's own (WORKER_FLAGS: what every configuration shares; ONLY, DURATION, PERF,
# ...), passed through; each configuration's flags go to run.sh as EXTRA_WORKER_FLAGS and
# GATEWAY_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$1 model=$2
shift 2
ROUNDS=${ROUNDS:-1}
FIRST_ROUND=${FIRST_ROUND:-1}
work=${TMPDIR:-/tmp}/gpu-ab
mkdir -p "$out" "$work"
for ((r = FIRST_ROUND; r < FIRST_ROUND + ROUNDS; r++)); do
  for cfg in "$@"; do
    IFS='|' read -r name app flags gflags <<<"$cfg"
    run=$work/$name-r$r
    rm -rf "$run"
    echo "== round $r: $name ($app${flags:+, worker $flags}${gflags:+, gateway $gflags})"
    VARIANTS="${VARIANTS:-}" EXTRA_WORKER_FLAGS="$flags" GATEWAY_FLAGS="$gflags" bash benches/gpu/run.sh "$app" "$model" "$run" \
      >"$run.log" 2>&1 || echo "   run.sh exited $?"
    if [ -f "$run/summary.md" ]; then
      # The flags the worker ran with, as run.sh logged them.
      used=$(sed -n 's/^== worker [^ ]* ([^)]*) \(.*\), started in .*/\1/p' "$run.log" | head -n 1)
      { echo "ab.sh round $r, $name: $app ($(cat "$app/commit.txt" 2>/dev/null || echo '?')); worker flags: $used; gateway flags: ${gflags:-none}"
        echo
        cat "$run/summary.md"; } >"$out/$name-r$r.md"
      # (a knee-only run has no closed-loop rows: no match is not a failure)
      { grep -E '^\| c[0-9]+ ' "$run/summary.md" || true; } | cut -d'|' -f2-8 | sed 's/^/   /'
    else
      echo "   no summary; last lines of its log:"
      tail -n 5 "$run.log" | sed 's/^/   /'
    fi
  done
done
