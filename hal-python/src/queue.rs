//! `Queue`: the operations a device runs in order, each gated by `waits=` and announcing its
//! completion through `signals=`; and `Readback`, the host end of a queue read.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyInt};

use hal::{Error, ExternalUse, FillPattern, HostCallFlags};

use crate::buffer::{Buffer, with_bytes};
use crate::command::CommandBuffer;
use crate::errors::{OrRaise, from_py_err};
use crate::gil::Detached;
use crate::notify::{Outcome, awaitable};
use crate::semaphore_list;

/// One queue of a device: `device.queue(0)`. Every operation takes `waits=[(sem, value), ...]`
/// (it starts once they are reached) and `signals=[(sem, value), ...]` (set when it completes, or
/// failed with its error), and returns without waiting for the device.
#[pyclass(module = "timeline_hal", frozen)]
pub struct Queue {
    queue: Detached<hal::Queue>,
}

impl Queue {
    /// Wraps a HAL queue.
    pub fn wrap(queue: hal::Queue) -> Self {
        Queue { queue: Detached::new(queue) }
    }
}

impl Queue {
    /// `wait_stream` or `signal_stream`: the queue's external timepoint on CUDA stream `stream`.
    fn order_with_stream(
        &self,
        py: Python<'_>,
        stream: &Bound<'_, PyAny>,
        use_: ExternalUse,
        waits: Option<&Bound<'_, PyAny>>,
        signals: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let timepoint = crate::streams::timepoint(crate::streams::handle(stream)?);
        let (waits, signals) = (semaphore_list(waits)?, semaphore_list(signals)?);
        py.detach(|| match use_ {
            // SAFETY: the caller's contract (`wait_stream`'s docs): a live stream of the device's
            // context (the driver checks the context), alive until `signals` are reached or failed.
            ExternalUse::Wait => unsafe { self.queue.wait_external(&waits, timepoint, &signals) },
            // SAFETY: as above.
            ExternalUse::Signal => unsafe { self.queue.signal_external(&waits, timepoint, &signals) },
        })
        .or_raise()
    }
}

/// The fill pattern of a `value` (an int, `width` bytes wide; a float, as `f32` bits; or bytes of
/// length 1, 2 or 4).
pub fn fill_pattern(value: &Bound<'_, PyAny>, width: u8) -> PyResult<FillPattern> {
    if value.is_instance_of::<PyFloat>() {
        return Ok(FillPattern::from(value.extract::<f64>()? as f32));
    }
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return match *bytes.as_bytes() {
            [a] => Ok(FillPattern::U8(a)),
            [a, b] => Ok(FillPattern::U16(u16::from_le_bytes([a, b]))),
            [a, b, c, d] => Ok(FillPattern::U32(u32::from_le_bytes([a, b, c, d]))),
            _ => Err(PyValueError::new_err("a fill pattern of bytes has 1, 2 or 4 of them")),
        };
    }
    if !value.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err("a fill value is an int, a float or bytes"));
    }
    // Negative ints fill their two's complement bits.
    let wide: i128 = value.extract()?;
    let fits = |bits: u32| wide >= -(1i128 << (bits - 1)) && wide < (1i128 << bits);
    let out_of_range = || PyValueError::new_err(format!("fill value {wide} does not fit {width} bytes"));
    match width {
        1 if fits(8) => Ok(FillPattern::U8(wide as u8)),
        2 if fits(16) => Ok(FillPattern::U16(wide as u16)),
        4 if fits(32) => Ok(FillPattern::U32(wide as u32)),
        1 | 2 | 4 => Err(out_of_range()),
        _ => Err(PyValueError::new_err(format!("width={width}: a fill pattern is 1, 2 or 4 bytes"))),
    }
}

/// The length of a range from `offset` to the end of `buffer` when `length` is None.
fn range_length(buffer: &hal::Buffer, offset: u64, length: Option<u64>) -> u64 {
    length.unwrap_or_else(|| buffer.size().saturating_sub(offset))
}

#[pymethods]
impl Queue {
    /// Its index on its device.
    #[getter]
    fn index(&self) -> usize {
        self.queue.index()
    }

    /// Fills `length` bytes (to the end when None) of `buffer` from `offset` with `value`
    /// repeated: an int `width` bytes wide (1, 2 or 4), a float (as f32) or bytes of length 1, 2
    /// or 4. Offset and length are multiples of the pattern's width.
    #[pyo3(signature = (buffer, value, offset = 0, length = None, *, width = 4, waits = None, signals = None))]
    #[allow(clippy::too_many_arguments)]
    fn fill(
        &self,
        py: Python<'_>,
        buffer: &Buffer,
        value: &Bound<'_, PyAny>,
        offset: u64,
        length: Option<u64>,
        width: u8,
        waits: Option<&Bound<'_, PyAny>>,
        signals: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let pattern = fill_pattern(value, width)?;
        let (waits, signals) = (semaphore_list(waits)?, semaphore_list(signals)?);
        let target = buffer.hal();
        let length = range_length(target, offset, length);
        py.detach(|| self.queue.fill(&waits, target, offset, length, pattern, &signals)).or_raise()
    }

