//! Bakes the commit the bench is built from into the binary (`BENCH_COMMIT`, `BENCH_COMMIT_DIRTY`),
//! so that a result file says what it measured even where the binary runs without git (a GPU
//! machine given only the binary). Without git, or outside a repository, both read `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "HEAD"]);
    // Dirty: a tracked file differs from the commit (untracked files do not count), other than
    // what the binary is not built from: the result files, the docs and scripts (a new result
    // file, not yet committed, must not mark the next run's binary dirty).
    let status = [
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ":(top)",
        ":(top,exclude)bench/results",
        ":(top,exclude)docs",
        ":(top,exclude)scripts",
        ":(top,exclude,glob)**/*.md",
    ];
    let dirty = commit.as_ref().and(git(&status)).map(|s| !s.is_empty());
    println!("cargo:rustc-env=BENCH_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
    println!("cargo:rustc-env=BENCH_COMMIT_DIRTY={}", dirty.map_or("unknown".to_string(), |d| d.to_string()));
    // Run again when HEAD moves (checkout, commit) or the index changes (add, status refresh).
    for path in ["HEAD", "index"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(p) = git(&["rev-parse", "--git-path", &reference])
    {
        println!("cargo:rerun-if-changed={p}");
    }
    // And when a source the binary is built from changes without a commit or a `git add`: the
    // dirty flag is worked out here, so it must be worked out again then (cargo scans a directory
    // for any change).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for source in [
        "Cargo.toml",
        "Cargo.lock",
        "hal/src",
        "driver-cpu-sim/src",
        "driver-cuda/src",
        "driver-vulkan/src",
        "bench/src",
        "bench/examples",
        "bench/Cargo.toml",
    ] {
        let path = root.join(source);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
