//! A persistent pool of threads that runs the workgroups of a dispatch in parallel.
//!
//! [`WorkgroupPool::run`] makes a job of `total` indices; the calling thread claims chunks of
//! indices from an atomic counter until none are left, and after its first chunk (or before it, for
//! a grid known to be heavy: [`CallForHelp::AtOnce`]), if chunks are left and runner slots are
//! free, it publishes the job so that pool threads claim chunks too; `run`
//! returns when every claimed chunk is finished. The first failure (an `Err` or a panic, caught) becomes the result and
//! the indices not yet started are skipped. Several stream workers may call `run` at once: jobs
//! queue up and the pool threads serve the oldest first, while each caller works on its own.
//! No thread is spawned per dispatch; the threads are joined when the pool drops.
//!
//! The pool has one runner slot per core (its threads plus one caller). Dispatches running at once
//! (their callers) and pool threads helping share those slots: a pool thread helps only into a free
//! slot, and stands back between chunks when a new dispatch takes its slot, so the runners never
//! outnumber the cores by more than the callers beyond the first. Two queues dispatching side by
//! side on 16 cores therefore get 16 runners between them, not one core each.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use hal::Error;
use hal::driver::{lock, wait};

use crate::kernel_panics::catch_kernel_panic;

/// Chunks per runner (pool threads plus caller) a job is split into, for load balance.
const CHUNKS_PER_RUNNER: u64 = 4;

/// At most about this much work in one chunk of a job whose cost per index is known: runners then
/// finish within about this long of each other, where a chunk of several heavy indices (IREE's
/// matmul workgroups take milliseconds each) would leave the others idle for its length. A claim
/// costs tens of nanoseconds.
const CHUNK_NS: u64 = 50_000;

/// Indices per chunk of a job of `total` indices over `runners` runners, each index taking about
/// `index_ns` (0: not known).
fn chunk_size(total: u64, runners: u64, index_ns: u64) -> u64 {
    let balanced = total.div_ceil(runners * CHUNKS_PER_RUNNER).max(1);
    CHUNK_NS.checked_div(index_ns).map_or(balanced, |fit| balanced.min(fit.max(1)))
}

/// When a dispatch's caller calls the pool threads to help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallForHelp {
    /// After its first chunk, if chunks are left and slots are free (see the module docs).
    AfterFirstChunk,
    /// Before its first chunk, if slots are free.
    AtOnce,
}

/// Why a job stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobFailure<E> {
    /// The task returned `Err(error)` for `index`.
    Failed {
        /// The index whose task failed.
        index: u64,
        /// What it returned.
        error: E,
    },
    /// The task panicked for `index`.
    Panicked {
        /// The index whose task panicked.
        index: u64,
        /// The panic message (or a placeholder when the payload was not a string).
        message: String,
    },
}

impl<E> JobFailure<E> {
    /// The index that failed.
    pub fn index(&self) -> u64 {
        match self {
            JobFailure::Failed { index, .. } | JobFailure::Panicked { index, .. } => *index,
        }
    }

    /// The same failure with its index moved up by `by` (a job that ran `by..` as `0..`).
    pub fn offset(self, by: u64) -> Self {
        match self {
            JobFailure::Failed { index, error } => JobFailure::Failed { index: index + by, error },
            JobFailure::Panicked { index, message } => JobFailure::Panicked { index: index + by, message },
        }
    }
}

/// A persistent set of worker threads that run jobs of indexed tasks.
pub struct WorkgroupPool {
    shared: Arc<PoolShared>,
    threads: Vec<JoinHandle<()>>,
}

struct PoolShared {
    /// Dispatches running now (on the pool or inline), each on its caller's thread.
    running: AtomicU64,
    /// Pool threads working on a job now.
    helping: AtomicU64,
    /// Runner slots: the pool's threads plus one (the cores it was sized for).
    slots: u64,
    state: Mutex<PoolState>,
    /// Signalled when a job is queued or the pool shuts down.
    work: Condvar,
    /// Times a job called the pool threads (a statistic: each call is a wake-up system call).
    calls_for_help: AtomicU64,
}

