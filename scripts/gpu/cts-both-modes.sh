#!/bin/bash
# The CTS with the default completion and with host callbacks, each also under the sanitizers.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/default $OUT/callback
echo "##### CTS + sanitizers, default completion"
OUT=$OUT/default CTS_LIMIT=150 SAN_LIMIT=240 bash devbin/cts-run.sh cts racecheck synccheck 2>&1 | tail -40
echo "##### CTS + sanitizers, HAL_CUDA_COMPLETION=host-callback"
HAL_CUDA_COMPLETION=host-callback OUT=$OUT/callback CTS_LIMIT=150 SAN_LIMIT=240 bash devbin/cts-run.sh cts racecheck synccheck 2>&1 | tail -40
