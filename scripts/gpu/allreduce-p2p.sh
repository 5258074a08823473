#!/bin/bash
# The all-reduce sweep on 2 and 4 GPUs with the raw-with-peers-connected column, and the CUDA CTS
# with its devices spread over the GPUs. Logs under $OUT.
cd "$(dirname "$0")/.."
source devbin/lib.sh
export NCCL_NVLS_ENABLE=0
cuda_test_env
for ranks in 2 4; do
  timeout "$(left 150)" devbin/allreduce_sweep $ranks 3 > $OUT/allreduce-$ranks.txt 2>&1; echo "sweep $ranks exit $? ($(el))"
  tail -12 $OUT/allreduce-$ranks.txt
done
CTEST_CUDA_SPREAD=1 timeout "$(left 200)" devbin/cts --include-ignored --test-threads=4 > $OUT/cts-spread.txt 2>&1; echo "cts spread exit $? ($(el))"
grep -E "^test result|FAILED|panicked" $OUT/cts-spread.txt | head
