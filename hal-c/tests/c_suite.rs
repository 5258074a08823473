//! Builds the C tests (tests/c) with the system C compiler against include/thal.h and this crate's
//! shared library, and runs each on cpu-sim; the SPIR-V test runs on vulkan too, where a Vulkan
//! device is listed (`HAL_REQUIRE_VULKAN=1` makes its absence a failure). `THAL_C_SANITIZE=1` builds
//! them with `-fsanitize=address,undefined` (what `.ci/run` does); `CC` picks the compiler.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long one C test may run before it counts as hung.
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// The built test program and kernels (built once per test process).
struct Built {
    program: PathBuf,
    /// kernels.c as a cpu-sim kernel library.
    kernels: PathBuf,
    /// kernels.wgsl as SPIR-V, for vulkan.
    spirv: PathBuf,
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
        let include = format!("-I{}", path(&crate_dir.join("include")));
        compile(&["-shared", "-fPIC", "-O1", &include, "-o", &path(&kernels), &path(&sources.join("kernels.c"))]);
        let spirv = out.join("kernels.spv");
        let wgsl = std::fs::read_to_string(sources.join("kernels.wgsl")).expect("kernels.wgsl is readable");
        let words = driver_vulkan::wgsl::compile(&wgsl, "kernels.wgsl").expect("kernels.wgsl compiles to SPIR-V");
        std::fs::write(&spirv, words).expect("the target tmp directory is writable");
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
        Built { program, kernels, spirv }
    })
}

/// Runs C test `name` on cpu-sim; fails with its output if it fails, crashes, hangs or does not run.
fn run(name: &str) {
    let built = built();
    if let Some(reason) = run_on("cpu-sim", &built.kernels, name) {
        panic!("C test {name} did not run on cpu-sim: {reason}");
    }
}

/// Runs C test `name` on `driver` with `kernels`; fails with its output if it fails, crashes or
/// hangs. Returns why it did not run, if it says it could not (no device of the driver here).
fn run_on(driver: &str, kernels: &Path, name: &str) -> Option<String> {
    let built = built();
    let mut child = Command::new(&built.program)
        .args([driver, kernels.to_str().expect("UTF-8 path"), name])
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
    assert!(!text.contains("runtime error"), "C test {name}: UBSan reported:\n{text}");
    let not_run = format!("not run {name}: ");
    if let Some(at) = text.find(&not_run) {
        let reason = text[at + not_run.len()..].lines().next().unwrap_or_default();
        return Some(reason.to_owned());
    }
    assert!(text.contains(&format!("ok {name}")), "C test {name} did not report success:\n{text}");
    None
}

/// The SPIR-V test on vulkan (lavapipe or a GPU): loads the suite's WGSL kernel as SPIR-V through
/// the C API and runs it. Without a Vulkan device it says why it did not run, and fails only under
/// `HAL_REQUIRE_VULKAN=1`.
#[test]
fn spirv_executables_on_vulkan() {
    let built = built();
    if let Some(reason) = run_on("vulkan", &built.spirv, "spirv_executables") {
        let required = std::env::var_os("HAL_REQUIRE_VULKAN").is_some_and(|v| v != "0");
        assert!(!required, "C test spirv_executables did not run on vulkan under HAL_REQUIRE_VULKAN=1: {reason}");
        eprintln!("C test spirv_executables not run on vulkan: {reason}");
    }
}

