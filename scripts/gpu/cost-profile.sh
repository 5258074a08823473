#!/bin/bash
# One call: what a submission's driver calls cost (submit_cost_probe.c), three quick benches, and
# where the HAL's chained one-dispatch buffer and alloca pair spend their time (profile.sh).
# Usage: bash devbin/cost-profile.sh (carry devbin/, devperf/ and scripts/gpu/submit_cost_probe.c).
cd "$(dirname "$0")/.."
source devbin/lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
gcc -O2 scripts/gpu/submit_cost_probe.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -o /tmp/sc \
  && timeout "$(left 90)" /tmp/sc > $OUT/submit_cost.txt 2>&1; echo "probe exit $? ($(el))"; cat $OUT/submit_cost.txt
for i in 1 2 3; do
  timeout "$(left 60)" devbin/bench --driver cuda --quick > $OUT/quick-$i.txt 2>&1; echo "quick $i exit $? ($(el))"
done
for w in "chain dispatch 400000" "alloca empty 400000" "chain empty 1000000"; do
  timeout "$(left 120)" bash devbin/profile.sh $w 2>&1 | tail -40; echo "profile $w done ($(el))"
done
