//! What the `hal` binary does with command lines it cannot honour (sizes that cannot
//! work, a trace path it cannot write, repeated flags) and the conveniences around them (`--help`
//! per command, `--version`, a closed stdout). Each case runs the built binary under a deadline.

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const HAL: &str = env!("CARGO_BIN_EXE_hal");

/// Waits for `child` for at most `limit`, killing it past that (a fixed binary answers at once).
fn finish_within(mut child: Child, limit: Duration) -> Output {
    let started = Instant::now();
    while child.try_wait().expect("poll the hal process").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hal still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("collect the hal process's output")
}

/// Runs `hal args` with piped output and a 20 s deadline.
fn hal(args: &[&str]) -> Output {
    let child =
        Command::new(HAL).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run the hal binary");
    finish_within(child, Duration::from_secs(20))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts a usage error: exit status 2 and one line on stderr containing every needle.
fn assert_usage_error(out: &Output, needles: &[&str]) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for needle in needles {
        assert!(stderr.contains(needle), "missing '{needle}' in: {stderr}");
    }
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}

#[test]
fn huge_steps_is_refused_not_aborted() {
    // Under a 4 GiB address-space limit, so a binary that pre-sizes its logs by the step count
    // (68 GB for this one) fails its allocation at once instead of taking the machine's memory.
    let child = Command::new("sh")
        .args(["-c", "ulimit -v 4194304; exec \"$0\" run --steps 4294967295"])
        .arg(HAL)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sh");
    let out = finish_within(child, Duration::from_secs(20));
    assert!(!text(&out.stderr).contains("memory allocation"), "{}", text(&out.stderr));
    assert_usage_error(&out, &["--steps", "4294967295"]);

    // Past u32 is still a number: say it is too large rather than "not a whole number".
    let out = hal(&["run", "--steps", "99999999999"]);
    assert_usage_error(&out, &["--steps", "99999999999", "between 0 and 10000000"]);
}

#[test]
fn bad_sizes_name_the_flag_and_value() {
    for (args, needles) in [
        (&["run", "--size", "4294967295"][..], &["--size", "4294967295", "between 4 and 16384"][..]),
        (&["run", "--size", "3"], &["--size", "3", "between 4 and 16384"]),
        (&["run", "--size", "18446744073709551616"], &["--size", "18446744073709551616"]),
        (&["run", "--window", "0"], &["--window", "0", "at least 1"]),
        (&["run", "--steps", "-1"], &["--steps", "'-1'", "between 0 and 10000000"]),
        (&["run", "--size", "many"], &["--size", "'many'", "not a whole number"]),
    ] {
        assert_usage_error(&hal(args), needles);
    }
}

#[test]
fn every_out_of_range_option_says_it_one_way() {
    for (args, expected) in [
        (
            &["run", "--devices", "0"][..],
            "invalid value '0' for '--devices <N>': 0 is out of range: it must be between 1 and 16",
        ),
        (
            &["run", "--size", "3"],
            "invalid value '3' for '--size <N>': 3 is out of range: it must be between 4 and 16384",
        ),
        (
            &["run", "--steps", "-1"],
            "invalid value '-1' for '--steps <K>': -1 is out of range: it must be between 0 and 10000000",
        ),
        (
            &["collective", "--rank", "2", "--ranks", "2", "--id-file", "unused"],
            "invalid value '2' for '--rank <R>': 2 is out of range: it must be between 0 and 1 (a rank of --ranks 2)",
        ),
    ] {
        let out = hal(args);
        assert_usage_error(&out, &[expected]);
        assert!(text(&out.stderr).starts_with(&format!("hal: error: {expected} (see `hal {} --help`)", args[0])));
    }
}

