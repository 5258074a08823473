//! The CTS runner: `ctest --driver cpu-sim [--filter substr] [--in-process] [--shared-device] [--list]`.
//!
//! Prints a table of area, case, time and result (PASS, FAIL with the message, SKIP with the
//! reason), the details of each failure, and the counts per area; exits non-zero when a case fails.
//! Each case runs in a child process (this binary, with `--child area::case`) so a case that crashes
//! fails alone; `--in-process` runs them all here instead.
//! This binary knows the drivers ctest can build a catalogue for (cpu-sim); other drivers call
//! `ctest::run_suite` with their own `Fixture`.

use std::process::ExitCode;

use std::process::Command;

use ctest::runner::{area_counts, cases, run_case};
use ctest::{Fixture, isolate, run_suite_with};

const USAGE: &str = "usage: ctest [--driver NAME] [--filter SUBSTR] [--in-process] [--shared-device] [--list]
  --driver NAME     driver to test (default: cpu-sim; known here: cpu-sim)
  --filter SUBSTR   run only cases whose 'area::case' contains SUBSTR
  --in-process      run the cases in this process (default: one child process per case)
  --shared-device   run every case on one device (implies --in-process)
  --list            list the cases per area and exit";

struct Args {
    driver: String,
    filter: Option<String>,
    in_process: bool,
    shared: bool,
    list: bool,
    child: Option<String>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        driver: hal::DEFAULT_DRIVER.to_string(),
        filter: None,
        in_process: false,
        shared: false,
        list: false,
        child: None,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--driver" => parsed.driver = args.next().ok_or("--driver needs a name")?,
            "--filter" => parsed.filter = Some(args.next().ok_or("--filter needs a substring")?),
            "--in-process" => parsed.in_process = true,
            "--shared-device" => parsed.shared = true,
            "--child" => parsed.child = Some(args.next().ok_or("--child needs a case")?),
            "--list" => parsed.list = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    Ok(parsed)
}

fn fixture(driver: &str) -> Result<Fixture, String> {
    match driver {
        driver_cpu_sim::DRIVER_NAME => Ok(Fixture::cpu_sim()),
        other => Err(format!(
            "no kernel catalogue for driver '{other}' in this runner (known: {}); a driver crate runs the \
             suite with its own Fixture (see docs/conformance.md)",
            driver_cpu_sim::DRIVER_NAME
        )),
    }
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("ctest: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.list {
        for case in cases() {
            println!("{}", case.id());
        }
        for (area, count) in area_counts() {
            println!("{area:<16} {count:>4}");
        }
        println!("{:<16} {:>4}", "total", cases().len());
        return ExitCode::SUCCESS;
    }
    if let Some(id) = &args.child {
        return run_child(&args.driver, id);
    }
    let mut fixture = match fixture(&args.driver) {
        Ok(fixture) => fixture,
        Err(message) => {
            eprintln!("ctest: {message}");
            return ExitCode::from(2);
        }
    };
    if args.shared {
        fixture = fixture.with_shared_device();
    }
    let mut out = std::io::stdout().lock();
    let exe = std::env::current_exe();
    let mut run = |case: &'static ctest::Case| match (&exe, args.in_process || args.shared) {
        (Ok(exe), false) => {
            let mut command = Command::new(exe);
            command.args(["--driver", &args.driver, "--child", &case.id()]);
            isolate::run_in_child(command, case)
        }
        _ => run_case(&fixture, case),
    };
    match run_suite_with(&args.driver, args.filter.as_deref(), &mut run, &mut out) {
        Ok(summary) if summary.failed() == 0 && !summary.reports.is_empty() => ExitCode::SUCCESS,
        Ok(summary) if summary.reports.is_empty() => {
            eprintln!("ctest: no case matches the filter");
            ExitCode::from(2)
        }
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("ctest: writing the report: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs one case in-process and prints its outcome for the parent.
fn run_child(driver: &str, id: &str) -> ExitCode {
    let Some(case) = cases().iter().find(|c| c.id() == id) else {
        eprintln!("ctest: no case {id}");
        return ExitCode::from(2);
    };
    match fixture(driver) {
        Ok(fixture) => {
            isolate::print_outcome(&run_case(&fixture, case));
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("ctest: {message}");
            ExitCode::from(2)
        }
    }
}
