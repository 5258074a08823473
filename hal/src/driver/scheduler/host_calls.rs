//! Host calls: user functions run in queue order on threads of their own, never on a completion
//! thread and never under a scheduler lock, so a call may submit to and wait on any queue, its own
//! included, and a slow call delays nothing but what is ordered behind it.
//!
//! A blocking call (the default, IREE's meaning) holds later work of its queue until it returns:
//! that order is its queue's admission list (`admission`), which the call leaves when it returns.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::admission::{Running, run_as};
use crate::driver::HostFn;
use crate::error::{Error, Result, panic_message};
use crate::semaphore::SemaphoreList;
use crate::sync::{Condvar, MODEL_CHECKED, Mutex, lock, wait_timeout};

/// How long an idle host-call thread waits for the next call before it exits.
const IDLE_EXIT: Duration = Duration::from_millis(500);

/// Where a host call's return is reported: its scheduler, whose admission list the call leaves.
pub(crate) trait ReturnTo: Send + Sync {
    /// Host call `action` of `queue` returned (or will never run).
    fn returned(&self, queue: usize, action: u64);
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
    /// Told once the call returned (weakly: the device may be gone by then).
    pub(crate) scheduler: Weak<dyn ReturnTo>,
}

impl Job {
    /// Runs the call (containing a panic), lets the work it held go, then applies its signals.
    fn run(self) {
        let Job { device, queue, action, call, outcome, signals, scheduler } = self;
        let name = || format!("queue {queue} action {action} (host-call)");
        let outcome = match (outcome, call) {
            (Err(fault), call) => {
                drop(call);
                Err(fault)
            }
            (Ok(()), None) => Err(Error::internal(format!("{}: host call ran twice", name()))),
            (Ok(()), Some(call)) => {
                let running = Running { device, queue, action };
                let ran = run_as(running, || std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)));
                match ran {
                    Ok(result) => result.map_err(|e| e.context(name())),
                    Err(panic) => {
                        Err(Error::aborted(format!("{}: host call panicked: {}", name(), panic_message(&*panic))))
                    }
                }
            }
        };
        if let Some(scheduler) = scheduler.upgrade() {
            scheduler.returned(queue, action);
        }
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
        // could be what that call waits for (through work it holds on another queue). An idle
        // thread may still be on its way to take an earlier call, so count calls against idle
        // threads, not just "any idle".
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
