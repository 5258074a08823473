#!/bin/bash
# One device call: the Vulkan recorder changes checked and timed, then the peers tables.
# 1. the Vulkan CTS on the GPU (the recording is what changed);
# 2. `bench --driver vulkan --quick`, devbin/bench_vk_before and devbin/bench alternating, 3 each;
# 3. the peers tables (CUDA: HAL, raw, PyTorch, IREE cuda; Vulkan: HAL, raw, IREE vulkan), each peer
#    in its own process.
# Needs devbin/ (bench, bench_vk_before, vulkan_cts, vulkan-env.sh, lib.sh, vk_ab.py), devpeers/, .gl/.
cd "$(dirname "$0")/.."
source devbin/lib.sh
echo "commit $(cat devbin/COMMIT); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
source devbin/vulkan-env.sh
export HAL_REQUIRE_VULKAN=1
echo "##### 1. Vulkan CTS"
timeout "$(left 120)" devbin/vulkan_cts --include-ignored --test-threads=8 > "$OUT/vulkan_cts.log" 2>&1; echo "exit $? ($(el))"
grep -E "test result|FAILED|panicked" "$OUT/vulkan_cts.log" | head -8
echo "##### 2. bench --driver vulkan --quick, before/after ($(el))"
vulkan_bench_ab
echo "##### 3. peers ($(el))"
timeout "$(left 200)" bash devpeers/run.sh --peer-timeout 90 > "$OUT/peers.txt" 2>&1; echo "peers exit $? ($(el))"
grep -vE "^  File|^Thread|^Current thread|^$" "$OUT/peers.txt" | tail -42
echo "done in $(el)"
(cd "$OUT" && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
