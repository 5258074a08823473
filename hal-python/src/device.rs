//! `Device`: a device a driver opened, with its queues, allocator and object factories.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use hal::{BufferParams, CommandBufferMode, EntryPointInfo, ExecutableFormat, ExecutableSource, KernelParam};

use crate::buffer::Buffer;
use crate::command::{CommandBuffer, Executable};
use crate::errors::OrRaise;
use crate::gil::Detached;
use crate::queue::Queue;
use crate::semaphore::Semaphore;

/// A device: `timeline_hal.device("cpu-sim")`. Dropping the last reference to it (and to its
/// queues) tears it down: work still waiting fails its signals with `CANCELLED`.
#[pyclass(module = "timeline_hal", frozen)]
pub struct Device {
    device: Detached<hal::Device>,
}

impl Device {
    /// Wraps an opened device.
    pub fn wrap(device: hal::Device) -> Self {
        Device { device: Detached::new(device) }
    }

    /// The HAL device.
    pub fn hal(&self) -> &hal::Device {
        &self.device
    }
}

/// The buffer params of a `memory=` argument: `"device"` (device-local: transfers and kernels) or
/// `"host"` (host-visible and mappable: NumPy views, DLPack on the CPU).
pub fn memory_params(memory: &str) -> PyResult<BufferParams> {
    match memory {
        "device" => Ok(BufferParams::device_local()),
        "host" => Ok(BufferParams::host_visible()),
        other => Err(PyValueError::new_err(format!("memory={other:?}: expected \"device\" or \"host\""))),
    }
}

/// The format of executable bytes: named, or recognised from the bytes' first ones.
fn executable_format(format: Option<&str>, data: &[u8]) -> PyResult<ExecutableFormat> {
    match format {
        Some("ptx") => Ok(ExecutableFormat::Ptx),
        Some("cubin") => Ok(ExecutableFormat::Cubin),
        Some("fatbin") => Ok(ExecutableFormat::Fatbin),
        Some("spirv") | Some("spir-v") => Ok(ExecutableFormat::Spirv),
        Some(other) => Err(PyValueError::new_err(format!(
            "format={other:?}: expected \"ptx\", \"cubin\", \"fatbin\", \"spirv\" or \"wgsl\""
        ))),
        None => match data {
            [0x03, 0x02, 0x23, 0x07, ..] => Ok(ExecutableFormat::Spirv),
            [0x7f, b'E', b'L', b'F', ..] => Ok(ExecutableFormat::Cubin),
            [0x50, 0xed, 0x55, 0xba, ..] => Ok(ExecutableFormat::Fatbin),
            _ if std::str::from_utf8(&data[..data.len().min(4096)]).is_ok_and(|t| t.contains(".version")) => {
                Ok(ExecutableFormat::Ptx)
            }
            _ => Err(PyValueError::new_err(
                "the executable's format is not recognised from its bytes: pass format=\"ptx\", \"cubin\", \"fatbin\" or \"spirv\"",
            )),
        },
    }
}

/// SPIR-V from WGSL source (the Vulkan driver's compiler).
#[cfg(feature = "vulkan")]
fn compile_wgsl(source: &str) -> hal::Result<Vec<u8>> {
    driver_vulkan::wgsl::compile(source, "load_executable")
}

#[cfg(not(feature = "vulkan"))]
fn compile_wgsl(_source: &str) -> hal::Result<Vec<u8>> {
    Err(hal::Error::unimplemented(
        "format=\"wgsl\": this build of timeline_hal has no Vulkan driver (its WGSL compiler)",
    ))
}

