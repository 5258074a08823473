//! Completions delivered to asyncio without the GIL on HAL threads.
//!
//! A HAL future (a semaphore wait, a readback) is polled with a waker that the HAL calls from
//! whichever thread settles it (a completion thread, a signalling thread). That waker never
//! touches Python: it queues the outcome on the event loop's [`LoopChannel`] and writes one byte to
//! the channel's socket. The loop watches the socket (`loop.add_reader`) and, on its own thread,
//! settles the asyncio futures. No thread is parked, nothing polls on a timer, and a HAL thread
//! never races the interpreter's shutdown for the GIL.

use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use pyo3::exceptions::PyBaseException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::gil::drop_detached;

/// What a settled HAL future gives Python.
pub enum Outcome {
    /// `None`: a semaphore reached its value.
    Reached,
    /// A readback's bytes.
    Bytes(Vec<u8>),
}

/// A HAL future whose outcome goes to an asyncio future.
pub type HalFuture = Pin<Box<dyn Future<Output = hal::Result<Outcome>> + Send>>;

/// Outcomes on their way to one event loop.
struct ChannelShared {
    /// The end the HAL's threads write a byte to when the queue stops being empty.
    writer: UnixStream,
    /// Settled futures: the asyncio future and its outcome.
    queue: Mutex<Vec<(Py<PyAny>, hal::Result<Outcome>)>>,
}

impl ChannelShared {
    /// Queues an outcome and wakes the loop; needs no GIL.
    fn push(&self, target: Py<PyAny>, outcome: hal::Result<Outcome>) {
        let was_empty = {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            queue.push((target, outcome));
            queue.len() == 1
        };
        if was_empty {
            // A full socket already holds a wake-up for the loop.
            let _ = (&self.writer).write(&[1]);
        }
    }
}

/// The way from HAL threads to one asyncio event loop: a socket pair and a queue of outcomes.
/// `timeline_hal._loop.channel(loop)` makes one per loop and registers `drain` as the loop's
/// reader of `fileno()`.
#[pyclass(module = "timeline_hal", frozen)]
pub struct LoopChannel {
    reader: UnixStream,
    shared: Arc<ChannelShared>,
}

#[pymethods]
impl LoopChannel {
    #[new]
    fn new() -> PyResult<Self> {
        let (reader, writer) = UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        writer.set_nonblocking(true)?;
        Ok(LoopChannel { reader, shared: Arc::new(ChannelShared { writer, queue: Mutex::new(Vec::new()) }) })
    }

    /// The socket the loop watches.
    fn fileno(&self) -> i32 {
        self.reader.as_raw_fd()
    }

    /// Settles every queued asyncio future: the loop's reader callback, on the loop's thread.
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        let mut scratch = [0u8; 64];
        loop {
            match (&self.reader).read(&mut scratch) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let settled = std::mem::take(&mut *self.shared.queue.lock().unwrap_or_else(PoisonError::into_inner));
        for (target, outcome) in settled {
            let value = match outcome {
                Ok(Outcome::Reached) => py.None().into_bound(py),
                Ok(Outcome::Bytes(bytes)) => PyBytes::new(py, &bytes).into_any(),
                Err(error) => crate::errors::exception(py, &error)?,
            };
            settle(target.bind(py), &value)?;
        }
        Ok(())
    }
}

/// The HAL future and where its outcome goes, until it is settled or cancelled.
struct Pending {
    future: HalFuture,
    target: Py<PyAny>,
    channel: Arc<ChannelShared>,
}

/// The waker: polls the HAL future again when the HAL wakes it.
struct Notifier {
    pending: Mutex<Option<Pending>>,
}

impl Notifier {
    /// Polls the future; once it is ready, queues the outcome for the loop.
    fn poll(self: &Arc<Self>) {
        let waker = Waker::from(self.clone());
        let mut cx = Context::from_waker(&waker);
        let ready = {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(p) = pending.as_mut() else { return };
            match p.future.as_mut().poll(&mut cx) {
                Poll::Pending => None,
                Poll::Ready(outcome) => pending.take().map(|p| (p, outcome)),
            }
        };
        if let Some((Pending { future, target, channel }, outcome)) = ready {
            drop(future);
            channel.push(target, outcome);
        }
    }

    /// Drops the HAL future (cancelling its timepoint) without delivering anything.
    fn cancel(&self) {
        let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner).take();
        drop_detached(pending.map(|p| p.future));
    }
}

impl Wake for Notifier {
    fn wake(self: Arc<Self>) {
        self.poll();
    }
}

/// Completes the asyncio future `target` with `outcome` (an exception instance is raised by the
/// `await`), unless it is done already (cancelled).
fn settle(target: &Bound<'_, PyAny>, outcome: &Bound<'_, PyAny>) -> PyResult<()> {
    if target.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    if outcome.is_instance_of::<PyBaseException>() {
        target.call_method1("set_exception", (outcome,))?;
    } else {
        target.call_method1("set_result", (outcome,))?;
    }
    Ok(())
}

/// Cancels the HAL future when its asyncio future is done first (cancelled, or `wait_for` timed
/// out): a done callback of the asyncio future.
#[pyclass(module = "timeline_hal", frozen)]
struct CancelOnDone {
    notifier: Arc<Notifier>,
}

#[pymethods]
impl CancelOnDone {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        self.notifier.cancel();
    }
}

/// An asyncio future of the running loop, completed with `future`'s outcome (see the module's
/// docs). Raises RuntimeError outside a running event loop.
pub fn awaitable<'py>(py: Python<'py>, future: HalFuture) -> PyResult<Bound<'py, PyAny>> {
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let channel = py.import("timeline_hal._loop")?.call_method1("channel", (&event_loop,))?;
    let channel = channel.cast::<LoopChannel>()?.get().shared.clone();
    let target = event_loop.call_method0("create_future")?;
    let notifier =
        Arc::new(Notifier { pending: Mutex::new(Some(Pending { future, target: target.clone().unbind(), channel })) });
    target.call_method1("add_done_callback", (CancelOnDone { notifier: notifier.clone() },))?;
    // The first poll registers the waker, or finds the outcome at once (queued like any other).
    notifier.poll();
    Ok(target)
}
