#!/bin/bash
# Session call 3: before/after bench, driver tests, peers table, CTS (default completion + sanitizers; host callbacks).
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
echo "before $(cat devbefore/COMMIT) after $(cat devbin/COMMIT) peers $(cat devpeers/COMMIT)"; nvidia-smi -L
N=$(ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null | head -1); mkdir -p /tmp/nv && ln -sf "$N" /tmp/nv/libnvrtc.so
export LD_LIBRARY_PATH=/tmp/nv:$(dirname "$N"):$LD_LIBRARY_PATH HAL_REQUIRE_CUDA=1
SECONDS=0
timeout 100 bash devbin/before-after.sh ./devbefore/bench ./devbin/bench --quick > $OUT/ba.txt 2>&1; echo "before-after exit $? at ${SECONDS}s"
for t in cuda_device cuda_fault cuda_completion_modes; do timeout 60 ./devbin/$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1; echo "$t exit $? $(grep 'test result' $OUT/$t.txt | tail -1)"; done
timeout 150 bash devpeers/run.sh > $OUT/peers.txt 2>&1; echo "peers exit $? at ${SECONDS}s"
OUT=$OUT/cts-default CTS_LIMIT=100 SAN_LIMIT=230 timeout 250 bash devbin/cts-run.sh cts racecheck synccheck > $OUT/cts-default.log 2>&1; echo "cts default+san exit $? at ${SECONDS}s"
HAL_CUDA_COMPLETION=host-callback OUT=$OUT/cts-cb CTS_LIMIT=90 timeout 100 bash devbin/cts-run.sh cts > $OUT/cts-cb.log 2>&1; echo "cts cb exit $? at ${SECONDS}s"
grep -E "test result|=== CTS exit|SUMMARY|=== compute" $OUT/cts-default.log $OUT/cts-cb.log | cut -c1-200
tail -30 $OUT/peers.txt
(cd $OUT && tar czf /tmp/logs.tgz --exclude=ba.txt --exclude=peers.txt . && find . -mindepth 1 -not -name ba.txt -not -name peers.txt -delete && mv /tmp/logs.tgz .)
