//! The stream model's rules, checked as cpu-sim runs them.
//!
//! The scheduler keeps rules that a GPU does not enforce: on CUDA an event recorded again under a
//! pending stream wait silently re-targets that wait (over-synchronisation, or a deadlock), while
//! cpu-sim's epochs would run the same program correctly and hide the bug. So cpu-sim checks every
//! rule at the call that would break it. A broken rule is logged with `tracing::error!`, kept in
//! the model's [`RuleLog`], counted in the device's resource usage (the pool
//! [`RULE_BREAKS_POOL`], never idle again, so the CTS idle check fails the case) and listed in the
//! device's report; in debug builds, dropping the device then panics with the list
//! ([`PanicOnBrokenRules`]). The simulation itself goes on as CUDA would (the checks only look).
//!
//! Costs on the hot path: one count per stream item and one per stream wait (atomics), and two
//! comparisons under the event's lock per record. Nothing is allocated unless a rule breaks.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use hal::DeviceId;
use hal::driver::lock;

/// The name of the resource-usage pool that counts a cpu-sim device's broken stream-model rules.
pub const RULE_BREAKS_POOL: &str = "stream-model rule breaks";

/// How many broken rules a log keeps the text of (all are counted): few enough that the list fits
/// the end of a test's output that the CTS shows for a child process that died.
const KEPT: usize = 16;

/// A rule of the stream model that cpu-sim checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamRule {
    /// An event recorded again while a stream wait enqueued on an earlier record of it has not run
    /// yet: on CUDA that wait would observe the new record. (The scheduler returns an event to its
    /// pool only once no pending stream wait refers to it.)
    RecordUnderPendingWait,
    /// An event recorded again before its previous record completed: on CUDA whoever still waits for
    /// that record (the completion thread, a host waiter) would wait for the new one. (The scheduler
    /// returns an event to its pool only once its record completed.)
    RecordBeforeCompletion,
    /// A stream wait on an event that was never recorded: a no-op on CUDA, so the work behind it is
    /// ordered after nothing. (A host query or synchronize of such an event is not a misuse: CUDA
    /// defines it as complete.)
    WaitOnUnrecordedEvent,
    /// A stream destroyed while work, records or waits enqueued on it had not run: drain streams
    /// before destroying them.
    DropWithWorkInFlight,
}

impl StreamRule {
    /// The rule's short name, as messages give it.
    pub fn name(self) -> &'static str {
        match self {
            StreamRule::RecordUnderPendingWait => "no re-record under a pending stream wait",
            StreamRule::RecordBeforeCompletion => "no re-record before the previous record completed",
            StreamRule::WaitOnUnrecordedEvent => "no stream wait on a never-recorded event",
            StreamRule::DropWithWorkInFlight => "no stream destroyed with work in flight",
        }
    }
}

/// One broken rule: which, and what broke it (the event or stream, and the epochs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleBreak {
    /// The rule.
    pub rule: StreamRule,
    /// What broke it.
    pub detail: String,
}

impl fmt::Display for RuleBreak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cpu-sim stream-model rule broken ({}): {}", self.rule.name(), self.detail)
    }
}

/// The broken rules of one stream model (one cpu-sim device), shared by its streams.
#[derive(Default)]
pub struct RuleLog {
    count: AtomicUsize,
    kept: Mutex<Vec<RuleBreak>>,
}

impl RuleLog {
    /// An empty log.
    pub fn new() -> Arc<Self> {
        Arc::new(RuleLog::default())
    }

