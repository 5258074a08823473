//! Host calls: user functions run in queue order on threads of their own, never on a completion
//! thread and never under a scheduler lock, so a call may submit to and wait on any queue, its own
//! included, and a slow call delays nothing but what is ordered behind it.
//!
//! A blocking call (the default, IREE's meaning) holds later work of its queue until it returns: once
//! its waits are reached (it enters its queue's order), it opens a *gate* on the queue, a host
//! semaphore that every submission of that queue entering the order later waits on (from the host,
//! like any semaphore of no device) and that the call's return signals. A call still waiting for its
//! own waits holds nothing back, so work behind it may signal what it waits for. Submissions made by
//! the call itself skip its own gate (it may wait for them).
//!
//! Work that a gate holds keeps its place: it opens a gate of its own as well, released once it is
//! issued (a blocking call's, once it returns). One release lets several held submissions go, on
//! whichever threads see it first; without their own gates, later ones could be issued first.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::driver::HostFn;
use crate::error::{Error, Result, panic_message};
use crate::semaphore::{Semaphore, SemaphoreList, SemaphoreValue};
use crate::sync::atomic::{AtomicUsize, Ordering};
use crate::sync::{Condvar, MODEL_CHECKED, Mutex, lock, wait_timeout};

/// How long an idle host-call thread waits for the next call before it exits.
const IDLE_EXIT: Duration = Duration::from_millis(500);

/// The open gates of one queue: blocking host calls that entered its order and have not returned,
/// and work that gates hold, not issued yet.
#[derive(Default)]
pub(crate) struct Gates {
    /// How many are open: a submission reads only this when there are none (no lock).
    count: AtomicUsize,
    open: Mutex<GateList>,
}

#[derive(Default)]
struct GateList {
    /// In the order the calls entered the queue's order.
    gates: SmallVec<[Gate; 1]>,
    /// The sequence number the next submission that checks the gates gets.
    next_seq: u64,
}

/// One open gate: the submission's action, the semaphore its release signals to 1, and its place.
#[derive(Clone)]
struct Gate {
    action: u64,
    semaphore: Semaphore,
    place: QueuePlace,
    /// A blocking host call's (released when it returns), not held work's (released at its issue).
    call: bool,
}

/// What a gate semaphore stands for, in the hang report.
pub(crate) enum GateOf {
    /// The return of this blocking host call.
    Call(u64),
    /// The issue of this held submission.
    Held(u64),
}

/// Where a submission stands in its queue's order, as far as gates go: taken the first time it
/// checks the gates and kept while a gate holds it, so that released together, held work still
/// waits for the calls ahead of it and for none behind it.
#[derive(Clone)]
pub(crate) struct QueuePlace {
    /// The sequence number of the outermost submission it belongs to: its own, or, for work that a
    /// running host call submits to its own queue, that call's root (the work is part of the call).
    root: u64,
    seq: u64,
    /// The running host calls of this queue it was submitted from, innermost first: it never
    /// waits for their gates (a call may wait for what it submits).
    within: SmallVec<[u64; 1]>,
}

impl QueuePlace {
    fn is_after(&self, gate: &Gate) -> bool {
        (gate.place.root, gate.place.seq) < (self.root, self.seq) && !self.within.contains(&gate.action)
    }
}

impl GateList {
    fn find(&self, action: u64) -> Option<&Gate> {
        self.gates.iter().find(|g| g.action == action)
    }
}

impl Gates {
    /// Lets later work go once host call `action` returned (or will never run). Idempotent.
    pub(crate) fn release(&self, action: u64) {
        let released = {
            let mut open = lock(&self.open);
            let Some(at) = open.gates.iter().position(|g| g.action == action) else { return };
            let gate = open.gates.remove(at);
            self.count.store(open.gates.len(), Ordering::Release);
            gate
        };
        // Outside the lock: this releases the held submissions, which issue on this thread.
        let _ = released.semaphore.signal(1);
    }

    /// Releases every gate (teardown).
    pub(crate) fn release_all(&self) {
        let all: SmallVec<[Gate; 1]> = std::mem::take(&mut lock(&self.open).gates);
        self.count.store(0, Ordering::Release);
        for gate in all {
            let _ = gate.semaphore.signal(1);
        }
    }

    /// Adds to `waits` a wait on every open gate ahead of submission `action` at `place` (taken
    /// here on its first check), but none of a host call it was submitted from (a call may wait for
    /// what it submits). Returns whether it added any. The submission's own gate opens in the same
    /// step if it is a blocking host call (`blocking`) or if gates hold it; the caller releases the
    /// latter once it is issued.
    pub(crate) fn add_waits(
        &self,
        device: u64,
        queue: usize,
        action: u64,
        blocking: bool,
        place: &mut Option<QueuePlace>,
        waits: &mut SmallVec<[SemaphoreValue; 4]>,
    ) -> bool {
        if !blocking && self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut open = lock(&self.open);
        let me = place.get_or_insert_with(|| {
            let seq = open.next_seq;
            open.next_seq += 1;
            let running = RUNNING.with(Cell::get).filter(|r| r.device == device && r.queue == queue);
            match running.and_then(|r| open.find(r.action).map(|gate| (r.action, gate))) {
                Some((action, gate)) => {
                    let mut within = SmallVec::from_elem(action, 1);
                    within.extend(gate.place.within.iter().copied());
                    QueuePlace { root: gate.place.root, seq, within }
                }
                None => QueuePlace { root: seq, seq, within: running.map(|r| r.action).into_iter().collect() },
            }
        });
        let before = waits.len();
        for gate in open.gates.iter().filter(|g| me.is_after(g)) {
            waits.push(SemaphoreValue::new(&gate.semaphore, 1));
        }
        let held = waits.len() > before;
        if (blocking || held) && open.find(action).is_none() {
            let gate = Gate { action, semaphore: Semaphore::new(0), place: me.clone(), call: blocking };
            open.gates.push(gate);
            self.count.store(open.gates.len(), Ordering::Release);
        }
        held
    }

