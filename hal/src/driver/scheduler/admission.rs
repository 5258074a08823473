//! Admission: the order blocking host calls impose on their queue, kept as a list.
//!
//! A blocking host call (the default, IREE's meaning) holds later work of its queue until it
//! returns. Every submission gets its place in the queue's order when it is submitted. A blocking
//! call enters its queue's admission list then, and leaves it when it returns (or never runs).
//! Every other submission of the queue looks at the list when its waits are resolved: it is issued
//! at once unless an entry ahead of it in the list holds it, and is otherwise held in the list, in
//! place order, until the list drains to it.
//!
//! Which entries hold a submission `W` (never its ancestors: the running calls that submitted it,
//! directly or through calls of their own):
//! - a call whose waits are resolved (running, or queued to run) holds all of `W`;
//! - a call still waiting for its own waits holds `W` only when `W`'s waits imply the call's
//!   (for each of the call's waits, `W` waits on the same semaphore for at least that value): such
//!   a `W` cannot start before the call could anyway, so holding it never deadlocks. Any other `W`
//!   is not held: it may be what signals the call's waits;
//! - held work holds `W` when it is held by something that holds `W` too, or when nothing holds it
//!   any more (it is about to be issued): work behind the same call issues in order.
//!
//! A returning call drains the list: held work is issued in order, each entry as soon as nothing
//! ahead holds it. One thread drains at a time, and work being issued stays in the list until it
//! is, so later submissions never pass it.
//!
//! Order: each submission gets a place `(root, seq)`. `seq` counts submissions of the queue;
//! `root` is its own `seq`, or, for work that a running call of the queue submits, that call's
//! `root`: the work is part of the call, so it sorts right after the call and ahead of everything
//! submitted after the call (which waits for the call, and so for it).

use std::cell::Cell;
use std::fmt::Write;

use smallvec::SmallVec;

use super::host_calls::ReturnTo;
use super::{Issue, Shared};
use crate::driver::stream_model::StreamModel;
use crate::error::Error;
use crate::semaphore::{SemaphoreList, SemaphoreValue};
use crate::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use crate::sync::{Mutex, lock};

/// The admission list of one queue.
pub(crate) struct Admission<M: StreamModel> {
    /// Entries in the list: a submission reads only this when there are none (no lock).
    count: AtomicUsize,
    /// The `seq` of the next submission.
    next_seq: AtomicU64,
    list: Mutex<AdmissionList<M>>,
}

struct AdmissionList<M: StreamModel> {
    /// In place order.
    entries: Vec<Entry<M>>,
    /// Whether a thread is issuing held work now (see the module docs).
    draining: bool,
}

struct Entry<M: StreamModel> {
    action: u64,
    place: Place,
    /// Whether it is a blocking host call (waiting, held, or admitted).
    call: bool,
    /// Its waits: what a call still waiting for them is waiting for, and what held work waited
    /// for (to tell whether it implies such a call's waits).
    waits: SemaphoreList,
    state: EntryState<M>,
}

enum EntryState<M: StreamModel> {
    /// A blocking host call whose waits are not resolved yet.
    Waiting,
    /// A blocking host call whose waits are resolved, not returned yet.
    Call,
    /// Held work, or a call whose waits are resolved held behind another; `None` while the
    /// draining thread issues it.
    Held(Option<Box<Issue<M>>>),
}

/// Where a submission stands in its queue's order (see the module docs). Every submission carries
/// one, so it stays small: what only work submitted from a running call has is boxed.
#[derive(Clone)]
pub(crate) struct Place {
    seq: u64,
    /// `None` for work not submitted from a running call of its queue (its root is its `seq`).
    nested: Option<Box<Nested>>,
}

/// The part of a [`Place`] that work submitted from a running call of its queue has.
#[derive(Clone)]
struct Nested {
    root: u64,
    /// The running calls of this queue it was submitted from, innermost first: it never waits for
    /// them (a call may wait for what it submits).
    ancestors: SmallVec<[u64; 2]>,
}

impl Place {
    fn key(&self) -> (u64, u64) {
        (self.nested.as_ref().map_or(self.seq, |n| n.root), self.seq)
    }

    fn ancestors(&self) -> &[u64] {
        self.nested.as_ref().map_or(&[], |n| &n.ancestors)
    }
}

/// Whether every wait of `call` is implied by one of `waits`: the same semaphore, at least the
/// same value.
fn implies(waits: &[SemaphoreValue], call: &[SemaphoreValue]) -> bool {
    call.iter().all(|c| waits.iter().any(|w| w.semaphore.same_as(&c.semaphore) && w.value >= c.value))
}

impl<M: StreamModel> Default for Admission<M> {
    fn default() -> Self {
        Admission {
            count: AtomicUsize::new(0),
            next_seq: AtomicU64::new(0),
            list: Mutex::new(AdmissionList { entries: Vec::new(), draining: false }),
        }
    }
}

impl<M: StreamModel> Admission<M> {
    /// Whether nothing is in the list (no blocking call running or waiting, no work held).
    pub(crate) fn is_empty(&self) -> bool {
        self.count.load(Ordering::Acquire) == 0
    }

