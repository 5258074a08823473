//! Host calls: user functions run in queue order on threads of their own, never on a completion
//! thread and never under a scheduler lock, so a call may submit to and wait on any queue, its own
//! included, and a slow call delays nothing but what is ordered behind it.
//!
//! A blocking call (the default, IREE's meaning) holds later work of its queue until it returns: once
//! its waits are reached and it is issued (enters its queue's order), it opens a *gate* on the queue,
//! a host semaphore that every submission of that queue issued later waits on (from the host, like
//! any semaphore of no device) and that the call's return signals. A call still waiting for its own
//! waits holds nothing back, so work behind it may signal what it waits for. Submissions made by the
//! call itself skip its own gate (it may wait for them).

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

/// The open gates of one queue: blocking host calls submitted and not yet returned.
#[derive(Default)]
pub(crate) struct Gates {
    /// How many are open: a submission reads only this when there are none (no lock).
    count: AtomicUsize,
    open: Mutex<SmallVec<[Gate; 1]>>,
}

/// One open gate: the host call's action and the semaphore its return signals to 1.
#[derive(Clone)]
struct Gate {
    action: u64,
    semaphore: Semaphore,
}

impl Gates {
    /// Lets later work go once host call `action` returned (or will never run). Idempotent.
    pub(crate) fn release(&self, action: u64) {
        let released = {
            let mut open = lock(&self.open);
            let Some(at) = open.iter().position(|g| g.action == action) else { return };
            let gate = open.remove(at);
            self.count.store(open.len(), Ordering::Release);
            gate
        };
        // Outside the lock: this releases the held submissions, which issue on this thread.
        let _ = released.semaphore.signal(1);
    }

    /// Releases every gate (teardown).
    pub(crate) fn release_all(&self) {
        let all: SmallVec<[Gate; 1]> = std::mem::take(&mut *lock(&self.open));
        self.count.store(0, Ordering::Release);
        for gate in all {
            let _ = gate.semaphore.signal(1);
        }
    }

    /// Adds to `waits` a wait on every open gate but the one of the host call running on this
    /// thread (a call may wait for what it submits itself). Returns whether it added any. When
    /// `opening` names a blocking host call and no gate holds it, its own gate opens in the same
    /// step, so two calls issued at once cannot both pass and each hold the other's work back.
    pub(crate) fn add_waits(
        &self,
        device: u64,
        queue: usize,
        opening: Option<u64>,
        waits: &mut SmallVec<[SemaphoreValue; 4]>,
    ) -> bool {
        if opening.is_none() && self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let own = RUNNING.with(Cell::get).filter(|r| r.device == device && r.queue == queue).map(|r| r.action);
        let mut open = lock(&self.open);
        let before = waits.len();
        for gate in open.iter().filter(|g| Some(g.action) != own) {
            waits.push(SemaphoreValue::new(&gate.semaphore, 1));
        }
        let held = waits.len() > before;
        if let Some(action) = opening.filter(|_| !held) {
            open.push(Gate { action, semaphore: Semaphore::new(0) });
            self.count.store(open.len(), Ordering::Release);
        }
        held
    }

    /// The host call whose return `semaphore` stands for, if it is one of these gates.
    pub(crate) fn action_of(&self, semaphore: &Semaphore) -> Option<u64> {
        lock(&self.open).iter().find(|g| g.semaphore.same_as(semaphore)).map(|g| g.action)
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
