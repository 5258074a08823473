//! Compiles IREE's HAL conformance suite (the CTS: its registry, fixture and test suites, all from the
//! sources eerie-sys vendors) and our entry point into two static archives, and links GoogleTest.
//!
//! eerie-sys has no `links` key, so it passes us nothing: its sources are found through
//! `cargo metadata`. The CTS needs no header that IREE's CMake build generates, so eerie-sys's
//! OUT_DIR (which may not exist yet when this script runs) is not needed either.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The CTS's suites, relative to `iree/runtime/src/iree/hal/cts`. All are compiled: the executable
/// suites instantiate nothing unless the run registers an executable format (see `cts/entry.cc`).
const SUITES: &[&str] = &[
    // Driver, semaphores, events; executables and their cache (executable suites).
    "core/driver_test.cc",
    "core/event_test.cc",
    "core/semaphore_test.cc",
    "core/semaphore_thread_test.cc",
    "core/executable_test.cc",
    "core/executable_cache_test.cc",
    // Allocator and mapping.
    "buffer/allocator_test.cc",
    "buffer/mapping_test.cc",
    // Command buffers: transfers (always), dispatches (executable suites).
    "command_buffer/basic_test.cc",
    "command_buffer/copy_buffer_test.cc",
    "command_buffer/fill_buffer_test.cc",
    "command_buffer/update_buffer_test.cc",
    "command_buffer/stress_test.cc",
    "command_buffer/transient_buffer_test.cc",
    "command_buffer/dispatch_test.cc",
    "command_buffer/dispatch_constants_test.cc",
    "command_buffer/dispatch_constants_bindings_test.cc",
    "command_buffer/dispatch_indirect_parameters_test.cc",
    "command_buffer/dispatch_multi_workgroup_test.cc",
    "command_buffer/dispatch_multi_entrypoint_test.cc",
    "command_buffer/dispatch_pipeline_test.cc",
    "command_buffer/dispatch_reuse_test.cc",
    // Queue operations.
    "queue/queue_alloca_test.cc",
    "queue/queue_transfer_test.cc",
    "queue/queue_host_call_test.cc",
    "queue/queue_dispatch_test.cc",
    "queue/semaphore_submission_test.cc",
    // Files.
    "file/file_test.cc",
];

/// The CTS's own support code, relative to `iree/runtime/src/iree`. `hal/cts/util/test_main.cc` is
/// left out: it defines `main`, and ours is `cts/entry.cc`'s `thal_iree_cts_main`.
const SUPPORT_CXX: &[&str] = &[
    "hal/cts/util/registry.cc",
    "hal/cts/util/test_base.cc",
    "hal/cts/util/profile_test_util.cc",
    "testing/temp_file.cc",
];

/// The defines IREE's CMake build compiles the runtime with (they shape its headers).
const DEFINES: &[(&str, &str)] =
    &[("IREE_ALLOCATOR_SYSTEM_CTL", "iree_allocator_libc_ctl"), ("IREE_THREADING_ENABLE", "1")];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let iree = eerie_sys_dir(&manifest_dir).join("iree");
    let runtime_src = iree.join("runtime/src");
    let flatcc_include = iree.join("third_party/flatcc/include");
    let iree_src = runtime_src.join("iree");
    let cts_src = iree_src.join("hal/cts");
    // Optional prefix of a GoogleTest install outside the system paths (its include/ and lib/).
    println!("cargo:rerun-if-env-changed=IREE_CTS_GTEST_PREFIX");
    let gtest_prefix = env::var_os("IREE_CTS_GTEST_PREFIX").map(PathBuf::from);

    // The C++ archive: every object in it is linked (`+whole-archive`) because the suites and the
    // registry register themselves from static initializers that nothing else refers to.
    let mut cxx = cc::Build::new();
    cxx.cpp(true)
        .std("c++17")
        .cpp_link_stdlib(None)
        .include(&runtime_src)
        .include(&flatcc_include)
        .include(manifest_dir.join("cts"))
        // IREE's own code is not ours to lint.
        .warnings(false)
        .flag_if_supported("-w")
        .link_lib_modifier("+whole-archive");
    if let Some(prefix) = &gtest_prefix {
        cxx.include(prefix.join("include"));
    }
    for (name, value) in DEFINES {
        cxx.define(name, *value);
    }
    for suite in SUITES {
        cxx.file(cts_src.join(suite));
    }
    for file in SUPPORT_CXX {
        cxx.file(iree_src.join(file));
    }
    for file in ["cts/entry.cc", "cts/backends.cc"] {
        println!("cargo:rerun-if-changed={file}");
        cxx.file(manifest_dir.join(file));
    }
    println!("cargo:rerun-if-changed=cts/entry.h");
    cxx.compile("thal_iree_cts");

    // GoogleTest and GoogleMock (Debian's libgtest-dev and libgmock-dev ship static archives), after
    // the archives that use them; eerie-sys's runtime archive (and hal-iree's, with IREE's
    // fixed-block pools) follow, as our dependencies.
    if let Some(prefix) = &gtest_prefix {
        println!("cargo:rustc-link-search=native={}", prefix.join("lib").display());
    }
    for lib in ["gmock", "gtest", "stdc++", "pthread"] {
        println!("cargo:rustc-link-lib={lib}");
    }
}

/// The directory of the eerie-sys package this build resolves to, from `cargo metadata`, unless
/// `IREE_CTS_EERIE_SYS_DIR` names it.
fn eerie_sys_dir(manifest_dir: &Path) -> PathBuf {
    println!("cargo:rerun-if-env-changed=IREE_CTS_EERIE_SYS_DIR");
    if let Some(dir) = env::var_os("IREE_CTS_EERIE_SYS_DIR") {
        return PathBuf::from(dir);
    }
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = env::var("TARGET").expect("TARGET");
    let output = Command::new(cargo)
        .current_dir(manifest_dir)
        .args(["metadata", "--offline", "--format-version", "1", "--filter-platform", &target])
        .output()
        .expect("running `cargo metadata`");
    assert!(
        output.status.success(),
        "`cargo metadata` failed (set IREE_CTS_EERIE_SYS_DIR to eerie-sys's directory instead): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("`cargo metadata` prints JSON");
    let packages = metadata["packages"].as_array().expect("`cargo metadata` lists packages");
    let eerie = packages
        .iter()
        .find(|package| package["name"] == "eerie-sys")
        .expect("eerie-sys is among the resolved packages");
    let manifest_path = eerie["manifest_path"].as_str().expect("eerie-sys has a manifest path");
    let dir = Path::new(manifest_path).parent().expect("a manifest lives in a directory").to_path_buf();
    println!("cargo:rerun-if-changed={}", dir.join("Cargo.toml").display());
    dir
}
