#!/bin/bash
# The C API on the GPU: the C test suite (hal-c/tests/c/thal_tests.c) against `cuda`, then the
# C-layer overhead bench (hal-c/examples/c_overhead.rs) on cuda and on cpu-sim.
#
#   bash scripts/gpu/capi-run.sh build   # here: release libthal.so, thal_tests, the bench, into devbin/capi/
#   bash devbin/capi-run.sh              # there (devbin/ carried along): everything below, logs under $OUT
#
# The kernels come as CUDA C (hal-c/tests/c/kernels.cu), compiled to PTX there with nvcc (the
# cpu-sim build of the same kernels is kernels.c). Without nvcc the kernel tests report it and fail.
set -u
if [ "${1:-}" = build ]; then
  set -e
  cd "$(dirname "$0")/../.."
  cargo build --release -p timeline-hal-c --lib --example c_overhead 2>&1 | tail -1
  release=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)/release
  mkdir -p devbin/capi
  cp "$release"/libthal.so "$release"/examples/c_overhead hal-c/tests/c/kernels.cu devbin/capi/
  # The test program finds libthal.so beside itself ($ORIGIN), wherever devbin/ lands.
  cc -std=gnu11 -O1 -g -Wall -Wextra -Werror -Ihal-c/include hal-c/tests/c/thal_tests.c -o devbin/capi/thal_tests \
     -Ldevbin/capi -lthal -Wl,-rpath,'$ORIGIN' -lpthread
  cc -shared -fPIC -O1 hal-c/tests/c/kernels.c -o devbin/capi/libthal_test_kernels.so
  strip devbin/capi/libthal.so devbin/capi/c_overhead
  cp scripts/gpu/capi-run.sh devbin/
  git rev-parse --short HEAD > devbin/capi/COMMIT
  du -sh devbin/capi
  exit 0
fi

cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader
echo "commit $(cat capi/COMMIT 2>/dev/null)"
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1)
PTX=$OUT/kernels.ptx
if [ -n "$NVCC" ]; then "$NVCC" -ptx -arch=sm_80 capi/kernels.cu -o "$PTX" || echo "nvcc failed"; else echo "no nvcc: the kernel tests will fail"; fi

TESTS="statuses_and_handles two_queue_pipeline_out_of_order failure_propagation host_call_calls_back_into_the_api
       teardown_from_a_callback binding_tables waits_from_several_threads subspans transient_buffers_and_indirect_dispatch
       host_mappings device_info profiling spirv_executables collectives"
pass=0; fail=0
for driver in cpu-sim cuda; do
  kernels=$([ "$driver" = cuda ] && echo "$PTX" || echo capi/libthal_test_kernels.so)
  for t in $TESTS; do
    if timeout 60 ./capi/thal_tests "$driver" "$kernels" "$t" > "$OUT/capi-$driver-$t.txt" 2>&1; then
      pass=$((pass + 1)); echo "ok $driver $t"
    else
      fail=$((fail + 1)); echo "FAILED $driver $t:"; tail -5 "$OUT/capi-$driver-$t.txt"
    fi
  done
done
echo "C tests: $pass passed, $fail failed"

# CAPI_OVERHEAD=0 skips the overhead bench (a call that has other work to fit in).
if [ "${CAPI_OVERHEAD:-1}" = 1 ]; then
  echo "=== C layer overhead (cuda)"
  timeout 240 ./capi/c_overhead --driver cuda --ops 20000 --trials 15 2>&1 | tee "$OUT/capi-overhead-cuda.txt"
  echo "=== C layer overhead (cpu-sim)"
  timeout 120 ./capi/c_overhead --driver cpu-sim --ops 20000 --trials 9 2>&1 | tee "$OUT/capi-overhead-cpu-sim.txt"
fi
# Keep $OUT to a few files: the per-test logs go into one archive.
tar czf "$OUT/capi-logs.tgz" -C "$OUT" $(cd "$OUT" && ls capi-cpu-sim-*.txt capi-cuda-*.txt) && rm -f "$OUT"/capi-cpu-sim-*.txt "$OUT"/capi-cuda-*.txt
[ "$fail" -eq 0 ]
