//! How host threads wait on a Vulkan stream without paying a thread wake-up per submission.
//!
//! Two threads stand between a submission and its waiter: the stream's submit thread (which calls
//! `vkQueueSubmit`) and the queue's completion thread (which blocks in an untimed
//! `vkWaitSemaphores` and retires). Each hand-off through a sleeping thread costs a wake-up of
//! several microseconds, so:
//! - a host thread waiting for a semaphore value polls the stream's timeline counter
//!   (`vkGetSemaphoreCounterValue`, a read of memory the device writes on NVIDIA) for up to
//!   [`HOST_POLL_ENV`] microseconds and retires the work itself when it sees the value, before it
//!   parks on the semaphore for the completion thread to wake;
//! - an idle submit thread watches for the next item for up to [`SUBMIT_WATCH_ENV`] microseconds
//!   before it sleeps; a submitter wakes it (a system call) only when it sleeps.
//!
//! Both watch politely, yielding between looks: a yield that returns late shows the cores are wanted
//! elsewhere, and the waiter then parks, the submit thread sleeps at once for a while.

use std::time::{Duration, Instant};

use hal::{Error, Result};

/// Microseconds a host thread waiting for a semaphore value polls the timeline before it parks
/// (default [`DEFAULT_HOST_POLL`]; `0`: it parks at once, woken by the completion thread).
pub const HOST_POLL_ENV: &str = "HAL_VULKAN_HOST_POLL_US";

/// Microseconds an idle submit thread watches for the next submission before it sleeps (default
/// [`DEFAULT_SUBMIT_WATCH`]; `0`: it sleeps at once).
pub const SUBMIT_WATCH_ENV: &str = "HAL_VULKAN_SUBMIT_WATCH_US";

/// The default of [`HOST_POLL_ENV`]: as long as the CUDA driver's host waiters spin.
pub const DEFAULT_HOST_POLL: Duration = Duration::from_micros(200);

/// The default of [`SUBMIT_WATCH_ENV`]: as long as the scheduler's completion threads watch.
pub const DEFAULT_SUBMIT_WATCH: Duration = Duration::from_micros(50);

/// A yield that returns later than this shows the cores are wanted by other threads.
const CONTENDED_YIELD: Duration = Duration::from_micros(20);

/// How long a submit thread that saw contention sleeps at once when idle, before it watches again.
const CONTENDED_PAUSE: Duration = Duration::from_millis(100);

/// How long the host's threads watch before they sleep, read when a device is created.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitTuning {
    pub(crate) host_poll: Duration,
    pub(crate) submit_watch: Duration,
}

impl WaitTuning {
    /// From [`HOST_POLL_ENV`] and [`SUBMIT_WATCH_ENV`]; `InvalidArgument` naming a value that is not
    /// a whole number of microseconds.
    pub(crate) fn from_env() -> Result<WaitTuning> {
        Ok(WaitTuning {
            host_poll: micros_from_env(HOST_POLL_ENV, DEFAULT_HOST_POLL)?,
            submit_watch: micros_from_env(SUBMIT_WATCH_ENV, DEFAULT_SUBMIT_WATCH)?,
        })
    }
}

fn micros_from_env(name: &str, default: Duration) -> Result<Duration> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(text) if text.trim().is_empty() => Ok(default),
        Ok(text) => text.trim().parse::<u64>().map(Duration::from_micros).map_err(|_| {
            Error::invalid_argument(format!("vulkan: {name}='{text}' is not a whole number of microseconds"))
        }),
    }
}

/// Polls `reached()` until it says `Some` (the outcome), `stop()` says the waiter no longer needs
/// it, `deadline` passes, `budget` is spent or a yield between polls shows the cores are wanted
/// (lavapipe runs the device's work on them): `None` in the last four cases.
pub(crate) fn poll(
    budget: Duration,
    deadline: Option<Instant>,
    stop: &dyn Fn() -> bool,
    mut reached: impl FnMut() -> Option<Result<()>>,
) -> Option<Result<()>> {
    let started = Instant::now();
    let end = deadline.map_or(started + budget, |deadline| deadline.min(started + budget));
    loop {
        if let Some(outcome) = reached() {
            return Some(outcome);
        }
        if stop() || Instant::now() >= end {
            return None;
        }
        let yielded = Instant::now();
        std::thread::yield_now();
        if yielded.elapsed() > CONTENDED_YIELD {
            return None;
        }
    }
}

