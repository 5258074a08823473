#!/bin/bash
# One device call for the progress-word completion (HAL_CUDA_COMPLETION_WORD=1): the CUDA CTS, the
# driver's device, indirect and completion-mode tests and the contract fuzz with it on; the quick
# bench off (devbin/bench) and on (devbin/bench_word.sh) alternating; the scaling tables and the
# one-rank collective chain both ways. Logs under $OUT.
cd "$(dirname "$0")/.."
source devbin/lib.sh
cuda_test_env
export HAL_CUDA_COMPLETION_WORD=1
timeout "$(left 100)" devbin/cts --include-ignored --test-threads=4 > $OUT/cts.txt 2>&1; echo "cts (word) exit $? ($(el))"
grep -E "test result|FAILED|panicked" $OUT/cts.txt | head -5
for t in cuda_device cuda_indirect cuda_completion_modes; do
  timeout "$(left 100)" devbin/$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1; echo "$t (word) exit $? ($(el))"
  grep -E "test result|FAILED" $OUT/$t.txt | head -5
done
HAL_FUZZ_SECONDS=30 timeout "$(left 90)" devbin/contract_fuzz --include-ignored --test-threads=1 > $OUT/fuzz.txt 2>&1; echo "fuzz (word) exit $? ($(el))"
grep -E "test result" $OUT/fuzz.txt
unset HAL_CUDA_COMPLETION_WORD
for w in 0 1 0 1; do
  echo "collective chain, word=$w: $(HAL_CUDA_COMPLETION_WORD=$w timeout 30 devbin/submit_profile cuda collective empty 100000)"
done
for w in 0 1; do
  HAL_CUDA_COMPLETION_WORD=$w timeout "$(left 60)" devbin/bench --driver cuda --scaling > $OUT/scaling-$w.txt 2>/dev/null; echo "scaling word=$w exit $? ($(el))"
  grep -A6 "^threads" $OUT/scaling-$w.txt | cut -c1-120
done
timeout "$(left 330)" bash devbin/before-after.sh devbin/bench devbin/bench_word.sh --quick > $OUT/ba.txt 2>&1; echo "before-after exit $? ($(el))"
cut -c1-150 $OUT/ba.txt
