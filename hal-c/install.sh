#!/usr/bin/env bash
# Builds the C library in release mode and installs it the way a C library installs on Linux:
#
#   <prefix>/<libdir>/libthal.so.<version>          SONAME libthal.so.<major>, stripped
#   <prefix>/<libdir>/libthal.so.<major>, libthal.so symbolic links
#   <prefix>/<libdir>/libthal.a                     debug info stripped
#   <prefix>/<libdir>/pkgconfig/thal.pc             pkg-config: `pkg-config --cflags --libs thal`
#   <prefix>/<libdir>/cmake/thal/thalConfig.cmake   CMake: `find_package(thal)`, target thal::thal
#   <prefix>/<libdir>/cmake/thal/thalConfigVersion.cmake
#   <prefix>/include/thal/thal.h, thal_kernel.h     the API and the cpu-sim kernel ABI
#
# Usage: hal-c/install.sh [--prefix DIR] [--libdir DIR] [--destdir DIR] [--no-strip] [-- CARGO_ARGS...]
#   --prefix   where the library will live (default /usr/local); written into thal.pc
#   --libdir   the library directory under the prefix (default lib; Debian uses lib/x86_64-linux-gnu)
#   --destdir  a staging root the files are copied under (DESTDIR of a package build)
#   --no-strip install the libraries with the debug info the release profile gave them
#   CARGO_ARGS go to cargo, e.g. `-- --no-default-features` for a cpu-sim-only library.
#
# This does by hand what cargo-c's `cargo cinstall` does: build the crate as cdylib and staticlib
# with the SONAME as a link argument, then copy the files in. The build is `cargo rustc --release`
# in the workspace's target directory, so the dependencies of an earlier `cargo build --release`
# are reused. Linux (ELF) only.
set -euo pipefail

prefix=/usr/local
libdir=lib
destdir=
strip=1
cargo_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --libdir) libdir=$2; shift 2 ;;
    --destdir) destdir=$2; shift 2 ;;
    --no-strip) strip=0; shift ;;
    --) shift; cargo_args=("$@"); break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$prefix" in /*) ;; *) echo "install.sh: --prefix must be an absolute path" >&2; exit 2 ;; esac
libdir=${libdir#/}
libdir=${libdir%/}

crate_dir=$(cd "$(dirname "$0")" && pwd)
manifest="$crate_dir/Cargo.toml"
pkgid=$(cargo pkgid --manifest-path "$manifest" -p timeline-hal-c)
version=${pkgid##*[#@]}
major=${version%%.*}
target=$(cargo metadata --format-version 1 --no-deps --manifest-path "$manifest" |
  grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)

echo "install.sh: building libthal $version (SONAME libthal.so.$major)"
cargo rustc --manifest-path "$manifest" -p timeline-hal-c --release --lib \
  --crate-type cdylib,staticlib ${cargo_args[@]+"${cargo_args[@]}"} \
  -- -C "link-arg=-Wl,-soname,libthal.so.$major"
built="$target/release"

root="$destdir$prefix"
lib="$root/$libdir"
install -d "$lib/pkgconfig" "$lib/cmake/thal" "$root/include/thal"

install -m 0755 "$built/libthal.so" "$lib/libthal.so.$version"
ln -sfn "libthal.so.$version" "$lib/libthal.so.$major"
ln -sfn "libthal.so.$major" "$lib/libthal.so"
install -m 0644 "$built/libthal.a" "$lib/libthal.a"
if [ "$strip" = 1 ]; then
  # The exported functions stay in the shared library's dynamic symbol table; the archive keeps its
  # symbol table (a linker needs it) and loses only debug sections.
  strip --strip-all "$lib/libthal.so.$version"
  strip --strip-debug "$lib/libthal.a"
fi

install -m 0644 "$crate_dir/include/thal.h" "$root/include/thal/thal.h"
if [ -f "$crate_dir/include/thal_kernel.h" ]; then
  install -m 0644 "$crate_dir/include/thal_kernel.h" "$root/include/thal/thal_kernel.h"
fi

# The CMake config finds the prefix from its own place: <prefix>/<libdir>/cmake/thal.
up="../.."
IFS=/ read -ra parts <<<"$libdir"
for _ in "${parts[@]}"; do up="$up/.."; done
subst() {
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@VERSION@|$version|g" \
    -e "s|@THAL_PREFIX_FROM_CONFIG@|$up|g" -e "s|@THAL_LIBDIR@|$libdir|g" \
    -e "s|@THAL_VERSION@|$version|g" -e "s|@THAL_SOVERSION@|$major|g" "$1" >"$2"
  chmod 0644 "$2"
}
subst "$crate_dir/thal.pc.in" "$lib/pkgconfig/thal.pc"
subst "$crate_dir/cmake/thalConfig.cmake.in" "$lib/cmake/thal/thalConfig.cmake"
subst "$crate_dir/cmake/thalConfigVersion.cmake.in" "$lib/cmake/thal/thalConfigVersion.cmake"

echo "install.sh: installed libthal $version under $root:"
(cd "$root" && find . \( -path "./$libdir/libthal*" -o -path "./$libdir/pkgconfig/thal.pc" \
  -o -path "./$libdir/cmake/thal/*" -o -path "./include/thal/*" \) -printf '  %p %s bytes\n' | sort)
