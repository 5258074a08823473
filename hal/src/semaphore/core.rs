//! The pure state of a timeline semaphore: its value, its failure, and the sorted timepoints waiting on
//! it. Nothing here blocks or wakes anyone: `signal` and `fail` hand back the timepoints they resolved
//! and the caller notifies them after dropping its lock. That keeps this part testable without threads
//! and keeps callbacks from running under the semaphore's lock.

use std::sync::Arc;

use crate::error::{Error, Result};

/// Something told when a timepoint resolves: a parked host thread, an async task's waker, or a
/// driver's pending queue action.
///
/// `notify` runs on whichever thread resolved the timepoint (a signaller, a completion thread), never
/// under the semaphore's lock, so it may call back into the semaphore. It must not block for long.
pub trait TimepointListener: Send + Sync {
    /// The timepoint registered with `tag` resolved: `Ok(())` once the value reached the wanted value,
    /// or the semaphore's failure.
    fn notify(&self, tag: u64, outcome: Result<()>);

    /// One line for hang reports: who is waiting (e.g. "host thread", "queue 1 action 42").
    fn describe(&self, tag: u64) -> String {
        let _ = tag;
        "listener".to_string()
    }
}

/// Identifies one registered timepoint on one semaphore, so its owner can cancel it. It names the
/// semaphore that minted it: handed to another semaphore, it matches nothing there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimepointId {
    semaphore: u64,
    sequence: u64,
}

/// What a timepoint waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimepointKind {
    /// The value itself reaching the wanted value (host-visible completion).
    Reached,
    /// Work that will signal at least the wanted value being enqueued on a device stream (or the
    /// value being reached, whichever comes first): what a device-side wait needs to go ahead.
    Enqueued,
}

/// A registration: the value waited for and who to tell.
pub struct Timepoint {
    /// The value the listener waits for.
    pub value: u64,
    /// What it waits for.
    pub kind: TimepointKind,
    pub(crate) id: TimepointId,
    pub(crate) listener: Arc<dyn TimepointListener>,
    pub(crate) tag: u64,
}

impl std::fmt::Debug for Timepoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Timepoint(value {}, {})", self.value, self.listener.describe(self.tag))
    }
}

impl Timepoint {
    /// Tells the listener how the timepoint resolved. Call without holding the semaphore's lock.
    pub fn notify(self, outcome: Result<()>) {
        self.listener.notify(self.tag, outcome);
    }
}

/// Timepoints resolved by one state change. A `Vec`: most changes resolve none, and an empty `Vec`
/// is three words that move for free and allocate nothing, where an inline list of a few timepoints
/// is copied whole at every move (a signal's result moves several times); a change that wakes
/// someone pays one allocation beside the wake-up itself.
pub type Resolved = Vec<Timepoint>;

/// What registering a timepoint did.
pub enum Registration {
    /// The value was already reached (`Ok`) or the semaphore had failed (`Err`); nothing was stored
    /// and the listener was not called.
    Resolved(Result<()>),
    /// Stored; the listener is called exactly once later unless the registration is cancelled first.
    Pending(TimepointId),
}

/// Value, failure and waiting timepoints of one semaphore. See the module docs.
pub struct TimelineState {
    value: u64,
    /// The highest value that work enqueued on a device will signal (see [`TimepointKind::Enqueued`]).
    enqueued: u64,
    failure: Option<Error>,
    /// Sorted by value (stable for equal values), so a signal resolves a prefix.
    timepoints: Vec<Timepoint>,
    /// The semaphore's process-unique id, carried by the timepoint ids it mints.
    owner: u64,
    next_id: u64,
}

impl TimelineState {
    /// A semaphore state at `initial` with no waiters.
    pub fn new(initial: u64) -> Self {
        Self::owned_by(0, initial)
    }

    /// The state of semaphore `owner` (its process-unique id) at `initial`, with no waiters.
    pub fn owned_by(owner: u64, initial: u64) -> Self {
        TimelineState { value: initial, enqueued: initial, failure: None, timepoints: Vec::new(), owner, next_id: 0 }
    }

    /// The current value, or the failure.
    pub fn query(&self) -> Result<u64> {
        match &self.failure {
            Some(failure) => Err(failure.clone()),
            None => Ok(self.value),
        }
    }

    /// The last value reached, even after a failure (for reports).
    pub fn last_value(&self) -> u64 {
        self.value
    }

    /// The failure, if the semaphore has failed.
    pub fn failure(&self) -> Option<&Error> {
        self.failure.as_ref()
    }

    /// Whether `value` is reached: `Ok(true)`, not yet: `Ok(false)`, or the failure.
    pub fn is_reached(&self, value: u64) -> Result<bool> {
        match &self.failure {
            Some(failure) => Err(failure.clone()),
            None => Ok(self.value >= value),
        }
    }

