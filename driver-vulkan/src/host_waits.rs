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
//!   before it sleeps; a submitter wakes it (a system call) only when it sleeps. A submit thread
//!   whose next item waits on another stream's value watches as long for that value's signal to be
//!   issued (Vulkan must never see a wait before its signal), and the other stream's submit thread
//!   wakes it only when it sleeps.
//!
//! Both yield between looks. A submit thread whose watches keep being cut short by late yields (the
//! cores are wanted elsewhere) sleeps at once for a while.
//!
//! A submission that needs no hand-off at all (its stream idle and seen to have reached its previous
//! value, no waits on other streams) is issued on the submitting thread unless [`ISSUE_ON_CALLER_ENV`]
//! is `0` (see `VulkanStream::issue_here`).

use std::time::{Duration, Instant};

use hal::{Error, Result};

/// Microseconds a host thread waiting for a semaphore value polls the timeline before it parks
/// (default [`DEFAULT_HOST_POLL`]; `0`: it parks at once, woken by the completion thread).
pub const HOST_POLL_ENV: &str = "HAL_VULKAN_HOST_POLL_US";

/// Microseconds an idle submit thread watches for the next submission, or for the signal of another
/// stream's value it waits on to be issued, before it sleeps (default [`DEFAULT_SUBMIT_WATCH`];
/// `0`: it sleeps at once).
pub const SUBMIT_WATCH_ENV: &str = "HAL_VULKAN_SUBMIT_WATCH_US";

/// `0` hands every submission to its queue's submit thread; otherwise (the default) a submission
/// whose queue the host saw reach its previous value is issued on the submitting thread.
pub const ISSUE_ON_CALLER_ENV: &str = "HAL_VULKAN_ISSUE_ON_CALLER";

/// The default of [`HOST_POLL_ENV`]: as long as the CUDA driver's host waiters spin.
pub const DEFAULT_HOST_POLL: Duration = Duration::from_micros(200);

/// The default of [`SUBMIT_WATCH_ENV`]: as long as the scheduler's completion threads watch.
pub const DEFAULT_SUBMIT_WATCH: Duration = Duration::from_micros(50);

/// A yield that returns later than this shows the cores are wanted by other threads.
const CONTENDED_YIELD: Duration = Duration::from_micros(20);

/// How many watches in a row cut short by a late yield show the cores are wanted.
const LATE_WATCHES: u32 = 3;

/// How long a submit thread that saw contention sleeps at once when idle, before it watches again.
const CONTENDED_PAUSE: Duration = Duration::from_millis(100);

/// How long the host's threads watch before they sleep, read when a device is created.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitTuning {
    pub(crate) host_poll: Duration,
    pub(crate) submit_watch: Duration,
    /// Whether a submitter may issue its own submission (see [`ISSUE_ON_CALLER_ENV`]).
    pub(crate) issue_on_caller: bool,
    /// Whether the submit threads keep off the CPUs that take the GPU's interrupts (see
    /// `interrupt_cpus`).
    pub(crate) avoid_interrupt_cpus: bool,
}

impl WaitTuning {
    /// From [`HOST_POLL_ENV`] and [`SUBMIT_WATCH_ENV`]; `InvalidArgument` naming a value that is not
    /// a whole number of microseconds.
    pub(crate) fn from_env() -> Result<WaitTuning> {
        Ok(WaitTuning {
            host_poll: micros_from_env(HOST_POLL_ENV, DEFAULT_HOST_POLL)?,
            submit_watch: micros_from_env(SUBMIT_WATCH_ENV, DEFAULT_SUBMIT_WATCH)?,
            issue_on_caller: switch_from_env(ISSUE_ON_CALLER_ENV)?,
            avoid_interrupt_cpus: switch_from_env(crate::interrupt_cpus::AVOID_INTERRUPT_CPUS_ENV)?,
        })
    }
}

/// `false` for `0`, `true` for `1` or where unset; `InvalidArgument` naming anything else.
pub(crate) fn switch_from_env(name: &str) -> Result<bool> {
    match std::env::var(name).as_deref().map(str::trim) {
        Err(_) | Ok("") | Ok("1") => Ok(true),
        Ok("0") => Ok(false),
        Ok(text) => Err(Error::invalid_argument(format!("vulkan: {name}='{text}' is neither 0 nor 1"))),
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
/// it, `deadline` passes or `budget` is spent: `None` in the last three cases. It yields between
/// polls, so threads that need the core (lavapipe runs the device's work on them) get it.
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
        std::thread::yield_now();
    }
}

