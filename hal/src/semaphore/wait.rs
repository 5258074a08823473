//! Host waits: a short spin, then one timepoint per semaphore and a parked thread. A waiter that
//! gives up (timeout) cancels its timepoints, so nothing is left behind on the semaphores.

use std::sync::Arc;
use std::time::Instant;

use smallvec::SmallVec;

use super::core::{Registration, TimepointId, TimepointListener};
use super::{SPIN_TIME, Semaphore, SemaphoreValue};
use crate::error::{Error, Result};
use crate::sync::{Condvar, MODEL_CHECKED, Mutex, get_mut, lock, spin_hint, wait, wait_timeout};
use crate::timeout::Timeout;

/// Whether a multi-semaphore wait needs every entry reached or any one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Every (semaphore, value) pair must be reached.
    All,
    /// One reached pair is enough.
    Any,
}

/// What one parked waiter is waiting for; the listener of its timepoints.
struct Parker {
    mode: WaitMode,
    state: Mutex<ParkState>,
    wake: Condvar,
}

struct ParkState {
    /// Entries still unreached (counts down in `All` mode).
    remaining: usize,
    outcome: Option<Result<()>>,
}

impl Parker {
    fn new(mode: WaitMode, remaining: usize) -> Self {
        Parker { mode, state: Mutex::new(ParkState { remaining, outcome: None }), wake: Condvar::new() }
    }

    /// Folds one resolved entry into the outcome; `true` once the wait is decided.
    fn resolve(&self, state: &mut ParkState, outcome: Result<()>) -> bool {
        if state.outcome.is_some() {
            return false;
        }
        match outcome {
            Err(failure) => state.outcome = Some(Err(failure)),
            Ok(()) => {
                state.remaining = state.remaining.saturating_sub(1);
                if self.mode == WaitMode::Any || state.remaining == 0 {
                    state.outcome = Some(Ok(()));
                }
            }
        }
        state.outcome.is_some()
    }

    /// Blocks until decided or `deadline`; `None` on timeout.
    fn park(&self, deadline: Option<Instant>) -> Option<Result<()>> {
        let mut state = lock(&self.state);
        loop {
            if let Some(outcome) = state.outcome.clone() {
                return Some(outcome);
            }
            state = match deadline {
                None => wait(&self.wake, state),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return None;
                    }
                    wait_timeout(&self.wake, state, deadline - now).0
                }
            };
        }
    }
}

impl TimepointListener for Parker {
    fn notify(&self, _tag: u64, outcome: Result<()>) {
        let mut state = lock(&self.state);
        if self.resolve(&mut state, outcome) {
            drop(state);
            self.wake.notify_all();
        }
    }

    fn describe(&self, _tag: u64) -> String {
        match self.mode {
            WaitMode::All => "host thread (wait-all)".to_string(),
            WaitMode::Any => "host thread (wait-any)".to_string(),
        }
    }
}

/// Spins briefly ([`SPIN_TIME`]) on the lock-free value; `Some` once decided.
fn spin(semaphore: &Semaphore, value: u64) -> Option<Result<()>> {
    if MODEL_CHECKED {
        return semaphore.check_fast(value);
    }
    let start = Instant::now();
    loop {
        // The clock is read once per 16 re-reads: a read costs about as much as a pause.
        for _ in 0..16 {
            if let Some(outcome) = semaphore.check_fast(value) {
                return Some(outcome);
            }
            spin_hint();
        }
        if start.elapsed() >= SPIN_TIME {
            return None;
        }
    }
}

pub(super) fn wait_one(semaphore: &Semaphore, value: u64, timeout: Timeout) -> Result<()> {
    if let Some(outcome) = semaphore.check_fast(value) {
        return outcome;
    }
    if timeout.is_immediate() {
        return Err(timed_out_one(semaphore, value));
    }
    let deadline = timeout.deadline();
    // The owning device may wait for the signalling work itself (no hop through its completion
    // thread), until the deadline at most. First: the event is what completes the value, and its
    // wait also watches the value (a host signal may reach it first).
    if semaphore.assist_wait(value, deadline)
        && let Some(outcome) = semaphore.check_fast(value)
    {
        return outcome;
    }
    if let Some(outcome) = spin(semaphore, value) {
        return outcome;
    }
    let parker = take_parker(WaitMode::All, 1);
    let outcome = match semaphore.register(value, parker.clone(), 0) {
        Registration::Resolved(outcome) => outcome,
        Registration::Pending(id) => match parker.park(deadline) {
            Some(outcome) => outcome,
            None if semaphore.cancel(id) => Err(timed_out_one(semaphore, value)),
            // It resolved between the timeout and the cancel: the state now says how.
            None => settled(semaphore, value),
        },
    };
    keep_parker(parker);
    outcome
}

/// How many parkers a thread keeps for its next waits. Two: the one its last wait used may still
/// be held for a moment by the thread that woke it (dropping its reference after the wake-up), the
/// one before that no longer is.
const SPARE_PARKERS: usize = 2;

crate::sync::thread_local! {
    #[allow(clippy::missing_const_for_thread_local)]
    /// The parkers of this thread's last parked waits, oldest first, for its next ones.
    static SPARES: std::cell::RefCell<SmallVec<[Arc<Parker>; SPARE_PARKERS]>> =
        std::cell::RefCell::new(SmallVec::new());
}