    /// What `semaphore` stands for, if it is one of these gates.
    pub(crate) fn gate_of(&self, semaphore: &Semaphore) -> Option<GateOf> {
        let open = lock(&self.open);
        let gate = open.gates.iter().find(|g| g.semaphore.same_as(semaphore))?;
        Some(if gate.call { GateOf::Call(gate.action) } else { GateOf::Held(gate.action) })
    }
}

/// The host call running on this thread, so its own submissions skip its gate.
#[derive(Clone, Copy)]
struct Running {
    device: u64,
    queue: usize,
    action: u64,
}

crate::sync::thread_local! {
    #[allow(clippy::missing_const_for_thread_local)]
    static RUNNING: Cell<Option<Running>> = Cell::new(None);
}

/// A host call whose turn has come (its waits reached, the work before it on its queue retired).
pub(crate) struct Job {
    pub(crate) device: u64,
    pub(crate) queue: usize,
    pub(crate) action: u64,
    /// The call (`None` if it was taken before: a bug).
    pub(crate) call: Option<HostFn>,
    /// Why it must not run (a failed wait or upstream), if so: then it is only dropped, here.
    pub(crate) outcome: Result<()>,
    pub(crate) signals: SemaphoreList,
    /// The queue's gates, released after the call returns.
    pub(crate) gates: Arc<Gates>,
}

impl Job {
    /// Runs the call (containing a panic), releases its gate, then applies its signals.
    fn run(self) {
        let Job { device, queue, action, call, outcome, signals, gates } = self;
        let name = || format!("queue {queue} action {action} (host-call)");
        let outcome = match (outcome, call) {
            (Err(fault), call) => {
                drop(call);
                Err(fault)
            }
            (Ok(()), None) => Err(Error::internal(format!("{}: host call ran twice", name()))),
            (Ok(()), Some(call)) => {
                RUNNING.with(|r| r.set(Some(Running { device, queue, action })));
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call));
                RUNNING.with(|r| r.set(None));
                match ran {
                    Ok(result) => result.map_err(|e| e.context(name())),
                    Err(panic) => {
                        Err(Error::aborted(format!("{}: host call panicked: {}", name(), panic_message(&*panic))))
                    }
                }
            }
        };
        gates.release(action);
        super::completion::apply_outcome(&signals, outcome, action);
    }
}

/// The threads that run host calls of one device: one per call running at once, started on demand
/// and gone after a short idle time or at teardown.
pub(crate) struct HostCallRunner {
    device: u64,
    state: Mutex<RunnerState>,
    ready: Condvar,
}

#[derive(Default)]
struct RunnerState {
    jobs: VecDeque<Job>,
    idle: usize,
    /// The calls running now, as (queue, action), for the hang report.
    running: Vec<(usize, u64)>,
    shutting_down: bool,
}

impl HostCallRunner {
    pub(crate) fn new(device: u64) -> Arc<Self> {
        Arc::new(HostCallRunner { device, state: Mutex::new(RunnerState::default()), ready: Condvar::new() })
    }

    /// Hands `job` to an idle thread, or starts one. Never blocks on the call.
    pub(crate) fn run(self: &Arc<Self>, job: Job) {
        if MODEL_CHECKED {
            // Loom models spawn no threads of their own: run in place (they hold no user code).
            job.run();
            return;
        }
        let mut state = lock(&self.state);
        state.jobs.push_back(job);
        // Every call waiting to be taken needs a thread of its own: one queued behind a running call
        // could be what that call waits for (a gate on another queue). An idle thread may still be
        // on its way to take an earlier call, so count calls against idle threads, not just "any idle".
        if state.jobs.len() <= state.idle {
            drop(state);
            self.ready.notify_one();
            return;
        }
        drop(state);
        let runner = self.clone();
        let spawned =
            std::thread::Builder::new().name(format!("hal-host-call-{}", self.device)).spawn(move || runner.work());
        if let Err(e) = spawned {
            // No thread: run it here rather than never (this thread holds no scheduler lock).
            tracing::error!(%e, "cannot start a host-call thread; running the call in place");
            if let Some(job) = lock(&self.state).jobs.pop_back() {
                job.run();
            }
        }
    }

    fn work(&self) {
        super::mark_scheduler_thread();
        let mut state = lock(&self.state);
        loop {
            if let Some(job) = state.jobs.pop_front() {
                let entry = (job.queue, job.action);
                state.running.push(entry);
                drop(state);
                job.run();
                state = lock(&self.state);
                if let Some(at) = state.running.iter().position(|r| *r == entry) {
                    state.running.swap_remove(at);
                }
                continue;
            }
            if state.shutting_down {
                return;
            }
            state.idle += 1;
            let (next, timeout) = wait_timeout(&self.ready, state, IDLE_EXIT);
            state = next;
            state.idle -= 1;
            if timeout && state.jobs.is_empty() {
                return;
            }
        }
    }

    /// Lets idle threads go; calls queued or running finish on their threads, which then exit.
    pub(crate) fn shut_down(&self) {
        lock(&self.state).shutting_down = true;
        self.ready.notify_all();
    }

    /// The calls running now, as (queue, action).
    pub(crate) fn running(&self) -> Vec<(usize, u64)> {
        lock(&self.state).running.clone()
    }

    /// Calls handed over and not finished yet (queued or running).
    pub(crate) fn in_use(&self) -> usize {
        let state = lock(&self.state);
        state.running.len() + state.jobs.len()
    }
}