struct PoolState {
    jobs: VecDeque<Arc<dyn Runnable>>,
    shutdown: bool,
}

impl PoolShared {
    fn state(&self) -> MutexGuard<'_, PoolState> {
        // Critical sections only push, pop and flag; a poisoned lock still holds consistent data.
        lock(&self.state)
    }
}

impl WorkgroupPool {
    /// A pool of `available_parallelism` threads (at least 2).
    #[cfg(test)]
    pub fn new() -> hal::Result<Self> {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2);
        Self::with_threads(threads)
    }

    /// A pool of `threads` threads (0 is allowed: callers then run their jobs alone).
    /// `ResourceExhausted` when the system refuses a thread.
    pub fn with_threads(threads: usize) -> hal::Result<Self> {
        let shared = Arc::new(PoolShared {
            running: AtomicU64::new(0),
            helping: AtomicU64::new(0),
            slots: threads as u64 + 1,
            state: Mutex::new(PoolState { jobs: VecDeque::new(), shutdown: false }),
            work: Condvar::new(),
            calls_for_help: AtomicU64::new(0),
        });
        let mut pool = WorkgroupPool { shared, threads: Vec::with_capacity(threads) };
        for index in 0..threads {
            let shared = pool.shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("cpu-sim-workgroup-{index}"))
                .spawn(move || worker_loop(&shared))
                .map_err(|e| {
                    Error::resource_exhausted(format!("workgroup pool: cannot start thread {index} of {threads}: {e}"))
                })?;
            // On an early return, dropping `pool` joins the threads started so far.
            pool.threads.push(spawned);
        }
        Ok(pool)
    }

    /// Runs `task(0..total)` on the pool with the caller ([`run`](Self::run)) while the dispatches
    /// running at once leave runner slots free, and on the caller alone
    /// ([`run_inline`](Self::run_inline)) when they fill the slots: queues that run dispatches side
    /// by side then already fill the cores, and each keeps its dispatch's data on its own thread
    /// instead of adding runners the cores cannot hold (a runner preempted mid-dispatch stalls that
    /// dispatch for a time slice). The caller calls the pool threads as `call` says (for a grid
    /// already known to be heavy, at once: its first chunk alone would leave the free runners idle
    /// for a chunk's time); indices are claimed in chunks of about [`CHUNK_NS`] of work where each
    /// is known to take about `index_ns` (0: not known).
    pub fn run_shared_with<F, E>(
        &self,
        total: u64,
        task: F,
        call: CallForHelp,
        index_ns: u64,
    ) -> Result<(), JobFailure<E>>
    where
        F: Fn(u64) -> Result<(), E> + Send + Sync + 'static,
        E: Send + 'static,
    {
        let others = self.shared.running.fetch_add(1, Ordering::AcqRel);
        let result = if others + 1 < self.shared.slots {
            self.run_with(total, task, call, index_ns)
        } else {
            Self::run_inline(total, task)
        };
        let left = self.shared.running.fetch_sub(1, Ordering::AcqRel) - 1;
        if others > 0 && left + 1 < self.shared.slots {
            // Pool threads may have stood back while this ran beside other dispatches: let them
            // help those into the slot this one frees (a dispatch that has not called for help
            // yet does so itself).
            let state = self.shared.state();
            if state.jobs.iter().any(|job| job.has_work()) {
                self.shared.calls_for_help.fetch_add(1, Ordering::Relaxed);
                self.shared.work.notify_all();
            }
        }
        result
    }

    /// Times a dispatch called the pool threads to help (each a wake-up); for tests and statistics.
    #[cfg(test)]
    pub fn calls_for_help(&self) -> u64 {
        self.shared.calls_for_help.load(Ordering::Relaxed)
    }

    /// Number of pool threads (the caller of `run` helps too).
    pub fn thread_count(&self) -> usize {
        self.threads.len()
    }

    /// Runs `task(0..total)` on the calling thread alone, with the same failure reporting as `run`:
    /// for dispatches too small to be worth waking the pool (no allocation, no hand-off).
    pub fn run_inline<F, E>(total: u64, task: F) -> Result<(), JobFailure<E>>
    where
        F: Fn(u64) -> Result<(), E>,
    {
        for index in 0..total {
            match catch_kernel_panic(|| task(index)) {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return Err(JobFailure::Failed { index, error }),
                Err(message) => return Err(JobFailure::Panicked { index, message }),
            }
        }
        Ok(())
    }

    /// Runs `task(0..total)` across the pool's threads and the calling thread; returns once every
    /// index ran, or with the first failure (remaining indices are skipped).
    #[cfg(test)]
    pub fn run<F, E>(&self, total: u64, task: F) -> Result<(), JobFailure<E>>
    where
        F: Fn(u64) -> Result<(), E> + Send + Sync + 'static,
        E: Send + 'static,
    {
        self.run_with(total, task, CallForHelp::AfterFirstChunk, 0)
    }

    /// [`run_shared_with`](Self::run_shared_with) as a grid of unknown cost runs.
    #[cfg(test)]
    pub fn run_shared<F, E>(&self, total: u64, task: F) -> Result<(), JobFailure<E>>
    where
        F: Fn(u64) -> Result<(), E> + Send + Sync + 'static,
        E: Send + 'static,
    {
        self.run_shared_with(total, task, CallForHelp::AfterFirstChunk, 0)
    }

    /// [`run`](Self::run), calling for help as `call` says, in chunks sized by `index_ns`.
    fn run_with<F, E>(&self, total: u64, task: F, call: CallForHelp, index_ns: u64) -> Result<(), JobFailure<E>>
    where
        F: Fn(u64) -> Result<(), E> + Send + Sync + 'static,
        E: Send + 'static,
    {
        if total == 0 {
            return Ok(());
        }
        let runners = self.threads.len() as u64 + 1;
        let chunk = chunk_size(total, runners, index_ns);
        let job = Arc::new(Job {
            task,
            total,
            chunk,
            next: AtomicU64::new(0),
            retired: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            done: Mutex::new(false),
            finished: Condvar::new(),
        });
        let helpers = self.threads.len() as u64;
        // The caller starts alone and calls for help after its first chunk, if chunks are left and
        // slots are free by then: when queues run dispatches side by side (each on its stream
        // thread), the one that starts first would otherwise wake pool threads that take the cores
        // the next ones are about to need, only to stand back a chunk later.
        let called = std::cell::Cell::new(false);
        let call_for_help = || {
            if !called.get() && helpers > 0 && job.has_work() && self.shared.free_slots() > 0 {
                called.set(true);
                let chunks_left = (job.total - job.next.load(Ordering::Relaxed)).div_ceil(job.chunk);
                self.shared.state().jobs.push_back(job.clone());
                self.shared.calls_for_help.fetch_add(1, Ordering::Relaxed);
                for _ in 0..helpers.min(chunks_left) {
                    self.shared.work.notify_one();
                }
            }
            true
        };
        if call == CallForHelp::AtOnce {
            call_for_help();
        }
        job.work_while(&call_for_help);
        job.wait();
        if called.get() {
            // Do not leave the finished job (and what its task holds) queued until the next wake-up.
            let queued: Arc<dyn Runnable> = job.clone();
            self.shared.state().jobs.retain(|other| !Arc::ptr_eq(other, &queued));
        }
        job.take_failure()
    }
}

