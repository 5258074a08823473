#!/bin/bash
# Prepares, here (no GPU needed, network for the wheels), what bench/peers/run.sh runs on the GPU
# machine, in devpeers/ (git-ignored, about 20 MiB: carry it):
# - the HAL / raw-CUDA side: the bench crate's `peers` example, stripped;
# - IREE: step.mlir compiled by iree-compile (iree-base-compiler, installed into a throwaway venv)
#   for CUDA, and the iree-base-runtime wheel for the GPU machine's Python (PY, default 3.12),
#   which peers.py unpacks there (the GPU machine has no network).
set -e
cd "$(dirname "$0")/../.."
IREE=${IREE:-3.13.0}; PY=${PY:-3.12}
mkdir -p devpeers
cargo build --release -p bench --example peers 2>&1 | tail -1
cp target/release/examples/peers devpeers/peers && strip devpeers/peers
cp bench/peers/peers.py bench/peers/run.sh devpeers/
VENV=${VENV:-/tmp/iree-venv}
if [ ! -x "$VENV/bin/iree-compile" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "iree-base-compiler==$IREE"
fi
"$VENV/bin/iree-compile" --iree-hal-target-device=cuda --iree-cuda-target=sm_80 bench/peers/step.mlir \
  -o devpeers/step_sm80.vmfb
rm -f devpeers/iree_base_runtime-*.whl
pip download -q "iree-base-runtime==$IREE" --no-deps --only-binary=:all: --python-version "$PY" \
  --platform manylinux_2_28_x86_64 -d devpeers
git rev-parse --short HEAD > devpeers/COMMIT
du -sh devpeers
