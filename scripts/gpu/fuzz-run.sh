#!/bin/bash
# The contract fuzzer on the GPU for FUZZ_SECONDS (default 300) in each completion mode named
# (default: poll, the completion thread, then host-callback). One mode per call keeps each under the
# device machine's 10-minute limit: `bash devbin/fuzz-run.sh poll`, then `... host-callback`.
cd "$(dirname "$0")/.."
nvidia-smi -L
# NVRTC compiles ctest's kernels; cudarc loads it as libnvrtc.so (as in cts-run.sh).
N=$(ls /usr/local/cuda/lib64/libnvrtc.so* /usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so* 2>/dev/null | head -1)
[ -z "$N" ] && N=$(find /usr /opt -name 'libnvrtc.so*' 2>/dev/null | grep -v builtins | head -1)
mkdir -p /tmp/nv && ln -sf "$N" /tmp/nv/libnvrtc.so
export LD_LIBRARY_PATH=/tmp/nv:$(dirname "$N"):$LD_LIBRARY_PATH
# Built without libcuda, the tests are marked ignored: run them anyway, and fail without a GPU.
export HAL_REQUIRE_CUDA=1
seconds=${FUZZ_SECONDS:-300}
modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(poll host-callback)
for mode in "${modes[@]}"; do
  echo "##### contract_fuzz, HAL_CUDA_COMPLETION=$mode, $seconds s"
  HAL_CUDA_COMPLETION=$mode HAL_FUZZ_SECONDS=$seconds timeout $((seconds + 120)) \
    devbin/contract_fuzz --include-ignored --nocapture --test-threads=1 2>&1 | tail -40
done