impl std::fmt::Debug for WorkgroupPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkgroupPool").field("threads", &self.threads.len()).finish()
    }
}

impl Drop for WorkgroupPool {
    fn drop(&mut self) {
        self.shared.state().shutdown = true;
        self.shared.work.notify_all();
        for thread in self.threads.drain(..) {
            // A worker never panics (tasks run under catch_unwind); nothing to report if it did.
            let _ = thread.join();
        }
    }
}

fn worker_loop(shared: &PoolShared) {
    loop {
        let job = {
            let mut state = shared.state();
            loop {
                if state.shutdown {
                    return;
                }
                while state.jobs.front().is_some_and(|job| !job.has_work()) {
                    state.jobs.pop_front();
                }
                // A pool thread helps only into a free runner slot (see the module docs); the
                // dispatches' own threads fill the rest.
                if let Some(job) = state.jobs.front()
                    && shared.take_slot()
                {
                    break job.clone();
                }
                state = wait(&shared.work, state);
            }
        };
        // Stand back between chunks once the runners outnumber the slots (a dispatch started).
        job.work_while(&|| {
            shared.running.load(Ordering::Relaxed) + shared.helping.load(Ordering::Relaxed) <= shared.slots
        });
        shared.helping.fetch_sub(1, Ordering::AcqRel);
    }
}

