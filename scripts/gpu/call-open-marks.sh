#!/bin/bash
# Session call 1: before/after bench (open marks), driver tests, CTS in both completion modes.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
echo "before $(cat devbefore/COMMIT) after $(cat devbin/COMMIT)"; nvidia-smi -L
N=$(ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null | head -1); mkdir -p /tmp/nv && ln -sf "$N" /tmp/nv/libnvrtc.so
export LD_LIBRARY_PATH=/tmp/nv:$(dirname "$N"):$LD_LIBRARY_PATH HAL_REQUIRE_CUDA=1
SECONDS=0
timeout 260 bash devbin/before-after.sh ./devbefore/bench ./devbin/bench --quick > $OUT/ba.txt 2>&1; echo "before-after exit $? at ${SECONDS}s"
for t in cuda_device cuda_fault cuda_completion_modes; do timeout 100 ./devbin/$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1; echo "$t exit $? $(grep 'test result' $OUT/$t.txt | tail -1)"; done
echo "tests done at ${SECONDS}s"
OUT=$OUT/cts-default CTS_LIMIT=110 timeout 120 bash devbin/cts-run.sh cts > $OUT/cts-default.log 2>&1; echo "cts default exit $?"
HAL_CUDA_COMPLETION=host-callback OUT=$OUT/cts-cb CTS_LIMIT=110 timeout 120 bash devbin/cts-run.sh cts > $OUT/cts-cb.log 2>&1; echo "cts cb exit $?"
echo "all done at ${SECONDS}s"
grep -E "test result|=== CTS exit" $OUT/cts-default.log $OUT/cts-cb.log | cut -c1-200
grep -E "FAILED|panicked" $OUT/cuda_*.txt | head
cat $OUT/ba.txt
(cd $OUT && tar czf /tmp/logs.tgz --exclude=ba.txt . && find . -mindepth 1 -not -name ba.txt -delete && mv /tmp/logs.tgz .)
