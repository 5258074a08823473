#!/bin/bash
# The all-reduce sweep on 2 GPUs up to 256 KiB with the enqueue-time columns, then the same under a
# flat perf profile (perf from devperf/, the sweep with symbols as devbin/allreduce_sweep_sym).
cd "$(dirname "$0")/.."
source devbin/lib.sh
export NCCL_NVLS_ENABLE=0
timeout "$(left 60)" devbin/allreduce_sweep_sym 2 3 262144 > $OUT/allreduce-2.txt 2>&1; echo "sweep exit $? ($(el))"
cut -c1-200 $OUT/allreduce-2.txt
export LD_LIBRARY_PATH=$PWD/devperf/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
P=./devperf/perf
timeout "$(left 90)" $P record -F 4000 -g -o /tmp/a.data devbin/allreduce_sweep_sym 2 5 262144 > $OUT/allreduce-perf-run.txt 2>&1
echo "perf exit $? ($(el))"
$P report -i /tmp/a.data --stdio --no-children --sort comm,dso --percent-limit 1 -g none > $OUT/ar-comm.txt 2>&1
$P report -i /tmp/a.data --stdio --no-children --sort dso,sym --percent-limit 0.6 -g none > $OUT/ar-flat.txt 2>&1
$P report -i /tmp/a.data --stdio --children --sort sym --percent-limit 1.5 -g none > $OUT/ar-children.txt 2>&1
grep -vE "^#|^$" $OUT/ar-comm.txt | head -15
grep -vE "^#|^$" $OUT/ar-flat.txt | head -40
