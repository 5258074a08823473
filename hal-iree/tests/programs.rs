//! Programs compiled by `iree-compile` (testdata/programs) run through IREE's VM on cpu-sim give
//! exactly what IREE's own CPU driver gave when the test data was made.

mod common;

use common::{inputs, programs};
use hal_iree::npy;
use hal_iree::runner::run_module;

fn check(name: &str, function: &str, driver: &str) {
    check_against(name, name, function, driver);
}

fn check_against(name: &str, expected_from: &str, function: &str, driver: &str) {
    let expected =
        npy::read(&programs().join(format!("{expected_from}.expected.npy"))).expect("a readable expected output");
    let report = run_module(driver, &programs().join(format!("{name}.vmfb")), function, &inputs(expected_from), 2)
        .unwrap_or_else(|e| panic!("{name} on {driver}: {e}"));
    assert_eq!(report.outputs.len(), 1, "{name} returns one tensor");
    assert_eq!(report.outputs[0].shape, expected.shape, "{name}'s shape");
    let mismatches: Vec<_> = report.outputs[0]
        .data
        .iter()
        .zip(&expected.data)
        .enumerate()
        .filter(|(_, (got, want))| got.to_bits() != want.to_bits())
        .take(5)
        .collect();
    assert!(mismatches.is_empty(), "{name} on {driver}: first mismatches (index, (got, expected)): {mismatches:?}");
}

#[test]
fn chain_runs_bit_exact_on_cpu_sim() {
    check("chain", "module.chain", hal_iree::CPU_SIM_DRIVER);
}

#[test]
fn eight_dependent_dispatches_run_bit_exact_on_cpu_sim() {
    check_against("chain_split", "chain", "module.chain", hal_iree::CPU_SIM_DRIVER);
}

#[test]
fn matmul_runs_bit_exact_on_cpu_sim() {
    check("matmul", "module.matmul", hal_iree::CPU_SIM_DRIVER);
}

#[test]
fn mlp_runs_bit_exact_on_cpu_sim() {
    check("mlp", "module.mlp", hal_iree::CPU_SIM_DRIVER);
}

#[test]
fn the_same_modules_run_on_iree_own_cpu_driver() {
    check("mlp", "module.mlp", "local-sync");
}

#[test]
fn a_missing_function_is_not_found_and_names_it() {
    let error = run_module(hal_iree::CPU_SIM_DRIVER, &programs().join("mlp.vmfb"), "module.nope", &inputs("mlp"), 1)
        .expect_err("no such function");
    assert_eq!(error.code(), hal::StatusCode::NotFound, "{error}");
    assert!(error.message().contains("module.nope"), "{error}");
}

/// The programs of real size, at their CI size: cpu-sim runs IREE's CPU executables, so its
/// output is IREE's `local-task` output bit for bit (generated inputs, compared in the same run).
#[test]
fn real_programs_at_small_size_match_iree_cpu_bit_for_bit_on_cpu_sim() {
    for (stem, function, specs) in common::real_programs(true) {
        let module = programs().join(format!("{stem}.vmfb"));
        let inputs = common::random_inputs(&specs);
        let run = |driver: &str| {
            let report =
                run_module(driver, &module, function, &inputs, 2).unwrap_or_else(|e| panic!("{stem} on {driver}: {e}"));
            assert_eq!(report.outputs.len(), 1, "{stem} returns one tensor");
            report.outputs.into_iter().next().expect("one output")
        };
        let (ours, iree) = (run(hal_iree::CPU_SIM_DRIVER), run("local-task"));
        assert_eq!(ours.shape, iree.shape, "{stem}'s shape");
        assert!(iree.data.iter().any(|v| *v != 0.0), "{stem}: IREE's output is all zeros (a degenerate check)");
        let differ = ours.data.iter().zip(&iree.data).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "{stem}: {differ} of {} values differ from local-task's", iree.data.len());
    }
}
