//! The host end of a [`Queue::read`](crate::Queue::read): a handle that can be waited on (blocking,
//! with a timeout) or awaited, and that hands over the bytes, or typed values, once the read ran.
//!
//! The driver holds the other end, a [`ReadTarget`] inside the queued operation. It stages the bytes
//! when the read ran; the scheduler hands them over when it retires the submission, in the same step
//! that signals its semaphores, so the bytes are there exactly when the signals are reached. A read
//! that does not run, or whose submission fails, fails its readback with the status its signals get
//! (a failed wait, a failed issue, a device fault, the device's teardown), so a waiter never waits
//! for bytes that cannot come, and learns why.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytemuck::Pod;
use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::host_data::{bytes_to_vec, check_whole_values};
use crate::semaphore::{SemaphoreValue, wake_deferred};
use crate::sync::{Condvar, Mutex, lock, wait, wait_timeout};
use crate::timeout::Timeout;

/// Where a [`Queue::read`](crate::Queue::read) leaves its bytes. Cheap to clone; clones share the
/// one result, which the first `wait`/`take` hands over.
///
/// ```
/// use hal::{BufferParams, SemaphoreValue as SV, Timeout};
///
/// let device = driver_cpu_sim::create_device()?;
/// let (queue, timeline) = (device.queue(0)?, device.create_semaphore(0)?);
/// let buffer = device.allocate_buffer(BufferParams::device_local(), 16)?;
/// queue.write_values(&[], &buffer, 0, &[1.5f32, 2.5, 3.5, 4.5], &[SV::new(&timeline, 1)])?;
/// let readback = queue.read(&[SV::new(&timeline, 1)], &buffer, 4, 8, &[])?;
/// assert_eq!(readback.wait_as::<f32>(Timeout::Infinite)?, [2.5, 3.5]);
/// assert!(readback.wait(Timeout::Immediate).is_err(), "the values were handed over once");
/// # Ok::<(), hal::Error>(())
/// ```
#[derive(Clone)]
pub struct Readback {
    shared: Arc<Shared>,
}

/// The driver's end of a read: the driver stages the bytes once the read ran, and the scheduler
/// settles it when the submission retires (or fails it when the read will not run).
pub struct ReadTarget {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// What the read is, for messages ("read of buffer 3 [0, +64) on queue 1").
    what: String,
    /// Bytes it reads (a typed wait checks the size against it before waiting).
    length: u64,
    /// The read's waits and signals: the first failure among them is the readback's when the read
    /// never ran (a failed wait is why it did not run; a signal carries whatever failed it).
    causes: SmallVec<[SemaphoreValue; 2]>,
    /// Where the signals start in `causes`.
    first_signal: usize,
}

enum State {
    /// Not decided: the tasks to wake, and the bytes once the driver staged them.
    Pending(Vec<Waker>, Option<Vec<u8>>),
    Ready(Vec<u8>),
    Failed(Error),
    Taken,
}

