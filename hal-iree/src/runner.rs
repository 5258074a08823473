//! Running a compiled IREE module (a `.vmfb`) on any driver in IREE's default registry, this
//! crate's included: IREE's VM calls the function, as `iree-run-module` does.

use std::path::Path;
use std::sync::{Mutex, OnceLock};

use crate::ffi::{self, sys};

/// A dense f32 tensor: its shape and its values in row-major order.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// The dimensions.
    pub shape: Vec<usize>,
    /// The values, `shape.iter().product()` of them.
    pub data: Vec<f32>,
}

/// What a run gave back: the last call's outputs and every call's time.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The outputs of the last call, in order.
    pub outputs: Vec<Tensor>,
    /// Each call's wall time in nanoseconds (the VM invocation, inputs already on the device).
    pub call_ns: Vec<u64>,
    /// The CPU time every thread of the process spent during each call, in nanoseconds: what a
    /// call costs the host (the VM, the driver, its threads), kernels on a GPU excluded.
    pub cpu_ns: Vec<u64>,
}

#[repr(C)]
struct RawTensor {
    rank: usize,
    shape: [i64; 8],
    data: *const f32,
    element_count: usize,
}

unsafe extern "C" {
    fn thal_iree_run_module(
        driver: *const std::ffi::c_char,
        module: *const std::ffi::c_void,
        module_length: usize,
        function: *const std::ffi::c_char,
        inputs: *const RawTensor,
        input_count: usize,
        inputs_per_call: std::ffi::c_int,
        repeat: usize,
        call_ns: *mut i64,
        cpu_ns: *mut i64,
        outputs: *mut RawTensor,
        output_capacity: usize,
        output_count: *mut usize,
    ) -> ffi::iree_status_t;
    fn thal_iree_tensor_free(tensor: *mut RawTensor);
}

/// Registers this crate's drivers into IREE's default registry, once per process.
pub fn register_default() -> Result<(), hal::Error> {
    static REGISTERED: OnceLock<Result<(), hal::Error>> = OnceLock::new();
    REGISTERED
        // SAFETY: the default registry lives for the process.
        .get_or_init(|| unsafe { crate::register_drivers(sys::iree_hal_driver_registry_default()) })
        .clone()
}

/// Calls `function` (`module.name`) of the module at `path` on the default device of IREE driver
/// `driver` (`thal-cpu-sim`, or IREE's own `local-sync`, `local-task`) `repeat` times (at least
/// once) with `inputs`, uploaded once.
pub fn run_module(
    driver: &str,
    path: &Path,
    function: &str,
    inputs: &[Tensor],
    repeat: usize,
) -> Result<RunReport, hal::Error> {
    run_module_with(driver, path, function, inputs, repeat, InputUploads::Once)
}

/// When a run uploads its inputs to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputUploads {
    /// Once, before the first call; every call takes the same buffers (as iree-benchmark-module).
    Once,
    /// Before each call, outside its time (as a program with fresh inputs each call).
    PerCall,
}

/// [`run_module`], with the inputs uploaded as `uploads` says.
pub fn run_module_with(
    driver: &str,
    path: &Path,
    function: &str,
    inputs: &[Tensor],
    repeat: usize,
    uploads: InputUploads,
) -> Result<RunReport, hal::Error> {
    register_default()?;
    let module = std::fs::read(path).map_err(|e| hal::Error::not_found(format!("module {}: {e}", path.display())))?;
    let cstr = |what: &str, text: &str| {
        std::ffi::CString::new(text)
            .map_err(|_| hal::Error::invalid_argument(format!("{what} '{text}' holds a NUL byte")))
    };
    let (driver_c, function_c) = (cstr("driver", driver)?, cstr("function", function)?);
    let mut raw_inputs = Vec::with_capacity(inputs.len());
    for (index, input) in inputs.iter().enumerate() {
        let count: usize = input.shape.iter().product();
        if input.shape.len() > 8 || count != input.data.len() {
            return Err(hal::Error::invalid_argument(format!(
                "input {index}: shape {:?} (rank at most 8) holds {count} values, the data {}",
                input.shape,
                input.data.len()
            )));
        }
        let mut shape = [0i64; 8];
        for (d, &n) in input.shape.iter().enumerate() {
            shape[d] = n as i64;
        }
        raw_inputs.push(RawTensor { rank: input.shape.len(), shape, data: input.data.as_ptr(), element_count: count });
    }
    let repeat = repeat.max(1);
    let mut call_ns = vec![0i64; repeat];
    let mut cpu_ns = vec![0i64; repeat];
    const MAX_OUTPUTS: usize = 16;
    let mut raw_outputs: Vec<RawTensor> = (0..MAX_OUTPUTS)
        .map(|_| RawTensor { rank: 0, shape: [0; 8], data: std::ptr::null(), element_count: 0 })
        .collect();
    let mut output_count = 0usize;
    // One run at a time in the process: each run makes an IREE runtime instance, and making one
    // registers IREE's HAL types into process-wide variables (`iree_hal_buffer_registration`, ...)
    // that the other instance's VM then checks its references against. Two runs side by side
    // (tests on threads) failed with "ref type mismatch" or "ref is null", or hung in a fence
    // wait, about once in 60 runs of `tests/programs.rs`, on IREE's own drivers as on ours.
    static ONE_RUN_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _alone = ONE_RUN_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // SAFETY: every pointer is valid for the call with the lengths given; the outputs the C side
    // fills are freed below.
    let status = unsafe {
        thal_iree_run_module(
            driver_c.as_ptr(),
            module.as_ptr().cast(),
            module.len(),
            function_c.as_ptr(),
            raw_inputs.as_ptr(),
            raw_inputs.len(),
            std::ffi::c_int::from(uploads == InputUploads::PerCall),
            repeat,
            call_ns.as_mut_ptr(),
            cpu_ns.as_mut_ptr(),
            raw_outputs.as_mut_ptr(),
            MAX_OUTPUTS,
            &mut output_count,
        )
    };
    let mut outputs = Vec::with_capacity(output_count);
    for raw in raw_outputs.iter_mut().take(output_count) {
        // SAFETY: the C side filled `element_count` floats at `data`.
        let data = unsafe { std::slice::from_raw_parts(raw.data, raw.element_count) }.to_vec();
        outputs.push(Tensor { shape: raw.shape[..raw.rank].iter().map(|&n| n as usize).collect(), data });
        // SAFETY: frees what the C side allocated, once.
        unsafe { thal_iree_tensor_free(raw) };
    }
    ffi::into_result(status).map_err(|e| e.context(format!("{function} of {} on {driver}", path.display())))?;
    let non_negative = |ns: Vec<i64>| ns.into_iter().map(|ns| ns.max(0) as u64).collect();
    Ok(RunReport { outputs, call_ns: non_negative(call_ns), cpu_ns: non_negative(cpu_ns) })
}

