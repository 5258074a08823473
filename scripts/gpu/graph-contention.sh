#!/bin/bash
# One device call for the one-node graph replay under contention: the scaling tables twice, the
# quick bench before (devbin/bench_c1) and after (devbin/bench) alternating, the CUDA CTS, the
# driver's device and indirect tests and the contract fuzz. Logs under $OUT; short output.
cd "$(dirname "$0")/.."
source devbin/lib.sh
cuda_test_env
for i in 1 2; do
  timeout "$(left 60)" devbin/bench --driver cuda --scaling > $OUT/scaling-$i.txt 2>/dev/null; echo "scaling exit $? ($(el))"
  grep -A7 "^threads" $OUT/scaling-$i.txt | cut -c1-120
done
timeout "$(left 100)" devbin/cts --include-ignored --test-threads=4 > $OUT/cts.txt 2>&1; echo "cts exit $? ($(el))"
grep -E "test result|FAILED|panicked" $OUT/cts.txt | head -5
for t in cuda_device cuda_indirect; do
  timeout "$(left 90)" devbin/$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1; echo "$t exit $? ($(el))"
  grep -E "test result|FAILED" $OUT/$t.txt | head -5
done
HAL_FUZZ_SECONDS=30 timeout "$(left 90)" devbin/contract_fuzz --include-ignored --test-threads=1 > $OUT/fuzz.txt 2>&1; echo "fuzz exit $? ($(el))"
grep -E "test result" $OUT/fuzz.txt
timeout "$(left 330)" bash devbin/before-after.sh devbin/bench_c1 devbin/bench --quick > $OUT/ba.txt 2>&1; echo "before-after exit $? ($(el))"
cut -c1-160 $OUT/ba.txt