/// One kernel parameter of an entry point's `params` list: `("binding", n)`, `("constant32", n)`,
/// `("constant64", n)` (constants n and n + 1 as one 64-bit value) or `None` (a null pointer,
/// Triton's unused scratch pointers).
fn kernel_param(item: &Bound<'_, PyAny>) -> PyResult<KernelParam> {
    if item.is_none() {
        return Ok(KernelParam::NullPointer);
    }
    let (kind, n): (String, u32) = item.extract().map_err(|_| {
        PyTypeError::new_err(
            "an entry point's params are (\"binding\" | \"constant32\" | \"constant64\", index) pairs or None",
        )
    })?;
    match kind.as_str() {
        "binding" => Ok(KernelParam::Binding(n)),
        "constant32" => Ok(KernelParam::Constant32(n)),
        "constant64" => Ok(KernelParam::Constant64(n)),
        other => Err(PyValueError::new_err(format!(
            "kernel parameter kind {other:?}: expected binding, constant32 or constant64"
        ))),
    }
}

/// One entry point of an `entry_points` list: a dict with `name`, `bindings`, `constants` and
/// optionally `workgroup_size` (an int or up to three), `params` (see [`kernel_param`]) and
/// `dynamic_workgroup_memory` (bytes).
fn entry_point(item: &Bound<'_, PyAny>) -> PyResult<EntryPointInfo> {
    let dict = item.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err("an entry point is a dict: {\"name\": ..., \"bindings\": n, \"constants\": n, \"workgroup_size\": (x, y, z)}")
    })?;
    let get = |key: &str| dict.get_item(key);
    let name: String =
        get("name")?.ok_or_else(|| PyValueError::new_err("an entry point needs a \"name\""))?.extract()?;
    let bindings: usize = get("bindings")?.map(|v| v.extract()).transpose()?.unwrap_or(0);
    let constants: usize = get("constants")?.map(|v| v.extract()).transpose()?.unwrap_or(0);
    let size = match get("workgroup_size")? {
        None => [1, 1, 1],
        Some(size) => crate::command::three(&size, 1, "workgroup_size")?,
    };
    let mut info = EntryPointInfo::new(name, size[0], bindings, constants).with_workgroup_size(size);
    if let Some(params) = get("params")?
        && !params.is_none()
    {
        let params = params.try_iter()?.map(|p| kernel_param(&p?)).collect::<PyResult<Vec<_>>>()?;
        info = info.with_params(params);
    }
    if let Some(bytes) = get("dynamic_workgroup_memory")? {
        info = info.with_dynamic_workgroup_memory(bytes.extract()?);
    }
    Ok(info)
}

