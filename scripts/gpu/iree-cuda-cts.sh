#!/bin/bash
# IREE on thal-cuda after a driver change: hal-iree's four CUDA programs against IREE's CPU output,
# and IREE's HAL CTS on thal-cuda (its indirect-parameter dispatches go through the driver's
# indirect dispatch). Needs devbin/iree/ (scripts/gpu/iree-cuda-build.sh) and lib.sh.
cd "$(dirname "$0")/.."
source devbin/lib.sh
cuda_test_env
timeout "$(left 90)" devbin/iree/cuda_programs --include-ignored --test-threads=1 --nocapture > "$OUT/cuda_programs.log" 2>&1; echo "programs exit $? ($(el))"
grep -E "^test |test result|panicked" "$OUT/cuda_programs.log" | head -8
IREE_CTS_DRIVER=thal-cuda IREE_CTS_EXECUTABLE_FORMAT=PTXE IREE_CTS_TESTDATA=$PWD/hal-iree/testdata/cts/executables-cuda \
  timeout "$(left 200)" devbin/iree/iree_cts > "$OUT/iree_cts_cuda.log" 2>&1; echo "iree-cts exit $? ($(el))"
grep -E "iree-cts:|total|FAILED  \]|PASSED|SKIPPED" "$OUT/iree_cts_cuda.log" | head -20
grep -iE "indirect" "$OUT/iree_cts_cuda.log" | grep -E "OK|FAILED" | head -10
