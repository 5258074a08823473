#!/bin/bash
# The end-of-session checks on a two-GPU machine: the CTS with its devices spread over both GPUs,
# cuda_device and cuda_stalls 5 times each, cuda_indirect 3 times, the other CUDA driver tests, the
# fuzz (30 s, one test at a time), and two quick benches with the cross-device hop between GPUs 0
# and 1. Logs come back as $OUT/logs.tgz. Usage: devbin/final-x2.sh
cd "$(dirname "$0")/.."
source devbin/lib.sh
export NCCL_NVLS_ENABLE=0
echo "commit $(cat devbin/COMMIT)"; nvidia-smi -L
CTEST_CUDA_SPREAD=1 OUT=$OUT/cts CTS_LIMIT=170 bash devbin/cts-run.sh cts 2>&1 | grep -E "^test result|FAILED|panicked" | head -6
echo "spread cts done ($(el))"
cuda_test_env
for t in "cuda_device 5" "cuda_stalls 5" "cuda_indirect 3" "cuda_fault 1" "cuda_completion_modes 1"; do
  read -r name times <<<"$t"; f=0
  for i in $(seq $times); do
    timeout 60 devbin/$name --include-ignored > $OUT/$name-$i.txt 2>&1 || { f=$((f+1)); grep -E "panicked" -A1 $OUT/$name-$i.txt | head -4; }
  done
  echo "$name: $f of $times failed; $(grep -E '^test result' $OUT/$name-1.txt)"
done
HAL_FUZZ_SECONDS=30 timeout "$(left 150)" devbin/contract_fuzz --include-ignored --test-threads=1 > $OUT/fuzz.txt 2>&1
echo "fuzz exit $?: $(grep -E '^test result' $OUT/fuzz.txt) ($(el))"
for i in 1 2; do
  timeout "$(left 60)" devbin/bench --driver cuda --quick --peer-ordinal 1 > $OUT/bench-peer1-$i.txt 2>/dev/null
  echo "bench $i exit $?"; grep -E "cross-|chain, empty|command buffer, chained|alloca \+ dealloca \(" $OUT/bench-peer1-$i.txt | cut -c1-120
done
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
echo "done ($(el))"
