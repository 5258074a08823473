#!/bin/bash
# Issue 34's multi-GPU rows in one device call: the all-reduce sweep (HAL queue and command buffer
# beside raw NCCL in the same process) and PyTorch's all-reduce on 2 GPUs and, where the machine has
# them, 4; the cross-device hop between GPUs 0 and 1; the scaling tables on GPU 0 with the default
# completion and, as a diagnostic, with completion threads querying 10x less often. Logs under $OUT.
cd "$(dirname "$0")/.."
source devbin/lib.sh
export NCCL_NVLS_ENABLE=0
GPUS=$(nvidia-smi -L | wc -l)
nvidia-smi -L; nvidia-smi topo -m | head -6; echo "cores: $(nproc)"
for ranks in 2 4; do
  [ "$ranks" -gt "$GPUS" ] && continue
  timeout "$(left 150)" devbin/allreduce_sweep $ranks 3 > $OUT/allreduce-$ranks.txt 2>&1; echo "sweep $ranks exit $? ($(el))"
  tail -14 $OUT/allreduce-$ranks.txt
  timeout "$(left 120)" python3 devbin/allreduce_torch.py $ranks 3 > $OUT/torch-$ranks.txt 2>&1; echo "torch $ranks exit $? ($(el))"
  tail -14 $OUT/torch-$ranks.txt
done
timeout "$(left 120)" devbin/bench --driver cuda --quick --peer-ordinal 1 > $OUT/bench-peer1.txt 2>/dev/null; echo "bench peer exit $? ($(el))"
grep -iE "cross-device|cross-queue" $OUT/bench-peer1.txt | cut -c1-200
for variant in default poll100; do
  env=(); [ $variant = poll100 ] && env=(HAL_CUDA_POLL_US=100)
  env "${env[@]}" CUDA_VISIBLE_DEVICES=0 timeout "$(left 120)" devbin/bench --driver cuda --scaling > $OUT/scaling-$variant.txt 2>/dev/null
  echo "scaling $variant exit $? ($(el))"; cut -c1-170 $OUT/scaling-$variant.txt | grep -vE "^$" | tail -30
done
