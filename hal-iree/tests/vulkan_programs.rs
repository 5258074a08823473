//! The programs compiled for IREE's Vulkan target (`testdata/programs/*.vulkan.vmfb`, SPIR-V for
//! the `vp_android_baseline_2022` profile, which lavapipe and desktop GPUs run) go through IREE's VM
//! on the HAL's Vulkan driver (`thal-vulkan`) and give exactly what IREE's CPU driver gave.
//!
//! These need a Vulkan device, so they are ignored by default (reported as not run, never as
//! passed); `hal-iree/ci.sh` runs them with `--include-ignored` where a Vulkan driver is installed
//! (lavapipe in CI). Without one, `--include-ignored` makes them fail.

mod common;

use common::{inputs, programs};
use hal_iree::npy;
use hal_iree::runner::run_module;

fn check(name: &str, expected_from: &str, function: &str) {
    let expected =
        npy::read(&programs().join(format!("{expected_from}.expected.npy"))).expect("a readable expected output");
    let module = programs().join(format!("{name}.vulkan.vmfb"));
    let report = run_module(hal_iree::VULKAN_DRIVER, &module, function, &inputs(expected_from), 2)
        .unwrap_or_else(|e| panic!("{name} on {}: {e}", hal_iree::VULKAN_DRIVER));
    assert_eq!(report.outputs.len(), 1, "{name} returns one tensor");
    let got = &report.outputs[0];
    assert_eq!(got.shape, expected.shape, "{name}'s shape");
    let differ = got.data.iter().zip(&expected.data).filter(|(g, e)| g.to_bits() != e.to_bits()).count();
    assert_eq!(differ, 0, "{name}: {differ} values differ from IREE's CPU output");
}

#[test]
#[ignore = "needs a Vulkan device: run with --include-ignored (hal-iree/ci.sh does where one is installed)"]
fn chain_runs_bit_exact_on_vulkan() {
    check("chain", "chain", "module.chain");
}

#[test]
#[ignore = "needs a Vulkan device: run with --include-ignored (hal-iree/ci.sh does where one is installed)"]
fn eight_dependent_dispatches_run_bit_exact_on_vulkan() {
    check("chain_split", "chain", "module.chain");
}

#[test]
#[ignore = "needs a Vulkan device: run with --include-ignored (hal-iree/ci.sh does where one is installed)"]
fn matmul_runs_bit_exact_on_vulkan() {
    check("matmul", "matmul", "module.matmul");
}

#[test]
#[ignore = "needs a Vulkan device: run with --include-ignored (hal-iree/ci.sh does where one is installed)"]
fn mlp_runs_bit_exact_on_vulkan() {
    check("mlp", "mlp", "module.mlp");
}

/// The programs of real size at their CI size on `thal-vulkan`, against IREE's `local-task` output
/// in the same run: the GPU's math differs from the CPU's (other reduction orders), so within a
/// relative tolerance: 1e-4 in f32, 1e-2 for the block computing in f16 (its Vulkan module is the
/// baseline profile with f16 added; it runs where the device has `shader_float16`, as lavapipe has).
#[test]
#[ignore = "needs a Vulkan device: run with --include-ignored (hal-iree/ci.sh does where one is installed)"]
fn real_programs_at_small_size_match_iree_cpu_on_vulkan() {
    for (stem, function, specs) in common::real_programs(true) {
        let tolerance = if stem.contains("f16") { 1e-2 } else { 1e-4 };
        let inputs = common::random_inputs(&specs);
        let run = |driver: &str, module: String| {
            let report = run_module(driver, &programs().join(module), function, &inputs, 2)
                .unwrap_or_else(|e| panic!("{stem} on {driver}: {e}"));
            report.outputs.into_iter().next().expect("one output")
        };
        let iree = run("local-task", format!("{stem}.vmfb"));
        let ours = run(hal_iree::VULKAN_DRIVER, format!("{stem}.vulkan.vmfb"));
        let d = hal_iree::runner::relative_difference(&iree, &ours).unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert!(d <= tolerance, "{stem}: largest relative difference from local-task {d:.3e}");
    }
}
