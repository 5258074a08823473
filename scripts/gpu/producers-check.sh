#!/bin/bash
# One GPU: the CTS, cuda_device, cuda_indirect and cuda_stalls twice each, the fuzz (30 s), then
# five quick benches of devbin/base/bench (before) and devbin/bench (after) alternating; prints the
# issue's rows of both (standing_summary.py). Usage: bash devbin/producers-check.sh (carry devbin/).
cd "$(dirname "$0")/.."
source devbin/lib.sh
echo "commit $(cat devbin/COMMIT)"; nvidia-smi -L | head -1
OUT=$OUT/cts CTS_LIMIT=170 bash devbin/cts-run.sh cts 2>&1 | grep -E "^test result|FAILED|panicked" | grep -v "sticky-fault variant" | head -8
echo "cts done ($(el))"
cuda_test_env
for t in "cuda_device 2" "cuda_indirect 2" "cuda_stalls 2"; do repeat_test $t; done
fuzz_for 30
quick_ab before after
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
echo "done ($(el))"
