//! Other libraries' CUDA streams (PyTorch's, CuPy's, a raw `CUstream`): their handles, and the
//! HAL's external timepoints that order a queue with one on the device, both ways, with no host
//! wait.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use hal::ExternalTimepoint;

use crate::errors::OrRaise;

/// The `CUstream` handle of `stream`: an int; an object with `__cuda_stream__()` (the CUDA stream
/// protocol, `(version, handle)`); a `torch.cuda.Stream` (`.cuda_stream`); a `cupy.cuda.Stream`
/// (`.ptr`).
pub fn handle(stream: &Bound<'_, PyAny>) -> PyResult<u64> {
    let as_handle = |value: Bound<'_, PyAny>| -> PyResult<u64> {
        let raw: i128 = value.extract()?;
        u64::try_from(raw).map_err(|_| PyValueError::new_err(format!("CUDA stream handle {raw} is not a pointer")))
    };
    if let Ok(raw) = stream.extract::<i128>() {
        return u64::try_from(raw)
            .map_err(|_| PyValueError::new_err(format!("CUDA stream handle {raw} is not a pointer")));
    }
    if stream.hasattr("__cuda_stream__")? {
        let (_version, raw): (i64, Bound<'_, PyAny>) = stream.call_method0("__cuda_stream__")?.extract()?;
        return as_handle(raw);
    }
    for attribute in ["cuda_stream", "ptr"] {
        if stream.hasattr(attribute)? {
            return as_handle(stream.getattr(attribute)?);
        }
    }
    Err(PyTypeError::new_err(format!(
        "a CUDA stream is an int handle or an object with __cuda_stream__, .cuda_stream or .ptr, not {}",
        stream.get_type().name()?
    )))
}

/// The timepoint of CUDA stream `handle`.
pub fn timepoint(handle: u64) -> ExternalTimepoint {
    ExternalTimepoint::CudaStream(handle)
}

/// Orders work enqueued on CUDA stream `handle` from now on after everything submitted so far to
/// every queue of `device` (the DLPack producer's duty to a consumer's stream).
pub fn after_every_queue(py: Python<'_>, device: &hal::Device, handle: u64) -> PyResult<()> {
    py.detach(|| -> hal::Result<()> {
        for index in 0..device.queue_count() {
            let queue = device.queue(index)?;
            // SAFETY: the consumer passed its live stream of this device's context; the driver
            // checks the context, and the stream outlives what it enqueues from now on.
            unsafe { queue.signal_external(&[], timepoint(handle), &[]) }?;
        }
        Ok(())
    })
    .or_raise()
}