    /// The place of a submission of `queue` made now, on this thread.
    pub(crate) fn place(&self, device: u64, queue: usize) -> Place {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let running = RUNNING.with(Cell::get).filter(|r| r.device == device && r.queue == queue);
        let Some(running) = running else {
            return Place { seq, nested: None };
        };
        let list = lock(&self.list);
        let call = list.position(running.action).map(|at| &list.entries[at].place);
        let mut ancestors = SmallVec::from_elem(running.action, 1);
        let root = match call {
            Some(call) => {
                ancestors.extend(call.ancestors().iter().copied());
                call.key().0
            }
            None => seq,
        };
        Place { seq, nested: Some(Box::new(Nested { root, ancestors })) }
    }
}

impl<M: StreamModel> AdmissionList<M> {
    fn position(&self, action: u64) -> Option<usize> {
        self.entries.iter().position(|e| e.action == action)
    }

    /// Whether entry `at` holds a submission at `place` with `waits` (see the module docs).
    fn holds(&self, at: usize, place: &Place, waits: &[SemaphoreValue]) -> bool {
        let entry = &self.entries[at];
        if entry.place.key() >= place.key() || place.ancestors().contains(&entry.action) {
            return false;
        }
        match (&entry.state, entry.call) {
            (EntryState::Waiting, _) => implies(waits, &entry.waits),
            // A call whose waits are resolved, running or held itself.
            (_, true) => true,
            (_, false) => {
                let mut holders = (0..at).filter(|&b| {
                    let ahead = &self.entries[b];
                    ahead.call && self.holds(b, &entry.place, &entry.waits)
                });
                match holders.next() {
                    None => true,
                    Some(first) => std::iter::once(first).chain(holders).any(|b| self.holds(b, place, waits)),
                }
            }
        }
    }

    /// Whether anything in the list holds a submission at `place` with `waits`.
    fn held(&self, place: &Place, waits: &[SemaphoreValue]) -> bool {
        (0..self.entries.len()).any(|at| self.holds(at, place, waits))
    }

    fn insert(&mut self, entry: Entry<M>, count: &AtomicUsize) {
        let at = self.entries.partition_point(|e| e.place.key() < entry.place.key());
        self.entries.insert(at, entry);
        count.store(self.entries.len(), Ordering::Release);
    }

    /// Sets the state of `action`'s entry (a call that waited for its waits in the list), or
    /// enters it.
    fn enter(
        &mut self,
        action: u64,
        place: Place,
        call: bool,
        waits: &[SemaphoreValue],
        state: EntryState<M>,
        count: &AtomicUsize,
    ) {
        match self.position(action) {
            Some(at) => self.entries[at].state = state,
            None => self.insert(Entry { action, place, call, waits: waits.iter().cloned().collect(), state }, count),
        }
    }

    fn remove(&mut self, at: usize, count: &AtomicUsize) -> Entry<M> {
        let entry = self.entries.remove(at);
        count.store(self.entries.len(), Ordering::Release);
        entry
    }

    /// The first held entry that nothing ahead of it holds: taken for issuing (it stays in the
    /// list, so that nothing passes it meanwhile).
    fn take_next_ready(&mut self) -> Option<(u64, Issue<M>)> {
        let at = (0..self.entries.len()).find(|&at| {
            let entry = &self.entries[at];
            matches!(entry.state, EntryState::Held(Some(_))) && !self.held(&entry.place, &entry.waits)
        })?;
        let next = &mut self.entries[at];
        let EntryState::Held(issue) = &mut next.state else { return None };
        Some((next.action, *issue.take()?))
    }
}

impl<M: StreamModel> Shared<M> {
    /// Blocking host call `id`, submitted at `place` with `waits` not resolved yet, enters its
    /// queue's admission list (see the module docs). Before its waits can resolve: `admit` finds it.
    pub(crate) fn enter_waiting(&self, id: u64, queue: usize, place: Place, waits: &[SemaphoreValue]) {
        let admission = &self.queues[queue].admission;
        let entry =
            Entry { action: id, place, call: true, waits: waits.iter().cloned().collect(), state: EntryState::Waiting };
        lock(&admission.list).insert(entry, &admission.count);
    }

    /// Issues a submission whose `waits` are resolved, unless an entry of its queue's admission
    /// list holds it (see the module docs): then it is held there, keeping the device events that
    /// cover its waits, until the list drains to it. A blocking host call is in the list either way.
    // Inlined into its callers, so the common case (an empty list) hands `issue` on without one
    // more copy of it.
    #[inline(always)]
    pub(crate) fn admit(&self, id: u64, issue: Issue<M>, waits: &[SemaphoreValue]) {
        let blocking = issue.op.is_blocking_host_call();
        if !blocking && self.queues[issue.queue].admission.is_empty() {
            self.issue(id, issue);
            return;
        }
        self.admit_through_list(id, issue, waits, blocking);
    }

