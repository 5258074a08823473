#!/bin/bash
# One call: how the completion threads' event queries slow a submitting thread. A chain of
# one-dispatch executes (submit_profile cuda chain dispatch) and of alloca pairs with the queries
# 10 us (default), 100 us and 1000 us apart and with blocking completion, three rounds alternating;
# then a quick bench at 10 and at 1000. Usage: bash devbin/poll-exp.sh (carry devbin/).
cd "$(dirname "$0")/.."
source devbin/lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
for r in 1 2 3; do
  for w in "chain dispatch" "alloca empty"; do
    for p in 10 100 1000 blocking; do
      if [ $p = blocking ]; then e="HAL_CUDA_COMPLETION=blocking"; else e="HAL_CUDA_POLL_US=$p"; fi
      echo "round $r $p: $(env $e timeout "$(left 30)" devbin/submit_profile cuda $w 200000 2>&1 | tail -1)"
    done
  done
done | tee $OUT/poll.txt
for p in 10 1000; do
  HAL_CUDA_POLL_US=$p timeout "$(left 60)" devbin/bench --driver cuda --quick > $OUT/quick-poll$p.txt 2>&1
  echo "quick poll $p: $?"; grep -E '^(dependent chain|1-dispatch command|queue_alloca|cross-queue|host round)' -A0 $OUT/quick-poll$p.txt
done
echo "done ($(el))"
