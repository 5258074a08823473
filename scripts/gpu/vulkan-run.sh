#!/bin/bash
# On the GPU machine: the Vulkan CTS (devbin/vulkan_cts, built by build.sh) on NVIDIA's Vulkan driver,
# the driver's own tests, then `hal run --device vulkan` (the stencil, bit-exact against the CPU).
# The Vulkan loader comes from .gl/ (see vulkan-env.sh, copied beside this script by build.sh).
# Usage: devbin/vulkan-run.sh
set -u
source "$(dirname "$0")/vulkan-env.sh"
cd "$(dirname "$0")/.."
export HAL_REQUIRE_VULKAN=1
status=0
echo "== hal devices"
devbin/hal devices 2>&1 | sed -n '/^vulkan/,$p'
echo "== Vulkan CTS"
# The whole log is kept (per-area counts, skipped cases with their reasons); its tail shown here.
devbin/vulkan_cts --include-ignored --test-threads=4 --nocapture > "${OUT:-/tmp}/vulkan_cts.log" 2>&1 || status=1
tail -40 "${OUT:-/tmp}/vulkan_cts.log"
echo "== Vulkan driver tests"
devbin/vulkan_vulkan_device 2>&1 | tail -8 || status=1
echo "== Vulkan binding tables (replayed where the device has update-after-bind descriptors)"
devbin/vulkan_binding_tables 2>&1 | tail -10 || status=1
echo "== hal run --device vulkan"
devbin/hal run --device vulkan || status=1
exit $status
