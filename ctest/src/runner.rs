//! Running cases: one case with its leak check ([`run_case`]), one case as a `#[test]`
//! ([`run_test`], what `instantiate_cts!` calls), or the whole suite as a table ([`run_suite`]).

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hal::Device;

use crate::check::{CaseError, CaseResult};
use crate::context::Cx;
use crate::fixture::Fixture;

/// One case of the suite.
#[derive(Clone, Copy)]
pub struct Case {
    /// The area (one file of the suite): "semaphore", "dispatch", ...
    pub area: &'static str,
    /// The case's name within its area.
    pub name: &'static str,
    /// The case.
    pub run: fn(&Cx) -> CaseResult,
}

impl Case {
    /// `area::name`, as filters and test names use it.
    pub fn id(&self) -> String {
        format!("{}::{}", self.area, self.name)
    }
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.id())
    }
}

/// Every case of the suite, grouped by area.
pub fn cases() -> &'static [Case] {
    crate::CASES
}

/// The case `area::name`.
pub fn find(area: &str, name: &str) -> Option<&'static Case> {
    cases().iter().find(|c| c.area == area && c.name == name)
}

/// The areas in suite order, each with its number of cases.
pub fn area_counts() -> Vec<(&'static str, usize)> {
    let mut counts: Vec<(&'static str, usize)> = Vec::new();
    for case in cases() {
        match counts.iter_mut().find(|(area, _)| *area == case.area) {
            Some((_, n)) => *n += 1,
            None => counts.push((case.area, 1)),
        }
    }
    counts
}

/// How a case ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It passed and the device was idle afterwards.
    Pass,
    /// It failed, or leaked: the message.
    Fail(String),
    /// It does not apply to this device: the reason.
    Skip(String),
}

/// A case's outcome and how long it took.
#[derive(Clone, Debug)]
pub struct CaseReport {
    /// The case.
    pub case: &'static Case,
    /// How it ended.
    pub outcome: Outcome,
    /// Time spent, leak check included.
    pub elapsed: Duration,
    /// What the case noted about how it ran (e.g. which variant), see [`Cx::note`].
    pub notes: Vec<String>,
}

/// How long a case may run before it counts as hung (its thread is abandoned).
pub const CASE_TIME_LIMIT: Duration = Duration::from_secs(60);

/// How long completion may take to return a device's pools to idle after a case.
pub const IDLE_LIMIT: Duration = Duration::from_secs(2);

/// Runs `case` on a device of `fixture` on its own thread, then checks every device it used is back
/// to idle (a pool still in use after [`IDLE_LIMIT`] fails the case). Never panics.
pub fn run_case(fixture: &Fixture, case: &'static Case) -> CaseReport {
    let start = Instant::now();
    let notes = Arc::new(Mutex::new(Vec::new()));
    let report = |outcome| CaseReport {
        case,
        outcome,
        elapsed: start.elapsed(),
        notes: std::mem::take(&mut *notes.lock().unwrap_or_else(|p| p.into_inner())),
    };
    if let Some(notice) = fixture.unavailable() {
        return report(Outcome::Skip(notice.to_string()));
    }
    let device = match fixture.case_device() {
        Ok(device) => device,
        Err(e) => return report(Outcome::Fail(format!("creating the device: {e}"))),
    };
    let others = Arc::new(Mutex::new(Vec::new()));
    let cx = Cx::new(fixture.clone(), device.clone(), others.clone(), notes.clone());
    let (done, result) = mpsc::channel();
    let run = case.run;
    let spawned = std::thread::Builder::new().name(format!("ctest {}", case.id())).spawn(move || {
        let result = catch_unwind(AssertUnwindSafe(|| run(&cx)));
        drop(cx);
        let _ = done.send(result);
    });
    let thread = match spawned {
        Ok(thread) => thread,
        Err(e) => return report(Outcome::Fail(format!("cannot start the case thread: {e}"))),
    };
    let outcome = match result.recv_timeout(CASE_TIME_LIMIT) {
        Ok(Ok(Ok(()))) => Outcome::Pass,
        Ok(Ok(Err(CaseError::Fail(message)))) => Outcome::Fail(message),
        Ok(Ok(Err(CaseError::Skip(reason)))) => Outcome::Skip(reason),
        Ok(Err(panic)) => Outcome::Fail(format!("panicked: {}", panic_message(&*panic))),
        Err(RecvTimeoutError::Timeout) => {
            return report(Outcome::Fail(format!(
                "still running after {CASE_TIME_LIMIT:?} (hung); device report:\n{}",
                device.report()
            )));
        }
        Err(RecvTimeoutError::Disconnected) => Outcome::Fail("the case thread ended without a result".into()),
    };
    let _ = thread.join();
    let mut devices = vec![device];
    devices.append(&mut others.lock().unwrap_or_else(|p| p.into_inner()));
    let outcome = match (outcome, check_idle(&devices, IDLE_LIMIT)) {
        (outcome, None) => outcome,
        (Outcome::Fail(message), Some(leak)) => Outcome::Fail(format!("{message}\n(also not idle afterwards: {leak})")),
        (_, Some(leak)) => Outcome::Fail(format!("resources not back to idle: {leak}")),
    };
    drop(devices);
    report(outcome)
}

