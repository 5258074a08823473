//! A generated test that is ignored in its binary (as the CUDA CTS is where no CUDA driver was found
//! at build time) and run with `--include-ignored` must run its case in the child process too, not
//! fail because the child, started without that flag, ran nothing.

const IGNORED_TEST: &str = "ignored_case_run_only_by_isolated_child_runs_an_ignored_test";

/// Run only by [`isolated_child_runs_an_ignored_test`], through this binary with `--include-ignored`.
#[test]
#[ignore = "run (with --include-ignored) by isolated_child_runs_an_ignored_test"]
fn ignored_case_run_only_by_isolated_child_runs_an_ignored_test() {
    ctest::run_test(driver_cpu_sim::cts::fixture, IGNORED_TEST, "device", "default_device");
}

#[test]
fn isolated_child_runs_an_ignored_test() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = std::process::Command::new(exe)
        .args([IGNORED_TEST, "--exact", "--include-ignored", "--test-threads=1"])
        .env(ctest::isolate::ISOLATE_ENV, "1")
        .env_remove(ctest::isolate::CHILD_ENV)
        .output()
        .expect("run this test binary");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the ignored test failed when run with --include-ignored:\n{text}");
    assert!(text.contains("1 passed; 0 failed; 0 ignored"), "the ignored test did not run:\n{text}");
}