/// Watches `changed()` for up to `watch` before a thread sleeps; whether it changed. Gives up early
/// (and sets `pause_until`) when a yield shows the cores are wanted; watches not at all before
/// `pause_until`.
pub(crate) fn watch(watch: Duration, pause_until: &mut Option<Instant>, changed: impl Fn() -> bool) -> bool {
    if watch.is_zero() || pause_until.is_some_and(|until| Instant::now() < until) {
        return changed();
    }
    let started = Instant::now();
    loop {
        if changed() {
            return true;
        }
        if started.elapsed() >= watch {
            return false;
        }
        let yielded = Instant::now();
        std::thread::yield_now();
        if yielded.elapsed() > CONTENDED_YIELD {
            *pause_until = Some(Instant::now() + CONTENDED_PAUSE);
            return changed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn poll_returns_the_outcome_once_reached() {
        let calls = Cell::new(0);
        let outcome = poll(Duration::from_secs(5), None, &|| false, || {
            calls.set(calls.get() + 1);
            (calls.get() == 3).then_some(Ok(()))
        });
        assert!(matches!(outcome, Some(Ok(()))));
        assert_eq!(calls.get(), 3);
    }

    #[test]
    fn poll_gives_up_when_stopped_past_its_budget_or_deadline() {
        assert!(poll(Duration::from_secs(5), None, &|| true, || None).is_none());
        let started = Instant::now();
        assert!(poll(Duration::from_millis(2), None, &|| false, || None).is_none());
        assert!(started.elapsed() < Duration::from_secs(5));
        let passed = Instant::now();
        assert!(poll(Duration::from_secs(5), Some(passed), &|| false, || None).is_none());
    }

    #[test]
    fn poll_passes_a_device_fault_on() {
        let outcome = poll(Duration::from_secs(5), None, &|| false, || Some(Err(Error::internal("lost"))));
        assert!(matches!(outcome, Some(Err(e)) if e.to_string().contains("lost")));
    }

    #[test]
    fn watch_sees_a_change_and_gives_up_after_its_time() {
        let mut pause = None;
        assert!(watch(Duration::from_secs(5), &mut pause, || true));
        let started = Instant::now();
        assert!(!watch(Duration::from_millis(2), &mut pause, || false));
        assert!(started.elapsed() >= Duration::from_millis(2) || pause.is_some());
        // A zero watch or a pause only looks once.
        assert!(!watch(Duration::ZERO, &mut pause, || false));
        let mut paused = Some(Instant::now() + Duration::from_secs(60));
        let looked = Cell::new(0);
        assert!(!watch(Duration::from_secs(5), &mut paused, || {
            looked.set(looked.get() + 1);
            false
        }));
        assert_eq!(looked.get(), 1);
    }

    #[test]
    fn tuning_reads_microseconds_and_names_a_bad_value() {
        assert_eq!(
            micros_from_env("HAL_VULKAN_TEST_UNSET_KNOB", Duration::from_micros(7)).unwrap(),
            Duration::from_micros(7)
        );
        // SAFETY: this test alone uses this variable.
        unsafe { std::env::set_var("HAL_VULKAN_TEST_KNOB", "15") };
        assert_eq!(micros_from_env("HAL_VULKAN_TEST_KNOB", Duration::ZERO).unwrap(), Duration::from_micros(15));
        // SAFETY: as above.
        unsafe { std::env::set_var("HAL_VULKAN_TEST_KNOB", "soon") };
        let e = micros_from_env("HAL_VULKAN_TEST_KNOB", Duration::ZERO).unwrap_err();
        assert!(e.to_string().contains("HAL_VULKAN_TEST_KNOB='soon'"), "{e}");
    }
}
