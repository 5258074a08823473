//! Indirect dispatches read on the host: the workgroup count is read from device memory when the
//! dispatch runs, and the submitting thread never waits for it. This is the path of a dispatch
//! replayed directly, or of a device that cannot set graph nodes' grids itself
//! (`crate::commands::indirect_node`, the default where it can).
//!
//! A kernel's grid is a launch argument, so something on the host must read the count and launch.
//! On the queue's stream an indirect dispatch becomes: a 12-byte copy of the count into a pinned
//! slot of the queue's *lane*, a `cuStreamWriteValue64` of the dispatch's sequence number into a pinned word of the
//! lane (so the host learns the copy is done by reading memory, not by querying an event,
//! which takes a driver lock the submitting thread needs), and a `cuStreamWaitValue64` on a device
//! word of the lane. The stream then holds everything after it, including later submissions, which
//! the submitting thread goes on enqueuing. The device's launcher thread sees the pinned word reach
//! the dispatch's number (everything before the dispatch ran, so the count is final), reads the
//! count, launches the kernel on the lane's side stream and enqueues a `cuStreamWriteValue64` of the
//! number into the device word behind it: the kernel's completion releases the queue's stream. One
//! host round trip per indirect dispatch (the launcher polls, yielding for a while before it sleeps
//! between polls); it needs nothing but the driver. While a dispatch waits, the lane's side
//! stream is queried about once a millisecond to notice a device fault, so a faulted device cannot
//! leave the launcher waiting.
//!
//! A count with a zero runs nothing; a count past the device's limits, or a launch that fails, is
//! stored as the submission's fault and the word is written anyway, so the queue never hangs. The
//! launcher keeps running until every pending dispatch released its stream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUdeviceptr, CUstream, CUstream_flags};
use hal::driver::stream_model::Work;
use hal::driver::{lock, wait};
use hal::{Error, Result};

use crate::executable::KernelLaunch;
use crate::free_gate;
use crate::sys::context::{Bound, Context};
use crate::sys::result;

/// How long the launcher yields between polls after a dispatch was submitted or launched, before it
/// sleeps between polls.
const SPIN: Duration = Duration::from_micros(200);
/// Its sleep between polls after that.
const SLEEP: Duration = Duration::from_micros(20);
/// How often a dispatch still waiting for its count has its event queried for a device fault.
const FAULT_CHECK: Duration = Duration::from_millis(1);

/// Count slots per lane: the dispatch numbered `n` copies its count into slot `n % SLOTS`. A slot
/// is reused only after the queue's stream passed the dispatch `SLOTS` earlier, whose count the
/// launcher read before it released the stream, so no slot is overwritten while it is read.
const SLOTS: u64 = 1024;
/// Bytes of a slot (a 12-byte count, aligned).
const SLOT_BYTES: u64 = 16;
/// Where the slots start in the lane's pinned area (the copied word comes first, on its own line).
const SLOTS_AT: u64 = 64;

/// One queue's side of indirect dispatches: the side stream the launcher launches on, the device
/// word the queue's stream waits on, and pinned memory for the counts and for the number of the
/// latest dispatch whose count was copied. Made at a queue's first indirect dispatch; kept for the
/// device's lifetime.
pub struct Lane {
    context: Arc<Context>,
    side: CUstream,
    word: CUdeviceptr,
    /// Pinned, device-mapped: the copied word (8 bytes at 0), then the count slots from `SLOTS_AT`.
    /// The queue's stream writes the copied word after each count, so the launcher polls memory
    /// instead of the driver (whose queries take a lock the submitting thread's launches need).
    host: *mut u8,
    device: CUdeviceptr,
    /// The sequence number of the next indirect dispatch on this queue (the word counts up to it).
    next: AtomicU64,
}

// SAFETY: the stream and the words are driver objects or pinned memory this lane owns, used with the
// context bound or through atomic loads and reads ordered by the copied word; the sequence is
// atomic, and enqueues on the dispatch stream are serialised by the scheduler's issue lock.
unsafe impl Send for Lane {}
// SAFETY: see `Send`.
unsafe impl Sync for Lane {}

