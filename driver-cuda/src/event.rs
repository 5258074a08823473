//! CUDA events (always `DISABLE_TIMING`) and how a completion thread waits for one.
//!
//! The scheduler's completion thread of each queue blocks on the oldest in-flight event, then retires
//! everything that completed. How it blocks is a trade between wake-up latency and CPU:
//! - [`CompletionWait::Spin`]: plain events; `cuEventSynchronize` spins (the primary context's
//!   default scheduling), a core per queue busy while work is in flight, fastest wake-up.
//! - [`CompletionWait::Blocking`]: `BLOCKING_SYNC` events; the thread sleeps in the driver, no CPU,
//!   but each wake-up costs the driver's interrupt path (tens of microseconds).
//! - [`CompletionWait::SpinThenBlock`]: `BLOCKING_SYNC` events, polled with `cuEventQuery` for a
//!   budget first, then `cuEventSynchronize`: short work completes at spin latency, long work
//!   costs no more CPU than the budget.
//!
//! - [`CompletionWait::PollThenSleep`] (the default): plain events polled, then polled with growing
//!   sleeps; the device-run measurement chose it (numbers on `CompletionWait::default`).
//! - [`CompletionWait::HostCallback`]: plain events; a host function on a per-queue callback stream
//!   wakes the thread (see the crate docs, "Completion").

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUevent, CUevent_flags, CUstream, CUstream_st};
use hal::Result;

use crate::options::CompletionWait;
use crate::progress_word::ProgressWord;
use crate::sys::context::Context;
use crate::sys::result;

/// How often an event whose progress word has not reached its mark is queried anyway, to notice a
/// device fault (the word never moves again after one).
const FAULT_CHECK: Duration = Duration::from_millis(1);

/// Nanoseconds since the first call in the process (for `CudaEvent::checked`).
fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The longest sleep between two queries of [`CompletionWait::PollThenSleep`]: bounds the extra
/// wake-up latency of long-running work.
pub const MAX_POLL_SLEEP: Duration = Duration::from_micros(100);

impl CompletionWait {
    /// The flags events are created with for this mode.
    pub(crate) fn event_flags(self) -> u32 {
        let disable_timing = CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        match self {
            CompletionWait::Spin | CompletionWait::PollThenSleep(_) | CompletionWait::HostCallback => disable_timing,
            CompletionWait::Blocking | CompletionWait::SpinThenBlock(_) => {
                disable_timing | CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32
            }
        }
    }
}

/// How long a host thread waiting for a semaphore value polls its event back to back before waiting
/// like a completion thread: someone is waiting for exactly this event, so wake-up latency matters.
pub const HOST_WAIT_SPIN: Duration = Duration::from_micros(200);

/// A CUDA event of one context. Destroyed on drop.
pub struct CudaEvent {
    raw: CUevent,
    /// The progress word and number its last record was followed by (see `progress_word`): the
    /// event is complete once the word reached the number. `None`: query the event.
    mark: Mutex<Option<(Arc<ProgressWord>, u64)>>,
    /// Whether `mark` is set: without the option on, queries and records skip its lock.
    marked: AtomicBool,
    /// When the event itself was last queried while its word lagged (`now_ns`).
    checked: AtomicU64,
    /// The stream of the latest `record` (null: never recorded), so a wait by that same stream,
    /// already ordered behind the capture, can be skipped.
    recorded_on: AtomicPtr<CUstream_st>,
    context: Arc<Context>,
}

// SAFETY: a CUevent is a driver handle; the driver functions used on it are thread-safe, and the
// scheduler orders record/wait against destruction (events are pooled and dropped last).
unsafe impl Send for CudaEvent {}
// SAFETY: see `Send`.
unsafe impl Sync for CudaEvent {}

impl CudaEvent {
    /// A new event with `flags` (see [`CompletionWait::event_flags`]).
    pub fn create(context: &Arc<Context>, flags: u32) -> Result<Self> {
        let raw = result::event_create(&context.bind()?, flags)?;
        Ok(CudaEvent {
            raw,
            mark: Mutex::new(None),
            marked: AtomicBool::new(false),
            checked: AtomicU64::new(0),
            recorded_on: AtomicPtr::new(std::ptr::null_mut()),
            context: context.clone(),
        })
    }

    /// The event handle.
    pub fn raw(&self) -> CUevent {
        self.raw
    }

    /// Notes that the event was just recorded on `stream` (the caller recorded it).
    pub fn recorded_on(&self, stream: CUstream) {
        self.recorded_on.store(stream, Ordering::Release);
    }

    /// Whether the latest record was on `stream`: a wait by `stream` itself is then already satisfied
    /// by stream order. (The scheduler never re-records an event while a wait on it is pending.)
    pub fn last_recorded_on(&self, stream: CUstream) -> bool {
        self.recorded_on.load(Ordering::Acquire) == stream
    }

    /// Whether the event's latest capture completed; `Err` on a device fault.
    pub fn query(&self) -> Result<bool> {
        let marked = if self.marked.load(Ordering::Acquire) {
            hal::driver::lock(&self.mark).as_ref().map(|(word, number)| word.reached(*number))
        } else {
            None
        };
        match marked {
            Some(true) => return Ok(true),
            Some(false) => {
                let now = now_ns();
                if now.saturating_sub(self.checked.load(Ordering::Relaxed)) < FAULT_CHECK.as_nanos() as u64 {
                    return Ok(false);
                }
                self.checked.store(now, Ordering::Relaxed);
            }
            None => {}
        }
        result::event_query(&self.context.bind()?, self.raw)
    }

