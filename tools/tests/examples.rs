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
