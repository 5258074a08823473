#!/bin/bash
# One device call for IREE on the HAL's Vulkan driver (hal-iree's `thal-vulkan`) on NVIDIA's Vulkan,
# then the peers tables. Needs devbin/ with iree/ (thal-iree-run, iree_cts from
# scripts/gpu/iree-cuda-build.sh), vulkan-env.sh and lib.sh; devpeers/; .gl/.
# 1. each program on thal-vulkan against IREE's own vulkan driver (iree-run-module), bit for bit;
# 2. IREE's HAL CTS on thal-vulkan (vulkan-spirv-fb executables);
# 3. the same-module timings: thal-iree-run (thal-vulkan) beside iree-benchmark-module (vulkan);
# 4. the peers tables (CUDA and Vulkan).
cd "$(dirname "$0")/.."
source devbin/lib.sh
echo "commit $(cat devbin/COMMIT); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
link_build_checkout
source devbin/vulkan-env.sh
W=/tmp/iree-wheel; mkdir -p $W && (cd $W && python3 -m zipfile -e "$(ls "$OLDPWD"/devpeers/iree_base_runtime-*.whl)" .)
chmod +x $W/iree/_runtime_libs/*; RUN=$W/iree/_runtime_libs/iree-run-module; BENCH=$W/iree/_runtime_libs/iree-benchmark-module
echo "##### 1. thal-vulkan vs IREE's vulkan driver, bit for bit"
for entry in "${PROGRAMS[@]}"; do
  program "$entry"
  timeout "$(left 30)" $RUN --device=vulkan --module=$P/$name.vulkan.vmfb --function=$func "${ins[@]}" --output=@/tmp/iree_$name.npy > "$OUT/iree-run-$name.txt" 2>&1 || echo "iree-run-module $name failed: $(tail -2 "$OUT/iree-run-$name.txt")"
  timeout "$(left 30)" devbin/iree/thal-iree-run --module $P/$name.vulkan.vmfb --function module.$func "${tins[@]}" --device thal-vulkan --expected @/tmp/iree_$name.npy > "$OUT/thal-$name.txt" 2>&1
  echo "$name: thal-vulkan vs IREE vulkan exit $? (0: bit-exact) $(grep -E 'differs|error' "$OUT/thal-$name.txt" | head -1)"
done
echo "##### 2. IREE's HAL CTS on thal-vulkan ($(el))"
IREE_CTS_DRIVER=thal-vulkan IREE_CTS_EXECUTABLE_FORMAT=vulkan-spirv-fb IREE_CTS_TESTDATA=$PWD/hal-iree/testdata/cts/executables-vulkan \
  timeout "$(left 120)" devbin/iree/iree_cts > "$OUT/iree_cts_vulkan.log" 2>&1; echo "iree-cts exit $? ($(el))"
grep -E "^total|FAILED  \]" "$OUT/iree_cts_vulkan.log" | head -12
echo "##### 3. same module, same GPU: IREE's VM on thal-vulkan vs on IREE's vulkan driver, us/call ($(el))"
printf "%-12s %14s %14s %8s\n" module thal-vulkan iree-vulkan ratio
for entry in "${PROGRAMS[@]}"; do
  program "$entry"
  ours=$(timeout "$(left 30)" devbin/iree/thal-iree-run --module $P/$name.vulkan.vmfb --function module.$func "${tins[@]}" --device thal-vulkan --repeat 500 2>/dev/null | grep "^| thal-vulkan" | awk -F'|' '{gsub(/ /,"",$4); print $4}')
  timeout "$(left 40)" $BENCH --device=vulkan --module=$P/$name.vulkan.vmfb --function=$func "${ins[@]}" --benchmark_repetitions=5 --benchmark_min_time=0.3 > "$OUT/iree-bench-$name.txt" 2>&1
  theirs=$(grep -E "_median" "$OUT/iree-bench-$name.txt" | head -1 | awk '{print $2, $3}')
  tus=$(echo "$theirs" | awk '{v=$1; if ($2=="ms") v*=1000; if ($2=="ns") v/=1000; printf "%.1f", v}')
  printf "%-12s %14s %14s %8s\n" $name "${ours:-?}" "${tus:-?}" "$(python3 -c "print(f'{$ours/$tus:.2f}x')" 2>/dev/null)"
done
echo "##### 4. peers ($(el))"
timeout "$(left 220)" bash devpeers/run.sh --peer-timeout 90 > "$OUT/peers.txt" 2>&1; echo "peers exit $? ($(el))"
grep -vE "^  File|^Thread|^Current thread|^$" "$OUT/peers.txt" | sed -n '/^CUDA: N sub/,/^spread/p' | head -30
echo "done in $(el)"
(cd "$OUT" && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
