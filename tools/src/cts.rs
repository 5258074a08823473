//! `hal cts`: the conformance suite (the `ctest` crate) on a driver, each case in a child process
//! (`hal cts --child AREA::CASE`) so a case that crashes fails alone, or all in this process.
//! Each driver crate supplies its fixture (ctest depends on no driver): cpu-sim's is
//! `driver_cpu_sim::cts::fixture()`, behind its `cts` feature; another driver's comes the same way.

use std::io::Write;
use std::process::Command;

use ctest::runner::{cases, run_case};
use ctest::{CaseReport, Fixture, Summary, isolate, run_suite_with};

/// The suite's fixture for `driver`: its devices and its kernels in the driver's format.
pub fn fixture(driver: &str) -> Result<Fixture, String> {
    match driver {
        driver_cpu_sim::DRIVER_NAME => Ok(driver_cpu_sim::cts::fixture()),
        crate::CUDA_DRIVER => Err(format!(
            "the suite's CUDA kernels are CUDA C compiled by NVRTC, which `hal` does not link; on a GPU run \
             the suite from driver-cuda's tests instead (driver '{driver}')"
        )),
        other => Err(format!("no conformance fixture for driver '{other}' (known: cpu-sim)")),
    }
}

/// The ids (`area::case`) of every case.
pub fn case_ids() -> Vec<String> {
    cases().iter().map(|c| c.id()).collect()
}

/// Runs the cases whose id contains `filter` (all when `None`) on `driver`, writing the suite's table
/// to `out`; each case runs in a child process started with `child` (given the case's id) unless
/// `child` is `None`, when they all run in this process (on one device shared by every case when
/// `shared_device`). `on_case` is given each case's report as the case ends, before its row is
/// written. A filter that matches no case is an error, before anything is written.
pub fn run(
    driver: &str,
    filter: Option<&str>,
    child: Option<&dyn Fn(&str) -> Command>,
    shared_device: bool,
    out: &mut dyn Write,
    on_case: &mut dyn FnMut(&CaseReport),
) -> Result<Summary, String> {
    // Checked first: a filter that matches nothing is an error, without an empty table before it.
    if !cases().iter().any(|case| filter.is_none_or(|f| case.id().contains(f))) {
        return Err(format!("no case matches the filter '{}' (see `hal cts --list`)", filter.unwrap_or("")));
    }
    let mut fixture = fixture(driver)?;
    if shared_device {
        fixture = fixture.with_shared_device();
    }
    let mut run_one = |case: &'static ctest::Case| {
        let report = match child {
            Some(child) => isolate::run_in_child(child(&case.id()), case),
            None => run_case(&fixture, case),
        };
        on_case(&report);
        report
    };
    run_suite_with(driver, filter, &mut run_one, out).map_err(|e| format!("writing the report: {e}"))
}

/// Runs case `id` in this process and prints its outcome for the parent (the child's side of
/// [`run`]).
pub fn run_child(driver: &str, id: &str) -> Result<(), String> {
    let case = cases().iter().find(|c| c.id() == id).ok_or_else(|| format!("no case {id}"))?;
    isolate::print_outcome(&run_case(&fixture(driver)?, case));
    Ok(())
}
