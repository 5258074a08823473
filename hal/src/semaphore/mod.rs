//! Timeline semaphores: a `u64` that only grows, or a failure that stays.
//!
//! [`Semaphore`] is the one semaphore type every driver uses. Its pure state lives in [`core`]; host
//! waits that park a thread are in `wait`, the async wait in `future`. Drivers hang their work on a
//! semaphore with [`Semaphore::register`] and a [`TimepointListener`].

pub mod core;
mod future;
mod wait;

use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::Waker;
use std::time::Instant;

use smallvec::SmallVec;

use crate::device::DeviceId;
use crate::error::{Error, Result};
use crate::label::{Label, Unlabelled};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{Mutex, lock};
use crate::timeout::Timeout;

pub(crate) use self::core::{
    Registration, Resolved, TimelineState, Timepoint, TimepointId, TimepointKind, TimepointListener,
};
pub use future::WaitFuture;
pub use wait::{WaitMode, wait_semaphores};

/// How long a host wait re-reads the value before it parks the thread: enough to catch a signal
/// already on its way without burning a core. Bounded by time, not a count of re-reads: what a
/// spin-loop pause costs differs by two orders of magnitude between CPUs, so a fixed count can
/// outlast a whole device round trip on some.
const SPIN_TIME: std::time::Duration = std::time::Duration::from_micros(1);

bitflags::bitflags! {
    /// How a semaphore may be used, fixed when it is created
    /// ([`Device::create_semaphore_with`](crate::Device::create_semaphore_with),
    /// [`Semaphore::with_flags`]).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct SemaphoreFlags: u32 {
        /// Only the host signals it ([`Semaphore::signal`]); a queue operation that would signal
        /// it is refused with `InvalidArgument`, naming it. Work waiting on it is held on the host
        /// until the signal, as for any value nobody has signalled yet, so it holds back nothing
        /// else on its queue.
        const HOST_SIGNAL_ONLY = 1 << 0;
    }
}

/// A timeline semaphore. Cheap to clone; clones are the same semaphore.
///
/// ```
/// use hal::{Semaphore, Timeout};
/// use std::time::Duration;
///
/// let sem = Semaphore::new(0);
/// let signaller = { let sem = sem.clone(); std::thread::spawn(move || sem.signal(2)) };
/// sem.wait(2, Timeout::After(Duration::from_secs(5))).unwrap();
/// signaller.join().unwrap().unwrap();
/// assert_eq!(sem.query().unwrap(), 2);
/// assert!(sem.signal(1).is_err(), "values only grow");
/// ```
#[derive(Clone)]
pub struct Semaphore {
    shared: Arc<Shared>,
}

struct Shared {
    id: u64,
    /// Mirrors of the state for the lock-free fast path; written only under `state`'s lock.
    value: AtomicU64,
    failed: AtomicBool,
    /// Queue signals that completed behind the value already reached (see `behind_signals`).
    behind: AtomicU64,
    state: Mutex<TimelineState>,
    owner: Option<DeviceId>,
    driver_data: Option<Arc<dyn SemaphoreDriverData>>,
    flags: SemaphoreFlags,
    label: Label,
}

/// What a driver attaches to the semaphores it creates: its per-semaphore state (found again with
/// `as_any`), and optionally help for host waits.
pub trait SemaphoreDriverData: Send + Sync + 'static {
    /// For downcasting to the driver's type.
    fn as_any(&self) -> &dyn Any;

    /// Called by a host wait for `value` before it parks: a driver that knows the device work that
    /// will signal `value` may wait for it directly, until `deadline` at most, and apply its
    /// completion on this thread, saving the hop through a completion thread. Returns whether it
    /// applied anything (`false` also when the deadline passed first).
    fn assist_wait(&self, semaphore: &Semaphore, value: u64, deadline: Option<Instant>) -> bool {
        let _ = (semaphore, value, deadline);
        false
    }

    /// Called once, when the semaphore fails: work in flight that would signal it has lost its
    /// purpose, and a driver may ask it to stop early (see `Work::request_cancel`).
    fn failed(&self) {}
}

