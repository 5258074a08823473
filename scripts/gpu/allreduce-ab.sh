#!/bin/bash
# Small all-reduces (8 B to 32 KiB) on two GPUs, the build before (devbin/base/allreduce_sweep) and
# after (devbin/allreduce_sweep) alternating, three processes each; prints each run's ratio columns.
# Usage: bash devbin/allreduce-ab.sh (carry devbin/).
cd "$(dirname "$0")/.."
source devbin/lib.sh
export NCCL_NVLS_ENABLE=0
nvidia-smi -L | head -2; echo "commit $(cat devbin/COMMIT)"
for i in 1 2 3; do
  for which in before after; do
    b=devbin/allreduce_sweep; [ $which = before ] && b=devbin/base/allreduce_sweep
    timeout "$(left 60)" $b 2 3 32768 > $OUT/ar-$which-$i.txt 2>&1; echo "$which $i exit $?"
    awk 'NR>2 && NF>10 {printf "  %8s raw %6s queue %6s cb %6s  %s %s\n", $1, $3, $4, $5, $9, $10}' $OUT/ar-$which-$i.txt | head -6
  done
done
echo "done ($(el))"