/// A tensor of `shape` whose values are uniform in `[-scale, scale)`, the same for the same
/// `(shape, scale, seed)` on every machine (a xorshift generator): inputs of real size that no file
/// needs to hold.
pub fn random_tensor(shape: &[usize], scale: f32, seed: u64) -> Tensor {
    let count: usize = shape.iter().product();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    let data = (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // The top 24 bits as a fraction in [0, 1), exact in f32.
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
            (unit * 2.0 - 1.0) * scale
        })
        .collect();
    Tensor { shape: shape.to_vec(), data }
}

/// Parses `random:SHAPE:SCALE` (e.g. `random:64x4096:0.015625`) into a [`random_tensor`] with
/// `seed`; `None` when `spec` is not of that form.
pub fn parse_random(spec: &str, seed: u64) -> Option<Result<Tensor, hal::Error>> {
    let rest = spec.strip_prefix("random:")?;
    let parse = || -> Option<Tensor> {
        let (shape, scale) = rest.split_once(':')?;
        let shape = shape.split('x').map(|d| d.parse::<usize>().ok()).collect::<Option<Vec<_>>>()?;
        let scale = scale.parse::<f32>().ok().filter(|s| s.is_finite())?;
        (!shape.is_empty() && shape.len() <= 8).then(|| random_tensor(&shape, scale, seed))
    };
    Some(parse().ok_or_else(|| {
        hal::Error::invalid_argument(format!(
            "input '{spec}': expected random:SHAPE:SCALE, e.g. random:64x4096:0.015625 (rank 1 to 8)"
        ))
    }))
}

/// How far `output` is from `reference`: the largest `|a - b| / (1 + |b|)` over the elements, or
/// an error naming the first difference in shape or a NaN on one side only. 0 means bit-equal
/// values (up to the sign of zero).
pub fn relative_difference(reference: &Tensor, output: &Tensor) -> Result<f64, String> {
    if reference.shape != output.shape {
        return Err(format!("shape {:?}, expected {:?}", output.shape, reference.shape));
    }
    let mut worst = 0.0f64;
    for (i, (&b, &a)) in reference.data.iter().zip(&output.data).enumerate() {
        if a.is_nan() != b.is_nan() {
            return Err(format!("element {i} is {a}, expected {b}"));
        }
        if a.is_nan() {
            continue;
        }
        let d = (f64::from(a) - f64::from(b)).abs() / (1.0 + f64::from(b).abs());
        worst = worst.max(d);
    }
    Ok(worst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_inputs_are_reproducible_and_in_range() {
        let a = random_tensor(&[3, 5], 0.5, 7);
        assert_eq!(a, random_tensor(&[3, 5], 0.5, 7));
        assert_ne!(a.data, random_tensor(&[3, 5], 0.5, 8).data);
        assert!(a.data.iter().all(|v| (-0.5..0.5).contains(v)));
        assert_eq!(parse_random("random:3x5:0.5", 7).unwrap().unwrap(), a);
        assert!(parse_random("@file.npy", 0).is_none());
        for bad in ["random:3x:1", "random:3x5", "random:3x5:inf", "random::1"] {
            assert!(parse_random(bad, 0).unwrap().is_err(), "{bad}");
        }
    }

    #[test]
    fn relative_difference_measures_and_refuses_mismatches() {
        let t = |data: Vec<f32>| Tensor { shape: vec![data.len()], data };
        assert_eq!(relative_difference(&t(vec![1.0, -2.0]), &t(vec![1.0, -2.0])), Ok(0.0));
        let d = relative_difference(&t(vec![1.0, 3.0]), &t(vec![1.0, 3.4])).unwrap();
        assert!((d - 0.1).abs() < 1e-6, "{d}");
        assert!(relative_difference(&t(vec![1.0]), &t(vec![f32::NAN])).is_err());
        assert!(relative_difference(&t(vec![1.0]), &t(vec![1.0, 2.0])).is_err());
    }
}
