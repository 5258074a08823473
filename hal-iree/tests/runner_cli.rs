//! `thal-iree-run` compares devices bit for bit and says when they differ.

use std::path::PathBuf;
use std::process::Command;

fn programs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/programs")
}

fn run(expected: &str) -> std::process::Output {
    let p = programs();
    Command::new(env!("CARGO_BIN_EXE_thal-iree-run"))
        .arg("--module")
        .arg(p.join("matmul.vmfb"))
        .args(["--function", "module.matmul", "--device", "thal-cpu-sim", "--device", "local-sync"])
        .arg(format!("--input=@{}", p.join("matmul.input0.npy").display()))
        .arg(format!("--input=@{}", p.join("matmul.input1.npy").display()))
        .arg(format!("--expected=@{}", p.join(expected).display()))
        .output()
        .expect("thal-iree-run starts")
}

#[test]
fn both_devices_match_the_expected_output() {
    let output = run("matmul.expected.npy");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("| thal-cpu-sim | 1 |") && stdout.contains("| local-sync | 1 |"), "{stdout}");
}

#[test]
fn an_output_that_differs_fails_the_run() {
    // mlp's expected output has another shape: every device differs from it.
    let output = run("mlp.expected.npy");
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stderr).contains("thal-cpu-sim: the output differs"));
}
