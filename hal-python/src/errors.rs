//! HAL errors as Python exceptions (`timeline_hal._errors`: `HalError` and one subclass per status
//! code), and Python exceptions as HAL errors (a host call that raised).

use pyo3::exceptions::PyBaseException;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use hal::{Error, StatusCode};

/// `timeline_hal._errors.error`, looked up once.
static ERROR_FACTORY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
/// `timeline_hal._errors.HalError`, looked up once.
static HAL_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn errors_module(py: Python<'_>) -> PyResult<Bound<'_, PyModule>> {
    py.import("timeline_hal._errors")
}

/// The exception object for `error`: an instance of its code's class, carrying the code and the
/// HAL's message.
pub fn exception<'py>(py: Python<'py>, error: &Error) -> PyResult<Bound<'py, PyAny>> {
    let factory = ERROR_FACTORY.get_or_try_init(py, || errors_module(py)?.getattr("error").map(Bound::unbind))?;
    factory.bind(py).call1((error.code().as_str(), error.message()))
}

/// `error` as a Python exception to raise.
pub fn to_py_err(error: Error) -> PyErr {
    Python::attach(|py| match exception(py, &error) {
        Ok(value) => PyErr::from_value(value),
        // The package's own module could not be imported: raise why, with the HAL's error in it.
        Err(import) => {
            pyo3::exceptions::PyRuntimeError::new_err(format!("{error} (and timeline_hal._errors failed: {import})"))
        }
    })
}

/// `.or_raise()`: a HAL result as a Python result.
pub trait OrRaise<T> {
    /// The value, or the error as its Python exception.
    fn or_raise(self) -> PyResult<T>;
}

impl<T> OrRaise<T> for hal::Result<T> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(to_py_err)
    }
}

/// The HAL status of a Python exception: a `HalError` keeps its code and message; any other
/// exception is `Aborted`, with its type and text (`ValueError: bad input`).
pub fn from_py_err(py: Python<'_>, err: &PyErr) -> Error {
    let value = err.value(py);
    let hal_error = HAL_ERROR.get_or_try_init(py, || {
        errors_module(py)?.getattr("HalError")?.cast_into::<PyType>().map(Bound::unbind).map_err(PyErr::from)
    });
    if let Ok(hal_error) = hal_error
        && value.is_instance(hal_error.bind(py)).unwrap_or(false)
    {
        let code = value.getattr("code").and_then(|c| c.extract::<String>()).unwrap_or_default();
        let message = value.getattr("message").and_then(|m| m.extract::<String>()).unwrap_or_else(|_| describe(value));
        let code = StatusCode::ALL.into_iter().find(|c| c.as_str() == code).unwrap_or(StatusCode::Aborted);
        return Error::new(code, message);
    }
    let type_name = value.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "exception".to_owned());
    Error::aborted(format!("{type_name}: {}", describe(value)))
}

/// `str(exception)`, or a placeholder when that raises too.
fn describe(value: &Bound<'_, PyBaseException>) -> String {
    value.str().map(|s| s.to_string()).unwrap_or_else(|_| "<str() failed>".to_owned())
}
