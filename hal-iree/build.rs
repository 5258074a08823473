//! Compiles `src/c/shim.c` (and IREE's fixed-block pools, which eerie-sys's runtime lacks) against the IREE sources that `eerie-sys` vendors. eerie-sys declares no
//! `links` key, so its headers are found through `cargo metadata` (its package directory).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/c/shim.c");
    println!("cargo:rerun-if-changed=src/c/run_module.c");
    let iree = eerie_sys_dir().join("iree");
    let runtime = iree.join("runtime/src/iree");
    cc::Build::new()
        .file("src/c/shim.c")
        .file("src/c/run_module.c")
        // IREE's fixed-block pools, which eerie-sys's runtime archive does not carry: a caller
        // builds them from a device's queue-pool backend.
        .file(runtime.join("hal/memory/fixed_block_pool.c"))
        .file(runtime.join("hal/memory/fixed_block_allocator.c"))
        .include(iree.join("runtime/src"))
        .include(iree.join("third_party/flatcc/include"))
        .define("IREE_ALLOCATOR_SYSTEM_CTL", "iree_allocator_libc_ctl")
        .define("IREE_THREADING_ENABLE", "1")
        .warnings(false)
        .compile("thal_iree_shim");
}

/// The directory of the `eerie-sys` package this build resolved.
fn eerie_sys_dir() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    // Only this target's packages: the build downloaded those; offline metadata of every
    // platform's would need packages no build fetches.
    let target = std::env::var("TARGET").expect("cargo sets TARGET for build scripts");
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline", "--filter-platform", &target])
        .current_dir(&manifest_dir)
        .output()
        .expect("`cargo metadata` runs");
    assert!(output.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    let json = String::from_utf8_lossy(&output.stdout);
    // The manifest path of the package whose name is eerie-sys: the metadata lists packages as
    // flat objects, so the first `manifest_path` after the name belongs to it.
    let at = json.find("\"name\":\"eerie-sys\"").expect("eerie-sys is a dependency");
    let rest = &json[at..];
    let key = "\"manifest_path\":\"";
    let start = rest.find(key).expect("a manifest path") + key.len();
    let end = start + rest[start..].find('"').expect("a closing quote");
    PathBuf::from(&rest[start..end]).parent().expect("a package directory").to_path_buf()
}
