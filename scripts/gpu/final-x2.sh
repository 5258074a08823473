#!/bin/bash
# The end-of-session checks on a two-GPU machine: the CTS with its devices spread over both GPUs,
# cuda_device and cuda_stalls 5 times each, cuda_indirect 3 times, the other CUDA driver tests, the
# fuzz (30 s, one test at a time), and two quick benches with the cross-device hop between GPUs 0
# and 1. Logs come back as $OUT/logs.tgz. Usage: devbin/final-x2.sh
cd "$(dirname "$0")/.."
source devbin/lib.sh
export NCCL_NVLS_ENABLE=0
echo "commit $(cat devbin/COMMIT)"; nvidia-smi -L
CTEST_CUDA_SPREAD=1 OUT=$OUT/cts CTS_LIMIT=170 bash devbin/cts-run.sh cts 2>&1 | grep -E "^test result|FAILED|panicked" | head -6
echo "spread cts done ($(el))"
cuda_test_env
for t in "cuda_device 5" "cuda_stalls 5" "cuda_indirect 3" "cuda_fault 1" "cuda_completion_modes 1"; do
  repeat_test $t
done
fuzz_for 30
peer_hop_benches
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
echo "done ($(el))"
