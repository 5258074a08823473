#!/bin/bash
# The end of a session on one GPU: the CUDA CTS, cuda_device, cuda_indirect and cuda_stalls twice
# each, cuda_completion_modes and cuda_fault once, the fuzz (20 s), one quick bench. Logs come back
# as $OUT/logs.tgz. Usage: bash devbin/head-check.sh (carry devbin/).
cd "$(dirname "$0")/.."
source devbin/lib.sh
echo "commit $(cat devbin/COMMIT)"; nvidia-smi -L | head -1
OUT=$OUT/cts CTS_LIMIT=170 bash devbin/cts-run.sh cts 2>&1 | grep -E "^test result|FAILED|panicked" | head -8
echo "cts done ($(el))"
cuda_test_env
for t in "cuda_device 2" "cuda_indirect 2" "cuda_stalls 2" "cuda_completion_modes 1" "cuda_fault 1"; do repeat_test $t; done
fuzz_for 20
timeout "$(left 40)" devbin/bench --driver cuda --quick > $OUT/quick.txt 2>/dev/null; echo "bench exit $?"
grep -E "^(dependent chain, empty|1-dispatch command buffer, chained|queue_alloca \+ queue_dealloca \(|cross-queue)" $OUT/quick.txt | cut -c1-120
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
echo "done ($(el))"
