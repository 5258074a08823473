//! Runs the examples under `tools/examples/` as tests: each is compiled here as a module and its
//! `run` called, so its assertions run in `cargo test` (cargo only builds examples). Their `main`s
//! only read the command line and call `run`.

#[path = "../examples/minimal_submit.rs"]
#[allow(dead_code)]
mod minimal_submit;

#[path = "../examples/failure_handling.rs"]
#[allow(dead_code)]
mod failure_handling;

#[test]
fn minimal_submit_runs_on_cpu_sim() {
    minimal_submit::run("cpu-sim").unwrap();
}

#[test]
fn failure_handling_runs() {
    failure_handling::run().unwrap();
}

#[path = "../examples/binding_table.rs"]
#[allow(dead_code)]
mod binding_table;

#[test]
fn binding_table_runs_on_cpu_sim() {
    binding_table::run("cpu-sim").unwrap();
}

#[path = "../examples/multi_process.rs"]
#[allow(dead_code)]
mod multi_process;

/// A rank of `multi_process_runs_two_processes_on_cpu_sim`: this test binary again, with the rank's
/// environment (without it, this test does nothing).
#[test]
fn multi_process_rank() {
    if std::env::var_os(multi_process::RANK).is_some() {
        print!("{}", multi_process::rank_from_env().unwrap());
    }
}

#[test]
fn multi_process_runs_two_processes_on_cpu_sim() {
    let exe = std::env::current_exe().unwrap();
    let rank = |_| {
        let mut command = std::process::Command::new(&exe);
        command.args(["--exact", "multi_process_rank", "--nocapture", "--test-threads=1"]);
        command
    };
    let outputs = multi_process::launch(2, "cpu-sim", &rank).unwrap();
    for (rank, output) in outputs.iter().enumerate() {
        assert!(output.contains(&format!("rank {rank} of 2 on cpu-sim: checked all-reduce")), "{output}");
    }
}