    /// Advances the value to `new_value` and returns the timepoints this satisfied, in value order.
    ///
    /// Refused with `FailedPrecondition` and no change when `new_value` is not greater than the
    /// current value; the failure itself is returned when the semaphore has failed. `who` names the
    /// semaphore in the message.
    pub fn signal(&mut self, new_value: u64, who: &dyn std::fmt::Display) -> Result<Resolved> {
        if let Some(failure) = &self.failure {
            return Err(failure.clone());
        }
        if new_value <= self.value {
            return Err(Error::failed_precondition(format!(
                "{who}: signal to {new_value} but value is already {}; values must increase",
                self.value
            )));
        }
        self.value = new_value;
        self.enqueued = self.enqueued.max(new_value);
        let reached = self.timepoints.partition_point(|t| t.value <= new_value);
        if reached == 0 {
            // Usually nobody waits for this value: no drain to set up and tear down.
            return Ok(Resolved::new());
        }
        Ok(self.timepoints.drain(..reached).collect())
    }

    /// Fails the semaphore for good with `status` and returns every waiting timepoint. A semaphore
    /// that already failed keeps its first failure and returns nothing.
    pub fn fail(&mut self, status: Error) -> Resolved {
        if self.failure.is_some() {
            return Resolved::new();
        }
        self.failure = Some(status);
        self.timepoints.drain(..).collect()
    }

    /// Registers `listener` to hear when the value reaches `value`, unless that is already decided.
    pub fn register(&mut self, value: u64, listener: Arc<dyn TimepointListener>, tag: u64) -> Registration {
        self.register_kind(TimepointKind::Reached, value, listener, tag)
    }

    /// Registers `listener` for `kind` at `value`, unless that is already decided.
    pub fn register_kind(
        &mut self,
        kind: TimepointKind,
        value: u64,
        listener: Arc<dyn TimepointListener>,
        tag: u64,
    ) -> Registration {
        match self.is_reached(value) {
            Ok(false) => {}
            Ok(true) => return Registration::Resolved(Ok(())),
            Err(failure) => return Registration::Resolved(Err(failure)),
        }
        if kind == TimepointKind::Enqueued && self.enqueued >= value {
            return Registration::Resolved(Ok(()));
        }
        let id = TimepointId { semaphore: self.owner, sequence: self.next_id };
        self.next_id += 1;
        let at = self.timepoints.partition_point(|t| t.value <= value);
        self.timepoints.insert(at, Timepoint { value, kind, id, listener, tag });
        Registration::Pending(id)
    }

    /// Records that device work signalling `value` is enqueued, and returns the `Enqueued`
    /// timepoints this satisfies. Ignored when not above what was already enqueued, or after failure.
    pub fn advance_enqueued(&mut self, value: u64) -> Resolved {
        if self.failure.is_some() || value <= self.enqueued {
            return Resolved::new();
        }
        self.enqueued = value;
        let end = self.timepoints.partition_point(|t| t.value <= value);
        let mut resolved = Resolved::new();
        let mut at = 0;
        let mut end = end;
        while at < end {
            if self.timepoints[at].kind == TimepointKind::Enqueued {
                resolved.push(self.timepoints.remove(at));
                end -= 1;
            } else {
                at += 1;
            }
        }
        resolved
    }

    /// The highest value enqueued device work will signal (at least the current value).
    pub fn enqueued(&self) -> u64 {
        self.enqueued.max(self.value)
    }

    /// Removes a pending timepoint. `true` when it was removed before it resolved (its listener will
    /// never be called); `false` when it already resolved (its listener was or is being called).
    pub fn cancel(&mut self, id: TimepointId) -> bool {
        if id.semaphore != self.owner {
            return false;
        }
        match self.timepoints.iter().position(|t| t.id == id) {
            Some(at) => {
                self.timepoints.remove(at);
                true
            }
            None => false,
        }
    }

    /// How many timepoints are waiting.
    pub fn pending_count(&self) -> usize {
        self.timepoints.len()
    }