    /// Sets (or, with `None`, clears) the progress word and number that follow this event's last
    /// record on its stream.
    pub(crate) fn set_mark(&self, mark: Option<(Arc<ProgressWord>, u64)>) {
        if mark.is_none() && !self.marked.load(Ordering::Acquire) {
            return;
        }
        let marked = mark.is_some();
        *hal::driver::lock(&self.mark) = mark;
        self.checked.store(now_ns(), Ordering::Relaxed);
        self.marked.store(marked, Ordering::Release);
    }

    /// One query, as a wait sees it: `Some` once the capture completed (`Ok`) or the device faulted.
    fn settled(&self) -> Option<Result<()>> {
        match self.query() {
            Ok(true) => Some(Ok(())),
            Ok(false) => None,
            Err(fault) => Some(Err(fault)),
        }
    }

    /// Blocks a host thread waiting for a semaphore value: polls for [`HOST_WAIT_SPIN`], then waits as
    /// `mode` says; with a `deadline`, polls with growing sleeps until it passes (`None` then), since
    /// `cuEventSynchronize` cannot time out.
    pub fn wait_for_host(
        &self,
        mode: CompletionWait,
        poll_interval: Duration,
        deadline: Option<Instant>,
        stop: &dyn Fn() -> bool,
    ) -> Option<Result<()>> {
        let spin_end = Instant::now() + HOST_WAIT_SPIN;
        let spin_stop = deadline.map_or(spin_end, |deadline| deadline.min(spin_end));
        loop {
            if let Some(outcome) = self.settled() {
                return Some(outcome);
            }
            if stop() {
                return None;
            }
            if Instant::now() >= spin_stop {
                break;
            }
        }
        // Polling (not a blocking synchronize, whatever the completion mode) so that `stop` is
        // asked between queries: the value may be reached another way (a host signal). A deadline
        // that stopped the spin has passed: `poll_then_sleep` returns `None` at once.
        let budget = match mode {
            CompletionWait::PollThenSleep(budget) => budget,
            _ => Duration::from_micros(100),
        };
        self.poll_then_sleep(budget, poll_interval, deadline, stop)
    }

    /// The completion thread's wait: [`synchronize`](Self::synchronize), except that a polling
    /// `mode` stops (`None`) as soon as `taken_over()` says a host waiter polls this event itself,
    /// or the work retired: two threads querying one event only contend for the driver lock.
    pub fn await_completion(
        &self,
        mode: CompletionWait,
        poll_interval: Duration,
        taken_over: &dyn Fn() -> bool,
    ) -> Option<Result<()>> {
        match mode {
            CompletionWait::PollThenSleep(budget) => self.poll_then_sleep(budget, poll_interval, None, taken_over),
            // Without its callback stream (see `CudaStreams::await_completion`), a short poll.
            CompletionWait::HostCallback => {
                self.poll_then_sleep(Duration::from_micros(100), poll_interval, None, taken_over)
            }
            CompletionWait::SpinThenBlock(budget) => Some(self.spin_then_block(budget, poll_interval)),
            CompletionWait::Spin | CompletionWait::Blocking => {
                Some(self.context.bind().and_then(|bound| result::event_synchronize(&bound, self.raw)))
            }
        }
    }

    /// Blocks until the latest capture completed, as `mode` says. While spinning, queries are
    /// `poll_interval` apart: each `cuEventQuery` takes driver locks the submitting threads need too.
    pub fn synchronize(&self, mode: CompletionWait, poll_interval: Duration) -> Result<()> {
        self.await_completion(mode, poll_interval, &|| false)
            .unwrap_or_else(|| Err(hal::Error::internal("cuda: an event wait without a deadline timed out")))
    }

    /// Queries every `poll_interval` for `budget`, then blocks in `cuEventSynchronize`.
    fn spin_then_block(&self, budget: Duration, poll_interval: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if self.query()? {
                return Ok(());
            }
            let polled = Instant::now();
            if polled.duration_since(start) >= budget {
                break;
            }
            while polled.elapsed() < poll_interval {
                std::hint::spin_loop();
            }
        }
        result::event_synchronize(&self.context.bind()?, self.raw)
    }

    /// Pauses, then queries: every `poll_interval` for `budget`, then with sleeps growing to
    /// `MAX_POLL_SLEEP` (100 us), until the capture completed (or faulted), or `deadline` passed or `stop()`
    /// said to give up (`None`).
    ///
    /// It pauses before the first query because every caller has just queried (a completion thread
    /// found this event pending while retiring; a host waiter spun on it): querying again at once
    /// would only take the driver lock that the submitting thread's next launch needs.
    fn poll_then_sleep(
        &self,
        budget: Duration,
        poll_interval: Duration,
        deadline: Option<Instant>,
        stop: &dyn Fn() -> bool,
    ) -> Option<Result<()>> {
        let start = Instant::now();
        let mut sleep = Duration::from_micros(10);
        loop {
            let paused = Instant::now();
            let left = match deadline {
                Some(deadline) if paused >= deadline => return None,
                Some(deadline) => deadline - paused,
                None => Duration::MAX,
            };
            if paused.duration_since(start) < budget {
                let pause = poll_interval.min(left);
                while paused.elapsed() < pause {
                    std::hint::spin_loop();
                }
            } else {
                std::thread::sleep(sleep.min(left));
                sleep = (sleep * 2).min(MAX_POLL_SLEEP);
            }
            // Asked before the query: once the waiter no longer needs the event, the query would
            // only take the driver lock.
            if stop() {
                return None;
            }
            if let Some(outcome) = self.settled() {
                return Some(outcome);
            }
        }
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        let Ok(bound) = self.context.bind() else { return };
        // SAFETY: destroyed once, here, and no longer used: the pool drops events only when no
        // submission or semaphore refers to them.
        if let Err(e) = unsafe { result::event_destroy(&bound, self.raw) } {
            tracing::debug!(%e, "destroying an event failed");
        }
    }
}
