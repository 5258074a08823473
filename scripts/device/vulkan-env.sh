#!/bin/bash
# The Vulkan environment on the GPU machine, sourced before anything that opens Vulkan (run.sh's
# vulkan suite and --driver vulkan, the peers tables of bench/peers/run.sh). That machine has
# NVIDIA's driver but no Vulkan loader: the loader and the GL vendor-neutral packages it needs
# (libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2, as .debs in .gl/ beside the kit;
# `kit.sh --vulkan-loader` fetches them) are unpacked first, and the loader is pointed at NVIDIA's
# ICD where it exists. Elsewhere (lavapipe, a machine with a loader) it changes nothing.
# Usage: source devbin/vulkan-env.sh (from any directory).
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  echo "usage: source devbin/vulkan-env.sh (sets up the Vulkan loader and ICD; runs nothing)"
  case "${1:-}" in -h|--help) exit 0 ;; *) exit 2 ;; esac
fi
_gl_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.gl"
if [ -d "$_gl_dir" ] && ! ldconfig -p | grep -q libvulkan.so.1; then
  for _deb in "$_gl_dir"/*.deb; do dpkg -x "$_deb" /; done
  ldconfig
fi
_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$_icd" ]; then
  export VK_DRIVER_FILES=$_icd
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
unset _gl_dir _icd _deb
