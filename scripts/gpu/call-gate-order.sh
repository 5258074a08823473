#!/bin/bash
# Session 3 check of the host-call gate ordering fix on CUDA: the whole CTS in both completion modes,
# then the host-call cases in-process 10 times each mode.
cd "$(dirname "$0")/.."
echo "commit $(cat devbin/COMMIT)"
OUT=$OUT/default CTS_LIMIT=150 bash devbin/cts-run.sh cts 2>&1 | tail -25
HAL_CUDA_COMPLETION=host-callback OUT=$OUT/callback CTS_LIMIT=150 bash devbin/cts-run.sh cts 2>&1 | tail -25
export HAL_REQUIRE_CUDA=1 LD_LIBRARY_PATH=/tmp/nv:$LD_LIBRARY_PATH
for mode in poll host-callback; do
  fails=0
  for i in $(seq 1 10); do
    HAL_CUDA_COMPLETION=$mode CTEST_ISOLATE=0 timeout 60 ./devbin/cts --include-ignored --test-threads=1 cuda::queue_ops::host_call > $OUT/hc-$mode-$i.log 2>&1 || { fails=$((fails+1)); grep -E "failed|FAILED" $OUT/hc-$mode-$i.log | head -3; }
  done
  echo "=== host_call cases in-process, $mode: $fails of 10 rounds failed; $(grep -h 'test result' $OUT/hc-$mode-1.log)"
done
