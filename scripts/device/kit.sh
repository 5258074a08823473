#!/bin/bash
# shellcheck disable=SC2317  # the build steps are called through step()
# Builds, here (no GPU needed), the kit the GPU machine runs: stripped release binaries in devbin/
# (git-ignored) with the device tools beside them. Then, there, with devbin/ carried along:
# `bash devbin/run.sh SUITE ...` (see scripts/device/README.md).
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: scripts/device/kit.sh [options]

Builds the device kit into devbin/ (release, stripped):
  bench, hal                    the bench and the hal CLI
  cuda tests                    driver-cuda's test binaries (cts, cuda_device, contract_fuzz, ...)
  vulkan_<test>                 driver-vulkan's test binaries (vulkan_cts, vulkan_vulkan_device, ...)
  cpu_sim_cts                   the CTS on cpu-sim (ctest's cpu_sim test)
  examples                      completion_modes, chain_costs, submit_profile, allreduce_sweep,
                                peers, triton_kernels, vulkan_round_trips, vulkan_process_state
  capi/                         libthal.so, thal_tests (finds libthal.so beside itself), the cpu-sim
                                kernel library, kernels.cu, c_overhead, TESTS (the C tests' names)
  run.sh ab.sh profile.sh hang-backtrace.sh summarize.py lib.sh vulkan-env.sh
  COMMIT, CHECKOUT              the commit, and the checkout path the test binaries look for data at

options:
  --out DIR         the kit's folder (default devbin; run.sh expects it at the checkout's top)
  --iree            also hal-iree (release): devbin/iree/ with thal-iree-run, cuda_programs and
                    iree_cts (needs what hal-iree/ci.sh installs: CMake 3.26+, libclang, gtest)
  --perf            also perf and the libraries it links into devperf/ (carry it for profile.sh),
                    and submit_profile_sym, bench_sym, allreduce_sweep_sym (symbols, no debug info)
  --parts LIST      what to build, a comma list of: cuda (driver-cuda's tests), vulkan (driver-vulkan's
                    tests), cpu-sim (cpu_sim_cts), bench (bench, hal, the examples), capi. Default
                    cuda,cpu-sim,bench,capi (about 57 MiB); the vulkan suite wants vulkan,bench
  --no-capi         leave the C library and tests out (the same as --parts without capi)
  --vulkan-loader   fetch the Vulkan loader .debs into .gl/ (apt-get download) where it is missing
  --dry-run         print the steps without running them
  -h, --help        this text

The kit and devperf/ together must stay under the 64 MiB a device run may carry (du is printed).
USAGE
}

OUTDIR=devbin IREE=0 PERF=0 PARTS=cuda,cpu-sim,bench,capi GL=0 DRY=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUTDIR=$2; shift ;;
    --iree) IREE=1 ;;
    --perf) PERF=1 ;;
    --parts) PARTS=$2; shift ;;
    --no-capi) PARTS=${PARTS//capi/} ;;
    --vulkan-loader) GL=1 ;;
    --dry-run) DRY=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "kit.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

