#!/bin/bash
# Sourced on the GPU machine before anything that opens Vulkan (vulkan-run.sh, the peers table):
# the machine has NVIDIA's driver but no Vulkan loader, so the loader and the GL vendor-neutral
# packages it needs (libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2, fetched as
# .debs into .gl/ on the build machine, beside devbin/ and devpeers/) are unpacked first, and the
# loader is pointed at NVIDIA's ICD. Usage: source devbin/vulkan-env.sh (from any directory).
gl_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.gl"
if [ -d "$gl_dir" ] && ! ldconfig -p | grep -q libvulkan.so.1; then
  for f in "$gl_dir"/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then
  export VK_DRIVER_FILES=$icd
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
unset gl_dir icd
