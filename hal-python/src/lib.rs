//! `timeline_hal._native`: the HAL as a Python extension module (PyO3, CPython's stable ABI from
//! 3.9). The pure-Python package `timeline_hal` re-exports it with NumPy helpers on top; see
//! `hal-python/README.md` and `docs/python.md` for the Python API.
//!
//! Rules every binding here keeps:
//! - the GIL is released around every wait, submission and device creation, and around dropping
//!   any HAL object (`gil::drop_detached`), so a host call or a completion on a HAL thread can
//!   always take it;
//! - a HAL error becomes an instance of `timeline_hal.HalError`'s subclass for its code
//!   (`errors`); a Rust panic never reaches Python (nothing here unwraps a HAL result);
//! - callbacks from HAL threads (host calls, asyncio completions) take the GIL only while the
//!   interpreter is running, and give up quietly when it is shutting down.

mod buffer;
mod command;
mod device;
mod dlpack;
mod errors;
mod ffi;
mod gil;
mod notify;
mod python_kernel;
mod queue;
mod semaphore;
mod streams;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use hal::{DeviceInfo, Registry, SemaphoreValue, StatusCode, Timeout, WaitMode};

use crate::errors::OrRaise;

/// The drivers this build holds: cpu-sim always, cuda and vulkan with their cargo features.
fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut registry = Registry::new();
        driver_cpu_sim::register(&mut registry);
        #[cfg(feature = "cuda")]
        driver_cuda::register(&mut registry);
        #[cfg(feature = "vulkan")]
        driver_vulkan::register(&mut registry);
        registry
    })
}

/// A device's description as a dict (`driver`, `name`, `ordinal`, `path`, `stable_id`,
/// `queue_count`, `memory_types`, `executable_kinds`, limits and the driver's properties).
fn info_dict<'py>(py: Python<'py>, info: &DeviceInfo) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("driver", &info.driver)?;
    dict.set_item("name", &info.name)?;
    dict.set_item("ordinal", info.ordinal)?;
    dict.set_item("path", format!("{}:{}", info.driver, info.ordinal))?;
    dict.set_item("stable_id", &info.stable_id)?;
    dict.set_item("queue_count", info.queue_count)?;
    let memory: Vec<String> = info.memory_types.iter().map(|t| t.to_string()).collect();
    dict.set_item("memory_types", memory)?;
    let kinds: Vec<&str> = info.executable_kinds.iter().map(|k| k.name()).collect();
    dict.set_item("executable_kinds", kinds)?;
    dict.set_item("max_allocation_size", info.max_allocation_size)?;
    dict.set_item("max_workgroup_threads", info.max_workgroup_threads)?;
    dict.set_item("max_workgroup_size", info.max_workgroup_size.to_vec())?;
    dict.set_item("max_workgroup_count", info.max_workgroup_count.to_vec())?;
    dict.set_item("binding_alignment", info.binding_alignment)?;
    let properties = PyDict::new(py);
    for (name, value) in &info.properties {
        properties.set_item(name, value)?;
    }
    dict.set_item("properties", properties)?;
    Ok(dict)
}

/// Every driver this build holds: a list of dicts with `name`, `available`, `reason` (why it is
/// unavailable, else None) and `devices` (their descriptions).
#[pyfunction]
fn drivers(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let listing = py.detach(|| registry().list());
    let out = PyList::empty(py);
    for driver in listing {
        let dict = PyDict::new(py);
        dict.set_item("name", &driver.name)?;
        let devices = PyList::empty(py);
        match &driver.devices {
            Ok(infos) => {
                dict.set_item("available", true)?;
                dict.set_item("reason", py.None())?;
                for info in infos {
                    devices.append(info_dict(py, info)?)?;
                }
            }
            Err(reason) => {
                dict.set_item("available", false)?;
                dict.set_item("reason", reason.to_string())?;
            }
        }
        dict.set_item("devices", devices)?;
        out.append(dict)?;
    }
    Ok(out)
}

/// The devices of every available driver, as dicts (see `drivers`); `path` is what `device()`
/// takes.
#[pyfunction]
fn devices(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let listing = py.detach(|| registry().list());
    let out = PyList::empty(py);
    for driver in listing {
        for info in driver.devices.iter().flatten() {
            out.append(info_dict(py, info)?)?;
        }
    }
    Ok(out)
}