    fn kept(&self) -> MutexGuard<'_, Vec<RuleBreak>> {
        lock(&self.kept)
    }

    /// Records that `rule` was broken, as `detail` says; logged at once.
    #[cold]
    pub(crate) fn broken(&self, rule: StreamRule, detail: String) {
        let entry = RuleBreak { rule, detail };
        tracing::error!(rule = rule.name(), "{entry}");
        let mut kept = self.kept();
        if kept.len() < KEPT {
            kept.push(entry);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times a rule was broken.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// The broken rules, oldest first (the first few dozen).
    #[cfg(test)]
    pub fn breaks(&self) -> Vec<RuleBreak> {
        self.kept().clone()
    }

    /// One line per broken rule kept, with a heading; empty when no rule was broken.
    pub fn describe(&self) -> String {
        let count = self.count();
        if count == 0 {
            return String::new();
        }
        let mut text = format!("cpu-sim stream-model rules broken {count} time(s):");
        for entry in self.kept().iter() {
            text.push_str("\n  ");
            text.push_str(&entry.to_string());
        }
        if count > KEPT {
            text.push_str(&format!("\n  ... and {} more", count - KEPT));
        }
        text
    }
}

/// Held by a cpu-sim device after its scheduler (so it drops last, once every stream is gone): in
/// debug builds, dropping it panics when a stream-model rule was broken, unless the thread is
/// already panicking. Release builds only log (and count, see [`RULE_BREAKS_POOL`]).
///
/// The panic prints the list on stderr and unwinds without the panic hook: with `RUST_BACKTRACE`
/// set, the hook's backtrace would follow the list and push it out of the end of the output that
/// the CTS reports for a case whose process died. The payload is the same text.
pub struct PanicOnBrokenRules {
    device: DeviceId,
    log: Arc<RuleLog>,
}

impl PanicOnBrokenRules {
    /// Watches `log` for `device`.
    pub fn new(device: DeviceId, log: Arc<RuleLog>) -> Self {
        PanicOnBrokenRules { device, log }
    }

    /// The log watched.
    pub fn log(&self) -> &Arc<RuleLog> {
        &self.log
    }
}

impl Drop for PanicOnBrokenRules {
    fn drop(&mut self) {
        if cfg!(debug_assertions) && self.log.count() > 0 && !std::thread::panicking() {
            let message = format!("{}: {}", self.device, self.log.describe());
            eprintln!("{message}");
            std::panic::resume_unwind(Box::new(message));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_rule_is_kept_named_and_counted() {
        let log = RuleLog::new();
        assert_eq!(log.describe(), "", "nothing broken, nothing to say");
        log.broken(StreamRule::WaitOnUnrecordedEvent, "stream 1 (queue 0) waited on event 2".into());
        assert_eq!(log.count(), 1);
        assert_eq!(
            log.breaks()[0].to_string(),
            "cpu-sim stream-model rule broken (no stream wait on a never-recorded event): stream 1 (queue 0) \
             waited on event 2"
        );
        for n in 0..KEPT {
            log.broken(StreamRule::DropWithWorkInFlight, format!("stream {n}"));
        }
        assert_eq!(log.count(), KEPT + 1);
        assert_eq!(log.breaks().len(), KEPT, "the text of the first few dozen is kept");
        let described = log.describe();
        assert!(described.starts_with(&format!("cpu-sim stream-model rules broken {} time(s):", KEPT + 1)));
        assert!(described.ends_with("... and 1 more"), "{described}");
    }

    #[test]
    fn dropping_the_guard_panics_in_debug_builds_only_when_a_rule_broke() {
        let device = DeviceId::next();
        drop(PanicOnBrokenRules::new(device, RuleLog::new()));
        let log = RuleLog::new();
        log.broken(StreamRule::RecordUnderPendingWait, "event 3 recorded again".into());
        let guard = PanicOnBrokenRules::new(device, log);
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(guard)));
        if cfg!(debug_assertions) {
            let panic = dropped.expect_err("a debug build panics");
            let message = panic.downcast_ref::<String>().expect("a formatted message");
            assert!(message.contains("no re-record under a pending stream wait"), "{message}");
            assert!(message.contains("event 3 recorded again"), "{message}");
            assert!(message.starts_with(&device.to_string()), "{message}");
        } else {
            assert!(dropped.is_ok(), "a release build only logs");
        }
    }
}

/// The checks, driving cpu-sim's stream model directly as the scheduler would (and as it must not).
#[cfg(test)]
mod model_tests {
    use std::time::{Duration, Instant};

    use hal::driver::QueueOp;
    use hal::driver::stream_model::{StreamModel, Work};
    use smallvec::SmallVec;

    use super::*;
    use crate::event::CpuEvent;
    use crate::stream::{CpuStream, CpuStreams};
    use crate::workgroup_pool::WorkgroupPool;

    fn model() -> CpuStreams {
        CpuStreams::new(Arc::new(WorkgroupPool::with_threads(1).unwrap()))
    }

    /// An event recorded by no stream: its one record completes when the test opens it, so a stream
    /// waiting on it holds everything behind the wait until then.
    struct Gate {
        event: CpuEvent,
        epoch: u64,
    }

    impl Gate {
        fn new() -> Self {
            let event = CpuEvent::new();
            let epoch = event.inner.begin_record(usize::MAX).epoch;
            Gate { event, epoch }
        }

        fn open(&self) {
            self.event.inner.complete(self.epoch);
        }
    }

    /// A test that fails opens its gate as it unwinds (gates are made after the streams they hold,
    /// so they drop first), and the streams' drops do not wait for it for ever.
    impl Drop for Gate {
        fn drop(&mut self) {
            self.open();
        }
    }

    fn barrier() -> Arc<Work> {
        Arc::new(Work::new(1, 0, QueueOp::Barrier, SmallVec::new()))
    }

    fn only_break(model: &CpuStreams) -> RuleBreak {
        let breaks = model.rule_log().breaks();
        assert_eq!(breaks.len(), 1, "exactly one broken rule: {breaks:?}");
        breaks[0].clone()
    }

    fn stream_name(queue: usize, message: &str) -> bool {
        message.contains(&format!("(queue {queue})"))
    }

    #[test]
    fn an_event_recorded_again_under_a_pending_stream_wait_is_reported() {
        let model = model();
        let (a, b) = (model.create_stream(0).unwrap(), model.create_stream(1).unwrap());
        let event = CpuEvent::new();
        model.record_event(&event, &a).unwrap();
        model.synchronize_event(&event).unwrap();
        // Stream 1 holds a wait on the first record behind a closed gate.
        let gate = Gate::new();
        model.wait_event(&b, &gate.event).unwrap();
        model.wait_event(&b, &event).unwrap();
        model.record_event(&event, &a).unwrap();
        let broken = only_break(&model);
        assert_eq!(broken.rule, StreamRule::RecordUnderPendingWait);
        let id = event.inner.id();
        assert!(
            broken.detail.starts_with(&format!("event {id} recorded again (epoch 2) on stream "))
                && broken.detail.ends_with(
                    "while 1 stream wait(s) enqueued on its epoch 1 or earlier had not run: they may observe the new record"
                )
                && stream_name(0, &broken.detail),
            "{broken}"
        );
        assert!(broken.to_string().contains("(no re-record under a pending stream wait)"), "{broken}");
        gate.open();
        model.synchronize_stream(&b).unwrap();
        model.synchronize_stream(&a).unwrap();
        // Past the wait, a record is fine again.
        model.record_event(&event, &a).unwrap();
        model.synchronize_event(&event).unwrap();
        assert_eq!(model.rule_log().count(), 1, "{}", model.rule_log().describe());
    }

    #[test]
    fn an_event_recorded_again_before_its_record_completed_is_reported() {
        let model = model();
        let a = model.create_stream(0).unwrap();
        let gate = Gate::new();
        model.wait_event(&a, &gate.event).unwrap();
        let event = CpuEvent::new();
        model.record_event(&event, &a).unwrap();
        model.record_event(&event, &a).unwrap();
        let broken = only_break(&model);
        assert_eq!(broken.rule, StreamRule::RecordBeforeCompletion);
        let id = event.inner.id();
        assert!(
            broken.detail.starts_with(&format!("event {id} recorded again (epoch 2) on stream "))
                && broken.detail.ends_with("before its epoch 1 completed"),
            "{broken}"
        );
        gate.open();
        model.synchronize_stream(&a).unwrap();
    }

    #[test]
    fn a_stream_wait_on_a_never_recorded_event_is_reported_but_host_queries_are_not() {
        let model = model();
        let a = model.create_stream(3).unwrap();
        let event = CpuEvent::new();
        // CUDA defines both for a never-recorded event: complete.
        assert!(model.query_event(&event).unwrap());
        model.synchronize_event(&event).unwrap();
        assert_eq!(model.rule_log().count(), 0, "{}", model.rule_log().describe());
        model.wait_event(&a, &event).unwrap();
        let broken = only_break(&model);
        assert_eq!(broken.rule, StreamRule::WaitOnUnrecordedEvent);
        let id = event.inner.id();
        assert!(
            broken
                .detail
                .ends_with(&format!("waited on event {id}, which was never recorded (the wait orders nothing)"))
                && stream_name(3, &broken.detail),
            "{broken}"
        );
        // The wait did nothing: the stream is not held.
        model.synchronize_stream(&a).unwrap();
    }

    #[test]
    fn a_stream_dropped_with_work_in_flight_is_reported_and_still_drains() {
        let model = model();
        let a = model.create_stream(2).unwrap();
        let gate = Arc::new(Gate::new());
        model.wait_event(&a, &gate.event).unwrap();
        model.enqueue(&a, &barrier()).unwrap();
        let marker = CpuEvent::new();
        model.record_event(&marker, &a).unwrap();
        // Opens the gate once the drop has reported (the drop then waits for the stream to drain).
        let opener = {
            let (log, gate) = (model.rule_log().clone(), gate.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(5);
                while log.count() == 0 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                gate.open();
            })
        };
        drop(a);
        opener.join().unwrap();
        let broken = only_break(&model);
        assert_eq!(broken.rule, StreamRule::DropWithWorkInFlight);
        assert!(
            broken
                .detail
                .ends_with("destroyed with 3 item(s) enqueued and not yet run (work, event records or stream waits)")
                && stream_name(2, &broken.detail),
            "{broken}"
        );
        assert!(model.query_event(&marker).unwrap(), "the dropped stream drained");
    }

    /// What the scheduler does: waits on recorded events, records again only once the record
    /// completed and every stream passed its waits, drains streams before dropping them.
    #[test]
    fn streams_used_by_the_rules_report_nothing() {
        let model = model();
        let streams: Vec<CpuStream> = (0..3).map(|q| model.create_stream(q).unwrap()).collect();
        let event = CpuEvent::new();
        for round in 0..50 {
            let recorder = &streams[round % 3];
            model.enqueue(recorder, &barrier()).unwrap();
            model.record_event(&event, recorder).unwrap();
            for stream in &streams {
                // The recording stream's own wait is skipped: it counts as nothing pending.
                model.wait_event(stream, &event).unwrap();
                model.enqueue(stream, &barrier()).unwrap();
            }
            for stream in &streams {
                model.synchronize_stream(stream).unwrap();
            }
            assert!(model.query_event(&event).unwrap());
        }
        drop(streams);
        assert_eq!(model.rule_log().count(), 0, "{}", model.rule_log().describe());
    }
}
