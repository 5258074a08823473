//! Pending queue actions: submissions held until every wait is reached on the host or covered by a
//! recorded device event. Each unresolved wait hangs one timepoint on its semaphore with the action as
//! listener; the resolution that clears the last wait issues the action (on that thread: issuing is a
//! few non-blocking stream calls); the first failed wait fails the action's signals instead.

use std::sync::{Arc, Weak};

use smallvec::SmallVec;

use super::event_semaphore::{Producer, SemaphoreEvents};
use super::host_calls::{GateOf, QueuePlace};
use super::{Issue, Shared};
use crate::driver::QueueOp;
use crate::driver::stream_model::StreamModel;
use crate::error::{Error, Result};
use crate::semaphore::{Registration, SemaphoreList, TimepointId, TimepointKind, TimepointListener};
use crate::sync::{Mutex, lock};

use super::event_pool::EventRef;

/// A held submission.
pub(crate) struct Action<M: StreamModel> {
    pub(crate) id: u64,
    pub(crate) queue: usize,
    pub(crate) waits: SemaphoreList,
    scheduler: Weak<Shared<M>>,
    state: Mutex<ActionState<M>>,
}

struct ActionState<M: StreamModel> {
    op: Option<QueueOp>,
    signals: SemaphoreList,
    /// Unresolved waits, plus one held by the submitter until it finished registering.
    remaining: usize,
    /// Issued or failed: later resolutions are ignored.
    done: bool,
    resolved: SmallVec<[bool; 2]>,
    registrations: SmallVec<[(usize, TimepointId); 2]>,
    /// Waits resolved by a device event rather than on the host (see `InFlight::waited`).
    waited: SemaphoreList,
    wait_events: SmallVec<[EventRef<M>; 2]>,
    upstream: SmallVec<[Producer<M>; 2]>,
    place: Option<QueuePlace>,
}

/// What resolving one wait decided.
enum Step<M: StreamModel> {
    Nothing,
    Issue(Issue<M>),
    /// The op comes along so that it is dropped outside the action's lock (it may hold user code:
    /// a host call's closure, whose drop may even drop the last handle of the device).
    Fail {
        op: Option<QueueOp>,
        signals: SemaphoreList,
        cancel: SmallVec<[(usize, TimepointId); 2]>,
        status: Error,
    },
}

impl<M: StreamModel> Action<M> {
    /// Holds `op` until its waits resolve. `ready` are the waits already covered at submission.
    pub(crate) fn hold(
        shared: &Arc<Shared<M>>,
        id: u64,
        queue: usize,
        op: QueueOp,
        waits: SemaphoreList,
        signals: SemaphoreList,
        covered: super::Covered<M>,
    ) {
        let count = waits.len();
        let mut resolved: SmallVec<[bool; 2]> = SmallVec::from_elem(false, count);
        for &index in &covered.indices {
            resolved[index] = true;
        }
        let action = Arc::new(Action {
            id,
            queue,
            waits,
            scheduler: Arc::downgrade(shared),
            state: Mutex::new(ActionState {
                op: Some(op),
                signals,
                remaining: count - covered.indices.len() + 1,
                done: false,
                resolved,
                registrations: SmallVec::new(),
                waited: covered.waited,
                wait_events: covered.events,
                upstream: covered.upstream,
                place: covered.place,
            }),
        });
        shared.pending_insert(&action);
        let host_only = action.is_host_only();
        for index in 0..count {
            if lock(&action.state).resolved[index] {
                continue;
            }
            let wait = &action.waits[index];
            let kind = if !host_only && SemaphoreEvents::<M>::of(&wait.semaphore, shared.device).is_some() {
                TimepointKind::Enqueued
            } else {
                TimepointKind::Reached
            };
            shared.timepoints_registered();
            match wait.semaphore.register_kind(kind, wait.value, action.clone(), index as u64) {
                Registration::Pending(id) => {
                    let mut state = lock(&action.state);
                    if state.done {
                        // Failed meanwhile through another wait: take this one back at once.
                        drop(state);
                        if wait.semaphore.cancel(id) {
                            shared.timepoints_resolved(1);
                        }
                        break;
                    }
                    state.registrations.push((index, id));
                }
                Registration::Resolved(outcome) => {
                    shared.timepoints_resolved(1);
                    action.resolve(index, outcome, shared);
                }
            }
        }
        // Drop the submitter's hold; this may issue the action right here.
        action.finish_step(shared);
    }

    fn is_host_only(&self) -> bool {
        matches!(lock(&self.state).op, Some(QueueOp::HostCall(_)))
    }

    /// Resolves wait `index` with `outcome`.
    fn resolve(self: &Arc<Self>, index: usize, outcome: Result<()>, shared: &Arc<Shared<M>>) {
        let wait = &self.waits[index];
        // An `Enqueued` resolution means an event covers the value, or the value was reached since.
        let covering = match &outcome {
            Ok(()) => SemaphoreEvents::<M>::of(&wait.semaphore, shared.device)
                .filter(|_| !matches!(wait.semaphore.query(), Ok(v) if v >= wait.value))
                .and_then(|table| {
                    let entry = table.covering(wait.value)?;
                    if entry.device != shared.device || entry.queue != self.queue {
                        table.note_waited_elsewhere();
                    }
                    Some((table.producer(&entry, shared.device), entry))
                }),
            Err(_) => None,
        };
        // An open mark is sealed now (a stream of this device is going to wait on it); a mark that
        // cannot be sealed means its stream faulted, and this wait fails with that.
        let (covering, outcome) = match covering {
            Some((producer, entry)) => match entry.event.sealed_for(shared, producer.scheduler.as_ref()) {
                Ok(event) => (Some((producer, event)), outcome),
                Err(status) => (None, Err(status)),
            },
            None => (None, outcome),
        };
        let outcome = match outcome {
            Ok(()) if covering.is_none() => match wait.semaphore.query() {
                Ok(v) if v >= wait.value => Ok(()),
                Ok(v) => Err(Error::internal(format!(
                    "action {}: {} reported {} enqueued but has no event and value {v}",
                    self.id, wait.semaphore, wait.value
                ))),
                Err(failure) => Err(failure),
            },
            other => other,
        };
        let step = {
            let mut state = lock(&self.state);
            if state.done || state.resolved[index] {
                return;
            }
            state.resolved[index] = true;
            state.registrations.retain(|(i, _)| *i != index);
            match outcome {
                Err(status) => Self::take_failure(&mut state, status),
                Ok(()) => {
                    if let Some((producer, event)) = covering {
                        state.waited.push(wait.clone());
                        state.wait_events.push(event);
                        state.upstream.push(producer);
                    }
                    state.remaining -= 1;
                    self.take_if_ready(&mut state)
                }
            }
        };
        self.run_step(step, shared);
    }

