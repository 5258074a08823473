#!/bin/bash
# A short call on one GPU: the CUDA CTS, cuda_device and cuda_stalls three times each, and the
# fuzz (20 s). Logs come back as $OUT/logs.tgz. Usage: devbin/trim-check.sh
cd "$(dirname "$0")/.."
source devbin/lib.sh
echo "commit $(cat devbin/COMMIT)"; nvidia-smi -L
OUT=$OUT/cts CTS_LIMIT=170 bash devbin/cts-run.sh cts 2>&1 | grep -E "^test result|FAILED|panicked|^resources" | head -8
echo "cts done ($(el))"
cuda_test_env
for t in cuda_device cuda_stalls; do
  f=0
  for i in 1 2 3; do
    timeout 60 devbin/$t --include-ignored > $OUT/$t-$i.txt 2>&1 || { f=$((f+1)); grep -E "panicked" -A1 $OUT/$t-$i.txt | head -4; }
  done
  echo "$t: $f of 3 failed; $(grep -E '^test result' $OUT/$t-1.txt)"
done
HAL_FUZZ_SECONDS=20 timeout "$(left 120)" devbin/contract_fuzz --include-ignored --test-threads=1 > $OUT/fuzz.txt 2>&1
echo "fuzz exit $?: $(grep -E '^test result' $OUT/fuzz.txt) ($(el))"
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
echo "done ($(el))"
