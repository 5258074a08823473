#!/bin/bash
# One call for the stream-ordered frees: the stall probe (scripts/gpu/free_stall_probe.c),
# cuda_stalls_old (a build without the change under test, if present) 3 times, cuda_device and
# cuda_stalls 15 times each, the CTS, the other CUDA driver tests, the fuzz, and the quick bench
# of BEFORE_DIR/bench and devbin/bench alternating (3 each). Logs come back as $OUT/logs.tgz.
# Usage: devbin/free-check.sh BEFORE_DIR
cd "$(dirname "$0")/.."
source devbin/lib.sh
B=$1
echo "commit $(cat devbin/COMMIT)"; nvidia-smi -L
gcc -O2 scripts/gpu/free_stall_probe.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -lpthread -o /tmp/fs \
  && timeout 60 /tmp/fs > $OUT/free_stall.txt 2>&1; echo "probe exit $? ($(el))"
cuda_test_env
if [ -x devbin/cuda_stalls_old ]; then  # a build without the change under test, if given: should fail
  for i in 1 2 3; do
    timeout 60 devbin/cuda_stalls_old --include-ignored > $OUT/stalls-old-$i.txt 2>&1; echo "cuda_stalls_old exit $?"
    grep -E "panicked" -A1 $OUT/stalls-old-$i.txt | grep -v "^--" | head -6
  done
fi
for t in cuda_device cuda_stalls; do
  f=0
  for i in $(seq 15); do
    timeout 60 devbin/$t --include-ignored --nocapture > $OUT/r.txt 2>&1 || { f=$((f+1)); cp $OUT/r.txt $OUT/$t-fail-$i.txt; grep -E "panicked" -A2 $OUT/r.txt | head -4; }
    [ $i = 1 ] && cp $OUT/r.txt $OUT/$t-1.txt
  done
  echo "$t: $f of 15 failed ($(el))"
done
rm -f $OUT/r.txt
CTEST_CUDA_SPREAD=0 OUT=$OUT/cts CTS_LIMIT=170 bash devbin/cts-run.sh cts 2>&1 | grep -E "^test result|FAILED|failed" | head -6
echo "cts done ($(el))"
for t in cuda_indirect cuda_fault cuda_completion_modes; do
  timeout "$(left 90)" devbin/$t --include-ignored > $OUT/$t.txt 2>&1; echo "$t exit $?: $(grep -E '^test result' $OUT/$t.txt)"
done
fuzz_for 30
mkdir -p $OUT/ab
for i in 1 2 3; do
  for which in before after; do
    dir=$B; [ $which = after ] && dir=devbin
    timeout "$(left 60)" $dir/bench --driver cuda --quick > $OUT/ab/$which-$i.txt 2>/dev/null || echo "bench $which $i exit $?"
  done
done
echo "benches done ($(el))"
cat $OUT/free_stall.txt
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
