#!/bin/bash
# Issue 28's multi-GPU checks in one device call (about 8 minutes on two GPUs): the CTS with its
# devices spread over every GPU in both completion modes, the collective area again with NCCL's
# lazy connection left on (NCCL_RUNTIME_CONNECT=1, the HAL's probe otherwise sets it to 0), the
# sanitizers over the spread CTS, and the CUDA contract fuzzer in host-callback mode.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export NCCL_NVLS_ENABLE=0 CTEST_CUDA_SPREAD=1
echo "commit $(cat devbin/COMMIT 2>/dev/null)"
echo "##### spread CTS, default completion"
OUT=$OUT/default CTS_LIMIT=150 bash devbin/cts-run.sh cts 2>&1 | tail -25
echo "##### spread CTS, HAL_CUDA_COMPLETION=host-callback"
HAL_CUDA_COMPLETION=host-callback OUT=$OUT/callback CTS_LIMIT=150 bash devbin/cts-run.sh cts 2>&1 | tail -25
# cts-run.sh linked NVRTC into /tmp/nv; the direct run below needs it on the path too.
export LD_LIBRARY_PATH=/tmp/nv:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
for mode in poll host-callback; do
  echo "##### collective area, NCCL_RUNTIME_CONNECT=1, HAL_CUDA_COMPLETION=$mode"
  NCCL_RUNTIME_CONNECT=1 HAL_CUDA_COMPLETION=$mode HAL_REQUIRE_CUDA=1 timeout 120 ./devbin/cts --include-ignored \
    --test-threads=4 cuda::collective:: > $OUT/collective-lazy-$mode.log 2>&1; echo "exit $?"
  grep -E "^test result|FAILED|panicked" $OUT/collective-lazy-$mode.log | head -8
done
echo "##### sanitizers over the spread CTS"
OUT=$OUT/san SAN_LIMIT=200 bash devbin/cts-run.sh racecheck synccheck 2>&1 | tail -30
echo "##### contract fuzzer, host-callback"
FUZZ_SECONDS=${FUZZ_SECONDS:-300} bash devbin/fuzz-run.sh host-callback > $OUT/fuzz-cb.log 2>&1; echo "fuzz exit $?"
tail -6 $OUT/fuzz-cb.log
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
