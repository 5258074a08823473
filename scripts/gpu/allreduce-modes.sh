#!/bin/bash
# The all-reduce sweep on 2 GPUs up to 256 KiB under each completion setting (default, queries 1 ms
# apart, blocking, spin-then-block, the progress word), to see how much of the HAL's small-size gap
# the completion threads account for. Needs devbin/allreduce_sweep.
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
for mode in default poll1000 blocking spin-then-block word default2 word2; do
  env=()
  case $mode in
    poll1000) env=(HAL_CUDA_POLL_US=1000) ;;
    blocking) env=(HAL_CUDA_COMPLETION=blocking) ;;
    spin-then-block) env=(HAL_CUDA_COMPLETION=spin-then-block) ;;
    word*) env=(HAL_CUDA_COMPLETION_WORD=1) ;;
  esac
  echo "== $mode"
  env "${env[@]}" timeout 60 devbin/allreduce_sweep 2 3 262144 2>&1 | tail -7
done
