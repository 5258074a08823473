//! Dropping HAL objects without holding the GIL.
//!
//! Dropping the last handle to a device joins its threads, which may be running a host call that
//! waits for the GIL: the thread that drops must not hold it meanwhile. Every HAL object a Python
//! object owns is therefore dropped through [`drop_detached`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use pyo3::prelude::*;

use crate::ffi::PyGILState_Check;

/// Drops `value`, releasing the GIL for the drop when this thread holds it.
pub fn drop_detached<T: Send>(value: T) {
    // SAFETY: `PyGILState_Check` only reads this thread's state; it is safe to call on any thread
    // once the interpreter is initialized, which it is while a Python object of ours exists.
    if unsafe { PyGILState_Check() } == 1 {
        // SAFETY: this thread holds the GIL (checked just above).
        let py = unsafe { Python::assume_attached() };
        py.detach(move || drop(value));
    } else {
        drop(value);
    }
}

/// A value dropped with [`drop_detached`].
pub struct Detached<T: Send>(Option<T>);

impl<T: Send> Detached<T> {
    /// Wraps `value`.
    pub fn new(value: T) -> Self {
        Detached(Some(value))
    }
}

impl<T: Send> std::ops::Deref for Detached<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match &self.0 {
            Some(value) => value,
            // Only `drop` takes the value out.
            None => unreachable!("a Detached value is there until it is dropped"),
        }
    }
}

impl<T: Send> Drop for Detached<T> {
    fn drop(&mut self) {
        if let Some(value) = self.0.take() {
            drop_detached(value);
        }
    }
}

/// Set by [`shutdown`]: HAL threads no longer call into Python.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);
/// HAL threads inside Python now (host calls, DLPack deleters), and the condition [`shutdown`]
/// waits on for them to leave.
static IN_PYTHON: Mutex<usize> = Mutex::new(0);
static LEFT_PYTHON: Condvar = Condvar::new();

/// How long [`shutdown`] waits for HAL threads to leave Python.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Runs `f` holding the GIL from a HAL thread; `None` once the interpreter is shutting down (after
/// [`shutdown`]), when the thread must not touch Python any more.
pub fn with_python<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    if SHUTTING_DOWN.load(Ordering::Acquire) {
        return None;
    }
    *IN_PYTHON.lock().unwrap_or_else(PoisonError::into_inner) += 1;
    let result = if SHUTTING_DOWN.load(Ordering::Acquire) { None } else { Python::try_attach(f) };
    *IN_PYTHON.lock().unwrap_or_else(PoisonError::into_inner) -= 1;
    LEFT_PYTHON.notify_all();
    result
}

/// Registered with `atexit` by the package: from now on HAL threads stay out of Python (a host
/// call fails its signals with `CANCELLED`), and the threads inside it now are given a few seconds
/// to leave, the GIL released, so that none is inside Python when the interpreter finalizes.
#[pyfunction]
pub fn shutdown(py: Python<'_>) {
    SHUTTING_DOWN.store(true, Ordering::Release);
    py.detach(|| {
        let inside = IN_PYTHON.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = LEFT_PYTHON.wait_timeout_while(inside, SHUTDOWN_WAIT, |count| *count > 0);
    });
}
