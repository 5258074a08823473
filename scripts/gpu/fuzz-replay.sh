#!/bin/bash
# Replays one contract-fuzz seed (SEED, FAMILIES) with the build before (devbin/base/contract_fuzz)
# three times and the build after (devbin/contract_fuzz) twice, then fuzzes the after build for
# SECONDS (default 60). Usage: SEED=... FAMILIES=... bash devbin/fuzz-replay.sh (carry devbin/).
cd "$(dirname "$0")/.."
source devbin/lib.sh
cuda_test_env
for run in base/contract_fuzz base/contract_fuzz base/contract_fuzz contract_fuzz contract_fuzz; do
  HAL_FUZZ_SEED=$SEED HAL_FUZZ_FAMILIES=$FAMILIES timeout "$(left 60)" devbin/$run --include-ignored --test-threads=1 contract_fuzz --exact > $OUT/replay.txt 2>&1
  echo "$run replay exit $?: $(grep -E '^test result' $OUT/replay.txt) $(grep -m1 -E '^step' $OUT/replay.txt | cut -c1-150)"
done
HAL_FUZZ_SECONDS=${SECONDS_FUZZ:-60} timeout "$(left 200)" devbin/contract_fuzz --include-ignored --test-threads=1 > $OUT/fuzz.txt 2>&1
echo "fuzz exit $?: $(grep -E '^test result' $OUT/fuzz.txt) ($(el))"; grep -E '^step|seed .* failed' $OUT/fuzz.txt | head -4
