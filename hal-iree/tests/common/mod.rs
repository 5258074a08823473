//! What the program tests share: where the compiled programs are and their inputs.

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
