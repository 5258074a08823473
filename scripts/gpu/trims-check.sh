#!/bin/bash
# One call on one GPU for the submission-path trims: the CUDA CTS, cuda_device, cuda_indirect (its
# graph launches with indirect nodes go through the counted FIFO), cuda_completion_modes, cuda_fault,
# the fuzz (30 s); then the driver-call probe, five quick benches of devbin/base (the build before)
# and devbin (after) alternating with three `peers` runs each, and the scaling tables of both while
# the budget lasts. Logs come back as $OUT/logs.tgz; summaries are printed.
# Usage: BUDGET=580 bash devbin/trims-check.sh (carry devbin/ and scripts/gpu/submit_cost_probe.c).
cd "$(dirname "$0")/.."
source devbin/lib.sh
echo "commit $(cat devbin/COMMIT)"; nvidia-smi -L | head -1
export CUDA_VISIBLE_DEVICES=0
OUT=$OUT/cts CTS_LIMIT=170 bash devbin/cts-run.sh cts 2>&1 | grep -E "^test result|FAILED|panicked" | head -8
echo "cts done ($(el))"
cuda_test_env
for t in "cuda_device 2" "cuda_indirect 2" "cuda_completion_modes 1" "cuda_fault 1"; do repeat_test $t; done
fuzz_for 30
for c in round_trip_probe free_stall_probe; do gcc -fsyntax-only scripts/gpu/$c.c -I/usr/local/cuda/include || echo "$c does not compile"; done
gcc -O2 scripts/gpu/submit_cost_probe.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -o /tmp/sc \
  && timeout "$(left 40)" /tmp/sc > $OUT/probe.txt 2>&1; echo "probe exit $? ($(el))"; cat $OUT/probe.txt
mkdir -p $OUT/before $OUT/after
for i in 1 2 3 4 5; do
  for which in before after; do
    d=devbin; [ $which = before ] && d=devbin/base
    timeout "$(left 40)" $d/bench --driver cuda --quick > $OUT/$which/quick-$i.txt 2>/dev/null || echo "bench $which $i exit $?"
    [ $i -le 3 ] && { timeout "$(left 60)" $d/peers 0 > $OUT/$which/peers-$i.txt 2>&1 || echo "peers $which $i exit $?"; }
  done
done
echo "benches done ($(el))"
for which in before after; do python3 devbin/standing_summary.py $OUT/$which 2>&1 | sed -n '1,16p'; done
for which in after before; do
  d=devbin; [ $which = before ] && d=devbin/base
  [ "$(left 100)" -lt 60 ] && break
  timeout "$(left 90)" $d/bench --driver cuda --scaling > $OUT/$which/scaling.txt 2>/dev/null; echo "scaling $which exit $? ($(el))"
  grep -A7 "own queue" $OUT/$which/scaling.txt | cut -c1-120
done
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
echo "done ($(el))"