    /// The waiting timepoints, lowest value first (for hang reports).
    pub fn pending(&self) -> impl Iterator<Item = &Timepoint> {
        self.timepoints.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Log(Mutex<Vec<(u64, Result<()>)>>);
    impl TimepointListener for Log {
        fn notify(&self, tag: u64, outcome: Result<()>) {
            self.0.lock().unwrap().push((tag, outcome));
        }
    }

    fn name() -> impl std::fmt::Display {
        "semaphore 1"
    }

    #[test]
    fn signal_resolves_a_sorted_prefix() {
        let log = Arc::new(Log::default());
        let mut s = TimelineState::new(0);
        for (tag, v) in [(0, 5), (1, 2), (2, 9), (3, 2)] {
            assert!(matches!(s.register(v, log.clone(), tag), Registration::Pending(_)));
        }
        let fired = s.signal(4, &name()).unwrap();
        let tags: Vec<u64> = fired.iter().map(|t| t.tag).collect();
        assert_eq!(tags, vec![1, 3], "values <= 4 in order, equal values in registration order");
        assert_eq!(s.pending_count(), 2);
        let fired = s.signal(9, &name()).unwrap();
        assert_eq!(fired.iter().map(|t| t.tag).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(s.pending_count(), 0);
    }

    #[test]
    fn signal_must_increase_and_changes_nothing_when_refused() {
        let mut s = TimelineState::new(5);
        let e = s.signal(5, &name()).err().unwrap();
        assert_eq!(e.code(), crate::StatusCode::FailedPrecondition);
        assert!(e.message().contains("semaphore 1") && e.message().contains('5'));
        assert!(s.signal(3, &name()).is_err());
        assert_eq!(s.query().unwrap(), 5);
    }

    #[test]
    fn register_reached_value_resolves_at_once() {
        let log = Arc::new(Log::default());
        let mut s = TimelineState::new(3);
        assert!(matches!(s.register(3, log.clone(), 0), Registration::Resolved(Ok(()))));
        assert!(matches!(s.register(0, log.clone(), 0), Registration::Resolved(Ok(()))));
        assert_eq!(s.pending_count(), 0);
        assert!(log.0.lock().unwrap().is_empty(), "resolved registrations do not call the listener");
    }

    #[test]
    fn fail_returns_all_and_is_sticky() {
        let log = Arc::new(Log::default());
        let mut s = TimelineState::new(0);
        s.register(1, log.clone(), 0);
        s.register(100, log.clone(), 1);
        let fired = s.fail(Error::data_loss("kernel trapped"));
        assert_eq!(fired.len(), 2);
        assert!(s.fail(Error::aborted("second")).is_empty());
        assert_eq!(s.query().unwrap_err().message(), "kernel trapped", "first failure is kept");
        assert_eq!(s.signal(7, &name()).unwrap_err().code(), crate::StatusCode::DataLoss);
        assert!(matches!(s.register(1, log, 0), Registration::Resolved(Err(_))));
        assert_eq!(s.last_value(), 0);
    }

    #[test]
    fn enqueued_resolves_only_enqueued_kind() {
        let log = Arc::new(Log::default());
        let mut s = TimelineState::new(0);
        s.register_kind(TimepointKind::Reached, 2, log.clone(), 0);
        s.register_kind(TimepointKind::Enqueued, 2, log.clone(), 1);
        s.register_kind(TimepointKind::Enqueued, 5, log.clone(), 2);
        let fired = s.advance_enqueued(3);
        assert_eq!(fired.iter().map(|t| t.tag).collect::<Vec<_>>(), vec![1]);
        assert!(s.advance_enqueued(3).is_empty(), "not above what was enqueued");
        assert!(matches!(s.register_kind(TimepointKind::Enqueued, 3, log.clone(), 3), Registration::Resolved(Ok(()))));
        assert!(matches!(s.register_kind(TimepointKind::Reached, 3, log.clone(), 4), Registration::Pending(_)));
        assert_eq!(s.query().unwrap(), 0, "enqueuing does not change the value");
        let fired = s.signal(5, &name()).unwrap();
        assert_eq!(fired.iter().map(|t| t.tag).collect::<Vec<_>>(), vec![0, 4, 2], "a signal resolves both kinds");
    }

    #[test]
    fn cancel_only_pending() {
        let log = Arc::new(Log::default());
        let mut s = TimelineState::new(0);
        let Registration::Pending(a) = s.register(2, log.clone(), 0) else { panic!() };
        let Registration::Pending(b) = s.register(3, log.clone(), 1) else { panic!() };
        assert!(s.cancel(a));
        assert!(!s.cancel(a), "second cancel finds nothing");
        let fired = s.signal(3, &name()).unwrap();
        assert_eq!(fired.len(), 1);
        assert!(!s.cancel(b), "already resolved");
    }

    #[test]
    fn an_id_of_another_semaphore_cancels_nothing() {
        let log = Arc::new(Log::default());
        let (mut a, mut b) = (TimelineState::owned_by(1, 0), TimelineState::owned_by(2, 0));
        let Registration::Pending(of_a) = a.register(1, log.clone(), 0) else { panic!() };
        let Registration::Pending(of_b) = b.register(1, log.clone(), 1) else { panic!() };
        assert!(!b.cancel(of_a), "b cancelled a timepoint by an id a minted");
        assert_eq!(b.pending_count(), 1, "b's own timepoint is still there");
        assert!(b.cancel(of_b));
        assert_eq!(a.pending_count(), 1);
    }
}
