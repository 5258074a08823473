//! The `hal` binary's commands, outputs and exit codes.

use std::process::{Command, Output};

fn hal(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hal")).args(args).output().expect("run the hal binary")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn devices_lists_cpu_sim() {
    let out = hal(&["devices"]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("cpu-sim: 1 device(s)\n  device 0: cpu-sim"), "{stdout}");
    assert!(stdout.contains("queues:"), "{stdout}");
}

#[test]
fn run_prints_the_check_time_submissions_and_utilisation() {
    let out = hal(&["run", "--size", "48", "--steps", "30"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for needle in
        ["check:        PASS", "wall time:", "submissions:  126 (", "queue 0:      busy", "queue 1:      busy"]
    {
        assert!(stdout.contains(needle), "missing '{needle}' in:\n{stdout}");
    }
}

#[test]
fn errors_are_one_line_with_a_non_zero_exit() {
    let out = hal(&["run", "--driver", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("hal: error: ") && stderr.contains("'nope'"), "{stderr}");

    let out = hal(&["run", "--size", "many"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr), "hal: --size wants a whole number, got 'many' (see `hal help`)\n");

    let out = hal(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn help_lists_every_command() {
    let out = hal(&["help"]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    for command in ["devices", "run [--driver NAME]", "cts [--driver NAME]", "bench [--driver NAME] [--quick]"] {
        assert!(stdout.contains(command), "{stdout}");
    }
}

#[test]
fn cts_lists_cases_and_runs_one_in_a_child_process() {
    let out = hal(&["cts", "--list"]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    let first = stdout.lines().next().expect("at least one case").to_string();
    assert!(first.contains("::"), "{stdout}");

    // Pass or fail is the suite's business; the runner must run exactly that case and report it.
    let out = hal(&["cts", "--filter", &first]);
    let stdout = text(&out.stdout);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("on driver 'cpu-sim'"), "{stdout}");
    let (area, case) = first.split_once("::").unwrap();
    assert!(stdout.lines().any(|l| l.starts_with(area) && l.contains(case)), "{stdout}");

    let out = hal(&["cts", "--filter", "no such case anywhere"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no case matches"), "{}", text(&out.stderr));
}
