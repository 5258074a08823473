#!/bin/bash
# One device call: the Vulkan barrier change and the cpu-sim runner-slot change, each before/after
# on this machine, then the peers tables. Needs devbin/ (bench, bench_vk_before, hal, hal_before,
# vulkan_cts, vulkan-env.sh, lib.sh, vk_ab.py), devpeers/ and .gl/. Steps:
# 1. the Vulkan CTS (after) on the GPU;
# 2. `bench --driver vulkan --quick`, before and after alternating, 3 processes each (the rows of
#    dispatch-heavy command buffers printed side by side);
# 3. the cpu-sim stencil 2048^2 x 300 steps on 1, 2, 4, 8, all cores, before and after alternating;
# 4. the peers tables (CUDA and Vulkan), each peer in its own process with a time limit, and IREE's
#    own iree-run-module on its vulkan driver as a check of that runtime on this machine.
cd "$(dirname "$0")/.."
source devbin/lib.sh
echo "commit $(cat devbin/COMMIT); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $(nproc) cores"
source devbin/vulkan-env.sh
export HAL_REQUIRE_VULKAN=1
echo "##### Vulkan CTS (after)"
timeout "$(left 120)" devbin/vulkan_cts --include-ignored --test-threads=8 > "$OUT/vulkan_cts.log" 2>&1; echo "exit $? ($(el))"
grep -E "test result|FAILED|panicked" "$OUT/vulkan_cts.log" | head -8
echo "##### bench --driver vulkan --quick, before/after alternating ($(el))"
vulkan_bench_ab
echo "##### cpu-sim stencil 2048^2 x 300, wall s, before/after alternating ($(el))"
n=$(nproc)
printf "%6s %8s %8s %8s %8s\n" cores before after before after
for c in 1 2 4 8 $n; do
  [ "$c" -gt "$n" ] && continue
  line="$(printf "%6s" $c)"
  for v in before after before after; do
    b=devbin/hal; [ $v = before ] && b=devbin/hal_before
    w=$(timeout "$(left 30)" taskset -c 0-$((c - 1)) $b run --size 2048 --steps 300 --no-check 2>&1 | grep -oE "wall time: +[0-9.]+" | grep -oE "[0-9.]+$")
    line="$line $(printf "%8s" "${w:-?}")"
  done
  echo "$line"
done
timeout "$(left 40)" devbin/hal run --size 2048 --steps 300 > "$OUT/stencil-check.txt" 2>&1
grep -E "check:|wall time" "$OUT/stencil-check.txt"
echo "##### peers ($(el))"
timeout "$(left 240)" bash devpeers/run.sh --peer-timeout 90 > "$OUT/peers.txt" 2>&1; echo "peers exit $? ($(el))"; cat "$OUT/peers.txt" | tail -45
echo "##### IREE's iree-run-module on its vulkan driver ($(el))"
mkdir -p /tmp/iree-wheel && (cd /tmp/iree-wheel && python3 -m zipfile -e "$(ls "$OLDPWD"/devpeers/iree_base_runtime-*.whl)" . )
chmod +x /tmp/iree-wheel/iree/_runtime_libs/iree-run-module
timeout "$(left 40)" /tmp/iree-wheel/iree/_runtime_libs/iree-run-module --device=vulkan --module=devpeers/step_vulkan.vmfb \
  --function=step --input=1024xf32=0 > "$OUT/iree-run-vulkan.txt" 2>&1; echo "iree-run-module vulkan exit $?"; tail -c 600 "$OUT/iree-run-vulkan.txt"
echo "done in $(el)"
(cd "$OUT" && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
