#!/bin/bash
# Everything in one device call (about 4-5 minutes; one call saves a machine start per script):
# driver tests, completion modes, chain_costs, submit_profile, the full bench, a traced hal run, the
# CTS in both completion modes with sanitizers, the bench once more with the earlier 100 us polling phase, and the
# perf profile when devperf/ was carried.
# The outputs land under $OUT; a short summary is printed last.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
echo "commit $(cat devbin/COMMIT 2>/dev/null)"
timeout 330 bash devbin/tests-and-bench.sh > $OUT/tests-and-bench.log 2>&1; echo "tests-and-bench exit $?"
timeout 200 bash devbin/cts-both-modes.sh > $OUT/cts-both-modes.log 2>&1; echo "cts-both-modes exit $?"
echo "=== bench full, HAL_CUDA_POLL_BUDGET_US=100 (the earlier default: a 100 us polling phase)"
HAL_CUDA_POLL_BUDGET_US=100 timeout 120 ./devbin/bench --driver cuda > $OUT/bench-cuda-budget100.txt 2>&1; echo "bench budget100 exit $?"
if [ -x devperf/perf ]; then timeout 60 bash devbin/profile.sh chain dispatch > $OUT/profile.log 2>&1; echo "profile exit $?"
  timeout 60 bash devbin/profile.sh chain empty > $OUT/profile-empty.log 2>&1; echo "profile empty exit $?"; fi
echo "===== summary"
grep -E "^=== .* exit|test result" $OUT/tests-and-bench.log | grep -v "exit 0$" | grep -vE "ok\. [0-9]+ passed; 0 failed; 0 ignored" || true
grep -E "MISSED|ok$|completion_wait|allocations per|chained submissions in|vs an event per op|vs graph|empty execute" $OUT/bench-cuda.txt 2>/dev/null | cut -c1-150
grep -E "^(PollThenSleep|HostCallback|Spin)" $OUT/completion_modes.txt 2>/dev/null
grep -E "neighbour|PollThenSleep|Spin" $OUT/chain_costs.txt 2>/dev/null
grep -E "test result|SUMMARY" $OUT/cts-both-modes.log
grep -E "chain|cuLaunchKernel|pthread_mutex|cuEventQuery" $OUT/profile.log 2>/dev/null | head -8
echo "--- HAL_CUDA_POLL_BUDGET_US=100"
grep -E "MISSED|ok$|vs an event per op" $OUT/bench-cuda-budget100.txt 2>/dev/null | cut -c1-150
# A run returns at most 8 files: the bench outputs stay loose, every other log goes into one tarball.
(cd $OUT && rm -f *.data && tar czf /tmp/logs.tgz --exclude='bench-cuda*' . && \
  find . -mindepth 1 -not -name 'bench-cuda*' -delete && mv /tmp/logs.tgz .)
