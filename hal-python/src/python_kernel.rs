//! cpu-sim kernels written in Python: `device.load_executable(function, entry_points=[...])` runs
//! `function(invocation)` once per workgroup on cpu-sim's runners, holding the GIL for the call.
//! An [`Invocation`] carries the workgroup's id and the dispatch's counts, the constants, and each
//! binding as a writable `memoryview` of the bound bytes, without a copy (NumPy:
//! `numpy.frombuffer(view, numpy.float32)`). The views are released when the call returns, so a
//! view (or the invocation) a kernel stored refuses every access afterwards, and a kernel that kept
//! one fails its dispatch. An array made over a view keeps only the memory's address (NumPy
//! releases the view's buffer at once), which nothing here can see or revoke: a kernel copies what
//! must outlive its call, as with a mapping.

use std::ffi::c_char;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use hal::{EntryPointInfo, NativeEntryPoint, NativeInvocation, NativeKernel};

use crate::errors::from_py_err;
use crate::ffi::PYBUF_WRITE;

/// One workgroup of a dispatch, as a Python kernel sees it.
#[pyclass(module = "timeline_hal", frozen, get_all)]
pub struct Invocation {
    /// The entry point's name.
    entry: String,
    /// `(x, y, z)` of this workgroup.
    workgroup_id: Py<PyTuple>,
    /// `(x, y, z)` workgroups in the dispatch.
    workgroup_count: Py<PyTuple>,
    /// `(x, y, z)` threads a workgroup (the entry point's `workgroup_size`).
    workgroup_size: Py<PyTuple>,
    /// The dispatch's constants, as 32-bit unsigned ints.
    constants: Py<PyTuple>,
    /// One writable `memoryview` of the bound bytes a binding, valid during the call.
    bindings: Py<PyList>,
}

#[pymethods]
impl Invocation {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<timeline_hal.Invocation {} workgroup {} of {}>",
            self.entry,
            self.workgroup_id.bind(py),
            self.workgroup_count.bind(py)
        )
    }
}

/// A writable `memoryview` of `len` bytes at `ptr`.
///
/// # Safety
/// The bytes stay valid until the view is released.
unsafe fn memoryview<'py>(py: Python<'py>, ptr: *mut u8, len: usize) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the caller's contract; `PyMemoryView_FromMemory` copies nothing and returns a new
    // reference or NULL with an error set.
    unsafe {
        let raw = ffi::PyMemoryView_FromMemory(ptr.cast::<c_char>(), len as ffi::Py_ssize_t, PYBUF_WRITE);
        Bound::from_owned_ptr_or_err(py, raw)
    }
}

/// Runs `function` for one workgroup of entry point `entry`.
fn call(py: Python<'_>, function: &Py<PyAny>, entry: &str, invocation: &NativeInvocation<'_>) -> Result<(), String> {
    let views = invocation
        .bindings
        .iter()
        // SAFETY: the binding's bytes are the dispatch's for the whole invocation, and every view
        // is released before this returns (below).
        .map(|binding| unsafe { memoryview(py, binding.ptr(), binding.len()) })
        .collect::<PyResult<Vec<_>>>()
        .map_err(|e| from_py_err(py, &e).message().to_owned())?;
    let built = (|| -> PyResult<Bound<'_, Invocation>> {
        Bound::new(
            py,
            Invocation {
                entry: entry.to_owned(),
                workgroup_id: PyTuple::new(py, invocation.workgroup_id)?.unbind(),
                workgroup_count: PyTuple::new(py, invocation.workgroup_count)?.unbind(),
                workgroup_size: PyTuple::new(py, invocation.workgroup_size)?.unbind(),
                constants: PyTuple::new(py, invocation.constants)?.unbind(),
                bindings: PyList::new(py, &views)?.unbind(),
            },
        )
    })();
    let outcome = match built {
        // The invocation (and with it its list of the views) is dropped with the call's argument
        // tuple, unless the kernel kept it.
        Ok(argument) => function.call1(py, (argument,)).map(drop),
        Err(e) => Err(e),
    };
    // A view the kernel still references (stored, or through the invocation) would outlive the
    // bytes: the dispatch fails. Only `views` holds each now otherwise.
    // SAFETY: each view is a live object (held by `views`), the GIL held.
    let kept =
        if outcome.is_ok() { views.iter().position(|view| unsafe { ffi::Py_REFCNT(view.as_ptr()) } > 1) } else { None };
    // Released whatever happened: the memory is the device's again once this returns, and a
    // released view refuses every access.
    for view in &views {
        let _ = view.call_method0("release");
    }
    outcome.map_err(|e| {
        let error = from_py_err(py, &e);
        format!("Python kernel '{entry}' raised {}", error.message())
    })?;
    match kept {
        Some(index) => Err(format!(
            "Python kernel '{entry}' kept a reference to binding {index} past its call (the view, or the invocation): \
             copy what must outlive the call"
        )),
        None => Ok(()),
    }
}

/// The entry points of a Python kernel: `source` is one callable for every entry point, or a
/// sequence of callables, one for each.
pub fn entry_points(source: &Bound<'_, PyAny>, infos: Vec<EntryPointInfo>) -> PyResult<Vec<NativeEntryPoint>> {
    let functions: Vec<Py<PyAny>> = if source.is_callable() {
        (0..infos.len()).map(|_| source.clone().unbind()).collect()
    } else {
        let list: Vec<Bound<'_, PyAny>> = source.try_iter()?.collect::<PyResult<_>>()?;
        if list.len() != infos.len() || !list.iter().all(|f| f.is_callable()) {
            return Err(PyTypeError::new_err(format!(
                "a Python kernel is one callable, or one callable an entry point ({} here)",
                infos.len()
            )));
        }
        list.into_iter().map(Bound::unbind).collect()
    };
    Ok(infos
        .into_iter()
        .zip(functions)
        .map(|(info, function)| {
            let entry = info.name.clone();
            let function = Arc::new(function);
            let kernel: NativeKernel = Arc::new(move |invocation: &NativeInvocation<'_>| {
                crate::gil::with_python(|py| call(py, &function, &entry, invocation))
                    .unwrap_or_else(|| Err("the Python interpreter is shutting down".to_owned()))
            });
            NativeEntryPoint::new(info, kernel)
        })
        .collect())
}