/// How a thread that watches before it sleeps notices that the cores are wanted elsewhere.
#[derive(Default)]
pub(crate) struct Contention {
    /// Watches in a row that a late yield cut short.
    late_watches: u32,
    /// Until when the thread sleeps at once instead of watching.
    pause_until: Option<Instant>,
    /// Watches a late yield cut short, in all.
    cut_short: u64,
}

/// Watches `changed()` for up to `watch` before a thread sleeps; whether it changed. A yield that
/// comes back late cuts the watch short; [`LATE_WATCHES`] such watches in a row show the cores are
/// wanted, and the thread then watches not at all for [`CONTENDED_PAUSE`]. (A single late yield
/// also comes from an interrupt or a migration: pausing on it left the watch off most of the time
/// on an otherwise idle 16-core host.)
pub(crate) fn watch(watch: Duration, contention: &mut Contention, changed: impl Fn() -> bool) -> bool {
    if watch.is_zero() || contention.paused() {
        return changed();
    }
    let started = Instant::now();
    loop {
        if changed() {
            contention.ran_its_course();
            return true;
        }
        if started.elapsed() >= watch {
            contention.ran_its_course();
            return false;
        }
        let yielded = Instant::now();
        std::thread::yield_now();
        if yielded.elapsed() > CONTENDED_YIELD {
            contention.cut_short();
            return changed();
        }
    }
}

impl Contention {
    /// Whether the thread sleeps at once for now instead of watching.
    pub(crate) fn paused(&self) -> bool {
        self.pause_until.is_some_and(|until| Instant::now() < until)
    }

    /// Watches a late yield cut short, in all.
    pub(crate) fn cut_short_count(&self) -> u64 {
        self.cut_short
    }

    /// A late yield cut a watch short: the streak grows, and pauses watching once long enough.
    fn cut_short(&mut self) {
        self.cut_short += 1;
        self.late_watches += 1;
        if self.late_watches >= LATE_WATCHES {
            self.late_watches = 0;
            self.pause_until = Some(Instant::now() + CONTENDED_PAUSE);
        }
    }

    /// A watch ran to its end or saw its change: the streak is over.
    fn ran_its_course(&mut self) {
        self.late_watches = 0;
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
        assert!(started.elapsed() >= Duration::from_millis(2));
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
        let mut contention = Contention::default();
        assert!(watch(Duration::from_secs(5), &mut contention, || true));
        assert!(!watch(Duration::from_millis(2), &mut contention, || false));
        // A zero watch only looks once.
        let looked = Cell::new(0);
        assert!(!watch(Duration::ZERO, &mut contention, || {
            looked.set(looked.get() + 1);
            false
        }));
        assert_eq!(looked.get(), 1);
    }

    #[test]
    fn late_yields_pause_watching_only_when_they_repeat() {
        let mut contention = Contention::default();
        for _ in 1..LATE_WATCHES {
            contention.cut_short();
        }
        assert!(!contention.paused());
        contention.ran_its_course();
        for _ in 1..LATE_WATCHES {
            contention.cut_short();
        }
        assert!(!contention.paused(), "a watch that ran its course ends the streak");
        contention.cut_short();
        assert!(contention.paused());
        // Paused, a watch looks once and returns.
        let looked = Cell::new(0);
        assert!(!watch(Duration::from_secs(5), &mut contention, || {
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

    #[test]
    fn a_switch_is_on_unless_zero_and_names_a_bad_value() {
        assert!(switch_from_env("HAL_VULKAN_TEST_UNSET_SWITCH").unwrap());
        for (text, on) in [("0", false), ("1", true), (" 0 ", false), ("", true)] {
            // SAFETY: this test alone uses this variable.
            unsafe { std::env::set_var("HAL_VULKAN_TEST_SWITCH", text) };
            assert_eq!(switch_from_env("HAL_VULKAN_TEST_SWITCH").unwrap(), on, "{text:?}");
        }
        // SAFETY: as above.
        unsafe { std::env::set_var("HAL_VULKAN_TEST_SWITCH", "yes") };
        let e = switch_from_env("HAL_VULKAN_TEST_SWITCH").unwrap_err();
        assert!(e.to_string().contains("HAL_VULKAN_TEST_SWITCH='yes'"), "{e}");
    }
}
