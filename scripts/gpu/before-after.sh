#!/bin/bash
# Five bench processes of two builds on one machine, alternating (before, after, before, ...), so
# both see the same GPU and host. Usage: devbin/before-after.sh BEFORE_BENCH AFTER_BENCH [--quick]
# Logs: $OUT/ba/{before,after}-N.txt; the rows of issue 18 are printed last, one line a process.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/ba
before=$1; after=$2; shift 2
for i in 1 2 3 4 5; do
  for which in before after; do
    bin=$before; [ $which = after ] && bin=$after
    timeout 150 $bin --driver cuda "$@" > $OUT/ba/$which-$i.txt 2>/dev/null || echo "$which $i exit $?"
  done
done
for row in "empty execute" "chain, 1 dispatch (" "fan-out" "round trip, 1 dispatch (no" "1-dispatch command buffer, chained" "queue_alloca + queue_dealloca (" "vs an event per op" "cross-queue ping-pong" "10-dispatch command buffer, chained" "1 indirect dispatch"; do
  echo "--- $row"
  for which in before after; do
    for i in 1 2 3 4 5; do
      grep -F "$row" $OUT/ba/$which-$i.txt | head -1 | sed "s/^/$which $i: /" | cut -c1-230
    done
  done
done