impl Readback {
    /// A readback and the target a driver completes, for the read `what` of `length` bytes with
    /// `waits` and `signals`.
    pub(crate) fn new(
        what: String,
        length: u64,
        waits: &[SemaphoreValue],
        signals: &[SemaphoreValue],
    ) -> (Readback, ReadTarget) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::Pending(Vec::new(), None)),
            changed: Condvar::new(),
            what,
            length,
            causes: waits.iter().chain(signals).cloned().collect(),
            first_signal: waits.len(),
        });
        (Readback { shared: shared.clone() }, ReadTarget { shared })
    }

    /// Blocks until the read ran, at most `timeout`, and takes its bytes. `DeadlineExceeded` when the
    /// time ran out (wait again later), the submission's failure when it failed, and
    /// `FailedPrecondition` when a clone took the bytes already.
    pub fn wait(&self, timeout: Timeout) -> Result<Vec<u8>> {
        let deadline = timeout.deadline();
        let mut state = lock(&self.shared.state);
        loop {
            if let Some(outcome) = take_outcome(&mut state, &self.shared.what) {
                return outcome;
            }
            state = match deadline {
                None => wait(&self.shared.changed, state),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::deadline_exceeded(format!(
                            "{}: not complete within {timeout:?}",
                            self.shared.what
                        )));
                    }
                    wait_timeout(&self.shared.changed, state, left).0
                }
            };
        }
    }

    /// [`wait`](Self::wait), then the bytes as values of `T`. A read whose length is not a whole
    /// number of `T`s is refused at once with `InvalidArgument` naming the read, without waiting and
    /// without taking the bytes: a later `wait` (or `wait_as` of a fitting type) still gets them.
    pub fn wait_as<T: Pod>(&self, timeout: Timeout) -> Result<Vec<T>> {
        check_whole_values::<T>(self.shared.length, &self.shared.what)?;
        bytes_to_vec(self.wait(timeout)?, &self.shared.what)
    }

    /// The bytes if the read ran (taking them); `None` while it has not, or after they were taken.
    pub fn take(&self) -> Option<Vec<u8>> {
        let mut state = lock(&self.shared.state);
        match &*state {
            State::Ready(_) => take_outcome(&mut state, &self.shared.what).and_then(Result::ok),
            _ => None,
        }
    }

    /// Whether a `wait` would return at once (the read ran or failed, or the bytes were taken).
    pub fn is_ready(&self) -> bool {
        !matches!(&*lock(&self.shared.state), State::Pending(..))
    }

    /// A future of the bytes (what `.await` on a `Readback` gives): no thread is parked and no async
    /// runtime is required.
    pub fn wait_async(&self) -> ReadbackFuture {
        ReadbackFuture { readback: self.clone() }
    }

    /// A future of the bytes as values of `T`: [`wait_as`](Self::wait_as) without blocking. A read
    /// whose length is not a whole number of `T`s makes the future ready at its first poll with
    /// `InvalidArgument` naming the read, without waiting and without taking the bytes.
    ///
    /// ```
    /// use hal::{BufferParams, SemaphoreValue as SV, StatusCode};
    ///
    /// let device = driver_cpu_sim::create_device()?;
    /// let (queue, timeline) = (device.queue(0)?, device.create_semaphore(0)?);
    /// let buffer = device.allocate_buffer(BufferParams::device_local(), 12)?;
    /// queue.write_values(&[], &buffer, 0, &[1.5f32, 2.5, 3.5], &[SV::new(&timeline, 1)])?;
    /// let readback = queue.read(&[SV::new(&timeline, 1)], &buffer, 0, 12, &[])?;
    /// # fn block_on<F: std::future::Future>(future: F) -> F::Output {
    /// #     struct Unpark(std::thread::Thread);
    /// #     impl std::task::Wake for Unpark {
    /// #         fn wake(self: std::sync::Arc<Self>) { self.0.unpark() }
    /// #     }
    /// #     let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    /// #     let mut future = std::pin::pin!(future);
    /// #     loop {
    /// #         let poll = future.as_mut().poll(&mut std::task::Context::from_waker(&waker));
    /// #         if let std::task::Poll::Ready(output) = poll { return output; }
    /// #         std::thread::park();
    /// #     }
    /// # }
    /// // Any executor drives it (here a few lines that park the thread); 12 bytes are not a whole
    /// // number of u64s.
    /// let refused = block_on(readback.wait_as_async::<u64>());
    /// assert_eq!(refused.unwrap_err().code(), StatusCode::InvalidArgument);
    /// assert_eq!(block_on(readback.wait_as_async::<f32>())?, [1.5, 2.5, 3.5]);
    /// # Ok::<(), hal::Error>(())
    /// ```
    pub fn wait_as_async<T: Pod>(&self) -> ReadbackAsFuture<T> {
        ReadbackAsFuture { bytes: self.wait_async(), values: PhantomData }
    }
}

impl IntoFuture for Readback {
    type Output = Result<Vec<u8>>;
    type IntoFuture = ReadbackFuture;

    fn into_future(self) -> ReadbackFuture {
        ReadbackFuture { readback: self }
    }
}

/// The future of a [`Readback`]'s bytes (see [`Readback::wait_async`]).
pub struct ReadbackFuture {
    readback: Readback,
}