    /// Drops one hold (the submitter's) and issues if nothing else remains.
    fn finish_step(self: &Arc<Self>, shared: &Arc<Shared<M>>) {
        let step = {
            let mut state = lock(&self.state);
            if state.done {
                Step::Nothing
            } else {
                state.remaining -= 1;
                self.take_if_ready(&mut state)
            }
        };
        self.run_step(step, shared);
    }

    fn take_if_ready(&self, state: &mut ActionState<M>) -> Step<M> {
        if state.remaining > 0 {
            return Step::Nothing;
        }
        state.done = true;
        match state.op.take() {
            Some(op) => Step::Issue(Issue {
                queue: self.queue,
                op,
                signals: std::mem::take(&mut state.signals),
                waited: std::mem::take(&mut state.waited),
                wait_events: std::mem::take(&mut state.wait_events),
                upstream: std::mem::take(&mut state.upstream),
                place: state.place.take(),
            }),
            None => Step::Nothing,
        }
    }

    fn run_step(self: &Arc<Self>, step: Step<M>, shared: &Arc<Shared<M>>) {
        match step {
            Step::Nothing => {}
            Step::Issue(issue) => {
                shared.pending_remove(self.id);
                shared.issue_or_gate(self.id, issue);
            }
            Step::Fail { op, signals, cancel, status } => {
                shared.pending_remove(self.id);
                shared.queues[self.queue].gates.release(self.id);
                if let Some(op) = &op {
                    op.will_not_run(&status);
                }
                drop(op);
                let mut cancelled = 0;
                for (index, id) in cancel {
                    cancelled += usize::from(self.waits[index].semaphore.cancel(id));
                }
                shared.timepoints_resolved(cancelled);
                tracing::debug!(action = self.id, %status, "wait failed; failing signals without running");
                for signal in &signals {
                    signal.semaphore.fail(status.clone());
                }
            }
        }
    }

    /// Fails the action (teardown): its signals get `status`, its timepoints are cancelled.
    pub(crate) fn abandon(self: &Arc<Self>, status: Error, shared: &Arc<Shared<M>>) {
        let step = {
            let mut state = lock(&self.state);
            if state.done {
                return;
            }
            Self::take_failure(&mut state, status)
        };
        self.run_step(step, shared);
    }

    /// Marks the action done without running it and takes what failing it needs.
    fn take_failure(state: &mut ActionState<M>, status: Error) -> Step<M> {
        state.done = true;
        Step::Fail {
            op: state.op.take(),
            signals: std::mem::take(&mut state.signals),
            cancel: std::mem::take(&mut state.registrations),
            status,
        }
    }

    /// One line per wait: semaphore, wanted value, current value or failure, resolved or not.
    /// `gate_of` names the blocking host call a wait stands for, if it is a gate.
    pub(crate) fn describe_waits(
        &self,
        gate_of: &dyn Fn(&crate::semaphore::Semaphore) -> Option<GateOf>,
    ) -> Vec<String> {
        let state = lock(&self.state);
        let op = state.op.as_ref().map(|op| op.describe()).unwrap_or_else(|| "(taken)".to_owned());
        let mut lines = vec![format!("action {} on queue {} ({op})", self.id, self.queue)];
        for (index, wait) in self.waits.iter().enumerate() {
            let now = match wait.semaphore.query() {
                Ok(v) => format!("value {v}"),
                Err(e) => format!("failed: {e}"),
            };
            let status = if state.resolved[index] { "satisfied" } else { "WAITING" };
            match gate_of(&wait.semaphore) {
                Some(GateOf::Call(call)) => {
                    lines.push(format!(
                        "  waits until host call action {call} of queue {} returns {status}",
                        self.queue
                    ));
                    continue;
                }
                Some(GateOf::Held(held)) => {
                    lines.push(format!(
                        "  waits until action {held} of queue {}, held ahead of it, issues {status}",
                        self.queue
                    ));
                    continue;
                }
                None => {}
            }
            lines.push(format!("  waits {} >= {} ({now}) {status}", wait.semaphore, wait.value));
        }
        lines
    }
}

impl<M: StreamModel> TimepointListener for Action<M> {
    fn notify(&self, tag: u64, outcome: Result<()>) {
        let Some(shared) = self.scheduler.upgrade() else {
            return;
        };
        shared.timepoints_resolved(1);
        let Some(this) = shared.pending_get(self.id) else {
            return;
        };
        this.resolve(tag as usize, outcome, &shared);
    }

    fn describe(&self, tag: u64) -> String {
        format!("queue {} action {} (wait {tag})", self.queue, self.id)
    }
}