/// Hands out semaphore ids for messages ("semaphore 7"). Plain std: naming is not a race we check.
static NEXT_SEMAPHORE_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Semaphore {
    /// A host semaphore at `initial`, owned by no device (every device waits on it from the host).
    pub fn new(initial: u64) -> Self {
        Self::build(initial, None, None, SemaphoreFlags::empty())
    }

    /// A host semaphore at `initial` with `flags` (see [`SemaphoreFlags`]).
    pub fn with_flags(initial: u64, flags: SemaphoreFlags) -> Self {
        Self::build(initial, None, None, flags)
    }

    /// A semaphore owned by `owner`, carrying the driver's per-semaphore data (e.g. the events its
    /// device recorded for pending signals). Drivers call this from `create_semaphore`.
    pub(crate) fn with_driver_data(
        initial: u64,
        owner: DeviceId,
        data: Arc<dyn SemaphoreDriverData>,
        flags: SemaphoreFlags,
    ) -> Self {
        Self::build(initial, Some(owner), Some(data), flags)
    }

    fn build(
        initial: u64,
        owner: Option<DeviceId>,
        driver_data: Option<Arc<dyn SemaphoreDriverData>>,
        flags: SemaphoreFlags,
    ) -> Self {
        let id = NEXT_SEMAPHORE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Semaphore {
            shared: Arc::new(Shared {
                id,
                value: AtomicU64::new(initial),
                failed: AtomicBool::new(false),
                behind: AtomicU64::new(0),
                state: Mutex::new(TimelineState::owned_by(id, initial)),
                owner,
                driver_data,
                flags,
                label: Label::default(),
            }),
        }
    }

    /// The id used in messages and reports.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// Labels the semaphore for messages, [`Device::report`](crate::Device::report) and traces
    /// ("semaphore 7 'name'"). Set once: `FailedPrecondition` when it has a label already,
    /// `InvalidArgument` for an empty label, one over [`MAX_LABEL_BYTES`](crate::MAX_LABEL_BYTES)
    /// bytes or one with control characters.
    pub fn set_label(&self, label: impl Into<String>) -> Result<()> {
        self.shared.label.set(&Unlabelled("semaphore", self.shared.id), label.into())
    }

    /// The label, if one was set.
    pub fn label(&self) -> Option<&str> {
        self.shared.label.get()
    }

    /// The device that created it, if any.
    pub fn owner(&self) -> Option<DeviceId> {
        self.shared.owner
    }

    /// The flags it was created with.
    pub fn flags(&self) -> SemaphoreFlags {
        self.shared.flags
    }

    /// Whether only the host may signal it ([`SemaphoreFlags::HOST_SIGNAL_ONLY`]).
    pub fn is_host_signal_only(&self) -> bool {
        self.shared.flags.contains(SemaphoreFlags::HOST_SIGNAL_ONLY)
    }

    /// The driver's data attached at creation, if any.
    pub(crate) fn driver_data(&self) -> Option<&dyn Any> {
        self.shared.driver_data.as_deref().map(|d| d.as_any())
    }

    /// Lets the owning driver help a host wait (see [`SemaphoreDriverData::assist_wait`]).
    pub(crate) fn assist_wait(&self, value: u64, deadline: Option<Instant>) -> bool {
        match &self.shared.driver_data {
            Some(data) => data.assist_wait(self, value, deadline),
            None => false,
        }
    }

    /// Whether two handles are the same semaphore.
    pub fn same_as(&self, other: &Semaphore) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The current value, or the failure the semaphore holds.
    pub fn query(&self) -> Result<u64> {
        if !self.shared.failed.load(Ordering::Acquire) {
            return Ok(self.shared.value.load(Ordering::Acquire));
        }
        lock(&self.shared.state).query()
    }

    /// Whether `value` is reached, without locking when it is: `Some(Ok)` reached, `Some(Err)` failed,
    /// `None` not yet.
    pub(crate) fn check_fast(&self, value: u64) -> Option<Result<()>> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Some(lock(&self.shared.state).query().map(|_| ()));
        }
        (self.shared.value.load(Ordering::Acquire) >= value).then_some(Ok(()))
    }

    /// Sets the value to `value` from the host and wakes everything waiting for it.
    ///
    /// `FailedPrecondition` (and no change) if `value` is not greater than the current value; the
    /// failure if the semaphore has failed.
    pub fn signal(&self, value: u64) -> Result<()> {
        let resolved = {
            let mut state = lock(&self.shared.state);
            let resolved = state.signal(value, &self.name())?;
            self.shared.value.store(value, Ordering::Release);
            resolved
        };
        deliver(resolved, Ok(()));
        Ok(())
    }

    /// Fails the semaphore for good with `status`; every waiter (host threads, async tasks, queued
    /// work) is woken with it. A second failure is ignored; the first is kept.
    pub fn fail(&self, status: Error) {
        self.fail_deciding(status, |_| ());
    }

    /// [`fail`](Self::fail), running `decide` with the failure the semaphore keeps (`status`, or an
    /// earlier failure) before the waiters this call wakes can see it: state that must agree with
    /// the semaphore's failure (a read's readback) is decided by the time they wake. `decide` runs under the
    /// semaphore's lock, so it must not call back into the semaphore nor run user code.
    pub(crate) fn fail_deciding(&self, status: Error, decide: impl FnOnce(&Error)) {
        let (first, resolved) = {
            let mut state = lock(&self.shared.state);
            let first = state.failure().is_none();
            let resolved = state.fail(status.clone());
            if let Some(kept) = state.failure() {
                decide(kept);
            }
            self.shared.failed.store(true, Ordering::Release);
            (first, resolved)
        };
        if first && let Some(data) = &self.shared.driver_data {
            data.failed();
        }
        // Only the first failure resolves anything, so `status` is the one the semaphore keeps.
        deliver(resolved, Err(status));
    }

    /// The failure, if the semaphore failed before it reached `value`: work that waited for `value`
    /// on the device (issued before the failure) must then not report success.
    pub(crate) fn failed_short_of(&self, value: u64) -> Option<Error> {
        if !self.shared.failed.load(Ordering::Acquire) {
            return None;
        }
        let state = lock(&self.shared.state);
        state.failure().filter(|_| state.last_value() < value).cloned()
    }

    /// Blocks until the value is at least `value`, the semaphore fails (its status is returned), or
    /// the timeout passes (`DeadlineExceeded`). A reached value returns at once without locking.
    pub fn wait(&self, value: u64, timeout: Timeout) -> Result<()> {
        wait::wait_one(self, value, timeout)
    }

    /// A future that resolves when the value is at least `value` (or the semaphore fails). It hangs the
    /// task's `Waker` on a timepoint: no thread is parked and no async runtime is required.
    pub fn wait_async(&self, value: u64) -> WaitFuture {
        WaitFuture::new(self.clone(), value)
    }

    /// Registers `listener` to be told once the value reaches `value` or the semaphore fails. When that
    /// is already decided nothing is stored and the outcome is returned instead.
    pub(crate) fn register(&self, value: u64, listener: Arc<dyn TimepointListener>, tag: u64) -> Registration {
        if let Some(outcome) = self.check_fast(value) {
            return Registration::Resolved(outcome);
        }
        lock(&self.shared.state).register(value, listener, tag)
    }

    /// Registers `listener` for `kind` at `value` (see [`TimepointKind`]); drivers use
    /// `TimepointKind::Enqueued` to learn when a device-side wait can be issued.
    pub(crate) fn register_kind(
        &self,
        kind: TimepointKind,
        value: u64,
        listener: Arc<dyn TimepointListener>,
        tag: u64,
    ) -> Registration {
        if let Some(outcome) = self.check_fast(value) {
            return Registration::Resolved(outcome);
        }
        lock(&self.shared.state).register_kind(kind, value, listener, tag)
    }

    /// Records that work signalling `value` is enqueued on a device stream (its event is recorded),
    /// waking the `Enqueued` timepoints it satisfies. Drivers call this after recording the event.
    pub(crate) fn advance_enqueued(&self, value: u64) {
        let resolved = lock(&self.shared.state).advance_enqueued(value);
        deliver(resolved, Ok(()));
    }

    /// Cancels a registration: `true` if it was removed before it resolved (the listener will not be
    /// called), `false` if it resolved already.
    pub(crate) fn cancel(&self, id: TimepointId) -> bool {
        lock(&self.shared.state).cancel(id)
    }

    /// How many timepoints are registered and unresolved (0 when nothing waits).
    pub(crate) fn pending_count(&self) -> usize {
        lock(&self.shared.state).pending_count()
    }

    /// How many queue signals completed behind the value already reached: submissions that signal
    /// this semaphore without being ordered with each other, where a later value completed first.
    /// Waiters see no difference (values only grow), but a count above 0 usually means a missing
    /// dependency in the program.
    pub fn behind_signals(&self) -> u64 {
        self.shared.behind.load(Ordering::Relaxed)
    }

    pub(crate) fn note_behind_signal(&self) {
        self.shared.behind.fetch_add(1, Ordering::Relaxed);
    }

    /// One line for hang reports: value or failure, and who waits for which value.
    pub fn report(&self) -> String {
        let state = lock(&self.shared.state);
        let mut line = match state.failure() {
            Some(failure) => format!("{}: failed ({failure}) at value {}", self.name(), state.last_value()),
            None => format!("{}: value {}", self.name(), state.last_value()),
        };
        let behind = self.behind_signals();
        if behind > 0 {
            line.push_str(&format!("; {behind} queue signal(s) completed behind the value reached"));
        }
        if state.pending_count() > 0 {
            let waiting: Vec<String> =
                state.pending().map(|t| format!("{} wants {}", t.listener.describe(t.tag), t.value)).collect();
            line.push_str(&format!("; waiting: {}", waiting.join(", ")));
        }
        line
    }

    fn name(&self) -> &Self {
        self
    }
}