    /// [`Self::admit`] when the list has entries or `issue` is a blocking call.
    #[inline(never)]
    fn admit_through_list(&self, id: u64, issue: Issue<M>, waits: &[SemaphoreValue], blocking: bool) {
        let admission = &self.queues[issue.queue].admission;
        let mut list = lock(&admission.list);
        if list.held(&issue.place, waits) {
            let place = issue.place.clone();
            list.enter(id, place, blocking, waits, EntryState::Held(Some(Box::new(issue))), &admission.count);
            return;
        }
        if blocking {
            // An admitted call stays in the list until it returns.
            list.enter(id, issue.place.clone(), true, waits, EntryState::Call, &admission.count);
        }
        drop(list);
        self.issue(id, issue);
    }

    /// Blocking host call `action` of `queue` returned (or will never run): it leaves the list,
    /// and the work it held issues.
    pub(crate) fn call_returned(&self, queue: usize, action: u64) {
        let admission = &self.queues[queue].admission;
        {
            let mut list = lock(&admission.list);
            let Some(at) = list.position(action) else { return };
            list.remove(at, &admission.count);
        }
        self.drain_admission(queue);
    }

    /// Issues held work of `queue` in order, as far as nothing ahead holds it, unless another
    /// thread is doing so (it looks again after each issue).
    fn drain_admission(&self, queue: usize) {
        let admission = &self.queues[queue].admission;
        let mut list = lock(&admission.list);
        if list.draining {
            return;
        }
        while let Some((id, issue)) = list.take_next_ready() {
            list.draining = true;
            let blocking = issue.op.is_blocking_host_call();
            drop(list);
            self.issue(id, issue);
            list = lock(&admission.list);
            list.draining = false;
            // A blocking call stays until it returns (unless it already has).
            if let Some(at) = list.position(id) {
                if blocking {
                    list.entries[at].state = EntryState::Call;
                } else {
                    list.remove(at, &admission.count);
                }
            }
        }
    }

    /// Cancels every held submission (teardown: they can never run now).
    pub(crate) fn abandon_admission(&self, queue: usize) {
        let admission = &self.queues[queue].admission;
        let entries = {
            let mut list = lock(&admission.list);
            admission.count.store(0, Ordering::Release);
            std::mem::take(&mut list.entries)
        };
        for entry in entries {
            if let EntryState::Held(Some(issue)) = entry.state {
                let status = Error::cancelled(format!(
                    "{}: device destroyed while queue {queue} action {} ({}) was held behind a host call",
                    self.device,
                    entry.action,
                    issue.op.kind()
                ));
                issue.fail(&status);
            }
        }
    }

    /// Submissions held in `queue`'s admission list.
    pub(crate) fn held_count(&self, queue: usize) -> usize {
        let admission = &self.queues[queue].admission;
        if admission.count.load(Ordering::Acquire) == 0 {
            return 0;
        }
        lock(&admission.list).entries.iter().filter(|e| matches!(e.state, EntryState::Held(_))).count()
    }

    /// The admission list of `queue` for the hang report: empty when nothing is in it.
    pub(crate) fn describe_admission(&self, queue: usize, out: &mut String) {
        let admission = &self.queues[queue].admission;
        if admission.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let list = lock(&admission.list);
        let _ = writeln!(out, "  queue {queue} admission list, in order:");
        for (at, entry) in list.entries.iter().enumerate() {
            let _ = match &entry.state {
                EntryState::Waiting => {
                    let waits: Vec<String> =
                        entry.waits.iter().map(|w| format!("{} >= {}", w.semaphore, w.value)).collect();
                    writeln!(
                        out,
                        "    host call action {}: waiting for {}; later work of the queue whose waits include those waits until it returns",
                        entry.action,
                        waits.join(", ")
                    )
                }
                EntryState::Call => {
                    writeln!(
                        out,
                        "    host call action {}: later work of the queue waits until it returns",
                        entry.action
                    )
                }
                EntryState::Held(Some(issue)) => {
                    let behind: Vec<String> = (0..at)
                        .filter(|&b| list.holds(b, &entry.place, &entry.waits))
                        .map(|b| format!("action {}", list.entries[b].action))
                        .collect();
                    writeln!(
                        out,
                        "    action {} ({}): held behind {}",
                        entry.action,
                        issue.op.describe(),
                        behind.join(", ")
                    )
                }
                EntryState::Held(None) => writeln!(out, "    action {}: being issued", entry.action),
            };
        }
    }
}

impl<M: StreamModel> ReturnTo for Shared<M> {
    fn returned(&self, queue: usize, action: u64) {
        self.call_returned(queue, action);
    }
}

/// The host call running on this thread, so its own submissions are not held behind it.
#[derive(Clone, Copy)]
pub(crate) struct Running {
    pub(crate) device: u64,
    pub(crate) queue: usize,
    pub(crate) action: u64,
}

crate::sync::thread_local! {
    #[allow(clippy::missing_const_for_thread_local)]
    static RUNNING: Cell<Option<Running>> = Cell::new(None);
}

/// Runs `call` as host call `running`: what it submits to its own queue is part of it.
pub(crate) fn run_as<R>(running: Running, call: impl FnOnce() -> R) -> R {
    let outer = RUNNING.with(|r| r.replace(Some(running)));
    let result = call();
    RUNNING.with(|r| r.set(outer));
    result
}
