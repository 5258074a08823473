#!/bin/bash
# The CUDA CTS on the device machine. Usage: devbin/cts-run.sh [cts] [racecheck] [synccheck] [memcheck]
# cts: the whole suite, one child process per case; sanitizers: in-process (CTEST_ISOLATE=0), one
# test thread, without the deliberate-fault and deliberate-bad-input cases, in parallel, and without
# indirect_dispatch: its queue's stream waits for a kernel launched later on a side stream, and those
# cases hung under racecheck (both completion modes) and under synccheck with host callbacks at
# 15f3c20 (a tool that serializes kernels never runs the side stream's kernel; see docs/conformance.md);
# and without the two profiling cases that hold kernels to their lengths (racecheck made every
# kernel take about 5 ms at 64d5247).
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
N=$(ls /usr/local/cuda/lib64/libnvrtc.so* /usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so* 2>/dev/null | head -1)
[ -z "$N" ] && N=$(find /usr /opt -name 'libnvrtc.so*' 2>/dev/null | grep -v builtins | head -1)
echo "nvrtc: $N"
mkdir -p /tmp/nv && ln -sf "$N" /tmp/nv/libnvrtc.so
export LD_LIBRARY_PATH=/tmp/nv:$(dirname "$N"):$LD_LIBRARY_PATH
export PATH=$PATH:/usr/local/cuda/bin
# The binaries were built without libcuda, so every CUDA test is marked ignored: each run below
# passes --include-ignored, and a missing GPU or NVRTC fails the tests instead of passing as "not run".
export HAL_REQUIRE_CUDA=1
CTS_LIMIT=${CTS_LIMIT:-180}; SAN_LIMIT=${SAN_LIMIT:-240}
SKIP="--skip indirect_dispatch:: --skip profiling::dispatches_recorded_with_command_indices --skip profiling::indirect_and_directly_replayed_dispatches --skip failure::fault_ --skip device_works_after_fault --skip repeated_faults --skip idle_after_failures --skip unloadable_sources_refused"
counts() {  # per-area pass/fail from a libtest log
  grep -oE "^test cuda::[a-z_]+::[a-z_0-9]+ \.\.\. (ok|FAILED)" "$1" | awk '{split($2,a,"::"); if ($4=="ok") p[a[2]]++; else f[a[2]]++; n[a[2]]++}
    END {for (k in n) printf "%-16s %4d passed %4d failed\n", k, p[k], f[k]}' | sort
}
status=0
for what in "$@"; do
  case $what in
  cts)
    echo "=== CTS (isolated, 4 threads)"; start=$(date +%s)
    timeout $CTS_LIMIT ./devbin/cts --include-ignored --test-threads=4 --nocapture > $OUT/cts.log 2>&1; rc=$?
    echo "=== CTS exit $rc after $(( $(date +%s) - start )) s"; [ $rc -ne 0 ] && status=1
    grep -E "^test result|sticky-fault variant|^failures:|panicked|^    cuda::" $OUT/cts.log | cut -c1-600
    counts $OUT/cts.log | tee $OUT/cts-areas.txt ;;
  stress)
    echo "=== stress: queue_ops and submission in-process, 20 rounds"; fails=0
    for i in $(seq 1 20); do
      CTEST_ISOLATE=0 timeout 60 ./devbin/cts --include-ignored --test-threads=1 cuda::queue_ops:: cuda::submission:: > $OUT/stress-round.log 2>&1 \
        || { fails=$((fails+1)); grep -E "failed:" $OUT/stress-round.log | head -3; cp $OUT/stress-round.log $OUT/stress-fail.log; }
    done; rm -f $OUT/stress-round.log; echo "=== stress: $fails of 20 rounds failed"; [ $fails -ne 0 ] && status=1 ;;
  device)
    for t in cuda_device cuda_fault; do
      timeout 90 ./devbin/$t --include-ignored --test-threads=1 > $OUT/$t.log 2>&1; echo "=== $t exit $?"; grep -E "^test |test result" $OUT/$t.log
    done ;;
  racecheck|synccheck|memcheck)
    ( start=$(date +%s)
      CTEST_ISOLATE=0 timeout $SAN_LIMIT compute-sanitizer --tool $what --print-limit 50 \
        ./devbin/cts --include-ignored --test-threads=1 $SKIP > $OUT/sanitizer-$what.log 2>&1
      echo "=== compute-sanitizer $what exit $? after $(( $(date +%s) - start )) s" >> $OUT/sanitizer-$what.log ) & ;;
  esac
done
wait
for f in $OUT/sanitizer-*.log; do
  [ -e "$f" ] || continue
  echo "=== $f"; grep -E "SUMMARY|^test result|=== compute|FAILED|panicked" "$f" | head -20
  counts "$f"
done
exit $status
