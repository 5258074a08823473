#!/bin/bash
# One call on a two-GPU machine: the checks of a build (cuda_indirect six times with hang detection,
# the CTS with its devices spread over the GPUs, the CUDA driver tests, the contract fuzz one test at
# a time), then issue 34's two-GPU rows (the quick bench with its cross-device hop between GPUs 0
# and 1, twice; the all-reduce sweep on two GPUs beside raw NCCL). Logs come back as $OUT/logs.tgz.
# Usage: devbin/verify-x2.sh
cd "$(dirname "$0")/.."
source devbin/lib.sh
export NCCL_NVLS_ENABLE=0
echo "commit $(cat devbin/COMMIT)"; nvidia-smi -L; echo "cores: $(nproc)"
OUT=$OUT bash devbin/hang-backtrace.sh 2>&1 | tail -8; echo "hang check done ($(el))"
CTEST_CUDA_SPREAD=1 OUT=$OUT/cts CTS_LIMIT=170 bash devbin/cts-run.sh cts 2>&1 | grep -E "^test result|passed|FAILED|failed" | tail -4
echo "cts done ($(el))"
cuda_test_env
for t in cuda_device cuda_fault cuda_completion_modes; do
  timeout "$(left 90)" devbin/$t --include-ignored > $OUT/$t.txt 2>&1; echo "$t exit $?: $(grep -E '^test result' $OUT/$t.txt)"
done
fuzz_for 30
peer_hop_benches
timeout "$(left 150)" devbin/allreduce_sweep 2 3 > $OUT/allreduce-2.txt 2>&1; echo "sweep exit $? ($(el))"; tail -14 $OUT/allreduce-2.txt
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
echo "done ($(el))"