/// Opens the device `path` names: `""` or `"cpu-sim"` (the default), `"cuda:1"`, `"vulkan"`, or a
/// stable id (`"GPU-8c3f..."`).
#[pyfunction(name = "device")]
#[pyo3(signature = (path = ""))]
fn open_device(py: Python<'_>, path: &str) -> PyResult<device::Device> {
    let opened = py.detach(|| registry().create_device_at(path)).or_raise()?;
    Ok(device::Device::wrap(opened))
}

/// The semaphore-value pairs of a `waits=`/`signals=` argument: an iterable of `(Semaphore, int)`.
fn semaphore_list(list: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<SemaphoreValue>> {
    let Some(list) = list else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for item in list.try_iter()? {
        let item = item?;
        let (semaphore, value): (PyRef<'_, semaphore::Semaphore>, u64) = item.extract().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "a wait or signal list holds (Semaphore, int) pairs, not {}",
                item.repr().map(|r| r.to_string()).unwrap_or_default()
            ))
        })?;
        out.push(SemaphoreValue::new(semaphore.hal(), value));
    }
    Ok(out)
}

/// The deadline of a `timeout=` argument in seconds: None (or infinity) waits for ever; 0 polls.
fn deadline(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_nan() || t < 0.0 => Err(PyValueError::new_err(format!("timeout {t}: not a number of seconds"))),
        Some(t) if t.is_infinite() => Ok(None),
        Some(t) => Ok(Some(
            Instant::now()
                .checked_add(Duration::from_secs_f64(t))
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(1 << 30)),
        )),
    }
}

/// How long one blocking wait lasts before the thread checks for Ctrl-C (a signal handler's
/// exception), with the GIL taken back for the check.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// Runs `wait` with the GIL released until it succeeds, fails, or `timeout` seconds pass, in
/// slices of [`WAIT_SLICE`] between which a pending signal (Ctrl-C) is raised.
fn wait_interruptibly<T: Send>(
    py: Python<'_>,
    timeout: Option<f64>,
    mut wait: impl FnMut(Timeout) -> hal::Result<T> + Send,
) -> PyResult<T> {
    let deadline = deadline(timeout)?;
    loop {
        let slice_end = Instant::now() + WAIT_SLICE;
        let (until, last) = match deadline {
            Some(deadline) if deadline <= slice_end => (deadline, true),
            _ => (slice_end, false),
        };
        match py.detach(|| wait(Timeout::At(until))) {
            Err(e) if e.code() == StatusCode::DeadlineExceeded && !last => py.check_signals()?,
            result => return result.or_raise(),
        }
    }
}

fn wait_list(py: Python<'_>, mode: WaitMode, list: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<()> {
    let list = semaphore_list(Some(list))?;
    wait_interruptibly(py, timeout, |t| hal::wait_semaphores(mode, &list, t))
}

/// Waits until every `(semaphore, value)` of `pairs` is reached (`timeout` in seconds, None: for
/// ever). Raises the first failure among them, or `DeadlineExceededError`.
#[pyfunction]
#[pyo3(signature = (pairs, timeout = None))]
fn wait_all(py: Python<'_>, pairs: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<()> {
    wait_list(py, WaitMode::All, pairs, timeout)
}

/// Waits until one `(semaphore, value)` of `pairs` is reached (or one fails: that failure is
/// raised).
#[pyfunction]
#[pyo3(signature = (pairs, timeout = None))]
fn wait_any(py: Python<'_>, pairs: &Bound<'_, PyAny>, timeout: Option<f64>) -> PyResult<()> {
    wait_list(py, WaitMode::Any, pairs, timeout)
}

/// The extension module: devices, buffers, semaphores, queues, command buffers and executables.
#[pymodule(name = "_native", gil_used = true)]
mod native {
    #[pymodule_export]
    use super::buffer::Buffer;
    #[pymodule_export]
    use super::command::{CommandBuffer, Executable};
    #[pymodule_export]
    use super::device::Device;
    #[pymodule_export]
    use super::dlpack::from_dlpack;
    #[pymodule_export]
    use super::gil::shutdown;
    #[pymodule_export]
    use super::notify::LoopChannel;
    #[pymodule_export]
    use super::python_kernel::Invocation;
    #[pymodule_export]
    use super::queue::{Queue, Readback};
    #[pymodule_export]
    use super::semaphore::Semaphore;
    #[pymodule_export]
    use super::{devices, drivers, open_device, wait_all, wait_any};

    use pyo3::prelude::*;

    /// Adds `HostView`, the type made by hand (see `buffer`).
    #[pymodule_init]
    fn init(module: &Bound<'_, PyModule>) -> PyResult<()> {
        module.add("HostView", super::buffer::host_view_type(module.py())?)
    }
}