impl Lane {
    fn create(context: &Arc<Context>) -> Result<Self> {
        let bound = context.bind()?;
        let word = result::mem_alloc(&bound, 8)?;
        let bytes = (SLOTS_AT + SLOTS * SLOT_BYTES) as usize;
        let devicemap = 0x2; // CU_MEMHOSTALLOC_DEVICEMAP
        let host = match result::mem_host_alloc(&bound, bytes, devicemap) {
            Ok(host) => host,
            Err(e) => {
                // SAFETY: allocated above, used by nothing yet.
                let _ = unsafe { result::mem_free(&bound, word) };
                return Err(e);
            }
        };
        // SAFETY: `host` is `bytes` bytes of pinned memory, page-aligned, used by nothing yet.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
        let made = result::memset_d8(&bound, word, 0, 8)
            .and_then(|()| result::mem_host_get_device_pointer(&bound, host))
            .and_then(|mapped| {
                let side = result::stream_create(&bound, CUstream_flags::CU_STREAM_NON_BLOCKING as u32)?;
                Ok((mapped, side))
            });
        match made {
            Ok((device, side)) => Ok(Lane {
                context: context.clone(),
                side,
                word,
                host: host.cast::<u8>(),
                device,
                next: AtomicU64::new(1),
            }),
            Err(e) => {
                // SAFETY: allocated above, used by nothing yet.
                let _ = unsafe { result::mem_free(&bound, word) };
                // SAFETY: allocated above, used by nothing yet.
                let _ = unsafe { result::mem_free_host(&bound, host) };
                Err(e)
            }
        }
    }

    /// Whether the queue's stream copied the count of dispatch `sequence` (and every one before).
    fn copied(&self, sequence: u64) -> bool {
        // SAFETY: the copied word is 8 aligned bytes at the start of this lane's pinned area; the
        // device writes it whole (a 64-bit stream write), so an atomic load sees the old or new value.
        let value = unsafe { AtomicU64::from_ptr(self.host.cast::<u64>()) }.load(Ordering::Acquire);
        value >= sequence
    }

    /// The device address of dispatch `sequence`'s count slot.
    fn slot_device(&self, sequence: u64) -> u64 {
        self.device + SLOTS_AT + (sequence % SLOTS) * SLOT_BYTES
    }

    /// The count bytes dispatch `sequence` copied (call once [`copied`](Self::copied) says so).
    fn count(&self, sequence: u64) -> [u8; 12] {
        let mut bytes = [0u8; 12];
        // SAFETY: the slot lies inside the pinned area; the copy into it completed before the copied
        // word reached `sequence` (stream order; the Acquire load in `copied` orders this read after
        // it), and the slot is not written again before the launcher releases this dispatch.
        unsafe {
            let slot = self.host.add((SLOTS_AT + (sequence % SLOTS) * SLOT_BYTES) as usize);
            std::ptr::copy_nonoverlapping(slot, bytes.as_mut_ptr(), 12);
        }
        bytes
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        let Ok(bound) = self.context.bind() else { return };
        // The queue's stream drained before (its owner drops the lane after draining it), and every
        // job holding the lane finished, so nothing waits on the word or runs on the side stream.
        let drained = result::stream_synchronize(&bound, self.side);
        // SAFETY: destroyed once, here; nothing is enqueued on it any more.
        let destroyed = unsafe { result::stream_destroy(&bound, self.side) };
        // SAFETY: freed once, here; no stream waits on it any more.
        let freed = unsafe { result::mem_free(&bound, self.word) };
        // SAFETY: freed once, here; the streams that wrote it drained, and no job reads it any more.
        let freed_host = unsafe { result::mem_free_host(&bound, self.host.cast()) };
        if let Err(e) = drained.and(destroyed).and(freed).and(freed_host) {
            tracing::warn!(%e, "tearing down an indirect-dispatch lane failed");
        }
    }
}

