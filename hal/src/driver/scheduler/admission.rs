//! Admission: the order blocking host calls impose on their queue, kept as a list.
//!
//! A blocking host call (the default, IREE's meaning) holds later work of its queue until it
//! returns. Once its waits are resolved it is *admitted*: it enters its queue's admission list,
//! and leaves it when it returns. Every submission of the queue is admitted the same way when its
//! waits are resolved: it is issued at once unless an entry ahead of it in the list is not one of
//! its ancestors (a running call that submitted it, directly or through calls of its own), and is
//! otherwise held in the list, in admission order. A call still waiting for its own waits holds
//! nothing back, so work behind it may signal what it waits for.
//!
//! A returning call drains the list: held work is issued in order, up to the first entry that
//! still has one ahead of it. One thread drains at a time, and work being issued stays in the list
//! until it is, so later submissions never pass it.
//!
//! Order: each admitted submission gets a place `(root, seq)`. `seq` counts admissions; `root` is
//! its own `seq`, or, for work that a running call of the queue submits, that call's `root`: the
//! work is part of the call, so it sorts right after the call and ahead of everything admitted
//! after the call (which waits for the call, and so for it).

use std::cell::Cell;
use std::fmt::Write;

use smallvec::SmallVec;

use super::host_calls::ReturnTo;
use super::{Issue, Shared};
use crate::driver::stream_model::StreamModel;
use crate::error::Error;
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{Mutex, lock};

/// The admission list of one queue.
pub(crate) struct Admission<M: StreamModel> {
    /// Entries in the list: a submission reads only this when there are none (no lock).
    count: AtomicUsize,
    list: Mutex<AdmissionList<M>>,
}

struct AdmissionList<M: StreamModel> {
    /// In place order.
    entries: Vec<Entry<M>>,
    /// The `seq` of the next admission.
    next_seq: u64,
    /// Whether a thread is issuing held work now (see the module docs).
    draining: bool,
}

struct Entry<M: StreamModel> {
    action: u64,
    place: Place,
    state: EntryState<M>,
}

enum EntryState<M: StreamModel> {
    /// A blocking host call, admitted and not returned yet.
    Call,
    /// Held work; `None` while the draining thread issues it.
    Held(Option<Box<Issue<M>>>),
}

/// Where a submission stands in its queue's order (see the module docs).
#[derive(Clone)]
struct Place {
    root: u64,
    seq: u64,
    /// The running calls of this queue it was submitted from, innermost first: it never waits for
    /// them (a call may wait for what it submits).
    ancestors: SmallVec<[u64; 1]>,
}

impl Place {
    fn key(&self) -> (u64, u64) {
        (self.root, self.seq)
    }

    /// Whether a submission at this place must wait for `entry`.
    fn waits_for<M: StreamModel>(&self, entry: &Entry<M>) -> bool {
        entry.place.key() < self.key() && !self.ancestors.contains(&entry.action)
    }
}

impl<M: StreamModel> Default for Admission<M> {
    fn default() -> Self {
        Admission {
            count: AtomicUsize::new(0),
            list: Mutex::new(AdmissionList { entries: Vec::new(), next_seq: 0, draining: false }),
        }
    }
}

impl<M: StreamModel> AdmissionList<M> {
    fn position(&self, action: u64) -> Option<usize> {
        self.entries.iter().position(|e| e.action == action)
    }

    /// A place for a submission of `queue` admitted now, on this thread.
    fn next_place(&mut self, device: u64, queue: usize) -> Place {
        let seq = self.next_seq;
        self.next_seq += 1;
        let running = RUNNING.with(Cell::get).filter(|r| r.device == device && r.queue == queue);
        let call = running.and_then(|r| self.position(r.action).map(|at| (r.action, &self.entries[at].place)));
        match call {
            Some((action, call)) => {
                let mut ancestors = SmallVec::from_elem(action, 1);
                ancestors.extend(call.ancestors.iter().copied());
                Place { root: call.root, seq, ancestors }
            }
            None => Place { root: seq, seq, ancestors: running.map(|r| r.action).into_iter().collect() },
        }
    }

    fn insert(&mut self, entry: Entry<M>, count: &AtomicUsize) {
        let at = self.entries.partition_point(|e| e.place.key() < entry.place.key());
        self.entries.insert(at, entry);
        count.store(self.entries.len(), Ordering::Release);
    }

    fn remove(&mut self, at: usize, count: &AtomicUsize) -> Entry<M> {
        let entry = self.entries.remove(at);
        count.store(self.entries.len(), Ordering::Release);
        entry
    }

    /// The first held entry, if nothing ahead of it holds it: taken for issuing (it stays in the
    /// list, so that nothing passes it meanwhile).
    fn take_next_ready(&mut self) -> Option<(u64, Issue<M>)> {
        let at = self.entries.iter().position(|e| matches!(e.state, EntryState::Held(_)))?;
        let (ahead, rest) = self.entries.split_at_mut(at);
        let next = &mut rest[0];
        if ahead.iter().any(|e| next.place.waits_for(e)) {
            return None;
        }
        let EntryState::Held(issue) = &mut next.state else { return None };
        Some((next.action, *issue.take()?))
    }
}

impl<M: StreamModel> Shared<M> {
    /// Issues a submission whose waits are resolved, unless an entry of its queue's admission list
    /// is ahead of it (see the module docs): then it is held there, keeping the device events that
    /// cover its waits, until the list drains to it. A blocking host call enters the list either way.
    pub(crate) fn admit(&self, id: u64, issue: Issue<M>) {
        let blocking = issue.op.is_blocking_host_call();
        let queue = issue.queue;
        let admission = &self.queues[queue].admission;
        if !blocking && admission.count.load(Ordering::Acquire) == 0 {
            self.issue(id, issue);
            return;
        }
        {
            let mut list = lock(&admission.list);
            let place = list.next_place(self.device.get(), queue);
            if list.entries.iter().any(|e| place.waits_for(e)) {
                list.insert(
                    Entry { action: id, place, state: EntryState::Held(Some(Box::new(issue))) },
                    &admission.count,
                );
                return;
            }
            if blocking {
                list.insert(Entry { action: id, place, state: EntryState::Call }, &admission.count);
            }
        }
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
        for entry in &list.entries {
            let _ = match &entry.state {
                EntryState::Call => {
                    writeln!(
                        out,
                        "    host call action {}: later work of the queue waits until it returns",
                        entry.action
                    )
                }
                EntryState::Held(Some(issue)) => {
                    let behind: Vec<String> = list
                        .entries
                        .iter()
                        .filter(|e| entry.place.waits_for(e))
                        .map(|e| format!("action {}", e.action))
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
