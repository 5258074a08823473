#!/bin/bash
# Prepares, here (no GPU needed, network for the wheels), what bench/peers/run.sh runs on the GPU
# machine, in devpeers/ (git-ignored, about 20 MiB: carry it, with .gl/ for the Vulkan table):
# - the HAL side: the bench crate's `peers` example, stripped (CUDA driver + raw CUDA, and with
#   `--driver vulkan` the Vulkan driver + raw Vulkan);
# - IREE: step.mlir compiled by iree-compile (iree-base-compiler, installed into a throwaway venv)
#   for CUDA and for Vulkan (SPIR-V), and the iree-base-runtime wheel for the GPU machine's Python
#   (PY, default 3.12), which peers.py unpacks there (the GPU machine has no network);
# - scripts/device/vulkan-env.sh, which run.sh sources to find the Vulkan loader in .gl/.
set -e
cd "$(dirname "$0")/../.."
IREE=${IREE:-3.13.0}; PY=${PY:-3.12}
# Where cargo put the release build (target/, or CARGO_TARGET_DIR when set).
release=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)/release
mkdir -p devpeers
cargo build --release -p bench --example peers 2>&1 | tail -1
cp "$release"/examples/peers devpeers/peers && strip devpeers/peers
cp bench/peers/peers.py bench/peers/run.sh scripts/device/vulkan-env.sh devpeers/
VENV=${VENV:-/tmp/iree-venv}
if [ ! -x "$VENV/bin/iree-compile" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "iree-base-compiler==$IREE"
fi
"$VENV/bin/iree-compile" --iree-hal-target-device=cuda --iree-cuda-target=sm_80 bench/peers/step.mlir \
  -o devpeers/step_sm80.vmfb
# The same add for IREE's vulkan driver, on 1024 floats (IREE imports host arrays, and Vulkan wants
# whole 4 KiB pages), as SPIR-V for an Ampere-class target env (lavapipe runs it too).
sed 's/256/1024/g' bench/peers/step.mlir > devpeers/step_1024.mlir
"$VENV/bin/iree-compile" --iree-hal-target-device=vulkan --iree-vulkan-target="${VULKAN_TARGET:-ampere}" \
  devpeers/step_1024.mlir -o devpeers/step_vulkan.vmfb
rm -f devpeers/iree_base_runtime-*.whl
pip download -q "iree-base-runtime==$IREE" --no-deps --only-binary=:all: --python-version "$PY" \
  --platform manylinux_2_28_x86_64 -d devpeers
git rev-parse --short HEAD > devpeers/COMMIT
du -sh devpeers
