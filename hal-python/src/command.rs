//! `Executable` (loaded kernels) and `CommandBuffer` (recorded dispatches and transfers).

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyString};

use hal::BufferBinding;

use crate::buffer::{Buffer, with_bytes};
use crate::errors::OrRaise;
use crate::gil::Detached;

/// Up to three non-negative ints (an int alone is x), the missing ones `fill`: workgroup sizes and
/// counts.
pub fn three(value: &Bound<'_, PyAny>, fill: u32, what: &str) -> PyResult<[u32; 3]> {
    if let Ok(x) = value.extract::<u32>() {
        return Ok([x, fill, fill]);
    }
    let items: Vec<u32> =
        value.extract().map_err(|_| PyTypeError::new_err(format!("{what}: an int or up to three ints (x, y, z)")))?;
    match items[..] {
        [x] => Ok([x, fill, fill]),
        [x, y] => Ok([x, y, fill]),
        [x, y, z] => Ok([x, y, z]),
        _ => Err(PyValueError::new_err(format!("{what}: an int or up to three ints (x, y, z), not {}", items.len()))),
    }
}

/// Loaded kernels: `device.load_executable(...)`. Entry points are dispatched by name or ordinal.
#[pyclass(module = "timeline_hal", frozen)]
pub struct Executable {
    executable: Detached<hal::Executable>,
}

impl Executable {
    /// Wraps a HAL executable.
    pub fn wrap(executable: hal::Executable) -> Self {
        Executable { executable: Detached::new(executable) }
    }

    /// The ordinal of an entry point given by name or ordinal.
    fn ordinal(&self, entry: &Bound<'_, PyAny>) -> PyResult<u32> {
        if entry.is_instance_of::<PyString>() {
            return self.executable.entry_point(&entry.extract::<String>()?).or_raise();
        }
        let ordinal: u32 =
            entry.extract().map_err(|_| PyTypeError::new_err("an entry point is a name or an ordinal"))?;
        self.executable.entry_point_info(ordinal).or_raise()?;
        Ok(ordinal)
    }
}

#[pymethods]
impl Executable {
    /// The entry points' names, in ordinal order.
    #[getter]
    fn entry_points(&self) -> Vec<String> {
        self.executable.entry_points().iter().map(|e| e.name.clone()).collect()
    }

    /// The ordinal of the entry point `name` (`NotFoundError` when there is none).
    fn entry_point(&self, name: &str) -> PyResult<u32> {
        self.executable.entry_point(name).or_raise()
    }

    fn __repr__(&self) -> String {
        format!("<timeline_hal.Executable {} entry_points={:?}>", self.executable.id(), self.entry_points())
    }
}