/// A dispatch whose count is being copied.
struct Job {
    launch: KernelLaunch,
    lane: Arc<Lane>,
    sequence: u64,
    work: Arc<Work>,
    who: String,
    since: Instant,
    /// When the side stream was last queried (about every [`FAULT_CHECK`], only to notice a device
    /// fault: readiness comes from the lane's memory).
    queried: Instant,
}

#[derive(Default)]
struct Pending {
    jobs: Vec<Job>,
    stop: bool,
}

struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    /// Dispatches enqueued on their queues' streams and not released yet (kernel not launched).
    unreleased: AtomicU64,
}

/// The device's launcher of indirect dispatches (one thread, started at the first one).
pub struct IndirectLauncher {
    context: Arc<Context>,
    limits: [u32; 3],
    shared: Arc<Shared>,
    thread: OnceLock<Mutex<Option<JoinHandle<()>>>>,
}

impl IndirectLauncher {
    /// A launcher for `context`'s device, whose grids may be at most `limits`.
    pub fn new(context: &Arc<Context>, limits: [u32; 3]) -> Self {
        IndirectLauncher {
            context: context.clone(),
            limits,
            shared: Arc::new(Shared {
                pending: Mutex::new(Pending::default()),
                wake: Condvar::new(),
                unreleased: AtomicU64::new(0),
            }),
            thread: OnceLock::new(),
        }
    }

    /// Whether a dispatch enqueued on some queue's stream still waits for this launcher to release
    /// it (its kernel not launched yet). While one does, no host function may be pending behind a
    /// wait for such a stream: CUDA may hold kernel launches of other streams (the side streams')
    /// behind a pending host function, and the two would wait for each other (see
    /// `CudaStreams::await_completion`; seen as a hang of 2,000 chained indirect dispatches with
    /// host-callback completion).
    pub fn holds_unreleased(&self) -> bool {
        self.shared.unreleased.load(Ordering::Acquire) > 0
    }

    /// A new lane for one queue.
    pub fn lane(&self) -> Result<Lane> {
        Lane::create(&self.context)
    }

    /// Enqueues on the queue's `stream` (with its `lane`) an indirect dispatch of `launch` (its grid is replaced by
    /// the count) reading its count at device address `count`. `work` is the submission, which takes
    /// any failure found later.
    // The queue's lane and raw stream come apart, so the launcher knows no stream type above it.
    #[allow(clippy::too_many_arguments)]
    pub fn enqueue(
        &self,
        bound: &Bound<'_>,
        lane: Arc<Lane>,
        stream: CUstream,
        count: u64,
        launch: KernelLaunch,
        work: &Arc<Work>,
        who: String,
    ) -> Result<()> {
        self.start()?;
        let sequence = lane.next.fetch_add(1, Ordering::Relaxed);
        // Counted before the stream can hold: a free that may wait for the device must not start
        // meanwhile (see `free_gate`).
        free_gate::dispatch_held();
        // Both addresses are device-mapped pinned memory or device memory this lane and the
        // dispatch's command buffer keep alive; 12 bytes fit the slot.
        let enqueued = result::memcpy_async(bound, lane.slot_device(sequence), count, 12, stream)
            .and_then(|()| result::stream_write_value64(bound, stream, lane.device, sequence))
            .and_then(|()| result::stream_wait_value64_geq(bound, stream, lane.word, sequence));
        if let Err(e) = enqueued {
            free_gate::dispatch_released();
            return Err(e);
        }
        let now = Instant::now();
        // Counted before the job is visible to the launcher, which uncounts it at its release.
        self.shared.unreleased.fetch_add(1, Ordering::AcqRel);
        let job = Job { launch, lane, sequence, work: work.clone(), who, since: now, queried: now };
        let mut pending = lock(&self.shared.pending);
        pending.jobs.push(job);
        drop(pending);
        self.shared.wake.notify_one();
        Ok(())
    }

    fn start(&self) -> Result<()> {
        let slot = self.thread.get_or_init(|| Mutex::new(None));
        let mut thread = lock(slot);
        if thread.is_none() {
            let (shared, context, limits) = (self.shared.clone(), self.context.clone(), self.limits);
            let handle = std::thread::Builder::new()
                .name("hal-cuda-indirect".into())
                .spawn(move || run(&shared, &context, limits))
                .map_err(|e| {
                    Error::resource_exhausted(format!("cuda: starting the indirect-dispatch launcher: {e}"))
                })?;
            *thread = Some(handle);
        }
        Ok(())
    }
}

