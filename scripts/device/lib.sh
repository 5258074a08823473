#!/bin/bash
# Shared by the device tools (run.sh, ab.sh, profile.sh, hang-backtrace.sh): where the kit and the
# checkout are, the call's time budget, and the environments the CUDA and Vulkan binaries need.
# Sourced, not run: `source "$(dirname "$0")/lib.sh"`. kit.sh copies it into the kit beside run.sh.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  echo "usage: source scripts/device/lib.sh (from a device tool; it defines helpers, runs nothing)"
  case "${1:-}" in -h|--help) exit 0 ;; *) exit 2 ;; esac
fi

# KIT: the folder holding the device binaries (the one this file sits in, devbin/ by default).
# ROOT: the checkout the kit travels with (its parent), where test data and bench/peers are.
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$KIT/.." && pwd)
# Run from scripts/device/ in a checkout rather than from a kit: the checkout is two levels up.
[ -f "$ROOT/Cargo.toml" ] || [ ! -f "$KIT/../../Cargo.toml" ] || ROOT=$(cd "$KIT/../.." && pwd)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# The call's time budget (seconds; the device tool ends a command after 600).
BUDGET=${BUDGET:-580}
_lib_start=$(date +%s)

# The smaller of $1 seconds and what is left of the budget (at least 1).
left() {
  local l=$((BUDGET - ($(date +%s) - _lib_start)))
  [ "$l" -lt 1 ] && l=1
  if [ "$l" -lt "$1" ]; then echo "$l"; else echo "$1"; fi
}
# Seconds since the call started, as "N s".
el() { echo "$(($(date +%s) - _lib_start)) s"; }
# A section heading in the console output.
say() { echo "##### $* ($(el))"; }

# The test binaries find test data by the checkout path they were built at (KIT/CHECKOUT, written by
# kit.sh): make that path point at ROOT.
link_build_checkout() {
  local built
  [ -f "$KIT/CHECKOUT" ] || return 0
  built=$(cat "$KIT/CHECKOUT")
  [ "$built" = "$ROOT" ] && return 0
  [ -e "$built" ] || { mkdir -p "$(dirname "$built")" && ln -s "$ROOT" "$built"; }
}

# NVRTC as libnvrtc.so on the loader path (the name cudarc loads; CUDA ships it versioned).
nvrtc_env() {
  local n
  n=$(find /usr/local/cuda/lib64/ /usr/local/cuda/targets/x86_64-linux/lib/ -maxdepth 1 -name 'libnvrtc.so*' 2>/dev/null | sort | head -1 || true)
  [ -z "$n" ] && n=$(find /usr /opt -name 'libnvrtc.so*' 2>/dev/null | grep -v builtins | head -1 || true)
  if [ -n "$n" ]; then
    mkdir -p /tmp/nv && ln -sf "$n" /tmp/nv/libnvrtc.so
    LD_LIBRARY_PATH="/tmp/nv:$(dirname "$n")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
  else
    echo "nvrtc: not found (CUDA tests that compile kernels will fail)"
  fi
  export PATH="$PATH:/usr/local/cuda/bin"
}

# What the CUDA test binaries need: NVRTC, a missing GPU failing the tests (they were built without
# libcuda, so every CUDA test is marked ignored and is run with --include-ignored), the checkout path.
cuda_test_env() {
  nvrtc_env
  export HAL_REQUIRE_CUDA=1
  link_build_checkout
}

# The Vulkan loader and NVIDIA's ICD (vulkan-env.sh), a missing device failing the Vulkan tests.
vulkan_test_env() {
  # shellcheck source=/dev/null
  source "$KIT/vulkan-env.sh"
  export HAL_REQUIRE_VULKAN=1
  link_build_checkout
}

# The machine, in a few lines (nothing where there is no nvidia-smi).
machine_info() {
  echo "kit commit $(cat "$KIT/COMMIT" 2>/dev/null || echo '?'); $(nproc) cores"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader || true
  fi
}

# Runs "$@" with a limit of $1 seconds (cut to the budget), its output to the file $2; prints the
# exit status and the libtest result lines. Returns the command's status.
#   run_logged SECONDS LOG COMMAND...
run_logged() {
  local limit=$1 log=$2 rc=0
  shift 2
  mkdir -p "$(dirname "$log")"
  timeout "$(left "$limit")" "$@" > "$log" 2>&1 || rc=$?
  echo "$(basename "$log" .log): exit $rc; $(grep -E '^test result' "$log" | tail -1 || true) ($(el))"
  [ "$rc" -eq 0 ] || grep -E "panicked|^    [a-z_]+::|FAILED" "$log" | head -8 || true
  return "$rc"
}

# Packs everything under OUT but the files named (globs, relative to OUT) into OUT/logs.tgz: the
# device tool brings back at most 8 files.
pack_out() {
  local tar_args=() find_args=() k
  for k in "$@"; do tar_args+=(--exclude="./$k"); find_args+=(-not -name "$k"); done
  (
    cd "$OUT"
    find . -name '*.data' -delete
    tar czf /tmp/logs.tgz "${tar_args[@]}" .
    find . -mindepth 1 -maxdepth 1 "${find_args[@]}" -exec rm -rf {} +
    mv /tmp/logs.tgz .
  )
}