/// Whether a pool counts for leak checks (informational pools, such as memory bytes, do not).
pub fn is_checked_pool(name: &str) -> bool {
    !name.contains("informational")
}

/// Polls `devices` until every checked pool is idle; `Some(description)` if one is not by `limit`.
pub fn check_idle(devices: &[Device], limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    loop {
        let busy: Vec<&Device> = devices
            .iter()
            .filter(|d| d.resource_usage().pools.iter().any(|p| is_checked_pool(p.name) && p.in_use > 0))
            .collect();
        if busy.is_empty() {
            return None;
        }
        if Instant::now() >= deadline {
            let mut out = String::new();
            for device in busy {
                let _ = write!(out, "{}: {}\n{}\n", device.id(), device.resource_usage(), device.report());
            }
            return Some(out);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

/// Runs case `area::name` as the test `test_name` (its libtest name): panics with the failure
/// message; a skip passes with a note. `instantiate_cts!` generates one `#[test]` calling this per
/// case. Unless `CTEST_ISOLATE=0`, the case runs in a child process (this test binary, re-run for
/// exactly `test_name`), so a crash fails only this test. A fixture that is
/// [not available](Fixture::not_available) prints `not run: <notice>` on stderr, past libtest's
/// capture, and passes without running the case (a driver that must not pass so panics in its
/// fixture instead, as driver-cuda's does under `HAL_REQUIRE_CUDA=1`).
pub fn run_test(fixture: impl FnOnce() -> Fixture, test_name: &str, area: &str, name: &str) {
    let Some(case) = find(area, name) else {
        panic!("ctest has no case {area}::{name}");
    };
    let fixture = fixture();
    if let Some(notice) = fixture.unavailable() {
        // Straight to stderr: libtest would hide a printed line of a test that passes.
        let _ = writeln!(std::io::stderr(), "not run: {test_name}: {notice}");
        return;
    }
    let report = if crate::isolate::isolation_wanted() {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut command = std::process::Command::new(exe);
        // --include-ignored: the parent may itself run because of it (a test ignored where its
        // hardware was missing at build time); the child must run the same test.
        command.args([test_name, "--exact", "--include-ignored", "--nocapture", "--test-threads=1"]);
        crate::isolate::run_in_child(command, case)
    } else {
        let report = run_case(&fixture, case);
        if crate::isolate::is_child() {
            crate::isolate::print_outcome(&report);
            return;
        }
        report
    };
    for note in &report.notes {
        println!("ctest {area}::{name}: {note}");
    }
    match report.outcome {
        Outcome::Pass => {}
        Outcome::Skip(reason) => eprintln!("ctest {area}::{name} skipped: {reason}"),
        Outcome::Fail(message) => panic!("ctest {area}::{name} failed: {message}"),
    }
}

/// Counts per area of one suite run.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// (area, passed, failed, skipped), in suite order.
    pub areas: Vec<(&'static str, usize, usize, usize)>,
    /// Every report, in run order.
    pub reports: Vec<CaseReport>,
}

impl Summary {
    /// Cases that failed.
    pub fn failed(&self) -> usize {
        self.areas.iter().map(|a| a.2).sum()
    }

    /// Cases that passed.
    pub fn passed(&self) -> usize {
        self.areas.iter().map(|a| a.1).sum()
    }

    /// Cases skipped.
    pub fn skipped(&self) -> usize {
        self.areas.iter().map(|a| a.3).sum()
    }
}

/// Runs every case whose `area::name` contains `filter` (all when `None`) in this process, writing a table row per
/// case to `out` as it finishes, then the details of failures and the counts per area.
pub fn run_suite(fixture: &Fixture, filter: Option<&str>, out: &mut dyn Write) -> std::io::Result<Summary> {
    run_suite_with(fixture.driver(), filter, &mut |case| run_case(fixture, case), out)
}

/// [`run_suite`] with the way each case is run left to `run` (e.g. in a child process, see
/// [`crate::isolate`]).
pub fn run_suite_with(
    driver: &str,
    filter: Option<&str>,
    run: &mut dyn FnMut(&'static Case) -> CaseReport,
    out: &mut dyn Write,
) -> std::io::Result<Summary> {
    let selected: Vec<&'static Case> = cases().iter().filter(|c| filter.is_none_or(|f| c.id().contains(f))).collect();
    let width = selected.iter().map(|c| c.name.len()).max().unwrap_or(4).max(4);
    writeln!(out, "ctest: {} case(s) on driver '{driver}'", selected.len())?;
    writeln!(out, "{:<16} {:<width$} {:>10}  RESULT", "AREA", "CASE", "TIME")?;
    let mut summary = Summary::default();
    let mut counts: BTreeMap<&'static str, (usize, usize, usize)> = BTreeMap::new();
    for case in selected {
        let report = run(case);
        let time = format!("{:.1} ms", report.elapsed.as_secs_f64() * 1e3);
        let entry = counts.entry(case.area).or_default();
        let result = match &report.outcome {
            Outcome::Pass => {
                entry.0 += 1;
                match report.notes.is_empty() {
                    true => "PASS".to_string(),
                    false => format!("PASS ({})", report.notes.join("; ")),
                }
            }
            Outcome::Fail(message) => {
                entry.1 += 1;
                format!("FAIL {}", message.lines().next().unwrap_or(""))
            }
            Outcome::Skip(reason) => {
                entry.2 += 1;
                format!("SKIP {reason}")
            }
        };
        writeln!(out, "{:<16} {:<width$} {time:>10}  {result}", case.area, case.name)?;
        out.flush()?;
        summary.reports.push(report);
    }
    let failures: Vec<&CaseReport> = summary.reports.iter().filter(|r| matches!(r.outcome, Outcome::Fail(_))).collect();
    if !failures.is_empty() {
        writeln!(out, "\nfailures:")?;
        for report in failures {
            if let Outcome::Fail(message) = &report.outcome {
                writeln!(out, "--- {}\n{message}", report.case.id())?;
            }
        }
    }
    for (area, _) in area_counts() {
        if let Some(&(pass, fail, skip)) = counts.get(area) {
            summary.areas.push((area, pass, fail, skip));
        }
    }
    writeln!(out, "\n{:<16} {:>5} {:>5} {:>5}", "AREA", "PASS", "FAIL", "SKIP")?;
    for (area, pass, fail, skip) in &summary.areas {
        writeln!(out, "{area:<16} {pass:>5} {fail:>5} {skip:>5}")?;
    }
    writeln!(out, "{:<16} {:>5} {:>5} {:>5}", "total", summary.passed(), summary.failed(), summary.skipped())?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_ids_are_unique_and_areas_contiguous() {
        let mut ids: Vec<String> = cases().iter().map(Case::id).collect();
        let total = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), total, "duplicate case ids");
        let areas = area_counts();
        assert_eq!(areas.iter().map(|a| a.1).sum::<usize>(), total);
        let mut names: Vec<&str> = areas.iter().map(|a| a.0).collect();
        names.dedup();
        assert_eq!(names.len(), areas.len(), "an area's cases are not listed together");
        assert!(total >= 120, "the suite has {total} cases");
    }

    #[test]
    fn find_by_area_and_name() {
        let case = find("semaphore", "query_after_create").expect("a known case");
        assert_eq!(case.id(), "semaphore::query_after_create");
        assert!(find("semaphore", "no_such_case").is_none());
    }
}
