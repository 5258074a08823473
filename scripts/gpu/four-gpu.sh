#!/bin/bash
# Issue 28's four-GPU checks in one device call (under ten minutes): the CUDA CTS with its devices
# spread over every GPU in both completion modes, the collective area again with NCCL's lazy
# connection asked for (NCCL_RUNTIME_CONNECT=1; unset, the driver sets 0), and the C suite, whose
# collectives test puts rank i on GPU i; then the all-reduce sweep on two GPUs and the bench's
# scaling tables on one.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export NCCL_NVLS_ENABLE=0 CTEST_CUDA_SPREAD=1
echo "commit $(cat devbin/COMMIT 2>/dev/null)"
nvidia-smi topo -m | head -8
for mode in poll host-callback; do
  echo "##### spread CTS, HAL_CUDA_COMPLETION=$mode"
  HAL_CUDA_COMPLETION=$mode OUT=$OUT/$mode CTS_LIMIT=170 bash devbin/cts-run.sh cts 2>&1 | tail -22
done
export LD_LIBRARY_PATH=/tmp/nv:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
for mode in poll host-callback; do
  echo "##### collective area, NCCL_RUNTIME_CONNECT=1, HAL_CUDA_COMPLETION=$mode"
  NCCL_RUNTIME_CONNECT=1 HAL_CUDA_COMPLETION=$mode HAL_REQUIRE_CUDA=1 timeout 90 ./devbin/cts --include-ignored \
    --test-threads=4 cuda::collective:: > $OUT/collective-lazy-$mode.log 2>&1; echo "exit $?"
  grep -E "^test result|FAILED|panicked|not run" $OUT/collective-lazy-$mode.log | head -8
done
echo "##### C suite"
CAPI_OVERHEAD=0 OUT=$OUT/capi timeout 100 bash devbin/capi-run.sh 2>&1 | tail -30
echo "##### all-reduce sweep on 2 GPUs, 8 B - 1 GiB, beside raw NCCL"
timeout 120 ./devbin/allreduce_sweep 2 3 > $OUT/allreduce-2.txt 2>&1; echo "exit $?"; tail -12 $OUT/allreduce-2.txt
echo "##### scaling tables (cuda, one GPU)"
CUDA_VISIBLE_DEVICES=0 timeout 150 ./devbin/bench --driver cuda --scaling --json $OUT/scaling.json > $OUT/scaling.txt 2>$OUT/scaling.err
echo "exit $?"; cat $OUT/scaling.txt | cut -c1-160; tail -3 $OUT/scaling.err
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
