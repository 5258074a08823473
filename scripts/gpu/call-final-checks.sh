#!/bin/bash
# Final checks of a change: the build before it (devbefore/) and HEAD (devbin/) alternating in quick
# bench processes (abc.sh), the driver tests, the full CTS in both completion modes, the sanitizers.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
echo "builds: $(cat devbefore/COMMIT) $(cat devbin/COMMIT)"; nvidia-smi -L
N=$(ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null | head -1); mkdir -p /tmp/nv && ln -sf "$N" /tmp/nv/libnvrtc.so
export LD_LIBRARY_PATH=/tmp/nv:$(dirname "$N"):$LD_LIBRARY_PATH HAL_REQUIRE_CUDA=1
SECONDS=0
timeout 120 bash devbin/abc.sh ./devbefore/bench ./devbin/bench; echo "abc done at ${SECONDS}s"
for t in cuda_device cuda_fault cuda_completion_modes; do timeout 60 ./devbin/$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1; echo "$t exit $? $(grep 'test result' $OUT/$t.txt | tail -1)"; done
OUT=$OUT/cts-default CTS_LIMIT=100 SAN_LIMIT=200 timeout 220 bash devbin/cts-run.sh cts racecheck synccheck > $OUT/cts-default.log 2>&1; echo "cts default+san exit $? at ${SECONDS}s"
HAL_CUDA_COMPLETION=host-callback OUT=$OUT/cts-cb CTS_LIMIT=90 timeout 100 bash devbin/cts-run.sh cts > $OUT/cts-cb.log 2>&1; echo "cts cb exit $? at ${SECONDS}s"
grep -E "test result|=== CTS exit|SUMMARY|=== compute" $OUT/cts-default.log $OUT/cts-cb.log | cut -c1-200
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
