//! Builds the C tests (tests/c) with the system C compiler against include/thal.h and this crate's
//! shared library, and runs each on cpu-sim. `THAL_C_SANITIZE=1` builds them with
//! `-fsanitize=address,undefined` (what `.ci/run` does); `CC` picks the compiler.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long one C test may run before it counts as hung.
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// The built test program and kernel library (built once per test process).
struct Built {
    program: PathBuf,
    kernels: PathBuf,
}

/// The directory holding this crate's `libthal.so` as built for this test run: `deps`, beside the
/// test binary (the copy one level up is refreshed by `cargo build` only).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its path");
    exe.parent().expect("tests run from <target>/<profile>/deps").to_path_buf()
}

fn sanitize() -> bool {
    std::env::var_os("THAL_C_SANITIZE").is_some_and(|v| v != "0")
}

fn compile(args: &[&str]) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let output = Command::new(&cc).args(args).output().unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        output.status.success(),
        "{cc} {}\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(if sanitize() { "c-suite-sanitize" } else { "c-suite" });
        std::fs::create_dir_all(&out).expect("the target tmp directory is writable");
        let sources = crate_dir.join("tests/c");
        let kernels = out.join("libthal_test_kernels.so");
        let program = out.join("thal_tests");
        let lib_dir = library_dir();
        let path = |p: &Path| p.to_str().expect("UTF-8 paths").to_owned();
        compile(&["-shared", "-fPIC", "-O1", "-o", &path(&kernels), &path(&sources.join("kernels.c"))]);
        let mut args = vec![
            "-std=gnu11".to_owned(),
            "-g".to_owned(),
            "-Wall".to_owned(),
            "-Wextra".to_owned(),
            "-Werror".to_owned(),
            format!("-I{}", path(&crate_dir.join("include"))),
            path(&sources.join("thal_tests.c")),
            "-o".to_owned(),
            path(&program),
            format!("-L{}", path(&lib_dir)),
            format!("-Wl,-rpath,{}", path(&lib_dir)),
            "-lthal".to_owned(),
            "-lpthread".to_owned(),
        ];
        if sanitize() {
            args.extend(
                ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
                    .map(String::from),
            );
        }
        compile(&args.iter().map(String::as_str).collect::<Vec<_>>());
        Built { program, kernels }
    })
}

/// Runs C test `name` on cpu-sim; fails with its output if it fails, crashes or hangs.
fn run(name: &str) {
    let built = built();
    let mut child = Command::new(&built.program)
        .args(["cpu-sim", built.kernels.to_str().expect("UTF-8 path"), name])
        // cargo's LD_LIBRARY_PATH names the profile directory first, whose libthal.so only `cargo
        // build` refreshes: the program must load the one it was linked against (its rpath).
        .env_remove("LD_LIBRARY_PATH")
        .env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=23")
        .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the C test program starts");
    let start = Instant::now();
    while child.try_wait().expect("the C test can be polled").is_none() {
        if start.elapsed() > TEST_LIMIT {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let output = child.wait_with_output().expect("the C test's output is readable");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "C test {name} failed ({}):\n{text}", output.status);
    assert!(text.contains(&format!("ok {name}")), "C test {name} did not report success:\n{text}");
    assert!(!text.contains("runtime error"), "C test {name}: UBSan reported:\n{text}");
}

/// The example a C programmer copies (examples-c/hello.c) builds with its documented line and prints
/// what it promises.
#[test]
fn c_example_builds_and_prints_its_results() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-example");
    std::fs::create_dir_all(&out).expect("the target tmp directory is writable");
    let program = out.join("hello");
    let lib_dir = library_dir();
    let path = |p: &Path| p.to_str().expect("UTF-8 paths").to_owned();
    compile(&[
        "-Wall",
        "-Wextra",
        "-Werror",
        &format!("-I{}", path(&crate_dir.join("include"))),
        &path(&crate_dir.join("../examples-c/hello.c")),
        &format!("-L{}", path(&lib_dir)),
        "-lthal",
        &format!("-Wl,-rpath,{}", path(&lib_dir)),
        "-o",
        &path(&program),
    ]);
    let output = Command::new(&program).env_remove("LD_LIBRARY_PATH").output().expect("the example runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the example failed: {text}{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(
        text,
        "host call: the copy is done\nread back: hello from C!\nwait after fail: CANCELLED: the request was cancelled\n"
    );
}

macro_rules! c_tests {
    ($($name:ident),* $(,)?) => {
        $(#[test]
        fn $name() {
            run(stringify!($name));
        })*
    };
}

c_tests! {
    statuses_and_handles,
    two_queue_pipeline_out_of_order,
    failure_propagation,
    host_call_calls_back_into_the_api,
    teardown_from_a_callback,
    binding_tables,
    waits_from_several_threads,
    subspans,
    host_mappings,
    device_info,
    profiling,
    transient_buffers_and_indirect_dispatch,
}
