#!/bin/bash
# Five quick benches each of devbin/bench (after) and devbin/base/bench (before) alternating, the
# after build first in each round (the order producers-check.sh uses, reversed); prints both
# builds' rows (standing_summary.py). Usage: bash devbin/ab-reversed.sh (carry devbin/).
cd "$(dirname "$0")/.."
source devbin/lib.sh
nvidia-smi -L | head -1
mkdir -p $OUT/before $OUT/after
for i in 1 2 3 4 5; do
  for which in after before; do
    b=devbin/bench; [ $which = before ] && b=devbin/base/bench
    timeout "$(left 40)" $b --driver cuda --quick > $OUT/$which/quick-$i.txt 2>/dev/null || echo "bench $which $i exit $?"
  done
done
for which in before after; do echo "-- $which"; python3 devbin/standing_summary.py $OUT/$which 2>&1 | sed -n '2,13p'; done
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
echo "done ($(el))"
