#!/bin/bash
# The scaling tables (each thread on its own queue) of two builds alternating, twice each: devbin/bench
# and devbin/k2/bench (one-node graph launches allowed from two threads at once instead of one).
# Usage: bash devbin/graph-launchers.sh (carry devbin/).
cd "$(dirname "$0")/.."
source devbin/lib.sh
nvidia-smi -L | head -1; echo "cores $(nproc)"
for i in 1 2; do
  for which in k1 k2; do
    b=devbin/bench; [ $which = k2 ] && b=devbin/k2/bench
    timeout "$(left 60)" $b --driver cuda --scaling > $OUT/scaling-$which-$i.txt 2>/dev/null; echo "$which $i exit $? ($(el))"
    grep -A7 "own queue" $OUT/scaling-$which-$i.txt | tail -6 | cut -c1-100
  done
done
