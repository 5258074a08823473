#!/bin/bash
# One four-GPU call: the cpu-sim stencil (hal run, 2048^2 x 300) on 1 to all cores, the CUDA CTS with
# its devices spread over the GPUs, and the cross-device hop between GPUs 0 and 1. Logs under $OUT.
cd "$(dirname "$0")/.."
source devbin/lib.sh
export NCCL_NVLS_ENABLE=0
cuda_test_env
cores=$(nproc); echo "cores: $cores"
echo "cpu-sim stencil 2048^2 x 300, wall s (two runs per core count)"
for c in 1 2 4 8 16 32 64; do
  [ "$c" -gt "$cores" ] && continue
  line="$c:"
  for r in 1 2; do
    w=$(timeout "$(left 30)" taskset -c 0-$((c - 1)) devbin/hal run --size 2048 --steps 300 --no-check 2>&1 | grep -oE "wall time: +[0-9.]+" | grep -oE "[0-9.]+$")
    line="$line $w"
  done
  echo "$line"
done
timeout "$(left 40)" devbin/hal run --size 2048 --steps 300 > $OUT/stencil-check.txt 2>&1
grep -E "check|wall time" $OUT/stencil-check.txt; echo "($(el))"
CTEST_CUDA_SPREAD=1 timeout "$(left 200)" devbin/cts --include-ignored --test-threads=4 > $OUT/cts-spread.txt 2>&1; echo "cts spread exit $? ($(el))"
grep -E "^test result|FAILED|panicked" $OUT/cts-spread.txt | head
timeout "$(left 90)" devbin/bench --driver cuda --quick --peer-ordinal 1 > $OUT/bench-peer1.txt 2>/dev/null; echo "bench peer exit $? ($(el))"
grep -iE "cross-device|cross-queue" $OUT/bench-peer1.txt | cut -c1-200
