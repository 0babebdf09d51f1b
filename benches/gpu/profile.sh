#!/usr/bin/env bash
# A profile of the worker alone at 896 clients on the GPU machine (sitting 24's), after
# benches/gpu/uncarry.sh and with perf carried (benches/gpu/pack-perf.sh):
#
#   bash benches/gpu/profile.sh APP_DIR [extra worker flags]      # reports under $OUT/prof
#
# perf record (-F 1999 -g, 4 s) starts 1.5 s into a 12 s closed-loop run, then perf stat (2 s);
# the worker's utime/stime over the record go to ticks.txt. PORT [18080]: the worker's port.
set -u
app=$1; shift
PORT=${PORT:-18080}
. /tmp/gpu/env.sh
P=/tmp/gpu/perfw
o=$OUT/prof; mkdir -p $o
$app/worker --model models/build/gpu --device cuda:0 --ort-lib "$ORT_DYLIB_PATH" --listen 127.0.0.1:$PORT \
  --max-batch-rows 256 --max-batch-tokens 16384 --max-queue-delay 1ms --queue-capacity 8192 --runtime-threads 8 "$@" \
  >$o/worker.log 2>&1 & wpid=$!
for i in $(seq 1 300); do curl -sf http://127.0.0.1:$PORT/readyz >/dev/null && break; sleep 0.2; done
$app/loadtest --url http://127.0.0.1:$PORT -c 896 --duration 4s --warmup 0s --json >/dev/null 2>&1
$app/loadtest --url http://127.0.0.1:$PORT -c 896 --duration 12s --warmup 0s --json >$o/load.json 2>&1 & lp=$!
sleep 1.5
t0=$(awk '{print $14, $15}' /proc/$wpid/stat); d0=$(date +%s.%N)
$P record -F 1999 -g -p $wpid -o /tmp/gpu/perf.data -- sleep 4 >$o/record.txt 2>&1
t1=$(awk '{print $14, $15}' /proc/$wpid/stat); d1=$(date +%s.%N)
echo "utime stime before: $t0 after: $t1 wall $d0 $d1" >$o/ticks.txt
$P stat -e task-clock,context-switches,cpu-migrations,page-faults -p $wpid -- sleep 2 2>$o/stat.txt
wait $lp
kill $wpid; wait $wpid
cd /tmp/gpu
$P report -i perf.data --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9.]+%' | head -20 >$o/dso.txt
$P report -i perf.data --no-children --sort comm,dso --stdio 2>/dev/null | grep -E '^ +[0-9.]+%' | head -30 >$o/comm-dso.txt
$P report -i perf.data --no-children --sort dso,symbol --stdio -g none 2>/dev/null | grep -E '^ +[0-9.]+%' | cut -c1-200 | head -150 >$o/self.txt
$P report -i perf.data --children --comm tokio-rt-worker --sort symbol --stdio -g none 2>/dev/null | grep -E '^ +[0-9.]+%' | cut -c1-200 | head -200 >$o/children-rt.txt
$P report -i perf.data --no-children --comm backend-light --sort dso,symbol --stdio -g none 2>/dev/null | grep -E '^ +[0-9.]+%' | cut -c1-200 | head -40 >$o/self-backend.txt
ls -la $o
