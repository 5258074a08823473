#!/bin/bash
# The last call of a session, on one GPU: the peers' HAL and raw CUDA rows and the quick bench of a
# before build (BEFORE_DIR/peers_s, BEFORE_DIR/bench) and of devbin/final/peers and devbin/bench
# alternating, three rounds, then the scaling tables of the after build (and of the before build
# while the budget lasts). Logs come back as $OUT/ab.tgz. Usage: BUDGET=330 devbin/final-peers-scaling.sh BEFORE_DIR
cd "$(dirname "$0")/.."
source devbin/lib.sh
B=$1; mkdir -p $OUT/ab; nvidia-smi -L; echo "commit $(cat devbin/COMMIT)"
for i in 1 2 3; do
  for which in before after; do
    p=$B/peers_s; b=$B/bench; [ $which = after ] && { p=devbin/final/peers; b=devbin/bench; }
    timeout "$(left 60)" $p 0 > $OUT/ab/peers-$which-$i.txt 2>&1 || echo "peers $which $i exit $?"
    timeout "$(left 40)" $b --driver cuda --quick > $OUT/ab/$which-$i.txt 2>/dev/null || echo "bench $which $i exit $?"
  done
done
echo "peers and benches done ($(el))"
for which in after before; do
  b=$B/bench; [ $which = after ] && b=devbin/bench
  [ "$(left 400)" -lt 60 ] && break
  timeout "$(left 150)" $b --driver cuda --scaling > $OUT/ab/scaling-$which.txt 2>/dev/null; echo "scaling $which exit $? ($(el))"
done
tar czf $OUT/ab.tgz -C $OUT ab && rm -rf $OUT/ab
echo "done ($(el))"
