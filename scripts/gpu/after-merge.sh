#!/bin/bash
# One device call after a merge of scheduler and driver changes: the CUDA CTS in both completion
# modes, the C API's tests on cuda with its overhead bench, and the quick bench of the build before
# (devbin/bench_before) and after, alternating, five processes each. Logs under $OUT.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
echo "commit $(cat devbin/COMMIT); before: devbin/bench_before"
echo "##### CTS, default completion"
OUT=$OUT/default CTS_LIMIT=150 bash devbin/cts-run.sh cts 2>&1 | grep -E "CTS exit|test result|FAILED|panicked" | head -12
echo "##### CTS, host-callback"
HAL_CUDA_COMPLETION=host-callback OUT=$OUT/callback CTS_LIMIT=150 bash devbin/cts-run.sh cts 2>&1 | grep -E "CTS exit|test result|FAILED|panicked" | head -12
echo "##### C API"
timeout 200 bash devbin/capi-run.sh > $OUT/capi.log 2>&1; echo "capi exit $?"; grep -E "FAILED|C tests:|^row|us|C -|Rust" $OUT/capi.log | head -30
echo "##### bench before/after (quick)"
timeout 260 bash devbin/before-after.sh devbin/bench_before devbin/bench --quick 2>&1 | tail -60
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
