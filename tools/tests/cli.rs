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
    assert!(stdout.starts_with("cpu-sim: 1 device\n  device 0: cpu-sim"), "{stdout}");
    assert!(stdout.contains("queues:"), "{stdout}");
    assert!(stdout.contains("    select with:           --device cpu-sim:0\n"), "{stdout}");
}

#[test]
fn devices_prints_sizes_one_way_and_thread_counts_that_agree() {
    let stdout = text(&hal(&["devices"]).stdout);
    assert!(stdout.contains("    max allocation:        4 GiB\n"), "{stdout}");
    assert!(stdout.contains("    memory_limit:          8 GiB\n"), "{stdout}");
    assert!(!stdout.contains("bytes") && !stdout.contains("8589934592"), "{stdout}");
    // The device's name counts its workgroup runners; the pool-threads property says the same number.
    let runners = stdout.split_once("device 0: cpu-sim (").and_then(|(_, rest)| rest.split_once(" workgroup runners)"));
    let runners = runners.expect("the runner count in the name").0;
    let threads = stdout.lines().find(|l| l.trim_start().starts_with("workgroup_threads:")).expect("the property");
    assert!(threads.ends_with(&format!(": {runners} workgroup runners")), "{threads} vs {runners} runners");
}

#[test]
fn device_is_chosen_by_driver_and_ordinal_as_devices_spells_it() {
    let out = hal(&["run", "--device", "cpu-sim:0", "--size", "16", "--steps", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("driver 'cpu-sim'"), "{}", text(&out.stdout));

    // A device that is not there: named, with the ones that are.
    let out = hal(&["run", "--device", "cpu-sim:3"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    for needle in ["'cpu-sim:3'", "device 3 does not exist", "available devices: cpu-sim:0"] {
        assert!(stderr.contains(needle), "missing '{needle}' in: {stderr}");
    }

    // By its stable id, as `hal devices` lists it; an id no device has is named, with the ones there are.
    let out = hal(&["run", "--device", "cpu-sim-0", "--size", "16", "--steps", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = hal(&["run", "--device", "cpu-sim:no-such-id"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no device has the id 'no-such-id'") && stderr.contains("cpu-sim:0 = cpu-sim-0"),
        "{stderr}"
    );

    // A spelling that is not a device path: a usage error.
    let out = hal(&["run", "--device", ":1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("':1' names no driver or device"), "{}", text(&out.stderr));
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
    assert!(stderr.starts_with("hal: error: ") && stderr.contains("'nope"), "{stderr}");
    assert!(stderr.contains("available devices: cpu-sim:0"), "{stderr}");

    let out = hal(&["run", "--size", "many"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "hal: error: invalid value 'many' for '--size <N>': not a whole number (see `hal run --help`)\n"
    );

    let out = hal(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr), "hal: error: unrecognized subcommand 'frobnicate' (see `hal --help`)\n");

    // No command at all: the usage, on stderr, as the usage error it is.
    let out = hal(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("usage: hal <COMMAND>"), "{}", text(&out.stderr));
}

#[test]
fn help_lists_every_command() {
    let out = hal(&["help"]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    for command in ["devices", "run", "cts", "bench"] {
        assert!(stdout.lines().any(|l| l.starts_with(&format!("  {command} "))), "{command}: {stdout}");
    }
    assert!(stdout.contains("Exit status: 0 on success"), "{stdout}");
    assert_eq!(stdout, text(&hal(&["--help"]).stdout));
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

    // A usage error (status 2, as every bad argument), alone: no empty table before it.
    let out = hal(&["cts", "--filter", "no such case anywhere"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "hal: error: no case matches the filter 'no such case anywhere'; `hal cts --list` lists the cases \
         (see `hal cts --help`)\n"
    );
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}

#[test]
fn piped_runs_draw_no_progress_bar() {
    // Stdout and stderr are pipes here: the bar is hidden, and no carriage return or escape code
    // reaches either stream.
    for args in [&["run", "--size", "16", "--steps", "50"][..], &["cts", "--filter", "device::default_device"]] {
        let out = hal(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}{}", text(&out.stdout), text(&out.stderr));
        for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            assert!(!bytes.iter().any(|b| matches!(b, b'\r' | 0x1b)), "{args:?} {stream}: {:?}", text(bytes));
        }
        assert!(out.stderr.is_empty(), "{args:?}: {}", text(&out.stderr));
    }
}

/// A fresh directory for one test's files, removed with everything in it when dropped.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("hal-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    Scratch(dir)
}

/// Starts `hal` with `args` (see [`finish_within`]).
fn hal_started(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_hal"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the hal binary")
}

/// `child`'s output, or a failure if it has not exited within `limit` (it is killed).
fn finish_within(mut child: std::process::Child, limit: std::time::Duration) -> Output {
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().expect("child status").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("hal did not finish within {limit:?}: {}", text(&child.wait_with_output().unwrap().stderr));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.wait_with_output().expect("child output")
}

#[test]
fn collective_runs_one_rank_per_process_through_an_id_file() {
    let dir = scratch("collective");
    let id_file = dir.0.join("id");
    let id_file = id_file.to_str().unwrap();
    let limit = std::time::Duration::from_secs(60);
    // Rank 1 first: it waits for the file rank 0 writes.
    let ranks: Vec<_> = (0..2)
        .rev()
        .map(|rank| {
            let rank = rank.to_string();
            let args = ["collective", "--rank", &rank, "--ranks", "2", "--id-file", id_file, "--elements", "100"];
            hal_started(&args)
        })
        .collect();
    for (child, rank) in ranks.into_iter().zip([1, 0]) {
        let out = finish_within(child, limit);
        assert!(out.status.success(), "rank {rank}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let expected = format!(
            "rank {rank} of 2 on cpu-sim:0: checked all-reduce (f32 x 100), all-gather (i32 x 100 per rank) and \
             barrier, 3 iterations; join "
        );
        assert!(stdout.starts_with(&expected) && stdout.lines().count() == 1, "{stdout}");
    }
}

#[test]
fn collective_rank_whose_peers_never_come_fails_within_its_timeout() {
    let dir = scratch("collective-alone");
    let id_file = dir.0.join("id");
    let id_file = id_file.to_str().unwrap();
    let limit = std::time::Duration::from_secs(30);
    let started = std::time::Instant::now();
    let alone = ["collective", "--rank", "0", "--ranks", "2", "--id-file", id_file, "--timeout", "1"];
    let out = finish_within(hal_started(&alone), limit);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "rank 0 of 2: iteration 0's collectives did not finish within 1.0 s: is every one of the 2 \
                         ranks running"
        ),
        "{stderr}"
    );
    std::fs::remove_file(id_file).expect("rank 0 published the id");
    let no_id = ["collective", "--rank", "1", "--ranks", "2", "--id-file", id_file, "--timeout", "1"];
    let out = finish_within(hal_started(&no_id), limit);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("rank 1 of 2: no channel id at {id_file} after 1.0 s")), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "both gave up near their 1 s timeout");
    let out = hal(&["collective", "--rank", "2", "--ranks", "2", "--id-file", id_file]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("2 is out of range: it must be between 0 and 1"), "{}", text(&out.stderr));
}

#[test]
fn counts_of_one_are_singular() {
    let out = hal(&["run", "--size", "16", "--steps", "1", "--window", "1"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for needle in ["f32, 1 step, halves", "host waited 0 times (window of 1 step)"] {
        assert!(stdout.contains(needle), "missing '{needle}' in:\n{stdout}");
    }
    assert!(!stdout.contains("(s)") && !stdout.contains(" 1 steps"), "{stdout}");
}

#[test]
fn an_unavailable_driver_is_explained_once_and_briefly() {
    let devices = text(&hal(&["devices"]).stdout);
    assert!(devices.lines().all(|l| l.len() < 250), "{devices}");
    assert!(!devices.contains("UNAVAILABLE: cuda:"), "the listing names the driver once: {devices}");
    let mut asked = vec!["bogus"];
    if devices.contains("\ncuda: unavailable: ") {
        asked.push("cuda");
    }
    for device in asked {
        let out = hal(&["run", "--device", device]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        // Room for the listing of cpu-sim, vulkan (lavapipe's 32-digit id) and cuda's reason.
        assert!(!stderr.contains("cuda: cuda:") && stderr.len() < 600, "{device}: {stderr}");
        assert!(stderr.matches("the CUDA driver library was not found").count() <= 1, "{stderr}");
        assert!(stderr.contains("available devices: cpu-sim:0"), "{stderr}");
    }
}

#[test]
fn run_without_the_check_says_it_was_skipped() {
    let out = hal(&["run", "--size", "32", "--steps", "3", "--no-check"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("  check:        skipped (--no-check)"), "{stdout}");
    assert!(!stdout.contains("PASS") && !stdout.contains("CPU reference 0"), "{stdout}");
    let help = text(&hal(&["run", "--help"]).stdout);
    assert!(help.contains("--no-check") && help.contains("CPU reference"), "{help}");
}

#[test]
fn run_on_vulkan_is_bit_exact_or_explains_why_it_cannot() {
    let devices = text(&hal(&["devices"]).stdout);
    let out = hal(&["run", "--device", "vulkan", "--size", "64", "--steps", "4"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    if devices.contains("\nvulkan: 1 device") || devices.contains("\nvulkan: 2 devices") {
        assert!(out.status.success(), "{stdout}{stderr}");
        assert!(stdout.contains("driver 'vulkan'") && stdout.contains("check:        PASS"), "{stdout}");
        assert!(stdout.contains("bit-exact"), "{stdout}");
    } else {
        // Where a Vulkan device must be there (CI installs lavapipe), its absence is a failure.
        assert!(!std::env::var("HAL_REQUIRE_VULKAN").is_ok_and(|v| v == "1"), "no Vulkan device listed:\n{devices}");
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        assert!(stderr.contains("vulkan"), "the error names the driver: {stderr}");
    }
}

/// Whether `hal devices` lists a device of `driver` here (a line `DRIVER: N device(s)`, N > 0).
fn lists_devices(devices: &str, driver: &str) -> bool {
    devices
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{driver}: ")))
        .any(|rest| rest.split_whitespace().next().and_then(|n| n.parse::<usize>().ok()).is_some_and(|n| n > 0))
}

/// `None` where `hal devices` lists a Vulkan device here; otherwise `Some(the listing)`.
fn vulkan_missing() -> Option<String> {
    let devices = text(&hal(&["devices"]).stdout);
    if lists_devices(&devices, "vulkan") { None } else { Some(devices) }
}

#[test]
fn cts_runs_on_vulkan_with_a_row_per_case() {
    if !cfg!(feature = "vulkan") {
        eprintln!("not run: cts_runs_on_vulkan_with_a_row_per_case: hal built without the `vulkan` feature");
        return;
    }
    if let Some(devices) = vulkan_missing() {
        // Where a Vulkan device must be there (CI installs lavapipe), its absence is a failure.
        assert!(!std::env::var("HAL_REQUIRE_VULKAN").is_ok_and(|v| v == "1"), "no Vulkan device listed:\n{devices}");
        eprintln!("not run: cts_runs_on_vulkan_with_a_row_per_case: no Vulkan device listed by `hal devices`");
        return;
    }
    let area = "binding_offsets::";
    let list = text(&hal(&["cts", "--list"]).stdout);
    let ids: Vec<&str> = list.lines().filter(|id| id.starts_with(area)).collect();
    assert!(!ids.is_empty(), "{list}");
    let out = hal(&["cts", "--device", "vulkan", "--filter", area]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.starts_with(&format!("ctest: {} case(s) on driver 'vulkan'\n", ids.len())), "{stdout}");
    for id in &ids {
        let (area, case) = id.split_once("::").unwrap();
        let row = stdout.lines().find(|l| l.starts_with(area) && l.split_whitespace().nth(1) == Some(case));
        assert!(row.is_some_and(|row| row.contains(" PASS")), "no passing row for {id}:\n{stdout}");
    }
    let total = stdout.lines().find(|l| l.starts_with("total")).expect("the total row");
    assert_eq!(total.split_whitespace().collect::<Vec<_>>(), ["total", &ids.len().to_string(), "0", "0"], "{stdout}");
}

#[test]
fn cts_on_a_device_the_driver_lacks_names_it_and_runs_nothing() {
    let out = hal(&["cts", "--device", "vulkan:7", "--filter", "device::properties"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stdout.is_empty(), "no table: {stdout}");
    if vulkan_missing().is_none() {
        assert!(stderr.contains("device 7 of driver 'vulkan' does not exist (it has "), "{stderr}");
        assert!(stderr.contains("vulkan:0"), "the devices there are: {stderr}");
    } else if cfg!(feature = "vulkan") {
        assert!(stderr.contains("'vulkan:7'"), "{stderr}");
    } else {
        assert!(stderr.contains("driver 'vulkan' is not built into this hal"), "{stderr}");
    }
    // cpu-sim has one device: another ordinal is refused, naming it.
    let out = hal(&["cts", "--device", "cpu-sim:1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("driver 'cpu-sim' has only device 0, not device 1"), "{}", text(&out.stderr));
}

#[test]
fn cts_spread_is_for_cuda_only() {
    let devices: &[&str] = if cfg!(feature = "vulkan") { &["cpu-sim", "vulkan"] } else { &["cpu-sim"] };
    for device in devices {
        let out = hal(&["cts", "--device", device, "--spread"]);
        assert_eq!(out.status.code(), Some(2), "{device}: {}", text(&out.stderr));
        assert_eq!(
            text(&out.stderr),
            format!(
                "hal: error: --spread is for the cuda driver only (it puts a case's devices on every GPU), not for \
                 '{device}' (see `hal cts --help`)\n"
            )
        );
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    }
    let help = text(&hal(&["cts", "--help"]).stdout);
    for needle in ["--spread", "vulkan[:N] and cuda[:N]", "says why, once"] {
        assert!(help.contains(needle), "missing '{needle}' in:\n{help}");
    }
}

#[test]
fn cts_on_cuda_without_it_says_why_once_and_runs_nothing() {
    if lists_devices(&text(&hal(&["devices"]).stdout), "cuda") {
        eprintln!("not run: cts_on_cuda_without_it_says_why_once_and_runs_nothing: a CUDA device is listed here");
        return;
    }
    let out = hal(&["cts", "--device", "cuda", "--filter", "semaphore::"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "no case rows: {stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    if cfg!(feature = "cuda") {
        assert!(stderr.starts_with("hal: error: the conformance suite cannot run on 'cuda:0': CUDA not available: "));
        let reason = if stderr.contains("NVRTC") { "NVRTC" } else { "the CUDA driver library was not found" };
        assert_eq!(stderr.matches(reason).count(), 1, "the reason said once: {stderr}");
    } else {
        assert_eq!(
            stderr, "hal: error: driver 'cuda' is not built into this hal: rebuild with the `cuda` feature\n",
            "{stderr}"
        );
    }
}
