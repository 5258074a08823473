//! Kernels from a second compiler: runs the PTX Triton produced for two kernels through the HAL,
//! each entry point declaring Triton's parameter layout (a scalar between pointers, trailing
//! scratch pointers passed null) and the dynamic shared memory Triton's metadata asks for, and
//! checks the results against PyTorch's and against Triton's own launch of the same kernels.
//!
//! On the device machine: `python3 bench/probes/triton_kernels.py DIR` (Triton and PyTorch there)
//! writes the PTX, launch facts, inputs and references into DIR; then
//! `cargo run --release -p timeline-hal-cuda --example triton_kernels -- DIR` (built here, run there).
//! Exit status 0 only when every output matches.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hal::{
    BufferBinding, BufferParams, CommandBufferMode, EntryPointInfo, ExecutableFormat, ExecutableSource,
    KernelParam as P, SemaphoreValue as SV, Timeout,
};

/// One line of the script's `kernels.txt`: `name key=value ...`.
struct Facts {
    name: String,
    values: HashMap<String, String>,
}

impl Facts {
    fn get(&self, key: &str) -> Result<&str, String> {
        self.values.get(key).map(String::as_str).ok_or_else(|| format!("{}: no {key}", self.name))
    }

    fn number<T: std::str::FromStr>(&self, key: &str) -> Result<T, String> {
        self.get(key)?.parse().map_err(|_| format!("{}: {key} is not a number", self.name))
    }
}

fn read_f32s(path: &Path) -> Result<Vec<f32>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// The layout this example declares for `name`, with Triton's trailing scratch pointers (the PTX
/// parameters past the kernel's own arguments; they must all be pointers) passed null.
fn layout(name: &str, ptx_params: &[&str]) -> Result<Vec<P>, String> {
    let own = match name {
        // scaled_add(x_ptr, alpha, y_ptr, out_ptr, n): bindings x, y, out; constants alpha bits, n.
        "scaled_add" => vec![P::Binding(0), P::Constant32(0), P::Binding(1), P::Binding(2), P::Constant32(1)],
        // softmax(out_ptr, in_ptr, in_stride, out_stride, n_cols): bindings out, in; three constants.
        "softmax" => vec![P::Binding(0), P::Binding(1), P::Constant32(0), P::Constant32(1), P::Constant32(2)],
        other => return Err(format!("no layout for kernel {other}")),
    };
    let scratch = ptx_params.get(own.len()..).unwrap_or(&[]);
    if scratch.iter().any(|t| *t != "u64") {
        return Err(format!("{name}: trailing parameters {scratch:?} are not all pointers"));
    }
    Ok(own.into_iter().chain(scratch.iter().map(|_| P::NullPointer)).collect())
}

fn run(dir: &Path) -> Result<bool, String> {
    let device = driver_cuda::create_device(0).map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(dir.join("kernels.txt")).map_err(|e| format!("kernels.txt: {e}"))?;
    let (queue, done) =
        (device.queue(0).map_err(|e| e.to_string())?, device.create_semaphore(0).map_err(|e| e.to_string())?);
    let mut all_ok = true;
    for (call, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let mut words = line.split_whitespace();
        let name = words.next().ok_or("empty line")?.to_string();
        let values = words.filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let facts = Facts { name: name.clone(), values };
        let ptx_params: Vec<&str> = facts.get("params")?.split(',').collect();
        let params = layout(&name, &ptx_params)?;
        let (threads, shared, grid): (u32, u32, u32) =
            (facts.number("threads")?, facts.number("shared")?, facts.number("grid")?);
        let inputs: Vec<Vec<f32>> = (0..2)
            .map(|i| dir.join(format!("{name}.in{i}.bin")))
            .filter(|p| p.exists())
            .map(|p| read_f32s(&p))
            .collect::<Result<_, _>>()?;
        let reference = read_f32s(&dir.join(format!("{name}.ref.bin")))?;
        let triton = read_f32s(&dir.join(format!("{name}.triton.bin")))?;
        let (bindings, constants): (usize, Vec<u32>) = match name.as_str() {
            "scaled_add" => (3, hal::constants![facts.number::<f32>("alpha")?, facts.number::<u32>("n")?]),
            _ => {
                let cols: u32 = facts.number("cols")?;
                (2, vec![cols, cols, cols])
            }
        };
        let entry = EntryPointInfo::new(facts.get("entry")?, threads, bindings, constants.len())
            .with_params(params.clone())
            .with_dynamic_workgroup_memory(shared);
        let source = ExecutableSource::Bytes {
            format: ExecutableFormat::Ptx,
            data: Arc::from(std::fs::read(dir.join(format!("{name}.ptx"))).map_err(|e| e.to_string())?),
            entry_points: vec![entry],
        };
        let executable = device.load_executable(&source).map_err(|e| format!("{name}: {e}"))?;
        let upload = |values: &[f32]| -> Result<hal::Buffer, String> {
            let buffer = device
                .allocate_buffer(BufferParams::host_visible(), 4 * values.len() as u64)
                .map_err(|e| e.to_string())?;
            buffer.write_values(0, values).map_err(|e| e.to_string())?;
            Ok(buffer)
        };
        let out = upload(&vec![f32::NAN; reference.len()])?;
        let ins: Vec<hal::Buffer> = inputs.iter().map(|v| upload(v)).collect::<Result<_, _>>()?;
        let table: Vec<BufferBinding> = match name.as_str() {
            "scaled_add" => {
                vec![BufferBinding::whole(&ins[0]), BufferBinding::whole(&ins[1]), BufferBinding::whole(&out)]
            }
            _ => vec![BufferBinding::whole(&out), BufferBinding::whole(&ins[0])],
        };
        let cb = device.create_command_buffer(CommandBufferMode::OneShot).map_err(|e| e.to_string())?;
        cb.dispatch(&executable, 0, [grid, 1, 1], &constants, &table).map_err(|e| e.to_string())?;
        cb.end().map_err(|e| e.to_string())?;
        let value = call as u64 + 1;
        queue.execute(&[], &cb, &[SV::new(&done, value)]).map_err(|e| e.to_string())?;
        done.wait(value, Timeout::After(std::time::Duration::from_secs(30))).map_err(|e| format!("{name}: {e}"))?;
        let mut got = vec![0f32; reference.len()];
        out.read_values(0, &mut got).map_err(|e| e.to_string())?;
        let max_diff = got.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let same_as_triton = got.iter().zip(&triton).filter(|(a, b)| a.to_bits() == b.to_bits()).count();
        let ok = max_diff <= 1e-5 && same_as_triton == got.len();
        all_ok &= ok;
        println!(
            "{} {name}: entry '{}', {threads} threads x {grid} workgroups, {shared} B dynamic shared memory, \
             layout {params:?}; {} values, max |HAL - PyTorch| {max_diff:.3e}, bit-identical to Triton's own \
             launch {same_as_triton}/{}",
            if ok { "ok" } else { "MISMATCH" },
            facts.get("entry")?,
            got.len(),
            got.len()
        );
    }
    Ok(all_ok)
}

fn main() {
    let dir: PathBuf = std::env::args().nth(1).unwrap_or_else(|| "triton".into()).into();
    match run(&dir) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("triton_kernels: {e}");
            std::process::exit(1);
        }
    }
}
