#!/bin/bash
# On the GPU machine: the Vulkan CTS (devbin/vulkan_cts, built by build.sh) on NVIDIA's Vulkan driver,
# the driver's own tests, then `hal run --device vulkan` (the stencil, bit-exact against the CPU).
# The machine has NVIDIA's driver but no Vulkan loader: carry the loader and the GL vendor-neutral
# packages it needs (libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2, fetched as .debs
# into .gl/ on the build machine) and this script unpacks them first. Usage: devbin/vulkan-run.sh
set -u
cd "$(dirname "$0")/.."
if [ -d .gl ] && ! ldconfig -p | grep -q libvulkan.so.1; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then
  export VK_DRIVER_FILES=$icd
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
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
