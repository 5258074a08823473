//! IREE's HAL conformance suite against one IREE driver: `cargo test -p timeline-hal-iree-cts`.
//!
//! Environment (all optional):
//! - `IREE_CTS_DRIVER`: the driver (default `thal-cpu-sim` with the `thal` feature, else `local-sync`);
//! - `IREE_CTS_TAGS`: comma-separated capability tags replacing the driver's own (`cts/backends.cc`);
//! - `IREE_CTS_EXECUTABLE_FORMAT`: the format of the compiled executables (default
//!   `embedded-elf-<arch>`);
//! - `IREE_CTS_TESTDATA`: the directory of compiled executables (`executable_test.bin`, ...); empty
//!   turns the executable suites off. Default: found under `hal-iree/testdata/cts/` if present;
//! - `IREE_CTS_VERIFY_XFAILS=1`: run the expected failures too and fail on those that pass;
//! - `IREE_CTS_TIMEOUT_S`: how long the whole run may take before it is aborted as hung (default
//!   600; the case that hangs is the last `[ RUN ]` line printed).
//!
//! Arguments after `--` go to GoogleTest (`--gtest_filter=*Semaphore*`) and IREE's flag parser.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hal_iree_cts::{Options, Outcome, SuiteCounts};

fn main() -> ExitCode {
    abort_when_hung();
    if let Err(error) = register_our_drivers() {
        eprintln!("iree-cts: registering the thal drivers failed: {error}");
        return ExitCode::FAILURE;
    }
    let env = |name: &str| std::env::var(name).ok();
    let testdata_dir = match env("IREE_CTS_TESTDATA") {
        Some(dir) if dir.is_empty() => None,
        Some(dir) => Some(PathBuf::from(dir)),
        None => hal_iree_cts::find_testdata(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/cts")),
    };
    let options = Options {
        driver: env("IREE_CTS_DRIVER"),
        tags: env("IREE_CTS_TAGS"),
        executable_format: env("IREE_CTS_EXECUTABLE_FORMAT"),
        testdata_dir,
    };
    let args: Vec<String> = std::env::args().collect();
    match hal_iree_cts::run(&options, &args) {
        Outcome::Passed(suites) => {
            print_counts(&suites);
            ExitCode::SUCCESS
        }
        Outcome::Failed(suites) => {
            print_counts(&suites);
            eprintln!("iree-cts: some cases failed (their names are in gtest's summary above)");
            ExitCode::FAILURE
        }
        Outcome::NotStarted => ExitCode::FAILURE,
    }
}

/// Aborts the process once the run has taken longer than `IREE_CTS_TIMEOUT_S` (default 600 s): a
/// hung case then fails the run at once, named by the last `[ RUN ]` line, instead of holding it
/// until an outer timeout kills it without a word.
fn abort_when_hung() {
    let limit = std::env::var("IREE_CTS_TIMEOUT_S").ok().and_then(|s| s.parse::<u64>().ok()).unwrap_or(600);
    let watchdog = std::thread::Builder::new().name("iree-cts-watchdog".into()).spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(limit));
        eprintln!("iree-cts: no result after {limit} s (IREE_CTS_TIMEOUT_S): the case last started above hangs");
        std::process::abort();
    });
    if let Err(error) = watchdog {
        eprintln!("iree-cts: no watchdog thread ({error}): a hung case will not be aborted");
    }
}

/// With the `thal` feature: puts our `thal-*` driver factories into IREE's default registry, where the
/// CTS looks its driver up.
#[cfg(feature = "thal")]
fn register_our_drivers() -> Result<(), String> {
    // SAFETY: IREE's default registry is a process-wide object that lives as long as the process; the
    // call happens before the CTS (the only other user in this process) starts.
    unsafe { hal_iree::register_drivers(eerie_sys::runtime::iree_hal_driver_registry_default()) }
        .map_err(|error| format!("{error:?}"))
}

/// Without the `thal` feature there are none of ours: IREE's built-in drivers only.
#[cfg(not(feature = "thal"))]
fn register_our_drivers() -> Result<(), String> {
    Ok(())
}

fn print_counts(suites: &[SuiteCounts]) {
    let width = suites.iter().map(|suite| suite.name.len()).max().unwrap_or(0).max("suite".len());
    println!("\n{:width$}  {:>6}  {:>6}  {:>7}", "suite", "passed", "failed", "skipped");
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for suite in suites {
        println!("{:width$}  {:>6}  {:>6}  {:>7}", suite.name, suite.passed, suite.failed, suite.skipped);
        passed += suite.passed;
        failed += suite.failed;
        skipped += suite.skipped;
    }
    println!("{:width$}  {passed:>6}  {failed:>6}  {skipped:>7}", "total");
}