    /// Writes `data` (any bytes-like object, a NumPy array included; copied now) to `buffer` at
    /// `offset`, in queue order.
    #[pyo3(signature = (buffer, data, offset = 0, *, waits = None, signals = None))]
    fn write(
        &self,
        py: Python<'_>,
        buffer: &Buffer,
        data: &Bound<'_, PyAny>,
        offset: u64,
        waits: Option<&Bound<'_, PyAny>>,
        signals: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (waits, signals) = (semaphore_list(waits)?, semaphore_list(signals)?);
        let bytes: std::sync::Arc<[u8]> = with_bytes(data, |bytes| std::sync::Arc::from(bytes))?;
        let target = buffer.hal();
        py.detach(|| self.queue.write(&waits, target, offset, bytes, &signals)).or_raise()
    }

    /// Reads `length` bytes (to the end when None) of `buffer` from `offset` to the host, in queue
    /// order: a `Readback` to `wait()` on or `await` for the bytes.
    #[pyo3(signature = (buffer, offset = 0, length = None, *, waits = None, signals = None))]
    fn read(
        &self,
        py: Python<'_>,
        buffer: &Buffer,
        offset: u64,
        length: Option<u64>,
        waits: Option<&Bound<'_, PyAny>>,
        signals: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Readback> {
        let (waits, signals) = (semaphore_list(waits)?, semaphore_list(signals)?);
        let source = buffer.hal();
        let length = range_length(source, offset, length);
        let readback = py.detach(|| self.queue.read(&waits, source, offset, length, &signals)).or_raise()?;
        Ok(Readback { readback: Detached::new(readback) })
    }

    /// Copies `length` bytes (to the end of `source` when None) from `source` at `source_offset` to
    /// `target` at `target_offset`.
    #[pyo3(signature = (source, target, length = None, *, source_offset = 0, target_offset = 0, waits = None, signals = None))]
    #[allow(clippy::too_many_arguments)]
    fn copy(
        &self,
        py: Python<'_>,
        source: &Buffer,
        target: &Buffer,
        length: Option<u64>,
        source_offset: u64,
        target_offset: u64,
        waits: Option<&Bound<'_, PyAny>>,
        signals: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (waits, signals) = (semaphore_list(waits)?, semaphore_list(signals)?);
        let (source, target) = (source.hal(), target.hal());
        let length = range_length(source, source_offset, length);
        py.detach(|| self.queue.copy(&waits, source, source_offset, target, target_offset, length, &signals)).or_raise()
    }

    /// Waits, then signals, running nothing: joins or forks dependencies.
    #[pyo3(signature = (*, waits = None, signals = None))]
    fn barrier(
        &self,
        py: Python<'_>,
        waits: Option<&Bound<'_, PyAny>>,
        signals: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (waits, signals) = (semaphore_list(waits)?, semaphore_list(signals)?);
        py.detach(|| self.queue.barrier(&waits, &signals)).or_raise()
    }

    /// Runs an ended command buffer.
    #[pyo3(signature = (command_buffer, *, waits = None, signals = None))]
    fn execute(
        &self,
        py: Python<'_>,
        command_buffer: &CommandBuffer,
        waits: Option<&Bound<'_, PyAny>>,
        signals: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (waits, signals) = (semaphore_list(waits)?, semaphore_list(signals)?);
        let command_buffer = command_buffer.hal();
        py.detach(|| self.queue.execute(&waits, command_buffer, &signals)).or_raise()
    }

    /// Calls `function()` (no arguments) on a HAL thread, holding the GIL, once `waits` are
    /// reached and the work before it on this queue is done. If it raises, `signals` fail with
    /// its `HalError` code, or `ABORTED`, and the message. Later work on the queue waits for it
    /// to return unless `non_blocking=True`.
    #[pyo3(signature = (function, *, waits = None, signals = None, non_blocking = false))]
    fn host_call(
        &self,
        py: Python<'_>,
        function: Py<PyAny>,
        waits: Option<&Bound<'_, PyAny>>,
        signals: Option<&Bound<'_, PyAny>>,
        non_blocking: bool,
    ) -> PyResult<()> {
        if !function.bind(py).is_callable() {
            return Err(PyTypeError::new_err("host_call takes a callable"));
        }
        let (waits, signals) = (semaphore_list(waits)?, semaphore_list(signals)?);
        let flags = if non_blocking { HostCallFlags::NON_BLOCKING } else { HostCallFlags::empty() };
        let call = move || -> hal::Result<()> {
            let ran = crate::gil::with_python(|py| {
                let result = function.call0(py).map(drop).map_err(|e| from_py_err(py, &e));
                drop(function);
                result
            });
            ran.unwrap_or_else(|| Err(Error::cancelled("host call: the Python interpreter is shutting down")))
        };
        py.detach(|| self.queue.host_call_with(&waits, call, flags, &signals)).or_raise()
    }

    /// A buffer of `size` bytes whose memory is committed in queue order once `waits` are
    /// reached, usable by work that waits on `signals` (queue-ordered allocation: the host never
    /// waits). `memory` is `"device"` or `"host"`.
    #[pyo3(signature = (size, memory = "device", *, waits = None, signals = None))]
    fn alloca(
        &self,
        py: Python<'_>,
        size: u64,
        memory: &str,
        waits: Option<&Bound<'_, PyAny>>,
        signals: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Buffer> {
        let params = crate::device::memory_params(memory)?;
        let (waits, signals) = (semaphore_list(waits)?, semaphore_list(signals)?);
        let buffer = py.detach(|| self.queue.alloca(&waits, params, size, &signals)).or_raise()?;
        Ok(Buffer::wrap(buffer, self.queue.device()))
    }

    /// Releases an `alloca` buffer's memory in queue order once `waits` are reached (work using it
    /// must be among them). A buffer not from `alloca` is `InvalidArgumentError`, a second dealloca
    /// `FailedPreconditionError`.
    #[pyo3(signature = (buffer, *, waits = None, signals = None))]
    fn dealloca(
        &self,
        py: Python<'_>,
        buffer: &Buffer,
        waits: Option<&Bound<'_, PyAny>>,
        signals: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (waits, signals) = (semaphore_list(waits)?, semaphore_list(signals)?);
        let buffer = buffer.hal();
        py.detach(|| self.queue.dealloca(&waits, buffer, &signals)).or_raise()
    }

    /// Work submitted to this queue from now on runs after the work enqueued on the CUDA `stream`
    /// so far (`torch.cuda.current_stream()`, a CuPy stream, an int handle), ordered on the
    /// device; then `signals` are set. Another library's results thus feed HAL work with no host
    /// wait. The stream must belong to this device's context (PyTorch's and CuPy's do) and stay
    /// alive until `signals` are reached; a CUDA device only. If the stream's work never ends, host
    /// waits on `signals` time out, and dropping the device fails them with `CANCELLED`.
    #[pyo3(signature = (stream, *, waits = None, signals = None))]
    fn wait_stream(
        &self,
        py: Python<'_>,
        stream: &Bound<'_, PyAny>,
        waits: Option<&Bound<'_, PyAny>>,
        signals: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.order_with_stream(py, stream, ExternalUse::Wait, waits, signals)
    }

    /// Work enqueued on the CUDA `stream` from now on runs after `waits` are reached and the work
    /// submitted to this queue so far is done, ordered on the device; then `signals` are set. HAL
    /// results thus feed another library's work with no host wait. If `waits` fail, or the device
    /// is dropped first, the stream is released anyway (a CUDA stream cannot be told of a
    /// failure) and `signals` fail: check them before trusting what the stream computed.
    #[pyo3(signature = (stream, *, waits = None, signals = None))]
    fn signal_stream(
        &self,
        py: Python<'_>,
        stream: &Bound<'_, PyAny>,
        waits: Option<&Bound<'_, PyAny>>,
        signals: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        self.order_with_stream(py, stream, ExternalUse::Signal, waits, signals)
    }

    /// Hands batched submissions to the device now.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.queue.flush()).or_raise()
    }

    fn __repr__(&self) -> String {
        format!("<timeline_hal.Queue {}>", self.queue.index())
    }
}

/// The host end of `queue.read(...)`: `wait(timeout)` or `await` it for the bytes, once.
#[pyclass(module = "timeline_hal", frozen)]
pub struct Readback {
    readback: Detached<hal::Readback>,
}

#[pymethods]
impl Readback {
    /// Blocks (the GIL released) until the read ran and returns its bytes; raises the read's
    /// failure, or `DeadlineExceededError` after `timeout` seconds (wait again later).
    #[pyo3(signature = (timeout = None))]
    fn wait<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = crate::wait_interruptibly(py, timeout, |t| self.readback.wait(t))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Whether `wait()` would return at once.
    #[getter]
    fn ready(&self) -> bool {
        self.readback.is_ready()
    }

    /// `await readback`: the bytes, from the running asyncio loop.
    fn __await__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let future = self.readback.wait_async();
        awaitable(py, Box::pin(async move { future.await.map(Outcome::Bytes) }))?.call_method0("__await__")
    }
}