impl Future for ReadbackFuture {
    type Output = Result<Vec<u8>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let shared = &self.readback.shared;
        let mut state = lock(&shared.state);
        if let Some(outcome) = take_outcome(&mut state, &shared.what) {
            return Poll::Ready(outcome);
        }
        if let State::Pending(wakers, _) = &mut *state
            && !wakers.iter().any(|w| w.will_wake(cx.waker()))
        {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// The future of a [`Readback`]'s bytes as values of `T` (see [`Readback::wait_as_async`]).
pub struct ReadbackAsFuture<T> {
    bytes: ReadbackFuture,
    /// `fn() -> T`: the future makes `T`s, it holds none (so it is `Send`, `Sync` and `Unpin`).
    values: PhantomData<fn() -> T>,
}

impl<T: Pod> Future for ReadbackAsFuture<T> {
    type Output = Result<Vec<T>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let shared = self.bytes.readback.shared.clone();
        check_whole_values::<T>(shared.length, &shared.what)?;
        Pin::new(&mut self.bytes).poll(cx).map(|bytes| bytes_to_vec(bytes?, &shared.what))
    }
}

/// Takes the outcome out of a decided state (leaving `Taken`); `None` while pending.
fn take_outcome(state: &mut State, what: &str) -> Option<Result<Vec<u8>>> {
    match std::mem::replace(state, State::Taken) {
        pending @ State::Pending(..) => {
            *state = pending;
            None
        }
        State::Ready(bytes) => Some(Ok(bytes)),
        State::Failed(error) => {
            *state = State::Failed(error.clone());
            Some(Err(error))
        }
        State::Taken => Some(Err(Error::failed_precondition(format!("{what}: its bytes were taken already")))),
    }
}

impl ReadTarget {
    /// Keeps the read's bytes until the scheduler retires the submission (the driver calls this once
    /// the read ran; the readback gets them when the read's signals are applied, or fails with their
    /// status if the submission fails after all).
    pub fn stage(&self, bytes: Vec<u8>) {
        if let State::Pending(_, staged) = &mut *lock(&self.shared.state) {
            *staged = Some(bytes);
        }
    }

    /// What the read is, for the driver's messages.
    pub fn describe(&self) -> &str {
        &self.shared.what
    }

    /// Decides the readback from the submission's outcome (the scheduler, at retirement): the staged
    /// bytes when it succeeded, its status when it failed.
    pub(crate) fn settle(&self, outcome: &Result<()>) {
        match outcome {
            Ok(()) => {
                let staged = match &mut *lock(&self.shared.state) {
                    State::Pending(_, staged) => staged.take(),
                    _ => return,
                };
                self.shared.decide(match staged {
                    Some(bytes) => State::Ready(bytes),
                    None => State::Failed(Error::internal(format!(
                        "{}: the submission completed but the driver staged no bytes",
                        self.shared.what
                    ))),
                });
            }
            Err(status) => self.fail(status),
        }
    }

    /// Fails the readback with the status its signals get, unless it is decided. The read's first
    /// signal semaphore is failed with `status` here, and the readback takes the failure that
    /// semaphore keeps (`status`, or one it got first from other work) in the same step: the
    /// readback and the signal's waiters see one status, and a waiter that this failure wakes finds
    /// the readback decided. The scheduler fails the other signals right after, as for any failed
    /// submission.
    pub(crate) fn fail(&self, status: &Error) {
        let what = &self.shared.what;
        let Some(first) = self.shared.causes.get(self.shared.first_signal) else {
            self.shared.decide(State::Failed(status.context(what)));
            return;
        };
        let mut wakers = None;
        first.semaphore.fail_deciding(status.clone(), |kept| {
            wakers = self.shared.set(State::Failed(kept.clone().context(what)));
        });
        if let Some(wakers) = wakers {
            self.shared.wake(wakers);
        }
    }
}

impl Drop for ReadTarget {
    /// A read dropped undecided never ran (the scheduler settles every read it issues, and fails those
    /// it will not run): its readback fails with the first failure among its waits and signals, or
    /// `Aborted` when none carries one.
    fn drop(&mut self) {
        if !matches!(&*lock(&self.shared.state), State::Pending(..)) {
            return;
        }
        let failure = self.shared.causes.iter().find_map(|cause| cause.semaphore.query().err());
        let error = failure.map(|e| e.context(&self.shared.what)).unwrap_or_else(|| {
            Error::aborted(format!("{}: did not run (its submission failed or was cancelled)", self.shared.what))
        });
        self.shared.decide(State::Failed(error));
    }
}

impl Shared {
    /// Moves a pending readback to `decided` and wakes every waiter (tasks after the scheduler's
    /// locks are released, a panicking waker contained); a decided one stays as it is.
    fn decide(&self, decided: State) {
        if let Some(wakers) = self.set(decided) {
            self.wake(wakers);
        }
    }

    /// Moves a pending readback to `decided` without waking anyone: the tasks to wake (`None` when
    /// it was decided already).
    fn set(&self, decided: State) -> Option<Vec<Waker>> {
        let mut state = lock(&self.state);
        let State::Pending(wakers, _) = &mut *state else { return None };
        let wakers = std::mem::take(wakers);
        *state = decided;
        Some(wakers)
    }

    /// Wakes the blocked waiters and `wakers` of a readback just decided.
    fn wake(&self, wakers: Vec<Waker>) {
        self.changed.notify_all();
        wake_deferred(wakers);
    }
}

impl fmt::Debug for Readback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Readback({})", self.shared.what)
    }
}

impl fmt::Debug for ReadTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReadTarget({})", self.shared.what)
    }
}
