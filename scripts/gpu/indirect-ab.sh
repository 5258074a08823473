#!/bin/bash
# One device call for indirect dispatches set on the device (issue 34): the driver's indirect tests,
# the CUDA CTS (the whole suite with the default, its indirect cases again with HAL_CUDA_INDIRECT=host),
# the contract fuzz, and five quick bench processes of the build before (devbin/bench_b6) and after
# (devbin/bench), alternating. Logs under $OUT; a short table last.
cd "$(dirname "$0")/.."
source devbin/lib.sh
cuda_test_env
nvidia-smi -L
timeout "$(left 120)" devbin/cuda_indirect --include-ignored --test-threads=1 > $OUT/cuda_indirect.txt 2>&1; echo "cuda_indirect exit $? ($(el))"
grep -E "^test |test result" $OUT/cuda_indirect.txt
timeout "$(left 200)" devbin/cts --include-ignored --test-threads=4 > $OUT/cts.txt 2>&1; echo "cts exit $? ($(el))"
grep -E "test result" $OUT/cts.txt; grep -E "FAILED|panicked" $OUT/cts.txt | head -5
HAL_CUDA_INDIRECT=host timeout "$(left 100)" devbin/cts --include-ignored indirect > $OUT/cts-host-indirect.txt 2>&1; echo "cts indirect on host exit $? ($(el))"
grep -E "test result" $OUT/cts-host-indirect.txt
HAL_FUZZ_SECONDS=30 timeout "$(left 100)" devbin/contract_fuzz --include-ignored --test-threads=1 > $OUT/fuzz.txt 2>&1; echo "fuzz exit $? ($(el))"
grep -E "test result" $OUT/fuzz.txt
BUDGET_BA=$(left 400)
timeout "$BUDGET_BA" bash devbin/before-after.sh devbin/bench_b6 devbin/bench --quick > $OUT/ba.txt 2>&1; echo "before-after exit $? ($(el))"
cat $OUT/ba.txt | cut -c1-200
