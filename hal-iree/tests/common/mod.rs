//! What the tests share: where the compiled programs are and their inputs, and an IREE device
//! opened through IREE's API (`iree_device`). Each test binary uses part of it.
#![allow(dead_code)]

pub mod iree_device;

use std::path::PathBuf;

use hal_iree::npy;
use hal_iree::runner::Tensor;

/// `testdata/programs`.
pub fn programs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/programs")
}

/// The inputs of program `name` (`name.input0.npy`, `name.input1.npy`, ...).
pub fn inputs(name: &str) -> Vec<Tensor> {
    (0..)
        .map(|k| programs().join(format!("{name}.input{k}.npy")))
        .take_while(|p| p.exists())
        .map(|p| npy::read(&p).expect("a readable input"))
        .collect()
}

/// The programs of real size (`make_programs.py`): module stem, function, and each input as
/// `(shape, scale)` for [`hal_iree::runner::random_tensor`] (input `i` takes seed `i`, as
/// `thal-iree-run --input=random:...` does). `small`: the CI sizes (`<stem>_small`).
/// A program of real size: its module stem, its function and its inputs' `(shape, scale)`.
pub type RealProgram = (String, &'static str, Vec<(Vec<usize>, f32)>);

pub fn real_programs(small: bool) -> Vec<RealProgram> {
    let mlp = |b: usize, d: usize| {
        let mut v = vec![(vec![b, d], 1.0)];
        for _ in 0..4 {
            v.push((vec![d, d], 1.0 / (d as f32).sqrt()));
            v.push((vec![d], 0.1));
        }
        v
    };
    let block = |s: usize, d: usize, f: usize| {
        let w = 1.0 / (d as f32).sqrt();
        vec![
            (vec![s, d], 1.0),
            (vec![d, d], w),
            (vec![d, d], w),
            (vec![d, d], w),
            (vec![d, d], w),
            (vec![d, f], w),
            (vec![f, d], 1.0 / (f as f32).sqrt()),
        ]
    };
    let conv = |n: usize, hw: usize, ci: usize, cm: usize, co: usize| {
        vec![
            (vec![n, hw, hw, ci], 1.0),
            (vec![3, 3, ci, cm], 1.0 / ((9 * ci) as f32).sqrt()),
            (vec![cm], 0.1),
            (vec![3, 3, cm, co], 1.0 / ((9 * cm) as f32).sqrt()),
            (vec![co], 0.1),
        ]
    };
    let sized = |stem: &str| if small { format!("{stem}_small") } else { stem.to_owned() };
    let (m, t, c) = if small {
        (mlp(4, 64), block(32, 64, 128), conv(1, 16, 4, 8, 8))
    } else {
        (mlp(64, 4096), block(512, 1024, 4096), conv(8, 64, 32, 64, 64))
    };
    vec![
        (sized("mlp4"), "module.mlp4", m),
        (sized("transformer"), "module.transformer", t.clone()),
        (sized("transformer_f16"), "module.transformer_f16", t),
        (sized("conv"), "module.conv", c),
    ]
}

/// The generated inputs of a real program.
pub fn random_inputs(specs: &[(Vec<usize>, f32)]) -> Vec<Tensor> {
    specs
        .iter()
        .enumerate()
        .map(|(i, (shape, scale))| hal_iree::runner::random_tensor(shape, *scale, i as u64))
        .collect()
}
