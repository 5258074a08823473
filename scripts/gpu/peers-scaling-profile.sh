#!/bin/bash
# One device call: the peers tables (bench/peers/run.sh: HAL, raw CUDA, PyTorch, IREE; then the
# Vulkan rows), then a flat perf profile of the scaling tables up to 8 threads (perf from devperf/,
# the bench with symbols as devbin/bench_sym). Logs under $OUT.
cd "$(dirname "$0")/.."
source devbin/lib.sh
timeout "$(left 330)" bash devpeers/run.sh > $OUT/peers.txt 2>&1; echo "peers exit $? ($(el))"
grep -vE "^\s*$" $OUT/peers.txt | tail -45 | cut -c1-180
export LD_LIBRARY_PATH=$PWD/devperf/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
P=./devperf/perf
timeout "$(left 100)" $P record -F 2000 -g -o /tmp/s.data devbin/bench_sym --driver cuda --scaling --max-threads 8 > $OUT/scaling-perf-run.txt 2>/dev/null
echo "perf record exit $? ($(el))"
$P report -i /tmp/s.data --stdio --no-children --sort dso,sym --percent-limit 0.7 -g none > $OUT/scaling-flat.txt 2>&1
$P report -i /tmp/s.data --stdio --no-children --sort comm --percent-limit 0.5 -g none > $OUT/scaling-comm.txt 2>&1
$P report -i /tmp/s.data --stdio --children --sort sym --percent-limit 1.5 -g none > $OUT/scaling-children.txt 2>&1
grep -vE "^#|^$" $OUT/scaling-flat.txt | head -40
grep -vE "^#|^$" $OUT/scaling-comm.txt | head -12
