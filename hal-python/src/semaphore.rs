//! `Semaphore`: a timeline semaphore, waited on from threads (the GIL released) and from asyncio.

use pyo3::prelude::*;

use hal::Error;

use crate::errors::OrRaise;
use crate::gil::Detached;
use crate::notify::{Outcome, awaitable};

/// A timeline semaphore: a `u64` that only grows, or a failure every waiter sees.
/// `device.semaphore(initial=0)`.
#[pyclass(module = "timeline_hal", frozen)]
pub struct Semaphore {
    semaphore: Detached<hal::Semaphore>,
}

impl Semaphore {
    /// Wraps a HAL semaphore.
    pub fn wrap(semaphore: hal::Semaphore) -> Self {
        Semaphore { semaphore: Detached::new(semaphore) }
    }

    /// The HAL semaphore.
    pub fn hal(&self) -> &hal::Semaphore {
        &self.semaphore
    }
}

#[pymethods]
impl Semaphore {
    /// The current value; raises the semaphore's failure if it failed.
    #[getter]
    fn value(&self) -> PyResult<u64> {
        self.semaphore.query().or_raise()
    }

    /// Whether it failed.
    #[getter]
    fn failed(&self) -> bool {
        self.semaphore.query().is_err()
    }

    /// The failure as an exception instance (not raised), or None.
    #[getter]
    fn failure<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.semaphore.query() {
            Ok(_) => Ok(None),
            Err(error) => crate::errors::exception(py, &error).map(Some),
        }
    }

    /// Sets the value to `value` from the host, waking everything waiting for it
    /// (`FailedPreconditionError` unless it grows).
    fn signal(&self, py: Python<'_>, value: u64) -> PyResult<()> {
        py.detach(|| self.semaphore.signal(value)).or_raise()
    }

    /// Fails the semaphore for good: every waiter (threads, tasks, queued work) gets
    /// `AbortedError` (or the status `code` names) with `message`.
    #[pyo3(signature = (message, code = "ABORTED"))]
    fn fail(&self, py: Python<'_>, message: &str, code: &str) -> PyResult<()> {
        let code = hal::StatusCode::ALL.into_iter().find(|c| c.as_str() == code).ok_or_else(|| {
            pyo3::exceptions::PyValueError::new_err(format!(
                "code={code:?}: not a status name (\"ABORTED\", \"CANCELLED\", ...)"
            ))
        })?;
        let error = Error::new(code, message);
        py.detach(|| self.semaphore.fail(error));
        Ok(())
    }

    /// Blocks until the value is at least `value` (the GIL released; Ctrl-C interrupts), raising
    /// the semaphore's failure or, after `timeout` seconds, `DeadlineExceededError`.
    #[pyo3(signature = (value, timeout = None))]
    fn wait(&self, py: Python<'_>, value: u64, timeout: Option<f64>) -> PyResult<()> {
        crate::wait_interruptibly(py, timeout, |t| self.semaphore.wait(value, t))
    }

    /// An awaitable (an asyncio future of the running loop) done when the value is at least
    /// `value`; raises the failure. `await sem.reach(3)`. Completed from the HAL's thread through
    /// the loop's `call_soon_threadsafe`; cancelling it cancels the wait.
    fn reach<'py>(&self, py: Python<'py>, value: u64) -> PyResult<Bound<'py, PyAny>> {
        let wait = self.semaphore.wait_async(value);
        awaitable(py, Box::pin(async move { wait.await.map(|()| Outcome::Reached) }))
    }

    /// `(self, value)`: a pair for `waits=` and `signals=` lists.
    fn at(slf: Py<Self>, value: u64) -> (Py<Self>, u64) {
        (slf, value)
    }

    /// The hang-report line: value or failure, and who waits for which value.
    fn report(&self) -> String {
        self.semaphore.report()
    }

    fn __repr__(&self) -> String {
        match self.semaphore.query() {
            Ok(value) => format!("<timeline_hal.Semaphore {} value={value}>", self.semaphore.id()),
            Err(error) => format!("<timeline_hal.Semaphore {} failed: {error}>", self.semaphore.id()),
        }
    }
}