impl PoolShared {
    /// Runner slots neither a running dispatch nor a helping pool thread holds.
    fn free_slots(&self) -> u64 {
        let taken = self.running.load(Ordering::Acquire) + self.helping.load(Ordering::Acquire);
        self.slots.saturating_sub(taken)
    }

    /// Takes a free slot for a pool thread about to help; false when there is none.
    fn take_slot(&self) -> bool {
        let mut helping = self.helping.load(Ordering::Acquire);
        loop {
            if self.running.load(Ordering::Acquire) + helping >= self.slots {
                return false;
            }
            match self.helping.compare_exchange_weak(helping, helping + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(now) => helping = now,
            }
        }
    }
}

/// A job as the pool threads see it.
trait Runnable: Send + Sync {
    /// Whether chunks are left to claim.
    fn has_work(&self) -> bool;
    /// Claims and runs chunks until none are left, or until `keep_going` says stop (checked
    /// between chunks; the job's caller finishes what is left).
    fn work_while(&self, keep_going: &dyn Fn() -> bool);
}

struct Job<F, E> {
    task: F,
    total: u64,
    chunk: u64,
    /// The next unclaimed index (at most `total`).
    next: AtomicU64,
    /// Indices finished or skipped; the job is done when it reaches `total`.
    retired: AtomicU64,
    /// Set on the first failure: indices not started yet are skipped.
    failed: AtomicBool,
    failure: Mutex<Option<JobFailure<E>>>,
    done: Mutex<bool>,
    finished: Condvar,
}

impl<F, E> Job<F, E>
where
    F: Fn(u64) -> Result<(), E> + Send + Sync,
    E: Send,
{
    fn record(&self, failure: JobFailure<E>) {
        let mut slot = lock(&self.failure);
        if slot.is_none() {
            *slot = Some(failure);
        }
        self.failed.store(true, Ordering::Relaxed);
    }

    /// Runs `start..end`, stopping at a failure.
    fn run_range(&self, start: u64, end: u64) {
        let mut index = start;
        let outcome = catch_kernel_panic(|| {
            while index < end && !self.failed.load(Ordering::Relaxed) {
                (self.task)(index)?;
                index += 1;
            }
            Ok(())
        });
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(error)) => self.record(JobFailure::Failed { index, error }),
            Err(message) => self.record(JobFailure::Panicked { index, message }),
        }
    }

    fn retire(&self, count: u64) {
        // AcqRel: the last retirer sees every other runner's writes, and the waiter sees them through `done`.
        if self.retired.fetch_add(count, Ordering::AcqRel) + count == self.total {
            *lock(&self.done) = true;
            self.finished.notify_all();
        }
    }

    fn wait(&self) {
        let mut done = lock(&self.done);
        while !*done {
            done = wait(&self.finished, done);
        }
    }

    fn take_failure(&self) -> Result<(), JobFailure<E>> {
        match lock(&self.failure).take() {
            Some(failure) => Err(failure),
            None => Ok(()),
        }
    }
}