part() { [[ ",$PARTS," == *",$1,"* ]]; }
cd "$(dirname "$0")/../.."
ROOT=$PWD
case $OUTDIR in /*) ;; *) OUTDIR=$ROOT/$OUTDIR ;; esac
HERE=scripts/device

# Runs (or, with --dry-run, prints) one step.
step() {
  if [ "$DRY" = 1 ]; then echo "+ $*"; else "$@"; fi
}

# Where cargo puts the release build (target/, or CARGO_TARGET_DIR when set).
target_dir() {
  cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

# Builds the test binaries of package $1 (in the workspace of the current directory) and copies each
# into folder $2 as $3<name>, skipping the names in $4 (space-separated).
copy_tests() {
  local pkg=$1 dest=$2 prefix=$3 skip=${4:-}
  cargo test --release -p "$pkg" --no-run --message-format=json 2> /tmp/kit-cargo.err | python3 -c '
import json, shutil, sys
dest, prefix, skip = sys.argv[1], sys.argv[2], sys.argv[3].split()
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        name = m["target"]["name"]
        if name not in skip:
            shutil.copy(m["executable"], f"{dest}/{prefix}{name}")
            print(f"{dest}/{prefix}{name}")
' "$dest" "$prefix" "$skip" || { echo "kit.sh: building $pkg's tests failed:"; grep -E "^error" -A5 /tmp/kit-cargo.err | head -30; return 1; }
}

build_main() {
  local release
  release=$(target_dir)/release
  mkdir -p "$OUTDIR"
  # not_run checks the no-GPU behaviour here (cargo test); cuda_timing is covered by cuda_device.
  if part cuda; then copy_tests timeline-hal-cuda "$OUTDIR" "" "not_run cuda_timing"; fi
  # The Vulkan test binaries as vulkan_<name> (their names would clash with CUDA's cts), built to
  # run: the GPU machine has a device even where this one has none (driver-vulkan/build.rs would
  # otherwise mark them ignored, and the suites there would pass without running them).
  if part vulkan; then HAL_REQUIRE_VULKAN=1 copy_tests timeline-hal-vulkan "$OUTDIR" vulkan_; fi
  # The CTS on cpu-sim (ctest's cpu_sim), as cpu_sim_cts: a run that needs no GPU.
  if part cpu-sim; then
    copy_tests timeline-hal-ctest "$OUTDIR" "" "isolation"
    mv "$OUTDIR/cpu_sim" "$OUTDIR/cpu_sim_cts"
  fi
  if part bench || [ "$PERF" = 1 ]; then
    cargo build --release -p bench -p tools --bins --examples 2>&1 | tail -1
    cargo build --release -p timeline-hal-cuda --examples 2>&1 | tail -1
  fi
  if part bench; then
    local ex
    for ex in completion_modes chain_costs triton_kernels submit_profile allreduce_sweep peers \
      vulkan_round_trips vulkan_process_state; do
      cp "$release/examples/$ex" "$OUTDIR/"
    done
    cp "$release/bench" "$release/hal" "$OUTDIR/"
  fi
  find "$OUTDIR" -maxdepth 1 -type f -perm -u+x ! -name '*.sh' ! -name '*.py' ! -name '*_sym' -exec strip {} +
  # For perf there: symbols kept, debug info dropped (the release profile's DWARF would take the
  # binaries past what a run may carry); reports can be read here too (same path).
  if [ "$PERF" = 1 ]; then
    strip --strip-debug -o "$OUTDIR/submit_profile_sym" "$release/examples/submit_profile"
    strip --strip-debug -o "$OUTDIR/bench_sym" "$release/bench"
    strip --strip-debug -o "$OUTDIR/allreduce_sweep_sym" "$release/examples/allreduce_sweep"
  fi
}

build_capi() {
  local release
  release=$(target_dir)/release
  cargo build --release -p timeline-hal-c --lib --example c_overhead 2>&1 | tail -1
  mkdir -p "$OUTDIR/capi"
  cp "$release/libthal.so" "$release/examples/c_overhead" hal-c/tests/c/kernels.cu "$OUTDIR/capi/"
  # The test program finds libthal.so beside itself ($ORIGIN), wherever the kit lands.
  # shellcheck disable=SC2016
  cc -std=gnu11 -O1 -g -Wall -Wextra -Werror -Ihal-c/include hal-c/tests/c/thal_tests.c \
    -o "$OUTDIR/capi/thal_tests" -L"$OUTDIR/capi" -lthal -Wl,-rpath,'$ORIGIN' -lpthread
  cc -shared -fPIC -O1 hal-c/tests/c/kernels.c -o "$OUTDIR/capi/libthal_test_kernels.so"
  strip "$OUTDIR/capi/libthal.so" "$OUTDIR/capi/c_overhead"
  # The C tests' names, in the order of thal_tests.c's table.
  grep -oE '^ *\{"[a-z_0-9]+", test_' hal-c/tests/c/thal_tests.c | grep -oE '"[a-z_0-9]+"' | tr -d '"' > "$OUTDIR/capi/TESTS"
}

build_iree() {
  local release dest
  dest=$OUTDIR/iree
  mkdir -p "$dest"
  (
    cd hal-iree
    release=$(target_dir)/release
    # A failed build says why (IREE's C runtime needs what hal-iree/ci.sh installs: CMake, libclang).
    if ! cargo test --release --workspace --no-run --message-format=json 2> /tmp/kit-iree.err | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in ("cuda_programs", "iree_cts"):
        shutil.copy(m["executable"], sys.argv[1] + "/" + m["target"]["name"]); print(sys.argv[1] + "/" + m["target"]["name"])
' "$dest"; then
      echo "kit.sh: building hal-iree's tests failed:"
      grep -E "^error|CMake|cmake" -A5 /tmp/kit-iree.err | head -30
      exit 1
    fi
    cargo build --release --bin thal-iree-run 2>&1 | tail -1
    cp "$release/thal-iree-run" "$dest/"
  )
  strip "$dest"/*
}

copy_perf() {
  local lib
  [ -x /usr/bin/perf ] || { echo "no /usr/bin/perf here: devperf/ not made"; return 0; }
  mkdir -p devperf/lib && cp /usr/bin/perf devperf/
  for lib in $(ldd /usr/bin/perf | awk '/=>/ {print $3}'); do
    case $(basename "$lib") in libc.so.6|libm.so.6|libstdc++.so.6|libgcc_s.so.1) ;; *) cp -L "$lib" devperf/lib/ ;; esac
  done
  du -sh devperf
}

fetch_vulkan_loader() {
  [ -d .gl ] && ls .gl/libvulkan1_*.deb > /dev/null 2>&1 && { echo ".gl/ has the loader"; return 0; }
  mkdir -p .gl
  (cd .gl && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
}

copy_tools() {
  cp "$HERE/run.sh" "$HERE/ab.sh" "$HERE/profile.sh" "$HERE/hang-backtrace.sh" "$HERE/summarize.py" \
    "$HERE/lib.sh" "$HERE/vulkan-env.sh" "$OUTDIR/"
  git rev-parse --short HEAD > "$OUTDIR/COMMIT"
  # Where the binaries were built: they find test data by that path (lib.sh's link_build_checkout).
  echo "$ROOT" > "$OUTDIR/CHECKOUT"
}

step build_main
if part capi; then step build_capi; fi
[ "$IREE" = 1 ] && step build_iree
[ "$PERF" = 1 ] && step copy_perf
[ "$GL" = 1 ] && step fetch_vulkan_loader
step copy_tools
if [ "$DRY" = 0 ]; then
  du -sh "$OUTDIR"
  [ "$PERF" = 1 ] && du -shc "$OUTDIR" devperf | tail -1
  carried=("$OUTDIR"); [ "$PERF" = 1 ] && carried+=(devperf)
  size=$(du -smc "${carried[@]}" | tail -1 | cut -f1)
  [ "$size" -le 64 ] || echo "kit.sh: WARNING: ${size} MiB, over the 64 MiB a run may carry: build fewer --parts"
fi
exit 0
