//! IREE's HAL conformance suite (CTS), compiled from the IREE sources eerie-sys vendors, run against
//! one IREE driver chosen at run time. The `iree_cts` test target (`cargo test`) is the way in; this
//! library is its small Rust face over the C++ entry point (`cts/entry.cc`).

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

// Nothing in Rust calls IREE here, but the CTS's C++ does: this links eerie-sys's runtime archive.
use eerie_sys as _;

/// The IREE driver the suite runs against when no other is asked for: our cpu-sim driver.
#[cfg(feature = "thal")]
pub const DEFAULT_DRIVER: &str = hal_iree::CPU_SIM_DRIVER;
/// The IREE driver the suite runs against when no other is asked for: without the `thal` feature,
/// IREE's own synchronous CPU driver.
#[cfg(not(feature = "thal"))]
pub const DEFAULT_DRIVER: &str = "local-sync";

/// What one run tests.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The IREE driver whose default device every case runs on; `None`: [`DEFAULT_DRIVER`].
    pub driver: Option<String>,
    /// Comma-separated capability tags replacing the driver's own (see `cts/backends.cc`).
    pub tags: Option<String>,
    /// The executable format the device loads; `None`: IREE's embedded ELF for this architecture.
    pub executable_format: Option<String>,
    /// A directory of compiled CTS executables (`executable_test.bin`, ...); `None`: the executable
    /// suites are not instantiated.
    pub testdata_dir: Option<PathBuf>,
}

/// The case counts of one gtest test suite (`CTS/AllocatorTest`, `CTS_Indirect/...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuiteCounts {
    /// The gtest suite name.
    pub name: String,
    /// Cases that passed.
    pub passed: u32,
    /// Cases that failed.
    pub failed: u32,
    /// Cases skipped: unsupported, expected to fail, or skipped by the case itself (a capability the
    /// device lacks).
    pub skipped: u32,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every case that ran passed or was skipped.
    Passed(Vec<SuiteCounts>),
    /// At least one case failed.
    Failed(Vec<SuiteCounts>),
    /// The run could not start (unknown driver, unreadable testdata); the reason is on stderr.
    NotStarted,
}

#[repr(C)]
struct RawOptions {
    driver_name: *const c_char,
    tags: *const c_char,
    executable_format: *const c_char,
    testdata_dir: *const c_char,
}

type ReportFn = unsafe extern "C" fn(*mut c_void, *const c_char, c_int, c_int, c_int);

unsafe extern "C" {
    fn thal_iree_cts_main(
        options: *const RawOptions,
        argc: c_int,
        argv: *mut *mut c_char,
        report: Option<ReportFn>,
        user_data: *mut c_void,
    ) -> c_int;
}

unsafe extern "C" fn collect(
    user_data: *mut c_void,
    name: *const c_char,
    passed: c_int,
    failed: c_int,
    skipped: c_int,
) {
    // SAFETY: `run` passes a `&mut Vec<SuiteCounts>` that outlives the C++ call making this one, and
    // nothing else touches it meanwhile; `name` is a NUL-terminated gtest suite name, valid for the call.
    let (suites, name) = unsafe { (&mut *user_data.cast::<Vec<SuiteCounts>>(), CStr::from_ptr(name)) };
    let count = |n: c_int| u32::try_from(n).unwrap_or(0);
    suites.push(SuiteCounts {
        name: name.to_string_lossy().into_owned(),
        passed: count(passed),
        failed: count(failed),
        skipped: count(skipped),
    });
}

static RAN: AtomicBool = AtomicBool::new(false);

/// Runs the CTS once with `args` (gtest flags such as `--gtest_filter=...`, and IREE flags; `args[0]`
/// is the program name). IREE's built-in drivers are registered first; drivers of our own must already
/// be in IREE's default registry.
///
/// # Panics
/// On a second call in one process: GoogleTest's main must run only once.
pub fn run(options: &Options, args: &[String]) -> Outcome {
    assert!(!RAN.swap(true, Ordering::SeqCst), "the CTS runs once per process");
    let text = |s: &str| CString::new(s).expect("no NUL inside an option");
    let path = |p: &Path| text(&p.to_string_lossy());
    let driver = text(options.driver.as_deref().unwrap_or(DEFAULT_DRIVER));
    let tags = options.tags.as_deref().map(text);
    let format = options.executable_format.as_deref().map(text);
    let testdata = options.testdata_dir.as_deref().map(path);
    let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    let raw = RawOptions {
        driver_name: driver.as_ptr(),
        tags: ptr(&tags),
        executable_format: ptr(&format),
        testdata_dir: ptr(&testdata),
    };
    let args: Vec<CString> = args.iter().map(|a| text(a)).collect();
    // argv as C has it: writable pointers, then NULL. Parsers may reorder these pointers, never the text.
    let mut argv: Vec<*mut c_char> = args.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    let argc = c_int::try_from(args.len()).expect("fewer than 2^31 arguments");
    let mut suites: Vec<SuiteCounts> = Vec::new();
    // SAFETY: every pointer in `raw` and `argv` points into a CString alive until this call returns;
    // argv has argc entries then NULL; `collect` matches the callback type and gets `suites`, which
    // nothing else touches during the call; RAN ensures GoogleTest's main runs once.
    let code =
        unsafe { thal_iree_cts_main(&raw, argc, argv.as_mut_ptr(), Some(collect), (&raw mut suites).cast::<c_void>()) };
    match code {
        0 => Outcome::Passed(suites),
        1 => Outcome::Failed(suites),
        _ => Outcome::NotStarted,
    }
}

/// The directory of compiled CTS executables to use when none is named: the first of `root` and its
/// subdirectories (two levels down) that holds `executable_test.bin`, or `None`.
pub fn find_testdata(root: &Path) -> Option<PathBuf> {
    let mut level = vec![root.to_path_buf()];
    for _ in 0..3 {
        if let Some(dir) = level.iter().find(|dir| dir.join("executable_test.bin").is_file()) {
            return Some(dir.clone());
        }
        let mut next: Vec<PathBuf> = level
            .iter()
            .filter_map(|dir| std::fs::read_dir(dir).ok())
            .flatten()
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.is_dir())
            .collect();
        next.sort();
        level = next;
    }
    None
}
