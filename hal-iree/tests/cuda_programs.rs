//! The same programs compiled for IREE's CUDA target (`testdata/programs/*.cuda.vmfb`, PTX for
//! sm_80) run through IREE's VM on the HAL's CUDA driver (`thal-cuda`) and give what IREE's CPU
//! driver gave, bit for bit for the elementwise chain and within float rounding for the reductions
//! (a GPU sums in another order).
//!
//! These need an NVIDIA GPU, so they are ignored by default (reported as not run, never as passed);
//! on a GPU machine: `cargo test --test cuda_programs -- --include-ignored` (the device scripts run
//! the built binary that way). Without a GPU, `--include-ignored` makes them fail.

mod common;

use common::{inputs, programs};
use hal_iree::npy;
use hal_iree::runner::run_module;

/// Runs `name.cuda.vmfb` on thal-cuda and compares with `expected_from`'s CPU output: at most
/// `tolerance` apart relative to the largest expected magnitude (0: bit for bit).
fn check(name: &str, expected_from: &str, function: &str, tolerance: f32) {
    let expected =
        npy::read(&programs().join(format!("{expected_from}.expected.npy"))).expect("a readable expected output");
    let module = programs().join(format!("{name}.cuda.vmfb"));
    let report = run_module(hal_iree::CUDA_DRIVER, &module, function, &inputs(expected_from), 3)
        .unwrap_or_else(|e| panic!("{name} on {}: {e}", hal_iree::CUDA_DRIVER));
    assert_eq!(report.outputs.len(), 1, "{name} returns one tensor");
    let got = &report.outputs[0];
    assert_eq!(got.shape, expected.shape, "{name}'s shape");
    let scale = expected.data.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
    let worst = got.data.iter().zip(&expected.data).map(|(g, e)| (g - e).abs() / scale).fold(0f32, f32::max);
    if tolerance == 0.0 {
        let differ = got.data.iter().zip(&expected.data).filter(|(g, e)| g.to_bits() != e.to_bits()).count();
        assert_eq!(differ, 0, "{name}: {differ} values differ from the CPU's (worst relative {worst:e})");
    } else {
        assert!(worst <= tolerance, "{name}: worst relative difference {worst:e} > {tolerance:e}");
    }
    println!("{name} on thal-cuda: worst relative difference {worst:e}, call {:?} ns", report.call_ns);
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --include-ignored on a GPU machine"]
fn chain_runs_bit_exact_on_cuda() {
    check("chain", "chain", "module.chain", 0.0);
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --include-ignored on a GPU machine"]
fn eight_dependent_dispatches_run_bit_exact_on_cuda() {
    check("chain_split", "chain", "module.chain", 0.0);
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --include-ignored on a GPU machine"]
fn matmul_runs_on_cuda() {
    check("matmul", "matmul", "module.matmul", 1e-5);
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --include-ignored on a GPU machine"]
fn mlp_runs_on_cuda() {
    check("mlp", "mlp", "module.mlp", 1e-5);
}

/// Without a GPU the driver is listed but opening a device fails with a clear error, not a crash.
#[test]
fn thal_cuda_without_a_gpu_fails_cleanly() {
    let mut registry = hal::Registry::new();
    driver_cuda::register(&mut registry);
    if registry.create_device("cuda", 0).is_ok() {
        // A GPU is here: the ignored tests above cover it.
        return;
    }
    let error =
        run_module(hal_iree::CUDA_DRIVER, &programs().join("chain.cuda.vmfb"), "module.chain", &inputs("chain"), 1)
            .expect_err("no CUDA device here");
    let text = error.to_string();
    assert!(text.contains("cuda") || text.contains("CUDA"), "{text}");
}