impl<F, E> Runnable for Job<F, E>
where
    F: Fn(u64) -> Result<(), E> + Send + Sync,
    E: Send,
{
    fn has_work(&self) -> bool {
        self.next.load(Ordering::Relaxed) < self.total
    }

    fn work_while(&self, keep_going: &dyn Fn() -> bool) {
        loop {
            if self.failed.load(Ordering::Relaxed) {
                // Claim everything left at once and retire it unrun.
                let start = self.next.swap(self.total, Ordering::Relaxed);
                if start < self.total {
                    self.retire(self.total - start);
                }
                return;
            }
            // A compare-exchange claim never moves `next` past `total`, so any u64 total works.
            let claim = self.next.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |start| {
                (start < self.total).then(|| start + self.chunk.min(self.total - start))
            });
            let Ok(start) = claim else { return };
            let end = start + self.chunk.min(self.total - start);
            self.run_range(start, end);
            self.retire(end - start);
            if !keep_going() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A one-index dispatch running on another thread until `finish`: a dispatch the next one runs
    /// beside.
    struct HeldDispatch {
        release: Arc<AtomicBool>,
        thread: std::thread::JoinHandle<Result<(), JobFailure<()>>>,
    }

    impl HeldDispatch {
        /// Starts it on `pool` and returns once its index runs.
        fn start(pool: &Arc<WorkgroupPool>) -> Self {
            let (started, running) = std::sync::mpsc::channel();
            let release = Arc::new(AtomicBool::new(false));
            let (pool, held) = (pool.clone(), release.clone());
            let thread = std::thread::spawn(move || {
                pool.run_shared(1, move |_| {
                    let _ = started.send(());
                    while !held.load(Ordering::Acquire) {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    Ok::<(), ()>(())
                })
            });
            running.recv().unwrap();
            HeldDispatch { release, thread }
        }

        /// Lets it finish and checks it ran.
        fn finish(self) {
            self.release.store(true, Ordering::Release);
            self.thread.join().unwrap().unwrap();
        }
    }

    /// A dispatch that starts while others fill the runner slots (here 1 pool thread: 2 slots, one
    /// dispatch running) runs on its caller's thread alone, and every index still runs once; the
    /// pool helps the next lone dispatch again.
    /// Chunks balance over the runners where the cost of an index is not known, and hold about
    /// `CHUNK_NS` of work where it is: one index each for heavy ones.
    #[test]
    fn chunks_are_sized_by_known_index_cost() {
        assert_eq!(chunk_size(512, 16, 0), 8);
        assert_eq!(chunk_size(512, 16, 1_800_000), 1);
        assert_eq!(chunk_size(100_000, 16, 100), 500);
        assert_eq!(chunk_size(100, 16, 10), 2, "never more than the balanced size");
        assert_eq!(chunk_size(1, 16, 0), 1);
    }

    /// A job of heavy indices whose cost is known is claimed one index at a time: with 2 runners
    /// and 64 indices of 1 ms no runner takes a balanced chunk (8 indices) in one claim.
    #[test]
    fn heavy_known_indices_are_claimed_one_at_a_time() {
        let pool = WorkgroupPool::with_threads(1).unwrap();
        let ran_by = Arc::new(Mutex::new(vec![None; 64]));
        let seen = ran_by.clone();
        let task = move |index: u64| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            lock(&seen)[index as usize] = Some(std::thread::current().id());
            Ok::<(), ()>(())
        };
        pool.run_shared_with(64, task, CallForHelp::AtOnce, 1_000_000).unwrap();
        let ran_by: Vec<_> = lock(&ran_by).iter().map(|id| id.expect("every index ran")).collect();
        let longest_run = ran_by.chunk_by(|a, b| a == b).map(<[_]>::len).max().unwrap();
        assert!(longest_run < 8, "one runner ran {longest_run} consecutive indices");
    }

    #[test]
    fn a_dispatch_beside_another_runs_on_its_callers_thread() {
        let pool = Arc::new(WorkgroupPool::with_threads(1).unwrap());
        let held = HeldDispatch::start(&pool);
        let threads = Arc::new(Mutex::new(Vec::new()));
        let seen = threads.clone();
        pool.run_shared(64, move |_| {
            seen.lock().unwrap().push(std::thread::current().id());
            Ok::<(), ()>(())
        })
        .unwrap();
        held.finish();
        let threads = threads.lock().unwrap();
        assert_eq!(threads.len(), 64);
        assert!(
            threads.iter().all(|&id| id == std::thread::current().id()),
            "a pool thread ran a side-by-side dispatch"
        );
        assert_eq!(pool.shared.running.load(Ordering::Acquire), 0);
        // Alone again: the pool takes part.
        assert!(threads_running_slow_tasks(|task| pool.run_shared(32, task)) > 1, "a lone dispatch ran on one thread");
    }

    /// Two dispatches side by side on a pool with slots to spare (4 threads: 5 slots) both get pool
    /// threads: the second is not left to its caller alone while the first runs.
    #[test]
    fn dispatches_side_by_side_share_the_free_slots() {
        let pool = Arc::new(WorkgroupPool::with_threads(4).unwrap());
        let held = HeldDispatch::start(&pool);
        let threads = threads_running_slow_tasks(|task| pool.run_shared(64, task));
        held.finish();
        assert!(threads > 2, "the second dispatch ran on {threads} threads with 3 slots free");
        // A pool thread gives its slot back after its last chunk, which may be after the dispatch
        // it helped has returned: the slots are free again soon, not at once.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while pool.shared.helping.load(Ordering::Acquire) != 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(pool.shared.helping.load(Ordering::Acquire), 0);
        assert_eq!(pool.shared.running.load(Ordering::Acquire), 0);
    }

    /// A dispatch that another dispatch joins before the first finishes its first chunk never wakes
    /// a pool thread: both keep their own stream threads, and the pool is not woken to take the
    /// core the second needs.
    #[test]
    fn a_dispatch_joined_within_its_first_chunk_wakes_no_pool_thread() {
        let pool = Arc::new(WorkgroupPool::with_threads(1).unwrap());
        let (first_started, second_may_start) = std::sync::mpsc::channel();
        let second_running = Arc::new(AtomicBool::new(false));
        let first_finished = Arc::new(AtomicBool::new(false));
        let threads = Arc::new(Mutex::new(HashSet::new()));
        let first = {
            let (pool, second_running, first_finished, threads) =
                (pool.clone(), second_running.clone(), first_finished.clone(), threads.clone());
            std::thread::spawn(move || {
                // 8 indices, 2 runners: chunks of one index. Index 0 waits for the second dispatch.
                let result = pool.run_shared(8, move |index| {
                    threads.lock().unwrap().insert(std::thread::current().id());
                    if index == 0 {
                        let _ = first_started.send(());
                        while !second_running.load(Ordering::Acquire) {
                            std::thread::yield_now();
                        }
                    }
                    Ok::<(), ()>(())
                });
                first_finished.store(true, Ordering::Release);
                result
            })
        };
        second_may_start.recv().unwrap();
        let (running, finished) = (second_running.clone(), first_finished.clone());
        // The second dispatch runs until the first has finished: the first never runs alone.
        pool.run_shared(1, move |_| {
            running.store(true, Ordering::Release);
            while !finished.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            Ok::<(), ()>(())
        })
        .unwrap();
        first.join().unwrap().unwrap();
        assert_eq!(pool.calls_for_help(), 0, "a pool thread was woken");
        assert_eq!(threads.lock().unwrap().len(), 1, "the first dispatch ran on its caller's thread alone");
        // Alone, a dispatch still calls for help.
        assert!(threads_running_slow_tasks(|task| pool.run_shared(32, task)) > 1, "a lone dispatch ran on one thread");
        assert!(pool.calls_for_help() >= 1);
    }

    /// How many threads ran `run`'s tasks, each slow enough (2 ms) for the pool to join in.
    fn threads_running_slow_tasks(
        run: impl FnOnce(Box<dyn Fn(u64) -> Result<(), ()> + Send + Sync>) -> Result<(), JobFailure<()>>,
    ) -> usize {
        let threads = Arc::new(Mutex::new(HashSet::new()));
        let seen = threads.clone();
        run(Box::new(move |_| {
            seen.lock().unwrap().insert(std::thread::current().id());
            std::thread::sleep(std::time::Duration::from_millis(2));
            Ok(())
        }))
        .unwrap();
        threads.lock().unwrap().len()
    }

    #[test]
    fn runs_every_index_once() {
        let pool = WorkgroupPool::with_threads(3).unwrap();
        let total = 10_007u64;
        let seen = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        let counts = seen.clone();
        pool.run(total, move |i| {
            counts[i as usize].fetch_add(1, Ordering::Relaxed);
            Ok::<(), String>(())
        })
        .unwrap();
        assert!(seen.iter().all(|c| c.load(Ordering::Relaxed) == 1));
    }

    #[test]
    fn uses_several_threads() {
        let pool = WorkgroupPool::with_threads(2).unwrap();
        assert!(threads_running_slow_tasks(|task| pool.run(64, task)) > 1, "work was not shared");
    }

    #[test]
    fn error_stops_the_job_and_is_returned() {
        let pool = WorkgroupPool::with_threads(2).unwrap();
        let ran = Arc::new(AtomicU64::new(0));
        let counter = ran.clone();
        let total = 1_000_000;
        let result = pool.run(total, move |i| {
            counter.fetch_add(1, Ordering::Relaxed);
            if i == 0 { Err(format!("index {i} failed")) } else { Ok(()) }
        });
        assert_eq!(result, Err(JobFailure::Failed { index: 0, error: "index 0 failed".to_owned() }));
        assert!(ran.load(Ordering::Relaxed) < total, "the rest was not skipped");
    }

    #[test]
    fn panic_is_caught_and_pool_survives() {
        let pool = WorkgroupPool::with_threads(2).unwrap();
        let result = pool.run(100, |i| {
            if i == 57 {
                panic!("workgroup {i} exploded");
            }
            Ok::<(), ()>(())
        });
        match result {
            Err(JobFailure::Panicked { index: 57, message }) => {
                assert!(message.starts_with("workgroup 57 exploded (at "), "{message}")
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(pool.run(100, |_| Ok::<(), ()>(())), Ok(()));
    }

    #[test]
    fn many_jobs_reuse_the_threads() {
        let pool = WorkgroupPool::with_threads(3).unwrap();
        let sum = Arc::new(AtomicU64::new(0));
        for round in 0..2000u64 {
            let sum = sum.clone();
            pool.run(1 + round % 17, move |i| {
                sum.fetch_add(i + 1, Ordering::Relaxed);
                Ok::<(), ()>(())
            })
            .unwrap();
        }
        let expected: u64 = (0..2000u64).map(|r| (1 + r % 17) * (2 + r % 17) / 2).sum();
        assert_eq!(sum.load(Ordering::Relaxed), expected);
        assert_eq!(pool.thread_count(), 3);
    }

    #[test]
    fn concurrent_callers_share_the_pool() {
        let pool = Arc::new(WorkgroupPool::with_threads(2).unwrap());
        let callers: Vec<_> = (0..4u64)
            .map(|caller| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let hits = Arc::new(AtomicU64::new(0));
                        let counter = hits.clone();
                        pool.run(50 + caller, move |_| {
                            counter.fetch_add(1, Ordering::Relaxed);
                            Ok::<(), ()>(())
                        })
                        .unwrap();
                        assert_eq!(hits.load(Ordering::Relaxed), 50 + caller);
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.join().unwrap();
        }
    }

    #[test]
    fn zero_threads_and_empty_jobs() {
        let pool = WorkgroupPool::with_threads(0).unwrap();
        let hits = Arc::new(AtomicU64::new(0));
        let counter = hits.clone();
        pool.run(10, move |_| {
            counter.fetch_add(1, Ordering::Relaxed);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(hits.load(Ordering::Relaxed), 10);
        assert_eq!(pool.run(0, |_| Err::<(), _>("never")), Ok(()));
    }

    #[test]
    fn finished_jobs_release_their_task() {
        let pool = WorkgroupPool::with_threads(2).unwrap();
        let held = Arc::new(());
        let captured = held.clone();
        pool.run(64, move |_| {
            let _ = &captured;
            Ok::<(), ()>(())
        })
        .unwrap();
        // A pool thread may drop its reference just after `run` returns, but none is kept for long.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while Arc::strong_count(&held) > 1 {
            assert!(std::time::Instant::now() < deadline, "the finished job is still referenced");
            std::thread::yield_now();
        }
    }

    #[test]
    fn default_pool_has_at_least_two_threads_and_drops() {
        let pool = WorkgroupPool::new().unwrap();
        assert!(pool.thread_count() >= 2);
        drop(pool); // joins; the test would hang otherwise
    }
}