crate::sync::thread_local! {
    // Not `const`-initialised: loom's `thread_local!` does not accept that form.
    #[allow(clippy::missing_const_for_thread_local)]
    /// Notifications raised while this thread is already notifying, delivered by the outermost
    /// `deliver` in a loop (see there).
    static DELIVERY: RefCell<Delivery> = RefCell::new(Delivery { active: false, queue: VecDeque::new() });
}

struct Delivery {
    active: bool,
    queue: VecDeque<Notice>,
}

/// One held-back notification: a timepoint's outcome, or a task waker (a readback's).
enum Notice {
    Timepoint(Timepoint, Result<()>),
    Wake(Waker),
}

/// Tells resolved timepoints their outcome. A listener may signal another semaphore from inside its
/// notification (a released action issues and publishes its own signals, which release the next
/// action, ...): those nested notifications are queued and delivered here in a loop, so a chain of a
/// million held submissions released by one host signal runs in constant stack.
fn deliver(resolved: Resolved, outcome: Result<()>) {
    if resolved.is_empty() {
        return;
    }
    deliver_notices(resolved.into_iter().map(|timepoint| Notice::Timepoint(timepoint, outcome.clone())));
}

/// Delivers `notices` now, then whatever they raise, when no delivery is active on this thread;
/// queues them behind the active one otherwise.
fn deliver_notices(notices: impl Iterator<Item = Notice>) {
    let mut notices = Some(notices);
    let nested = DELIVERY.with(|d| {
        let mut d = d.borrow_mut();
        if d.active {
            d.queue.extend(notices.take().into_iter().flatten());
            true
        } else {
            d.active = true;
            false
        }
    });
    if nested {
        return;
    }
    let _active = ActiveDelivery;
    notices.into_iter().flatten().for_each(notify_guarded);
    drain_delivery_queue();
}

