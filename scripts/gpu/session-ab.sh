#!/bin/bash
# One call at the end of a round: the quick bench and the peers' CUDA rows of the round's first
# build (BEFORE_DIR/bench, BEFORE_DIR/peers) and devbin/ alternating, ROUNDS (4) each; the scaling
# tables of both; then the CTS, the CUDA driver tests and the fuzz (one test at a time) on devbin/.
# Logs come back as $OUT/ab.tgz. Usage: devbin/session-ab.sh BEFORE_DIR
cd "$(dirname "$0")/.."
source devbin/lib.sh
B=$1; mkdir -p $OUT/ab
for i in $(seq ${ROUNDS:-4}); do
  for which in before after; do
    dir=$B; [ $which = after ] && dir=devbin
    timeout 100 $dir/peers 0 > $OUT/ab/peers-$which-$i.txt 2>&1 || echo "peers $which $i exit $?"
    timeout 60 $dir/bench --driver cuda --quick > $OUT/ab/$which-$i.txt 2>/dev/null || echo "bench $which $i exit $?"
  done
done
for which in before after; do
  dir=$B; [ $which = after ] && dir=devbin
  timeout 150 $dir/bench --driver cuda --scaling > $OUT/ab/scaling-$which.txt 2>/dev/null || echo "scaling $which exit $?"
done
echo "benches done at $(el)"
cuda_test_env
timeout 200 devbin/cts --include-ignored --test-threads=4 > $OUT/ab/cts.txt 2>&1; echo "cts exit $?: $(grep -E '^test result' $OUT/ab/cts.txt)"
for t in cuda_device cuda_indirect cuda_fault cuda_completion_modes; do
  timeout 120 devbin/$t --include-ignored > $OUT/ab/$t.txt 2>&1; echo "$t exit $?: $(grep -E '^test result' $OUT/ab/$t.txt)"
done
HAL_FUZZ_SECONDS=${FUZZ_SECONDS:-40} timeout 200 devbin/contract_fuzz --include-ignored --test-threads=1 > $OUT/ab/fuzz.txt 2>&1
echo "fuzz exit $?: $(grep -E '^test result' $OUT/ab/fuzz.txt)"
tar czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
echo "done at $(el)"
