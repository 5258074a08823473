#!/usr/bin/env bash
# The hal-iree workspace (IREE's runtime on our drivers, and IREE's HAL conformance suite) on a fresh
# Debian 12 machine, as root (or with sudo): installs what is missing, then checks formatting and
# lints and runs every test. Safe to run again: it installs only what is absent. Needs a Rust
# toolchain (cargo) already.
# Environment: IREE_CTS_VENV (where CMake goes; default /opt/iree-cts-venv), and the IREE_CTS_* run
# settings of README.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
venv=${IREE_CTS_VENV:-/opt/iree-cts-venv}
sudo=""
if [ "$(id -u)" != 0 ]; then sudo=sudo; fi

# C/C++ toolchain and make (IREE's CMake build), libclang (eerie-sys's bindgen), GoogleTest and
# GoogleMock (static archives and headers), python3-venv (for a recent CMake), ccache (below).
packages=(build-essential libclang-dev libgtest-dev libgmock-dev python3-venv ccache)
missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  $sudo apt-get update
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

# IREE's runtime needs CMake 3.26 or newer; Debian 12 has 3.25, so CMake comes from PyPI.
if ! "$venv/bin/cmake" --version >/dev/null 2>&1; then
  $sudo python3 -m venv "$venv"
  $sudo "$venv/bin/pip" install --quiet --disable-pip-version-check 'cmake>=3.26'
fi
export PATH="$venv/bin:$PATH"

cd "$here"
export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=line-tables-only
# Cargo keeps a build script's output apart for check and build modes, so clippy and the tests each
# run eerie-sys's CMake build of IREE's runtime. Through ccache the second build's 281 compiles are
# cache hits (paths rewritten relative to the target directory; the working directory, which
# differs between the two build trees, left out of the key).
target=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)
export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_DIR="$target/ccache" \
  CCACHE_BASEDIR="$target" CCACHE_NOHASHDIR=1
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# One build of IREE's runtime serves both packages (same features, one target directory).
cargo test --workspace --locked
# With a Vulkan device (lavapipe, which .ci/run installs), IREE's Vulkan programs and IREE's HAL CTS
# on `thal-vulkan` too, under the Vulkan validation layers. Without one they are not run (the
# program tests stay ignored in the run above, reported as such).
# These runs start the test executables the build above made, from their package directories as
# cargo does: each cargo call would rerun eerie-sys's build script first (its bindgen lists a
# directory of its own CMake build tree, which that build touches, so cargo always finds it dirty),
# about 45 s a call on two cores.
test_executable() {
  local newest="" candidate
  for candidate in "$target"/debug/deps/"$1"-*; do
    if [ -f "$candidate" ] && [ -x "$candidate" ] && { [ -z "$newest" ] || [ "$candidate" -nt "$newest" ]; }; then
      newest=$candidate
    fi
  done
  if [ -z "$newest" ]; then
    echo "ci.sh: no test executable $1 under $target/debug/deps" >&2
    return 1
  fi
  echo "$newest"
}
if ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1; then
  vulkan_programs=$(test_executable vulkan_programs)
  iree_cts=$(test_executable iree_cts)
  (cd "$here" && HAL_VULKAN_VALIDATION=1 "$vulkan_programs" --include-ignored)
  (cd "$here/cts" && HAL_VULKAN_VALIDATION=1 IREE_CTS_DRIVER=thal-vulkan IREE_CTS_EXECUTABLE_FORMAT=vulkan-spirv-fb \
    IREE_CTS_TESTDATA="$here/testdata/cts/executables-vulkan" "$iree_cts")
else
  echo "not run: IREE on thal-vulkan (no Vulkan driver manifest in /usr/share/vulkan/icd.d)"
fi