/// Runs `f` with every notification it raises on this thread held back, then delivers them once
/// `f` returned: the scheduler retires work under its locks inside `f`, and listeners (wakers,
/// released actions, user code) must never run under those locks. Inside another delivery (or
/// another `defer_delivery`) the notifications simply join the outer queue.
pub(crate) fn defer_delivery<R>(f: impl FnOnce() -> R) -> R {
    let outermost = DELIVERY.with(|d| {
        let mut d = d.borrow_mut();
        !std::mem::replace(&mut d.active, true)
    });
    if !outermost {
        return f();
    }
    let _active = ActiveDelivery;
    let result = f();
    drain_delivery_queue();
    result
}

/// Clears the active flag when the outermost delivery ends, even if something panics, so later
/// deliveries on this thread are not lost.
struct ActiveDelivery;

impl Drop for ActiveDelivery {
    fn drop(&mut self) {
        DELIVERY.with(|d| {
            let mut d = d.borrow_mut();
            d.active = false;
            // Empty unless a listener panicked mid-delivery; clearing an empty deque still sets up
            // and tears down a drain, on every submission.
            if !d.queue.is_empty() {
                d.queue.clear();
            }
        });
    }
}

fn drain_delivery_queue() {
    while let Some(notice) = DELIVERY.with(|d| d.borrow_mut().queue.pop_front()) {
        notify_guarded(notice);
    }
}