/// A dispatch's constants: 32-bit words from ints (negative ones as their two's complement) and
/// floats (as f32 bits).
fn constant_words(constants: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<u32>> {
    let Some(constants) = constants else { return Ok(Vec::new()) };
    let mut words = Vec::new();
    for item in constants.try_iter()? {
        let item = item?;
        if item.is_instance_of::<PyFloat>() {
            words.push((item.extract::<f64>()? as f32).to_bits());
        } else if item.is_instance_of::<PyInt>() || item.hasattr("__index__")? {
            let value: i64 = item.extract()?;
            let word = u32::try_from(value)
                .or_else(|_| i32::try_from(value).map(|v| v as u32))
                .map_err(|_| PyValueError::new_err(format!("constant {value} does not fit 32 bits")))?;
            words.push(word);
        } else {
            return Err(PyTypeError::new_err("a dispatch constant is an int or a float"));
        }
    }
    Ok(words)
}

/// A dispatch's bindings: buffers, or `(buffer, offset, length)` ranges.
fn bindings(list: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<BufferBinding>> {
    let Some(list) = list else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for item in list.try_iter()? {
        let item = item?;
        if let Ok(buffer) = item.cast::<Buffer>() {
            out.push(BufferBinding::whole(buffer.get().hal()));
            continue;
        }
        let (buffer, offset, length): (PyRef<'_, Buffer>, u64, u64) = item
            .extract()
            .map_err(|_| PyTypeError::new_err("a binding is a Buffer or a (Buffer, offset, length) tuple"))?;
        out.push(BufferBinding::range(buffer.hal(), offset, length));
    }
    Ok(out)
}

/// Recorded commands: `device.command_buffer()`, recorded, `end()`ed, then `queue.execute(cb)`.
#[pyclass(module = "timeline_hal", frozen)]
pub struct CommandBuffer {
    command_buffer: Detached<hal::CommandBuffer>,
}

impl CommandBuffer {
    /// Wraps a HAL command buffer.
    pub fn wrap(command_buffer: hal::CommandBuffer) -> Self {
        CommandBuffer { command_buffer: Detached::new(command_buffer) }
    }

    /// The HAL command buffer.
    pub fn hal(&self) -> &hal::CommandBuffer {
        &self.command_buffer
    }
}

#[pymethods]
impl CommandBuffer {
    /// Records a dispatch of `entry` (a name or an ordinal) of `executable` over `workgroups` (an
    /// int or up to three), with `constants` (ints and floats, 32 bits each) and `bindings`
    /// (buffers or `(buffer, offset, length)`), as the entry point declares them.
    #[pyo3(signature = (executable, entry, workgroups, constants = None, bindings = None))]
    fn dispatch(
        &self,
        executable: &Executable,
        entry: &Bound<'_, PyAny>,
        workgroups: &Bound<'_, PyAny>,
        constants: Option<&Bound<'_, PyAny>>,
        bindings: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let ordinal = executable.ordinal(entry)?;
        let workgroups = three(workgroups, 1, "workgroups")?;
        let words = constant_words(constants)?;
        let bindings = self::bindings(bindings)?;
        self.command_buffer.dispatch(&executable.executable, ordinal, workgroups, &words, &bindings).or_raise()
    }

    /// Records a fill of `length` bytes (to the end when None) from `offset` with `value` (an int
    /// `width` bytes wide, a float as f32, or bytes of length 1, 2 or 4).
    #[pyo3(signature = (buffer, value, offset = 0, length = None, *, width = 4))]
    fn fill(
        &self,
        buffer: &Buffer,
        value: &Bound<'_, PyAny>,
        offset: u64,
        length: Option<u64>,
        width: u8,
    ) -> PyResult<()> {
        let pattern = crate::queue::fill_pattern(value, width)?;
        let length = length.unwrap_or_else(|| buffer.hal().size().saturating_sub(offset));
        self.command_buffer.fill(buffer.hal(), offset, length, pattern).or_raise()
    }

    /// Records a copy of `length` bytes (to the end of `source` when None).
    #[pyo3(signature = (source, target, length = None, *, source_offset = 0, target_offset = 0))]
    fn copy(
        &self,
        source: &Buffer,
        target: &Buffer,
        length: Option<u64>,
        source_offset: u64,
        target_offset: u64,
    ) -> PyResult<()> {
        let length = length.unwrap_or_else(|| source.hal().size().saturating_sub(source_offset));
        self.command_buffer.copy(source.hal(), source_offset, target.hal(), target_offset, length).or_raise()
    }

    /// Records a write of `data` (bytes-like, copied now) to `buffer` at `offset`.
    #[pyo3(signature = (buffer, data, offset = 0))]
    fn update(&self, buffer: &Buffer, data: &Bound<'_, PyAny>, offset: u64) -> PyResult<()> {
        with_bytes(data, |bytes| self.command_buffer.update(buffer.hal(), offset, bytes))?.or_raise()
    }

    /// Records an execution barrier: later commands start after earlier ones finish.
    fn barrier(&self) -> PyResult<()> {
        self.command_buffer.barrier().or_raise()
    }

    /// Ends recording; the command buffer can then be executed.
    fn end(&self) -> PyResult<()> {
        self.command_buffer.end().or_raise()
    }

    /// Whether `end()` was called.
    #[getter]
    fn ended(&self) -> bool {
        self.command_buffer.is_ended()
    }

    fn __repr__(&self) -> String {
        format!("<timeline_hal.CommandBuffer {} ended={}>", self.command_buffer.id(), self.command_buffer.is_ended())
    }
}