#[test]
fn unwritable_trace_fails_before_the_run() {
    let path = "/nonexistent/dir/run.json";
    let started = Instant::now();
    let out = hal(&["run", "--size", "64", "--steps", "50", "--trace", path]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("hal: error: ") && stderr.contains(path), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(out.stdout.is_empty(), "the run went ahead: {}", text(&out.stdout));
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
}

#[test]
fn a_failed_run_leaves_no_trace_file_behind() {
    // The trace file is created before the run; a run that then fails does not leave it empty.
    let path = std::env::temp_dir().join(format!("hal-unwritable-trace-{}.json", std::process::id()));
    let out = hal(&["run", "--driver", "nope", "--trace", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(!path.exists(), "left {} behind", path.display());
}

#[test]
fn repeated_flag_is_an_error() {
    // clap's wording: "the argument '--steps <K>' cannot be used multiple times".
    assert_usage_error(&hal(&["run", "--steps", "5", "--steps", "6"]), &["--steps", "multiple times"]);
    assert_usage_error(&hal(&["run", "--size=8", "--size", "8"]), &["--size", "multiple times"]);
    assert_usage_error(&hal(&["bench", "--quick", "--quick"]), &["--quick", "multiple times"]);
    // An option and its alias are one option.
    assert_usage_error(&hal(&["run", "--device", "cpu-sim", "--driver", "cpu-sim"]), &["--device", "multiple times"]);
}

#[test]
fn run_help_prints_usage_and_exits_0() {
    for args in [&["run", "--help"][..], &["run", "-h"], &["help", "run"], &["run", "--steps", "5", "--help"]] {
        let out = hal(args);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
        assert!(stdout.starts_with("usage: hal run "), "{args:?}: {stdout}");
        for flag in ["--driver", "--size", "--steps", "--window", "--trace"] {
            assert!(stdout.contains(flag), "{args:?}: {stdout}");
        }
        assert!(!stdout.contains("usage: hal cts"), "only run's usage: {stdout}");
    }
    let out = hal(&["cts", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with("usage: hal cts "), "{}", text(&out.stdout));
}

#[test]
fn version_prints_the_version() {
    for flag in ["--version", "-V"] {
        let out = hal(&[flag]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), format!("hal {}\n", env!("CARGO_PKG_VERSION")));
    }
}

#[test]
fn cts_list_into_a_closed_pipe_exits_quietly() {
    // A pipe whose reader is gone before hal starts: its first write fails with EPIPE
    // (`hal cts --list | head -1`, deterministically).
    let (reader, writer) = std::io::pipe().expect("make a pipe");
    drop(reader);
    let mut child = Command::new(HAL)
        .args(["cts", "--list"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the hal binary");
    let mut stderr = String::new();
    child.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("read stderr");
    let status = finish_within(child, Duration::from_secs(20)).status;
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(status.code(), Some(0));
}

/// `hal run --devices N` splits the stencil over N devices (on cpu-sim, devices of the one
/// ordinal, each opened as a separate device and named so), bit-exact against the CPU reference; a count outside 1..=16 is a usage error.
#[test]
fn run_over_several_devices_is_verified() {
    for (count, halos) in [("2", "60 halo copies"), ("3", "120 halo copies")] {
        let out = hal(&["run", "--size", "96", "--steps", "30", "--devices", count]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
        assert!(stdout.contains(&format!("{count} parts on queue 0 of each of {count} devices")), "{stdout}");
        assert!(stdout.contains(halos), "{stdout}");
        assert!(stdout.contains("check:        PASS"), "{stdout}");
        // cpu-sim has one ordinal: each device of the run is named, the reopened ones as such.
        assert!(stdout.contains("device 0 = ordinal 0, device 1 = ordinal 0 opened again"), "{stdout}");
        assert!(stdout.contains("(each opening a separate device)") && !stdout.contains("ordinals"), "{stdout}");
        assert!(stdout.contains(&format!("device {}:", count.parse::<usize>().unwrap() - 1)), "{stdout}");
    }
    assert_usage_error(&hal(&["run", "--devices", "17"]), &["--devices", "17"]);
    assert_usage_error(&hal(&["run", "--devices", "0"]), &["--devices", "0"]);
}

#[test]
fn a_trace_device_that_takes_no_bytes_fails_before_the_run_with_the_write_error() {
    if !std::path::Path::new("/dev/full").exists() {
        return;
    }
    let out = hal(&["run", "--size", "64", "--steps", "50", "--trace", "/dev/full"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "hal: error: cannot write the trace to /dev/full: No space left on device (os error 28)\n"
    );
    assert!(out.stdout.is_empty(), "the run went ahead: {}", text(&out.stdout));
}

#[test]
fn bench_result_files_that_cannot_be_written_fail_before_the_bench() {
    let json = std::env::temp_dir().join(format!("hal-bench-json-{}.json", std::process::id()));
    let json = json.to_str().unwrap();
    for (args, path) in [
        (&["bench", "--quick", "--json", "/nonexistent/dir/b.json"][..], "/nonexistent/dir/b.json"),
        (&["bench", "--quick", "--json", json, "--svg", "/nonexistent/dir/b.svg"], "/nonexistent/dir/b.svg"),
    ] {
        let started = Instant::now();
        let out = hal(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.starts_with("hal: error: cannot create the ") && stderr.contains(path), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "the bench ran first: {stderr}");
        assert!(out.stdout.is_empty(), "the bench ran first: {}", text(&out.stdout));
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    }
    assert!(!std::path::Path::new(json).exists(), "the JSON file of a bench that did not run was left behind");
}
