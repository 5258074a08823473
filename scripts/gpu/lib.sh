#!/bin/bash
# Sourced by the one-call device scripts (iree-cuda.sh, iree-vulkan.sh, vulkan-ab-peers.sh,
# ab-vulkan-stencil-peers.sh): a time budget for the call and the Vulkan before/after bench loop.
# Usage: `source devbin/lib.sh` from the repository root on the GPU machine (the scripts cd there
# first; build.sh copies this file into devbin/ with the other scripts).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); BUDGET=${BUDGET:-580}
# The smaller of $1 seconds and what is left of the budget.
left() { local l=$(( BUDGET - ($(date +%s) - start) )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
# Seconds since the call started.
el() { echo "$(( $(date +%s) - start )) s"; }
# `bench --driver vulkan --quick` of devbin/bench_vk_before and devbin/bench alternating, 3 each,
# then the rows side by side (vk_ab.py). Needs the Vulkan environment (vulkan-env.sh) sourced.
vulkan_bench_ab() {
  local i v b
  for i in 1 2 3; do
    for v in before after; do
      b=devbin/bench; [ $v = before ] && b=devbin/bench_vk_before
      timeout "$(left 40)" $b --driver vulkan --quick > "$OUT/bench-vulkan-$v-$i.txt" 2>/dev/null
    done
  done
  python3 devbin/vk_ab.py "$OUT" 2>&1 | head -30
}
