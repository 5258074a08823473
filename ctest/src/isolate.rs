//! Running one case in a child process, so a case that crashes the process (a stack overflow, an
//! abort, a segfault in a driver) fails alone and by name instead of taking the whole run down.
//!
//! The child runs the case in-process and prints its outcome between two marker lines on stdout; the
//! parent reads them back. No marker means the child died: the case fails with its exit status and
//! the end of its output.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::runner::{CASE_TIME_LIMIT, Case, CaseReport, Outcome};

/// Set in a child's environment: run the case in-process and report it.
pub const CHILD_ENV: &str = "CTEST_CHILD";

/// Set to `0` to run generated tests in-process (e.g. under a debugger).
pub const ISOLATE_ENV: &str = "CTEST_ISOLATE";

const BEGIN: &str = "CTEST-OUTCOME-BEGIN";
const END: &str = "CTEST-OUTCOME-END";
/// Starts a line carrying one of the case's notes (printed before the outcome).
const NOTE: &str = "CTEST-NOTE ";

/// Whether this process is a child started by [`run_in_child`].
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Whether generated tests should isolate their case (the default; `CTEST_ISOLATE=0` turns it off).
pub fn isolation_wanted() -> bool {
    !is_child() && std::env::var(ISOLATE_ENV).map_or(true, |v| v != "0")
}

/// Prints `report`'s outcome for the parent (call in the child).
pub fn print_outcome(report: &CaseReport) {
    let (kind, text) = match &report.outcome {
        Outcome::Pass => ("PASS", String::new()),
        Outcome::Fail(message) => ("FAIL", message.clone()),
        Outcome::Skip(reason) => ("SKIP", reason.clone()),
    };
    for note in &report.notes {
        println!("\n{NOTE}{}", note.replace('\n', " "));
    }
    println!("\n{BEGIN} {kind} {}\n{text}\n{END}", report.elapsed.as_nanos());
}

/// Runs `command` (which must run exactly `case` and print its outcome with [`print_outcome`]) as a
/// child with [`CHILD_ENV`] set, killing it after [`CASE_TIME_LIMIT`] and a margin.
pub fn run_in_child(mut command: Command, case: &'static Case) -> CaseReport {
    let start = Instant::now();
    let report = |outcome| CaseReport { case, outcome, elapsed: start.elapsed(), notes: Vec::new() };
    command.env(CHILD_ENV, "1").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return report(Outcome::Fail(format!("cannot start the child process: {e}"))),
    };
    let readers = [child.stdout.take().map(drain), child.stderr.take().map(drain)];
    let limit = CASE_TIME_LIMIT + Duration::from_secs(10);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return report(Outcome::Fail(format!("waiting for the child process: {e}"))),
        }
    };
    let [stdout, stderr] = readers.map(|r| r.and_then(|h| h.join().ok()).unwrap_or_default());
    if let Some(parsed) = parse_outcome(&stdout) {
        return CaseReport { case, outcome: parsed.0, elapsed: parsed.1, notes: parse_notes(&stdout) };
    }
    let how = match status {
        Some(status) => format!("the case's process died ({status})"),
        None => format!("the case's process was killed after {limit:?}"),
    };
    report(Outcome::Fail(format!("{how}; its output ends with:\n{}", tail(&format!("{stdout}{stderr}"), 30))))
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

fn parse_outcome(stdout: &str) -> Option<(Outcome, Duration)> {
    let begin = stdout.rfind(BEGIN)?;
    let rest = &stdout[begin + BEGIN.len()..];
    let (header, body) = rest.split_once('\n')?;
    let body = &body[..body.rfind(END)?];
    let text = body.strip_suffix('\n').unwrap_or(body).to_string();
    let mut fields = header.split_whitespace();
    let kind = fields.next()?;
    let elapsed = Duration::from_nanos(fields.next()?.parse().ok()?);
    let outcome = match kind {
        "PASS" => Outcome::Pass,
        "FAIL" => Outcome::Fail(text),
        "SKIP" => Outcome::Skip(text),
        _ => return None,
    };
    Some((outcome, elapsed))
}

/// The notes the child printed before its outcome.
fn parse_notes(stdout: &str) -> Vec<String> {
    let end = stdout.rfind(BEGIN).unwrap_or(stdout.len());
    stdout[..end].lines().filter_map(|line| line.strip_prefix(NOTE)).map(str::to_string).collect()
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_round_trips_through_the_markers() {
        let stdout = format!("noise\n{BEGIN} FAIL 1500\nline one\nline two\n{END}\n");
        let (outcome, elapsed) = parse_outcome(&stdout).expect("parsed");
        assert_eq!(outcome, Outcome::Fail("line one\nline two".into()));
        assert_eq!(elapsed, Duration::from_nanos(1500));
        let (outcome, _) = parse_outcome(&format!("{BEGIN} PASS 1\n\n{END}\n")).expect("parsed");
        assert_eq!(outcome, Outcome::Pass);
        assert!(parse_outcome("thread panicked\n").is_none(), "no markers: the child died");
    }

    #[test]
    fn notes_come_back_with_the_outcome() {
        let stdout = format!("noise\n\n{NOTE}sticky variant\n\n{NOTE}second\n\n{BEGIN} PASS 1\n\n{END}\n");
        assert_eq!(parse_notes(&stdout), vec!["sticky variant".to_string(), "second".to_string()]);
        assert!(parse_notes(&format!("{BEGIN} PASS 1\n\n{END}\n")).is_empty());
    }
}
