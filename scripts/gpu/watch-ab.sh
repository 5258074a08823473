#!/bin/bash
# The host waiter's event taken over from the completion thread (hal/src/driver/scheduler/watch.rs),
# before/after on one GPU: the peers' CUDA rows (3 processes each, alternating), the quick bench
# (3 each, alternating, plus 2 after with HAL_CUDA_POLL_US=1000: how much a completion thread that
# polls slowly would give the chained rows), then the checks on the after build and a perf profile
# of the round trip. Usage: devbin/watch-ab.sh BEFORE_DIR (holding bench and peers built before).
# ROUNDS (3) processes of each build; POLL1000=0 and PROFILE=0 leave those parts out (the later
# before/after calls of the submission-cost cuts used ROUNDS=4 POLL1000=0 PROFILE=0).
cd "$(dirname "$0")/.."
source devbin/lib.sh
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/ab
B=$1
for i in $(seq ${ROUNDS:-3}); do
  for which in before after; do
    dir=$B; [ $which = after ] && dir=devbin
    timeout 100 $dir/peers 0 > $OUT/ab/peers-$which-$i.txt 2>&1 || echo "peers $which $i exit $?"
  done
done
for i in $(seq ${ROUNDS:-3}); do
  for which in before after; do
    bin=$B/bench; [ $which = after ] && bin=devbin/bench
    timeout 150 $bin --driver cuda --quick > $OUT/ab/$which-$i.txt 2>/dev/null || echo "bench $which $i exit $?"
  done
done
[ "${POLL1000:-1}" = 1 ] && for i in 1 2; do HAL_CUDA_POLL_US=1000 timeout 150 devbin/bench --driver cuda --quick > $OUT/ab/poll1000-$i.txt 2>/dev/null; done
echo "at $(el)"
cuda_test_env
timeout 200 devbin/cts --include-ignored --test-threads=4 > $OUT/cts.txt 2>&1; echo "cts exit $?: $(grep -E '^test result' $OUT/cts.txt)"
for t in cuda_device cuda_indirect cuda_fault cuda_completion_modes; do
  timeout 120 devbin/$t --include-ignored > $OUT/$t.txt 2>&1; echo "$t exit $?: $(grep -E '^test result' $OUT/$t.txt)"
done
HAL_FUZZ_SECONDS=40 timeout 150 devbin/contract_fuzz --include-ignored --test-threads=1 > $OUT/fuzz.txt 2>&1; echo "fuzz exit $?: $(grep -E '^test result' $OUT/fuzz.txt)"
echo "at $(el)"
[ "${PROFILE:-1}" = 1 ] && [ -d devperf ] && { mkdir -p $OUT/prof; OUT=$OUT/prof timeout 120 bash devbin/profile.sh roundtrip dispatch 300000 > $OUT/prof/profile.txt 2>&1; tar czf $OUT/prof.tgz -C $OUT prof && rm -rf $OUT/prof; }
echo "--- peers N=1 (us per call: median p10 p90)"
for f in $OUT/ab/peers-*.txt; do echo "$(basename $f .txt): $(grep -E 'row (hal|raw)_[a-z_]+ 1 ' $f | awk '{print $2"="$4}' | tr '\n' ' ')"; done
echo "--- bench rows"
for row in "empty execute" "chain, 1 dispatch (" "round trip, 1 dispatch (no" "1-dispatch command buffer, chained" "queue_alloca + queue_dealloca (" "cross-queue ping-pong" "fan-out"; do
  echo "- $row"
  for f in $OUT/ab/*.txt; do case $f in *peers*) continue;; esac; echo "$(basename $f .txt): $(grep -F "$row" $f | head -1 | cut -c1-150)"; done
done
tar czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