/// A parker for a wait in `mode` on `remaining` entries: one of this thread's spares that nothing
/// else refers to any more, so that a thread that parks wait after wait allocates nothing; else a
/// new one. No timepoint can hold a parker nothing else refers to, so no late notification reaches
/// the wait that reuses it.
fn take_parker(mode: WaitMode, remaining: usize) -> Arc<Parker> {
    let reused = SPARES
        .try_with(|spares| {
            let mut spares = spares.borrow_mut();
            let free = spares.iter_mut().position(|parker| Arc::get_mut(parker).is_some())?;
            Some(spares.remove(free))
        })
        .ok()
        .flatten();
    if let Some(mut parker) = reused
        && let Some(spare) = Arc::get_mut(&mut parker)
    {
        spare.mode = mode;
        *get_mut(&mut spare.state) = ParkState { remaining, outcome: None };
        return parker;
    }
    Arc::new(Parker::new(mode, remaining))
}

/// Keeps `parker` among this thread's spares (see [`take_parker`]), in place of the oldest.
fn keep_parker(parker: Arc<Parker>) {
    let _ = SPARES.try_with(|spares| {
        let mut spares = spares.borrow_mut();
        if spares.len() == SPARE_PARKERS {
            spares.remove(0);
        }
        spares.push(parker);
    });
}

/// The outcome for an entry whose timepoint already resolved.
fn settled(semaphore: &Semaphore, value: u64) -> Result<()> {
    match semaphore.query() {
        Ok(current) if current >= value => Ok(()),
        Ok(current) => {
            Err(Error::internal(format!("{}: timepoint for {value} resolved but value is {current}", semaphore)))
        }
        Err(failure) => Err(failure),
    }
}

fn timed_out_one(semaphore: &Semaphore, value: u64) -> Error {
    match semaphore.query() {
        Ok(current) => {
            Error::deadline_exceeded(format!("{}: wait for {value} timed out at value {current}", semaphore))
        }
        Err(failure) => failure,
    }
}

/// Waits on a list of (semaphore, value) pairs until all (or any) are reached, one fails, or the
/// timeout passes. One timepoint is registered per pair; none is left registered when this returns.
/// An empty list is satisfied at once.
///
/// ```
/// use hal::{Semaphore, SemaphoreValue, Timeout, WaitMode, wait_semaphores};
///
/// let a = Semaphore::new(0);
/// let b = Semaphore::new(0);
/// b.signal(1).unwrap();
/// let list = [SemaphoreValue::new(&a, 1), SemaphoreValue::new(&b, 1)];
/// wait_semaphores(WaitMode::Any, &list, Timeout::Immediate).unwrap();
/// assert!(wait_semaphores(WaitMode::All, &list, Timeout::Immediate).is_err());
/// ```
pub fn wait_semaphores(mode: WaitMode, list: &[SemaphoreValue], timeout: Timeout) -> Result<()> {
    match list {
        [] => return Ok(()),
        [one] => return wait_one(&one.semaphore, one.value, timeout),
        _ => {}
    }
    if let Some(outcome) = poll_list(mode, list) {
        return outcome;
    }
    if timeout.is_immediate() {
        return Err(timed_out_list(mode, list));
    }
    let deadline = timeout.deadline();
    let parker = take_parker(mode, list.len());
    let mut registered: SmallVec<[(usize, TimepointId); 8]> = SmallVec::new();
    for (index, entry) in list.iter().enumerate() {
        match entry.semaphore.register(entry.value, parker.clone(), index as u64) {
            Registration::Pending(id) => registered.push((index, id)),
            Registration::Resolved(outcome) => parker.notify(index as u64, outcome),
        }
        if lock(&parker.state).outcome.is_some() {
            break;
        }
    }
    let outcome = parker.park(deadline);
    let mut cancelled_all = true;
    for &(index, id) in &registered {
        cancelled_all &= list[index].semaphore.cancel(id);
    }
    keep_parker(parker);
    match outcome {
        Some(outcome) => outcome,
        None if cancelled_all => Err(timed_out_list(mode, list)),
        // Some entry resolved while we timed out: decide from the current states.
        None => poll_list(mode, list).unwrap_or_else(|| Err(timed_out_list(mode, list))),
    }
}

/// Decides a list wait from the current values, if it can be decided now.
fn poll_list(mode: WaitMode, list: &[SemaphoreValue]) -> Option<Result<()>> {
    let mut all_reached = true;
    for entry in list {
        match entry.semaphore.check_fast(entry.value) {
            Some(Err(failure)) => return Some(Err(failure)),
            Some(Ok(())) if mode == WaitMode::Any => return Some(Ok(())),
            Some(Ok(())) => {}
            None => all_reached = false,
        }
    }
    (mode == WaitMode::All && all_reached).then_some(Ok(()))
}

fn timed_out_list(mode: WaitMode, list: &[SemaphoreValue]) -> Error {
    let mut detail = Vec::with_capacity(list.len());
    for entry in list {
        match entry.semaphore.query() {
            Ok(current) => detail.push(format!("{} at {current} (want {})", entry.semaphore, entry.value)),
            Err(failure) => return failure,
        }
    }
    let mode = match mode {
        WaitMode::All => "wait-all",
        WaitMode::Any => "wait-any",
    };
    Error::deadline_exceeded(format!("{mode} on {} semaphores timed out: {}", list.len(), detail.join(", ")))
}