/// Wakes task `wakers` the way listeners are told: after the scheduler's locks are released when a
/// delivery is active on this thread (a retirement, say), at once otherwise; a waker that panics is
/// contained either way.
pub(crate) fn wake_deferred(wakers: Vec<Waker>) {
    if !wakers.is_empty() {
        deliver_notices(wakers.into_iter().map(Notice::Wake));
    }
}

/// Tells one listener or wakes one task, containing a panic: a panicking waker or listener must not
/// stop delivery to the others, nor kill the thread delivering (a completion thread, a signaller).
fn notify_guarded(notice: Notice) {
    let value = match &notice {
        Notice::Timepoint(timepoint, _) => Some(timepoint.value),
        Notice::Wake(_) => None,
    };
    let told = catch_unwind(AssertUnwindSafe(|| match notice {
        Notice::Timepoint(timepoint, outcome) => timepoint.notify(outcome),
        Notice::Wake(waker) => waker.wake(),
    }));
    if let Err(panic) = told {
        let panic = crate::error::panic_message(&*panic);
        match value {
            Some(value) => tracing::error!(value, %panic, "a semaphore listener panicked"),
            None => tracing::error!(%panic, "a task waker panicked"),
        }
    }
}

impl fmt::Display for Semaphore {
    /// "semaphore N", or "semaphore N 'label'" when it has a label.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.label.write_name(f, "semaphore", self.shared.id)
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.report())
    }
}

/// A semaphore and a value: "wait until `semaphore` reaches `value`" in a wait list, "set `semaphore`
/// to `value`" in a signal list.
#[derive(Clone, Debug)]
pub struct SemaphoreValue {
    /// The semaphore.
    pub semaphore: Semaphore,
    /// The value.
    pub value: u64,
}

impl SemaphoreValue {
    /// Pairs `semaphore` with `value`.
    pub fn new(semaphore: &Semaphore, value: u64) -> Self {
        SemaphoreValue { semaphore: semaphore.clone(), value }
    }
}

/// An owned wait or signal list, stored without allocating for the common one or two entries.
pub type SemaphoreList = SmallVec<[SemaphoreValue; 2]>;

#[cfg(test)]
mod tests;
