#!/bin/bash
# Where a small all-reduce's host time goes, HAL queue against raw NCCL, two ranks (GPUs 0 and 1):
# perf (devperf/) records allreduce_sweep_sym up to 4 KiB with call chains; callchain_split.py
# splits the enqueuing threads' samples into the HAL's path and raw NCCL's, each inside and outside
# ncclAllReduce; then one rank's chain of collectives alone (submit_profile).
# Usage: bash devbin/allreduce-where.sh (carry devbin/, devperf/).
cd "$(dirname "$0")/.."
source devbin/lib.sh
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/devperf/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
nvidia-smi -L | head -2
timeout "$(left 120)" ./devperf/perf record -F 4000 -e cpu-clock --call-graph dwarf,16384 -o /tmp/ar.data \
  ./devbin/allreduce_sweep_sym 2 20 4096 > $OUT/sweep-perf.txt 2>&1; echo "perf sweep exit $? ($(el))"
head -8 $OUT/sweep-perf.txt
timeout "$(left 240)" ./devperf/perf script -i /tmp/ar.data 2>/dev/null | python3 devbin/callchain_split.py > $OUT/split.txt
echo "split exit $? ($(el))"; cat $OUT/split.txt
timeout "$(left 60)" devbin/submit_profile cuda collective empty 200000 2>&1 | tail -1
echo "done ($(el))"
