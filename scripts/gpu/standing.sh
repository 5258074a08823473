#!/bin/bash
# Issue 34's one-GPU rows where they stand, in one call on GPU 0: the driver-call probe
# (submit_cost_probe.c) twice, five quick benches, three `peers` runs (the one-call row beside raw
# graph + sync), and the scaling tables (own queue, one queue; raw launches and raw graph launches
# beside; SCALING=0 leaves them out). Logs come back as $OUT/standing.tgz; the summary is printed.
# Usage: bash devbin/standing.sh (carry devbin/ and scripts/gpu/submit_cost_probe.c).
cd "$(dirname "$0")/.."
source devbin/lib.sh
mkdir -p $OUT/s; nvidia-smi -L | head -1; echo "commit $(cat devbin/COMMIT); cores $(nproc)"
export CUDA_VISIBLE_DEVICES=0
gcc -O2 scripts/gpu/submit_cost_probe.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -o /tmp/sc || echo "probe build failed"
for i in 1 2; do timeout "$(left 60)" /tmp/sc > $OUT/s/probe-$i.txt 2>&1; echo "probe $i exit $?"; done
for i in 1 2 3 4 5; do
  timeout "$(left 40)" devbin/bench --driver cuda --quick > $OUT/s/quick-$i.txt 2>/dev/null; echo "quick $i exit $?"
  [ $i -le 3 ] && { timeout "$(left 60)" devbin/peers 0 > $OUT/s/peers-$i.txt 2>&1; echo "peers $i exit $?"; }
done
echo "benches done ($(el))"
[ "${SCALING:-1}" = 1 ] && { timeout "$(left 200)" devbin/bench --driver cuda --scaling > $OUT/s/scaling.txt 2>/dev/null; echo "scaling exit $? ($(el))"; }
python3 devbin/standing_summary.py $OUT/s
tar czf $OUT/standing.tgz -C $OUT s && rm -rf $OUT/s
echo "done ($(el))"
