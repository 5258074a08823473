//! `thal-iree-run`: calls a function of a compiled IREE module on one or more IREE drivers (this
//! crate's `thal-cpu-sim`, IREE's own `local-sync` and `local-task`), like `iree-run-module`; with
//! several `--device`s it checks that every device gives the same bits and prints each device's
//! call time and the host CPU time a call takes (every thread of the process, during the call).
//!
//! ```text
//! thal-iree-run --module testdata/programs/mlp.vmfb --function module.mlp \
//!     --input @testdata/programs/mlp.input0.npy ... --device thal-cpu-sim --device local-sync --repeat 50
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use hal_iree::npy;
use hal_iree::runner::{InputUploads, Tensor, parse_random, relative_difference, run_module_with};

#[derive(Parser)]
#[command(about = "Run a function of an IREE module (.vmfb) on timeline-hal or IREE devices")]
struct Args {
    /// The compiled module.
    #[arg(long)]
    module: PathBuf,
    /// The function, as `module.name`.
    #[arg(long)]
    function: String,
    /// An input, `@path.npy` (f32) or `random:SHAPE:SCALE` (values uniform in [-SCALE, SCALE), the
    /// same on every machine for the same argument position); repeat in argument order.
    #[arg(long = "input")]
    inputs: Vec<String>,
    /// An IREE driver to run on; repeat to compare (default: thal-cpu-sim).
    #[arg(long = "device")]
    devices: Vec<String>,
    /// Calls per device (the outputs are the last call's).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Uploads the inputs again before every call (outside its time), instead of once.
    #[arg(long)]
    inputs_per_call: bool,
    /// Writes the first device's first output here (`@path.npy`).
    #[arg(long)]
    output: Option<String>,
    /// Fails unless every device's first output equals this (`@path.npy`), bit for bit unless
    /// `--tolerance` says otherwise (without it, the first device's output is the reference).
    #[arg(long)]
    expected: Option<String>,
    /// How far an output may be from the reference: the largest `|a - b| / (1 + |b|)` over its
    /// elements (0: bit for bit), for devices whose math differs (GPU against CPU).
    #[arg(long, default_value_t = 0.0)]
    tolerance: f64,
}

fn npy_path(argument: &str) -> PathBuf {
    PathBuf::from(argument.strip_prefix('@').unwrap_or(argument))
}

fn preview(tensor: &Tensor) -> String {
    let shape: Vec<String> = tensor.shape.iter().map(ToString::to_string).collect();
    let values: Vec<String> = tensor.data.iter().take(8).map(|v| v.to_string()).collect();
    let more = if tensor.data.len() > 8 { " ..." } else { "" };
    format!("{}xf32={}{more}", shape.join("x"), values.join(" "))
}

fn median(ns: &[u64]) -> f64 {
    let mut sorted = ns.to_vec();
    sorted.sort_unstable();
    sorted[sorted.len() / 2] as f64 / 1000.0
}

fn run(args: Args) -> Result<bool, hal::Error> {
    let inputs = args
        .inputs
        .iter()
        .enumerate()
        .map(|(i, a)| parse_random(a, i as u64).unwrap_or_else(|| npy::read(&npy_path(a))))
        .collect::<Result<Vec<_>, _>>()?;
    let expected = args.expected.as_deref().map(|a| npy::read(&npy_path(a))).transpose()?;
    let devices = if args.devices.is_empty() { vec![hal_iree::CPU_SIM_DRIVER.to_owned()] } else { args.devices };
    let mut first: Option<Tensor> = None;
    let mut agree = true;
    println!(
        "| device | calls | median us/call | min us/call | median host CPU us/call | max us/call | first output |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | --- |");
    for device in &devices {
        let uploads = if args.inputs_per_call { InputUploads::PerCall } else { InputUploads::Once };
        let report = run_module_with(device, &args.module, &args.function, &inputs, args.repeat, uploads)?;
        let output = report.outputs.first().cloned().unwrap_or(Tensor { shape: vec![0], data: vec![] });
        let min = report.call_ns.iter().min().copied().unwrap_or(0) as f64 / 1000.0;
        let max = report.call_ns.iter().max().copied().unwrap_or(0) as f64 / 1000.0;
        println!(
            "| {device} | {} | {:.1} | {min:.1} | {:.1} | {max:.1} | {} |",
            report.call_ns.len(),
            median(&report.call_ns),
            median(&report.cpu_ns),
            preview(&output)
        );
        let reference = expected.as_ref().or(first.as_ref());
        if let Some(reference) = reference {
            let against = if expected.is_some() { "--expected" } else { "the first device's" };
            match relative_difference(reference, &output) {
                Ok(d) if args.tolerance == 0.0 => {
                    let same = reference.data.iter().zip(&output.data).all(|(a, b)| a.to_bits() == b.to_bits());
                    if !same {
                        eprintln!("{device}: the output differs from {against} (largest relative difference {d:.3e})");
                        agree = false;
                    }
                }
                Ok(d) if d <= args.tolerance => {
                    println!(
                        "{device}: within {:.1e} of {against} output (largest relative difference {d:.3e})",
                        args.tolerance
                    )
                }
                Ok(d) => {
                    eprintln!(
                        "{device}: largest relative difference from {against} output {d:.3e} > {:.1e}",
                        args.tolerance
                    );
                    agree = false;
                }
                Err(why) => {
                    eprintln!("{device}: the output differs from {against}: {why}");
                    agree = false;
                }
            }
        }
        if first.is_none() {
            if let Some(path) = &args.output {
                npy::write(&npy_path(path), &output)?;
            }
            first = Some(output);
        }
    }
    Ok(agree)
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("thal-iree-run: {error}");
            ExitCode::from(2)
        }
    }
}
