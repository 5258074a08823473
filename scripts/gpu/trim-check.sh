#!/bin/bash
# A short call on one GPU: the CUDA CTS, cuda_device and cuda_stalls three times each, and the
# fuzz (20 s). Logs come back as $OUT/logs.tgz. Usage: devbin/trim-check.sh
cd "$(dirname "$0")/.."
source devbin/lib.sh
echo "commit $(cat devbin/COMMIT)"; nvidia-smi -L
OUT=$OUT/cts CTS_LIMIT=170 bash devbin/cts-run.sh cts 2>&1 | grep -E "^test result|FAILED|panicked|^resources" | head -8
echo "cts done ($(el))"
cuda_test_env
repeat_test cuda_device 3
repeat_test cuda_stalls 3
fuzz_for 20
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
echo "done ($(el))"
