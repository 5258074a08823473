#!/bin/bash
# One device call at the end of a round, on a machine with several GPUs: the CUDA CTS's collective
# area with its devices spread over every GPU (both completion modes, and with NCCL's lazy
# connection asked for), then round-check.sh on GPU 0 alone, then the peers table if devpeers/ came
# along. Logs under $OUT.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
nvidia-smi -L
N=$(ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null | head -1); mkdir -p /tmp/nv && ln -sf "$N" /tmp/nv/libnvrtc.so
export LD_LIBRARY_PATH=/tmp/nv:/usr/local/cuda/lib64:$LD_LIBRARY_PATH NCCL_NVLS_ENABLE=0
for run in "poll " "host-callback " "poll 1" "host-callback 1"; do
  set -- $run; mode=$1; lazy=${2:-}
  echo "##### collective area spread over the GPUs, HAL_CUDA_COMPLETION=$mode${lazy:+, NCCL_RUNTIME_CONNECT=1}"
  env ${lazy:+NCCL_RUNTIME_CONNECT=1} CTEST_CUDA_SPREAD=1 HAL_CUDA_COMPLETION=$mode HAL_REQUIRE_CUDA=1 timeout 100 \
    ./devbin/cts --include-ignored --test-threads=4 cuda::collective:: > "$OUT/collective-$mode${lazy:+-lazy}.log" 2>&1
  echo "exit $?"; grep -E "^test result|FAILED|skipped" "$OUT/collective-$mode${lazy:+-lazy}.log" | head -6
done
echo "##### round check on GPU 0 ($(( $(date +%s) - start )) s)"
CUDA_VISIBLE_DEVICES=0 CAPI_OVERHEAD=0 BUDGET=$(( ${TOTAL:-560} - ${PEERS_S:-0} - ($(date +%s) - start) )) OUT=$OUT/round bash devbin/round-check.sh
if [ -d devpeers ]; then
  echo "##### peers ($(( $(date +%s) - start )) s)"
  CUDA_VISIBLE_DEVICES=0 timeout $(( ${TOTAL:-560} - ($(date +%s) - start) )) bash devpeers/run.sh > "$OUT/peers.txt" 2>&1; echo "exit $?"; tail -40 "$OUT/peers.txt"
fi
echo "done in $(( $(date +%s) - start )) s"
(cd "$OUT" && tar czf /tmp/final-logs.tgz . && find . -mindepth 1 -delete && mv /tmp/final-logs.tgz .)
