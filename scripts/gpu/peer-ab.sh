#!/bin/bash
# Two GPUs: quick benches with the cross-device hop between GPUs 0 and 1, devbin/base/bench (before)
# and devbin/bench (after) alternating, ROUNDS (3) each; prints the hop rows of each run.
# Usage: bash devbin/peer-ab.sh (carry devbin/).
cd "$(dirname "$0")/.."
source devbin/lib.sh
export NCCL_NVLS_ENABLE=0
nvidia-smi -L | head -2
for i in $(seq ${ROUNDS:-3}); do
  for which in before after; do
    b=devbin/bench; [ $which = before ] && b=devbin/base/bench
    timeout "$(left 50)" $b --driver cuda --quick --peer-ordinal 1 > $OUT/peer-$which-$i.txt 2>/dev/null; echo "$which $i exit $?"
    grep -E "^(cross-queue|cross-device ping-pong|fan-out)" $OUT/peer-$which-$i.txt | cut -c1-125
  done
done
echo "done ($(el))"