/// The `entry_points` argument of `what` (bytes, WGSL), which needs one.
fn entry_point_list(entry_points: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Vec<EntryPointInfo>> {
    let Some(list) = entry_points else {
        return Err(PyValueError::new_err(format!("{what} need entry_points=[{{\"name\": ..., ...}}]")));
    };
    list.try_iter()?.map(|e| entry_point(&e?)).collect()
}

#[pymethods]
impl Device {
    /// The driver's name (`"cpu-sim"`, `"cuda"`, `"vulkan"`).
    #[getter]
    fn driver(&self) -> String {
        self.device.info().driver.clone()
    }

    /// The device's name as its driver reports it.
    #[getter]
    fn name(&self) -> String {
        self.device.info().name.clone()
    }

    /// Its queues.
    #[getter]
    fn queue_count(&self) -> usize {
        self.device.queue_count()
    }

    /// Everything the driver reports about the device, as a dict (see `timeline_hal.devices()`).
    #[getter]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        crate::info_dict(py, self.device.info())
    }

    /// Queue `index` (`OutOfRangeError` past the device's queues).
    #[pyo3(signature = (index = 0))]
    fn queue(&self, index: usize) -> PyResult<Queue> {
        Ok(Queue::wrap(self.device.queue(index).or_raise()?))
    }

    /// A buffer of `size` bytes: `memory="device"` (device-local) or `"host"` (host-visible and
    /// mappable: `map()`, NumPy views, DLPack on the CPU).
    #[pyo3(signature = (size, memory = "device"))]
    fn allocate(&self, py: Python<'_>, size: u64, memory: &str) -> PyResult<Buffer> {
        let params = memory_params(memory)?;
        let buffer = py.detach(|| self.device.allocate_buffer(params, size)).or_raise()?;
        Ok(Buffer::wrap(buffer, &self.device))
    }

    /// A timeline semaphore at `initial`.
    #[pyo3(signature = (initial = 0))]
    fn semaphore(&self, initial: u64) -> PyResult<Semaphore> {
        Ok(Semaphore::wrap(self.device.create_semaphore(initial).or_raise()?))
    }

    /// A command buffer to record into; `reusable=True` lets it be executed more than once.
    #[pyo3(signature = (reusable = false))]
    fn command_buffer(&self, reusable: bool) -> PyResult<CommandBuffer> {
        let mode = if reusable { CommandBufferMode::Reusable } else { CommandBufferMode::OneShot };
        Ok(CommandBuffer::wrap(self.device.create_command_buffer(mode).or_raise()?))
    }

    /// Loads an executable: a path (`str` or `os.PathLike`) to a cpu-sim kernel library (a shared
    /// library exporting `hal_cpu_sim_kernel_table`, which declares its entry points), or bytes
    /// (PTX, cubin, fatbin: CUDA; SPIR-V: Vulkan) with `entry_points`, a list of dicts
    /// `{"name", "bindings", "constants", "workgroup_size", "params", "dynamic_workgroup_memory"}`.
    /// `format` is recognised from the bytes when not given. `format="wgsl"` takes WGSL source
    /// text (a str), compiled to SPIR-V in-process (Vulkan). On cpu-sim, a Python callable (or one
    /// an entry point, in a list) with `entry_points` is a kernel run once a workgroup with an
    /// `Invocation` (its bindings are memoryviews of the bound bytes).
    #[pyo3(signature = (source, entry_points = None, format = None))]
    fn load_executable(
        &self,
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        entry_points: Option<&Bound<'_, PyAny>>,
        format: Option<&str>,
    ) -> PyResult<Executable> {
        let source = if format == Some("wgsl") {
            let text: String =
                source.extract().map_err(|_| PyTypeError::new_err("format=\"wgsl\" takes the WGSL source as a str"))?;
            let entry_points = entry_point_list(entry_points, "WGSL")?;
            let spirv = py.detach(|| compile_wgsl(&text)).or_raise()?;
            ExecutableSource::Bytes { format: ExecutableFormat::Spirv, data: Arc::from(spirv), entry_points }
        } else if let Ok(bytes) = source.cast::<PyBytes>() {
            let data = bytes.as_bytes();
            let format = executable_format(format, data)?;
            let entry_points = entry_point_list(entry_points, "executable bytes")?;
            ExecutableSource::Bytes { format, data: Arc::from(data), entry_points }
        } else if source.is_callable() || (!source.is_instance_of::<PyString>() && source.hasattr("__iter__")?) {
            let infos = entry_point_list(entry_points, "Python kernels")?;
            if format.is_some() {
                return Err(PyValueError::new_err("a Python kernel takes no format="));
            }
            ExecutableSource::Native(crate::python_kernel::entry_points(source, infos)?)
        } else {
            let path: PathBuf = source.extract().map_err(|_| {
                PyTypeError::new_err(
                    "load_executable takes bytes (PTX, cubin, fatbin, SPIR-V) or a path to a kernel library",
                )
            })?;
            if entry_points.is_some() || format.is_some() {
                return Err(PyValueError::new_err(
                    "a kernel library declares its entry points itself: pass only its path",
                ));
            }
            ExecutableSource::SharedLibrary(path)
        };
        let executable = py.detach(|| self.device.load_executable(&source)).or_raise()?;
        Ok(Executable::wrap(executable))
    }

    /// The hang report: every pending operation, what it waits on, and the semaphores' values.
    fn report(&self, py: Python<'_>) -> String {
        py.detach(|| self.device.report())
    }

    /// Gives back memory the device keeps for reuse.
    fn trim(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.device.trim()).or_raise()
    }

    fn __repr__(&self) -> String {
        let info = self.device.info();
        format!("<timeline_hal.Device {}:{} '{}'>", info.driver, info.ordinal, info.name)
    }
}
