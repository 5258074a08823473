//! The async wait: a `Future` whose task `Waker` hangs on a timepoint. No thread is parked and no
//! async runtime is a dependency; dropping the future cancels its timepoint.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use super::Semaphore;
use super::core::{Registration, TimepointId, TimepointListener};
use crate::error::Result;
use crate::sync::{Mutex, lock};

/// Resolves when a semaphore reaches a value (`Ok`) or fails (its status). See
/// [`Semaphore::wait_async`].
///
/// ```
/// # use std::task::{Context, Poll, Waker};
/// # use std::future::Future;
/// use hal::Semaphore;
///
/// let sem = Semaphore::new(0);
/// let mut fut = Box::pin(sem.wait_async(1));
/// let mut cx = Context::from_waker(Waker::noop());
/// assert!(fut.as_mut().poll(&mut cx).is_pending());
/// sem.signal(1).unwrap();
/// assert!(matches!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(()))));
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct WaitFuture {
    semaphore: Semaphore,
    value: u64,
    registered: Option<(TimepointId, Arc<WakeSlot>)>,
}

/// Where the outcome lands and which waker to call; the listener of the future's timepoint.
struct WakeSlot {
    state: Mutex<SlotState>,
}

struct SlotState {
    outcome: Option<Result<()>>,
    waker: Option<Waker>,
}

impl TimepointListener for WakeSlot {
    fn notify(&self, _tag: u64, outcome: Result<()>) {
        let waker = {
            let mut state = lock(&self.state);
            state.outcome = Some(outcome);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn describe(&self, _tag: u64) -> String {
        "async task".to_string()
    }
}

impl WaitFuture {
    pub(super) fn new(semaphore: Semaphore, value: u64) -> Self {
        WaitFuture { semaphore, value, registered: None }
    }
}

impl Future for WaitFuture {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some((_, slot)) = &this.registered {
            let mut state = lock(&slot.state);
            if let Some(outcome) = state.outcome.take() {
                drop(state);
                this.registered = None;
                return Poll::Ready(outcome);
            }
            match &state.waker {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => state.waker = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        }
        if let Some(outcome) = this.semaphore.check_fast(this.value) {
            return Poll::Ready(outcome);
        }
        let slot =
            Arc::new(WakeSlot { state: Mutex::new(SlotState { outcome: None, waker: Some(cx.waker().clone()) }) });
        match this.semaphore.register(this.value, slot.clone(), 0) {
            Registration::Resolved(outcome) => Poll::Ready(outcome),
            Registration::Pending(id) => {
                this.registered = Some((id, slot));
                Poll::Pending
            }
        }
    }
}

impl Drop for WaitFuture {
    fn drop(&mut self) {
        if let Some((id, _)) = self.registered.take() {
            self.semaphore.cancel(id);
        }
    }
}