/// include/thal_kernel.h, written by hand, declares the kernel ABI of `cpu_sim_kernel_abi`: the C
/// compiler checks every size, alignment and offset, and the constants, against the Rust types.
#[test]
fn kernel_header_matches_the_rust_abi() {
    use cpu_sim_kernel_abi::{self as abi, KernelArgs, KernelCall, KernelEntry, KernelTable};
    use std::mem::{align_of, offset_of, size_of};
    assert_eq!(offset_of!(KernelCall, args), 0, "a kernel's args pointer is the start of its KernelCall");
    let checks: Vec<(&str, usize)> = vec![
        ("sizeof(thal_kernel_args_t)", size_of::<KernelCall>()),
        ("_Alignof(thal_kernel_args_t)", align_of::<KernelCall>()),
        ("offsetof(thal_kernel_args_t, workgroup_id)", offset_of!(KernelArgs, workgroup_id)),
        ("offsetof(thal_kernel_args_t, workgroup_count)", offset_of!(KernelArgs, workgroup_count)),
        ("offsetof(thal_kernel_args_t, workgroup_size)", offset_of!(KernelArgs, workgroup_size)),
        ("offsetof(thal_kernel_args_t, constants)", offset_of!(KernelArgs, constants)),
        ("offsetof(thal_kernel_args_t, constant_count)", offset_of!(KernelArgs, constant_count)),
        ("offsetof(thal_kernel_args_t, bindings)", offset_of!(KernelArgs, bindings)),
        ("offsetof(thal_kernel_args_t, binding_lengths)", offset_of!(KernelArgs, binding_lengths)),
        ("offsetof(thal_kernel_args_t, binding_count)", offset_of!(KernelArgs, binding_count)),
        ("offsetof(thal_kernel_args_t, set_error)", offset_of!(KernelCall, set_error)),
        ("offsetof(thal_kernel_args_t, error_context)", offset_of!(KernelCall, error_context)),
        ("sizeof(thal_kernel_entry_t)", size_of::<KernelEntry>()),
        ("_Alignof(thal_kernel_entry_t)", align_of::<KernelEntry>()),
        ("offsetof(thal_kernel_entry_t, name)", offset_of!(KernelEntry, name)),
        ("offsetof(thal_kernel_entry_t, workgroup_size)", offset_of!(KernelEntry, workgroup_size)),
        ("offsetof(thal_kernel_entry_t, binding_count)", offset_of!(KernelEntry, binding_count)),
        ("offsetof(thal_kernel_entry_t, constant_count)", offset_of!(KernelEntry, constant_count)),
        ("offsetof(thal_kernel_entry_t, function)", offset_of!(KernelEntry, function)),
        ("sizeof(thal_kernel_table_t)", size_of::<KernelTable>()),
        ("_Alignof(thal_kernel_table_t)", align_of::<KernelTable>()),
        ("offsetof(thal_kernel_table_t, abi_version)", offset_of!(KernelTable, abi_version)),
        ("offsetof(thal_kernel_table_t, count)", offset_of!(KernelTable, count)),
        ("offsetof(thal_kernel_table_t, entries)", offset_of!(KernelTable, entries)),
        ("THAL_KERNEL_ABI_VERSION", abi::ABI_VERSION as usize),
        ("THAL_KERNEL_MAX_ERROR_MESSAGE", abi::MAX_ERROR_MESSAGE),
        ("sizeof(THAL_KERNEL_TABLE_SYMBOL)", abi::KERNEL_TABLE_SYMBOL.len() + 1),
    ];
    let mut source = String::from("#include <stddef.h>\n#include <thal_kernel.h>\n");
    for (expr, value) in &checks {
        source += &format!("_Static_assert({expr} == {value}, \"{expr} is {value} in Rust\");\n");
    }
    // The symbol's name itself, and the function type's signature (a wrong one does not compile).
    let symbol = format!("#define THAL_KERNEL_TABLE_SYMBOL \"{}\"", abi::KERNEL_TABLE_SYMBOL);
    source += "static int32_t k(const thal_kernel_args_t *a) { a->set_error(a, \"m\"); return 1; }\n";
    source += "static const thal_kernel_entry_t e = {\"k\", {1, 1, 1}, 0, 0, k};\n";
    source += "const thal_kernel_entry_t *entry(void) { return &e; }\n";
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = std::fs::read_to_string(crate_dir.join("include/thal_kernel.h")).expect("thal_kernel.h is readable");
    assert!(header.contains(&symbol), "thal_kernel.h lacks `{symbol}`");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kernel-abi-layout.c");
    std::fs::write(&out, source).expect("the target tmp directory is writable");
    let include = format!("-I{}", crate_dir.join("include").display());
    compile(&["-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", &include, out.to_str().expect("UTF-8 path")]);
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
    spirv_executables,
    collectives,
    transient_buffers_and_indirect_dispatch,
    stale_handles,
    forged_handles,
    retain_release_from_threads,
}
