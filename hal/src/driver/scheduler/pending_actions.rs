//! Pending queue actions: submissions held until every wait is reached on the host or covered by a
//! recorded device event. Each unresolved wait hangs one timepoint on its semaphore with the action as
//! listener; the resolution that clears the last wait issues the action (on that thread: issuing is a
//! few non-blocking stream calls); the first failed wait fails the action's signals instead.

use std::sync::{Arc, Weak};

use smallvec::SmallVec;

use super::event_semaphore::SemaphoreEvents;
use super::wait_cover::{Covers, Readiness, WaitStatus};
use super::{Issue, Shared};
use crate::driver::Submission;
use crate::driver::stream_model::StreamModel;
use crate::error::{Error, Result};
use crate::semaphore::{Registration, SemaphoreList, TimepointId, TimepointKind, TimepointListener};
use crate::sync::{Mutex, lock};

/// A held submission.
pub(crate) struct Action<M: StreamModel> {
    pub(crate) id: u64,
    pub(crate) queue: usize,
    pub(crate) waits: SemaphoreList,
    /// A host call: its waits are reached on the host, never covered by a device event.
    host_only: bool,
    scheduler: Weak<Shared<M>>,
    state: Mutex<ActionState<M>>,
}

struct ActionState<M: StreamModel> {
    /// The submission, with the events that cover the waits resolved so far; taken when it issues
    /// or fails.
    issue: Option<Issue<M>>,
    /// Unresolved waits, plus one held by the submitter until it finished registering.
    remaining: usize,
    /// Issued or failed: later resolutions are ignored.
    done: bool,
    resolved: Readiness,
    registrations: SmallVec<[(usize, TimepointId); 2]>,
}

/// What resolving one wait decided.
enum Step<M: StreamModel> {
    Nothing,
    Issue(Issue<M>),
    /// The submission comes along so that its op is dropped outside the action's lock (it may hold
    /// user code: a host call's closure, whose drop may even drop the last handle of the device).
    Fail {
        issue: Option<Issue<M>>,
        cancel: SmallVec<[(usize, TimepointId); 2]>,
        status: Error,
    },
}

impl<M: StreamModel> Action<M> {
    /// Holds `issue` until its `waits` resolve; `ready` says which are resolved already.
    pub(crate) fn hold(shared: &Arc<Shared<M>>, id: u64, waits: SemaphoreList, ready: &[bool], issue: Issue<M>) {
        let count = waits.len();
        let host_only = matches!(issue.op, Submission::HostCall(_));
        let action = Arc::new(Action {
            id,
            queue: issue.queue,
            waits,
            host_only,
            scheduler: Arc::downgrade(shared),
            state: Mutex::new(ActionState {
                issue: Some(issue),
                remaining: ready.iter().filter(|&&ready| !ready).count() + 1,
                done: false,
                resolved: ready.iter().copied().collect(),
                registrations: SmallVec::new(),
            }),
        });
        shared.pending_insert(&action);
        for index in 0..count {
            if lock(&action.state).resolved[index] {
                continue;
            }
            let wait = &action.waits[index];
            let kind = if !action.host_only && SemaphoreEvents::<M>::of(&wait.semaphore, shared.device).is_some() {
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

    /// Resolves wait `index` with `outcome`. An `Enqueued` resolution means an event covers the
    /// value, or the value was reached since.
    fn resolve(self: &Arc<Self>, index: usize, outcome: Result<()>, shared: &Arc<Shared<M>>) {
        let wait = &self.waits[index];
        let mut covers = Covers::default();
        let outcome = outcome.and_then(|()| match covers.resolve_wait(shared, self.queue, wait, self.host_only) {
            WaitStatus::Reached | WaitStatus::Covered => Ok(()),
            WaitStatus::Unsealable(status) | WaitStatus::Failed(status) => Err(status),
            // No event any more: the producer retired since (its entry pruned), so the value is
            // reached now, unless the semaphore broke its promise.
            WaitStatus::Open => match wait.semaphore.query() {
                Ok(value) if value >= wait.value => Ok(()),
                Ok(value) => Err(Error::internal(format!(
                    "action {}: {} reported {} enqueued but has no event and value {value}",
                    self.id, wait.semaphore, wait.value
                ))),
                Err(failure) => Err(failure),
            },
        });
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
                    if let Some(issue) = &mut state.issue {
                        issue.covers.extend(covers);
                    }
                    state.remaining -= 1;
                    Self::take_if_ready(&mut state)
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
                Self::take_if_ready(&mut state)
            }
        };
        self.run_step(step, shared);
    }

    fn take_if_ready(state: &mut ActionState<M>) -> Step<M> {
        if state.remaining > 0 {
            return Step::Nothing;
        }
        state.done = true;
        state.issue.take().map_or(Step::Nothing, Step::Issue)
    }

    fn run_step(self: &Arc<Self>, step: Step<M>, shared: &Arc<Shared<M>>) {
        match step {
            Step::Nothing => {}
            Step::Issue(issue) => {
                shared.pending_remove(self.id);
                shared.admit(self.id, issue, &self.waits);
            }
            Step::Fail { issue, cancel, status } => {
                shared.pending_remove(self.id);
                let signals = match issue {
                    Some(Issue { op, signals, queue, .. }) => {
                        let blocking = op.is_blocking_host_call();
                        op.will_not_run(&status);
                        drop(op);
                        if blocking {
                            // It never runs: it leaves its queue's admission list.
                            shared.call_returned(queue, self.id);
                        }
                        signals
                    }
                    None => SemaphoreList::new(),
                };
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
        Step::Fail { issue: state.issue.take(), cancel: std::mem::take(&mut state.registrations), status }
    }

    /// One line per wait: semaphore, wanted value, current value or failure, resolved or not.
    pub(crate) fn describe_waits(&self) -> Vec<String> {
        let state = lock(&self.state);
        let op = state.issue.as_ref().map_or_else(|| "(taken)".to_owned(), |issue| issue.op.describe());
        let mut lines = vec![format!("action {} on queue {} ({op})", self.id, self.queue)];
        for (index, wait) in self.waits.iter().enumerate() {
            let now = match wait.semaphore.query() {
                Ok(v) => format!("value {v}"),
                Err(e) => format!("failed: {e}"),
            };
            let status = if state.resolved[index] { "satisfied" } else { "WAITING" };
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