impl Drop for IndirectLauncher {
    fn drop(&mut self) {
        lock(&self.shared.pending).stop = true;
        self.shared.wake.notify_all();
        if let Some(slot) = self.thread.get()
            && let Some(handle) = lock(slot).take()
        {
            let _ = handle.join();
        }
    }
}

/// The launcher thread: polls the pending dispatches' events and launches each once its count is
/// final; stops when asked and nothing is pending.
fn run(shared: &Shared, context: &Arc<Context>, limits: [u32; 3]) {
    free_gate::mark_launcher_thread();
    let mut local: Vec<Job> = Vec::new();
    // When a dispatch last launched: while dispatches follow each other, the launcher keeps polling.
    let mut progress = Instant::now();
    loop {
        {
            let mut pending = lock(&shared.pending);
            while pending.jobs.is_empty() && local.is_empty() {
                if pending.stop {
                    return;
                }
                pending = wait(&shared.wake, pending);
            }
            local.append(&mut pending.jobs);
        }
        let Ok(bound) = context.bind() else {
            // Cannot happen once the device exists; drop the jobs' work rather than spin.
            for job in local.drain(..) {
                job.work.fault.set(Error::internal("cuda: the indirect-dispatch launcher cannot bind its context"));
                shared.unreleased.fetch_sub(1, Ordering::AcqRel);
                free_gate::dispatch_released();
            }
            continue;
        };
        let mut newest = None::<Instant>;
        local.retain_mut(|job| {
            if job.lane.copied(job.sequence) {
                launch(&bound, job, limits, &shared.unreleased);
                progress = Instant::now();
                return false;
            }
            if job.queried.elapsed() >= FAULT_CHECK {
                job.queried = Instant::now();
                if let Err(fault) = result::stream_query(&bound, job.lane.side) {
                    job.work.fault.set(fault);
                    release(&bound, job, &shared.unreleased);
                    return false;
                }
            }
            newest = Some(newest.map_or(job.since, |t: Instant| t.max(job.since)));
            true
        });
        match newest {
            Some(since) if since.elapsed() < SPIN || progress.elapsed() < SPIN => std::thread::yield_now(),
            Some(_) => std::thread::sleep(SLEEP),
            None => {}
        }
    }
}

/// Reads `job`'s count, launches its kernel on the lane's side stream (or stores why not), and
/// releases the queue's stream behind it.
fn launch(bound: &Bound<'_>, job: &Job, limits: [u32; 3], unreleased: &AtomicU64) {
    let count = job.lane.count(job.sequence);
    match hal::driver::indirect_workgroups(count, limits, &job.who) {
        Ok(Some(grid)) => {
            let mut launch = job.launch.clone();
            launch.grid = grid;
            if let Err(e) = launch.launch_on(bound, job.lane.side) {
                job.work.fault.set(e.context(&job.who));
            }
        }
        Ok(None) => {}
        Err(e) => job.work.fault.set(e),
    }
    release(bound, job, unreleased);
}

/// Lets the queue's stream go past `job`'s wait once the side stream's work so far ran, and uncounts
/// it from `unreleased`. If CUDA refuses the stream write, the word is written from the host at once
/// (the kernel, if launched, may then overlap the work after it; the submission carries that
/// failure).
fn release(bound: &Bound<'_>, job: &Job, unreleased: &AtomicU64) {
    if let Err(e) = result::stream_write_value64(bound, job.lane.side, job.lane.word, job.sequence) {
        job.work.fault.set(e);
        if let Err(e) = result::memcpy_htod(bound, job.lane.word, &job.sequence.to_le_bytes()) {
            tracing::error!(%e, "cuda: releasing a queue held by an indirect dispatch failed");
        }
    }
    unreleased.fetch_sub(1, Ordering::AcqRel);
    free_gate::dispatch_released();
}
