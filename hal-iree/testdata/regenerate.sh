#!/usr/bin/env bash
# Rebuilds everything in hal-iree/testdata from source:
#   programs/*.vmfb, programs/*.input*.npy, programs/*.expected.{txt,npy}
#   cts/executables/*.bin (IREE's HAL CTS testdata, compiled from the eerie-sys sources)
#   programs/*.cuda.vmfb, cts/executables-cuda/*.bin (the same for IREE's CUDA target, PTX for sm_80)
#   programs/*.vulkan.vmfb, cts/executables-vulkan/*.bin (the same for IREE's Vulkan target, SPIR-V)
# Needs a Python venv with iree-base-compiler and iree-base-runtime (same version) and numpy:
#   python3 -m venv /tmp/iree-venv
#   /tmp/iree-venv/bin/pip install iree-base-compiler==3.13.0 iree-base-runtime==3.13.0 numpy
# Env: IREE_VENV (default /tmp/iree-venv), IREE_CTS_TESTDATA (default: the eerie-sys-0.5.0
# crate's iree/runtime/src/iree/hal/cts/testdata in the cargo registry).
set -euo pipefail

VENV=${IREE_VENV:-/tmp/iree-venv}
HERE=$(cd "$(dirname "$0")" && pwd)
COMPILE="$VENV/bin/iree-compile"
RUN="$VENV/bin/iree-run-module"
PY="$VENV/bin/python"

# Generic x86-64 code for the embedded-ELF loader, whatever the build host's CPU is.
TARGET=(
  --iree-hal-target-device=local
  --iree-hal-local-target-device-backends=llvm-cpu
  --iree-llvmcpu-target-cpu=generic
  --iree-llvmcpu-target-triple=x86_64-unknown-unknown-eabi-elf
)

"$COMPILE" --version | grep "compiler version"

# ---- 1. programs --------------------------------------------------------------
P="$HERE/programs"
"$PY" "$P/make_inputs.py" "$P"

# name function number-of-inputs
PROGRAMS=(
  "chain chain 1"
  "chain_split chain 1"
  "matmul matmul 2"
  "mlp mlp 5"
)
for entry in "${PROGRAMS[@]}"; do
  read -r name func nin <<<"$entry"
  # Compiled from inside the directory, by bare file name: the source path goes into the
  # module's debug info, and a relative one keeps the output the same on every machine.
  (cd "$P" && "$COMPILE" "${TARGET[@]}" "$name.mlir" -o "$name.vmfb")
  dispatches=$(cd "$P" && "$COMPILE" "${TARGET[@]}" --compile-to=hal "$name.mlir" | grep -c 'hal.command_buffer.dispatch')
  # chain_split shares chain's inputs and expected outputs.
  data=$name; [[ $name == chain_split ]] && data=chain
  inputs=()
  for ((k = 0; k < nin; k++)); do inputs+=("--input=@$P/$data.input$k.npy"); done
  # --output_max_element_count: print every element (the default, 1024, cuts matmul's 2048 short).
  args=(--module="$P/$name.vmfb" --function="$func" --output_max_element_count=4096 "${inputs[@]}")
  sync_txt=$("$RUN" --device=local-sync "${args[@]}")
  task_txt=$("$RUN" --device=local-task "${args[@]}")
  if [[ "$sync_txt" != "$task_txt" ]]; then
    echo "error: $name: local-sync and local-task outputs differ" >&2
    exit 1
  fi
  if [[ $name == chain_split ]]; then
    if [[ "$sync_txt" != "$(cat "$P/chain.expected.txt")" ]]; then
      echo "error: chain_split output differs from chain's" >&2
      exit 1
    fi
  else
    printf '%s\n' "$sync_txt" >"$P/$name.expected.txt"
    "$RUN" --device=local-sync "${args[@]}" --output="@$P/$name.expected.npy" >/dev/null
  fi
  echo "$name.vmfb: $(stat -c %s "$P/$name.vmfb") bytes, $dispatches dispatch(es)"
done

# ---- 2. HAL CTS executables -------------------------------------------------------
CTS_SRC=${IREE_CTS_TESTDATA:-}
if [[ -z "$CTS_SRC" ]]; then
  CTS_SRC=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/eerie-sys-0.5.0/iree/runtime/src/iree/hal/cts/testdata | head -n1)
fi
E="$HERE/cts/executables"
rm -rf "$E"
mkdir -p "$E"
# Same flags as IREE's iree_hal_executable() CMake rule for the local_sync/local_task
# llvm_cpu CTS testdata (plus the explicit triple).
for src in "$CTS_SRC"/*.mlir; do
  stem=$(basename "$src" .mlir)
  (cd "$CTS_SRC" && "$COMPILE" --compile-mode=hal-executable --mlir-print-op-on-diagnostic=false \
    "${TARGET[@]}" "$stem.mlir" -o "$E/$stem.bin")
  echo "cts/executables/$stem.bin: $(stat -c %s "$E/$stem.bin") bytes"
done

# ---- 3. the same for IREE's CUDA target (run by thal-cuda on a GPU) ------------------------
# PTX for sm_80, which the CUDA driver JIT-compiles for newer GPUs (the H100's sm_90).
CUDA_TARGET=(--iree-hal-target-device=cuda --iree-cuda-target=sm_80)
for entry in "${PROGRAMS[@]}"; do
  read -r name _ _ <<<"$entry"
  (cd "$P" && "$COMPILE" "${CUDA_TARGET[@]}" "$name.mlir" -o "$name.cuda.vmfb")
  echo "$name.cuda.vmfb: $(stat -c %s "$P/$name.cuda.vmfb") bytes"
done
EC="$HERE/cts/executables-cuda"
rm -rf "$EC"
mkdir -p "$EC"
for src in "$CTS_SRC"/*.mlir; do
  stem=$(basename "$src" .mlir)
  (cd "$CTS_SRC" && "$COMPILE" --compile-mode=hal-executable --mlir-print-op-on-diagnostic=false \
    "${CUDA_TARGET[@]}" "$stem.mlir" -o "$EC/$stem.bin")
  echo "cts/executables-cuda/$stem.bin: $(stat -c %s "$EC/$stem.bin") bytes"
done

# ---- 4. the same for IREE's Vulkan target (run by thal-vulkan; lavapipe in CI) -------------
# SPIR-V for the Vulkan profile `vp_android_baseline_2022`, which lavapipe and desktop GPUs run.
VULKAN_TARGET=(--iree-hal-target-device=vulkan --iree-vulkan-target=vp_android_baseline_2022)
for entry in "${PROGRAMS[@]}"; do
  read -r name _ _ <<<"$entry"
  (cd "$P" && "$COMPILE" "${VULKAN_TARGET[@]}" "$name.mlir" -o "$name.vulkan.vmfb")
  echo "$name.vulkan.vmfb: $(stat -c %s "$P/$name.vulkan.vmfb") bytes"
done
EV="$HERE/cts/executables-vulkan"
rm -rf "$EV"
mkdir -p "$EV"
for src in "$CTS_SRC"/*.mlir; do
  stem=$(basename "$src" .mlir)
  (cd "$CTS_SRC" && "$COMPILE" --compile-mode=hal-executable --mlir-print-op-on-diagnostic=false \
    "${VULKAN_TARGET[@]}" "$stem.mlir" -o "$EV/$stem.bin")
  echo "cts/executables-vulkan/$stem.bin: $(stat -c %s "$EV/$stem.bin") bytes"
done
