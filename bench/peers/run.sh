#!/bin/bash
# Runs the peers tables on the GPU machine from devpeers/ (see prepare.sh); one GPU, ORDINAL (0):
# CUDA (HAL, raw CUDA, PyTorch, IREE cuda), then Vulkan (HAL Vulkan, raw Vulkan, IREE vulkan).
# VULKAN=0 leaves the Vulkan table out; VULKAN_ORDINAL picks the GPU in the Vulkan loader's order.
cd "$(dirname "$0")"
echo "commit $(cat COMMIT 2>/dev/null)"
vulkan=()
if [ "${VULKAN:-1}" != 0 ]; then
  # The Vulkan loader from .gl/ and NVIDIA's ICD, as for the Vulkan tests.
  source ./vulkan-env.sh
  vulkan=(--hal-vulkan --vmfb-vulkan step_vulkan.vmfb --vulkan-ordinal "${VULKAN_ORDINAL:-${ORDINAL:-0}}" --iree-vulkan-quick)
fi
python3 peers.py --hal ./peers --vmfb step_sm80.vmfb --iree-wheel iree_base_runtime-*.whl --ordinal "${ORDINAL:-0}" \
  "${vulkan[@]}" "$@"
