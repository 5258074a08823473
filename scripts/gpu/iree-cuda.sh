#!/bin/bash
# One device call for IREE on the HAL's CUDA driver (hal-iree's `thal-cuda`), then the Vulkan
# per-pair barrier A/B. Needs devbin/ with: iree/ (thal-iree-run, cuda_programs, iree_cts, made by
# scripts/gpu/iree-cuda-build.sh), cuda_device, cts, bench, bench_vk_before, vulkan-env.sh, lib.sh, vk_ab.py; devpeers/
# (IREE's runtime wheel: its cuda driver, iree-run-module and iree-benchmark-module); .gl/.
# Steps, each with what is left of a 580 s budget:
# 1. driver-cuda: the new pinned-import test and the CTS's imported-memory cases;
# 2. hal-iree's CUDA tests: the four programs on thal-cuda against IREE's CPU output;
# 3. each program on thal-cuda against IREE's own cuda driver (iree-run-module), bit for bit;
# 4. IREE's HAL CTS on thal-cuda (PTXE executables from testdata/cts/executables-cuda);
# 5. the same-module timings: thal-iree-run (thal-cuda) beside iree-benchmark-module (cuda);
# 6. `bench --driver vulkan --quick` before/after (3 each, alternating; VULKAN=0 leaves it out).
cd "$(dirname "$0")/.."
source devbin/lib.sh
echo "commit $(cat devbin/COMMIT); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
link_build_checkout
N=$(ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null | head -1); mkdir -p /tmp/nv && ln -sf "$N" /tmp/nv/libnvrtc.so
export LD_LIBRARY_PATH=/tmp/nv:$(dirname "$N"):$LD_LIBRARY_PATH HAL_REQUIRE_CUDA=1
W=/tmp/iree-wheel; mkdir -p $W && (cd $W && python3 -m zipfile -e "$(ls "$OLDPWD"/devpeers/iree_base_runtime-*.whl)" .)
chmod +x $W/iree/_runtime_libs/*; RUN=$W/iree/_runtime_libs/iree-run-module; BENCH=$W/iree/_runtime_libs/iree-benchmark-module
echo "##### 1. driver-cuda imports"
timeout "$(left 60)" devbin/cuda_device --include-ignored --test-threads=1 ranges_of_pinned_buffers 2>&1 | grep -E "^test |test result|panicked" | head -5
timeout "$(left 60)" devbin/cts --include-ignored imported_memory 2>&1 | grep -E "test result|FAILED|panicked" | head -5
echo "##### 2. hal-iree CUDA programs vs IREE's CPU output ($(el))"
timeout "$(left 90)" devbin/iree/cuda_programs --include-ignored --test-threads=1 --nocapture > "$OUT/cuda_programs.log" 2>&1; echo "exit $?"
grep -E "^test |test result|panicked|thal-cuda:" "$OUT/cuda_programs.log" | head -14
echo "##### 3. thal-cuda vs IREE's cuda driver, bit for bit ($(el))"
for entry in "${PROGRAMS[@]}"; do
  program "$entry"
  timeout "$(left 30)" $RUN --device=cuda --module=$P/$name.cuda.vmfb --function=$func "${ins[@]}" --output=@/tmp/iree_$name.npy > "$OUT/iree-run-$name.txt" 2>&1 || echo "iree-run-module $name failed: $(tail -2 "$OUT/iree-run-$name.txt")"
  timeout "$(left 30)" devbin/iree/thal-iree-run --module $P/$name.cuda.vmfb --function module.$func "${tins[@]}" --device thal-cuda --expected @/tmp/iree_$name.npy > "$OUT/thal-$name.txt" 2>&1
  echo "$name: thal-cuda vs IREE cuda exit $? (0: bit-exact) $(grep -E 'differs|error' "$OUT/thal-$name.txt" | head -1)"
done
echo "##### 4. IREE's HAL CTS on thal-cuda ($(el))"
IREE_CTS_DRIVER=thal-cuda IREE_CTS_EXECUTABLE_FORMAT=PTXE IREE_CTS_TESTDATA=$PWD/hal-iree/testdata/cts/executables-cuda \
  timeout "$(left 150)" devbin/iree/iree_cts > "$OUT/iree_cts_cuda.log" 2>&1; echo "iree-cts exit $? ($(el))"
grep -E "iree-cts:|^suite|^[A-Za-z_/]+ +[0-9]+ +[0-9]+ +[0-9]+|total|FAILED  \]|PASSED|SKIPPED" "$OUT/iree_cts_cuda.log" | head -40
echo "##### 5. same module, same GPU: IREE's VM on thal-cuda vs on IREE's cuda driver, us/call ($(el))"
printf "%-12s %14s %14s %8s\n" module thal-cuda iree-cuda ratio
for entry in "${PROGRAMS[@]}"; do
  program "$entry"
  ours=$(timeout "$(left 30)" devbin/iree/thal-iree-run --module $P/$name.cuda.vmfb --function module.$func "${tins[@]}" --device thal-cuda --repeat 2000 2>/dev/null | grep "^| thal-cuda" | awk -F'|' '{gsub(/ /,"",$4); print $4}')
  timeout "$(left 40)" $BENCH --device=cuda --module=$P/$name.cuda.vmfb --function=$func "${ins[@]}" --benchmark_repetitions=5 --benchmark_min_time=0.5 > "$OUT/iree-bench-$name.txt" 2>&1
  theirs=$(grep -E "_median" "$OUT/iree-bench-$name.txt" | head -1 | awk '{print $2, $3}')
  tus=$(echo "$theirs" | awk '{v=$1; if ($2=="ms") v*=1000; if ($2=="ns") v/=1000; printf "%.1f", v}')
  printf "%-12s %14s %14s %8s\n" $name "${ours:-?}" "${tus:-?}" "$(python3 -c "print(f'{$ours/$tus:.2f}x')" 2>/dev/null)"
done
if [ "${VULKAN:-1}" != 0 ]; then
echo "##### 6. bench --driver vulkan --quick, before/after the per-pair barriers ($(el))"
source devbin/vulkan-env.sh
vulkan_bench_ab
fi
echo "done in $(el)"
(cd "$OUT" && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
