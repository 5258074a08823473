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
# The CTS sources compiled with the target flags given, into cts/$1/.
cts_executables() {
  local dir="$HERE/cts/$1" src stem
  shift
  rm -rf "$dir"
  mkdir -p "$dir"
  for src in "$CTS_SRC"/*.mlir; do
    stem=$(basename "$src" .mlir)
    (cd "$CTS_SRC" && "$COMPILE" --compile-mode=hal-executable --mlir-print-op-on-diagnostic=false \
      "$@" "$stem.mlir" -o "$dir/$stem.bin")
    echo "cts/${dir##*/}/$stem.bin: $(stat -c %s "$dir/$stem.bin") bytes"
  done
}
# The programs compiled with the target flags given, as programs/<name>.$1.vmfb.
programs_for() {
  local suffix=$1 entry name
  shift
  for entry in "${PROGRAMS[@]}"; do
    read -r name _ _ <<<"$entry"
    (cd "$P" && "$COMPILE" "$@" "$name.mlir" -o "$name.$suffix.vmfb")
    echo "$name.$suffix.vmfb: $(stat -c %s "$P/$name.$suffix.vmfb") bytes"
  done
}

# Same flags as IREE's iree_hal_executable() CMake rule for the local_sync/local_task
# llvm_cpu CTS testdata (plus the explicit triple).
cts_executables executables "${TARGET[@]}"

# ---- 3. the same for IREE's CUDA target (run by thal-cuda on a GPU) ------------------------
# PTX for sm_80, which the CUDA driver JIT-compiles for newer GPUs (the H100's sm_90).
CUDA_TARGET=(--iree-hal-target-device=cuda --iree-cuda-target=sm_80)
programs_for cuda "${CUDA_TARGET[@]}"
cts_executables executables-cuda "${CUDA_TARGET[@]}"

# ---- 4. the same for IREE's Vulkan target (run by thal-vulkan; lavapipe in CI) -------------
# SPIR-V for the Vulkan profile `vp_android_baseline_2022`, which lavapipe and desktop GPUs run.
VULKAN_TARGET=(--iree-hal-target-device=vulkan --iree-vulkan-target=vp_android_baseline_2022)
programs_for vulkan "${VULKAN_TARGET[@]}"
cts_executables executables-vulkan "${VULKAN_TARGET[@]}"
