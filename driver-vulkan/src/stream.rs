//! The stream model on Vulkan. Each HAL queue is a stream with a timeline `VkSemaphore` of its own
//! and a submit thread: work enqueued on the stream gets the next timeline value, and the thread
//! submits it in order, waiting on the other streams' values the scheduler asked for and on the
//! stream's previous value (submissions to one `VkQueue` are not ordered otherwise, and a timeline's
//! signals must rise), unless one of those other values shows it reached (`WaitLog`). An event is
//! a (timeline, value) pair; its completion is the timeline's counter reaching the value.
//!
//! A submission that waits on no other stream, whose stream the host has seen reach the previous
//! value and has nothing queued, is issued on the submitting thread instead
//! (`VulkanStream::issue_here`): a round trip then pays no hand-off. Whichever thread issues holds
//! the stream's issuer lock, so values are issued in order and the command pool has one user.
//!
//! Vulkan never sees a wait before its signal: the submit thread submits a wait on another stream's
//! value only once that stream's thread issued the signal (queued it on a `VkQueue` or signalled
//! it from the host). Two HAL queues sharing one `VkQueue` (lavapipe has one) therefore cannot
//! deadlock on each other. Host-side work (queue reads and writes, alloca, dealloca) runs on the
//! submit thread once its waits are reached, then signals the value from the host; reads and writes
//! of an embedder's `VkBuffer`, which has no mapping here, are device copies through a staging
//! buffer instead.
//!
//! An external timepoint (`crate::interop`) is an empty submission that also waits on, or also
//! signals, a value of an embedder's timeline semaphore. Its wait is the one exception to the rule
//! above: the embedder, not the HAL, issues that value's signal, so the submission may reach the
//! `VkQueue` before it (see the `interop` module docs for what that asks of the embedder).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ash::vk;
use hal::driver::stream_model::{StreamModel, Work};
use hal::driver::{CommandBufferExt, QueueOp};
use hal::driver::{lock, try_lock, wait};
use hal::{Error, Result};
use smallvec::{SmallVec, smallvec};

use crate::commands::bound::BoundSets;
use crate::commands::record::{CommandPool, CountChecks, Keep, Recorder};
use crate::commands::replay::{Lease, Recording, Replays};
use crate::commands::{CHECK_SLOT_BYTES, VulkanPreparedCommands};
use crate::error::from_vk;
use crate::executable::VulkanExecutable;
use crate::gpu::Gpu;
use crate::host_waits::{self, WaitTuning};
use crate::interop::external::{self, ExternalOp, ExternalWaits, Point};
use crate::memory::{Block, Placement};
use crate::memory::{VulkanMemory, resolve};
use crate::submit_batch::{Batch, Entry};
use crate::thread_counts::{HostThreadCounts, ThreadCounters};
use crate::timing::{ClockAnchor, QueryPool, SubmissionTiming};

/// A timeline and how far its stream has got.
pub struct Timeline {
    gpu: Arc<Gpu>,
    pub(crate) semaphore: vk::Semaphore,
    /// The highest value whose signal was issued (submitted, or signalled from the host), and how
    /// many threads sleep on `issued_changed` for a higher one.
    issued: Mutex<Issued>,
    /// `issued.value`, read without the lock by threads watching for it.
    issued_value: AtomicU64,
    issued_changed: Condvar,
    /// The highest value the host has seen the device reach (a counter query or a wait that
    /// returned), read without a lock to decide where a submission is issued.
    seen_reached: AtomicU64,
    /// How long a thread waiting for a value's signal to be issued watches before it sleeps.
    watch: Duration,
    /// Where its sleeps are counted (a diagnostic).
    counts: Arc<ThreadCounters>,
    /// What the submissions of recent values waited on (see [`WaitLog`]).
    waited: Mutex<WaitLog>,
    /// Names it in other timelines' [`WaitLog`]s: unique in the process, unlike a handle or an
    /// address, which a later timeline may reuse.
    key: u64,
}

#[derive(Default)]
struct Issued {
    value: u64,
    sleepers: u32,
}

/// The recent values of a timeline whose submissions waited on other streams' values, with those
/// values: the timeline reaching such a value shows that the device reached what it waited on (a
/// submission's signal follows its waits; a submission that fails, or runs on the host, is
/// signalled from the host once its waits are reached).
///
/// A stream submits each item behind its own previous value, because Vulkan does not order separate
/// submissions of one queue and a timeline's signals must rise. An item that waits on another
/// stream's value whose own submission waited on this stream's previous value has that order
/// already: the second wait is left out. On NVIDIA it cost about 0.8 us of device time a hop.
struct WaitLog {
    entries: [LoggedWaits; WAIT_LOG_LEN],
}

/// Values a [`WaitLog`] keeps (the one of value `v` sits at `v % WAIT_LOG_LEN`): a stream that
/// gets further ahead of the one reading it leaves the second wait in.
const WAIT_LOG_LEN: usize = 16;

/// Waits of one value's submission a [`WaitLog`] keeps (the first ones; the rest are not looked at).
const LOGGED_WAITS: usize = 4;

/// One value's submission and (the first [`LOGGED_WAITS`] of) the values it waited on.
#[derive(Clone, Copy, Default)]
struct LoggedWaits {
    value: u64,
    count: usize,
    /// (the waited timeline's key, the value).
    waits: [(u64, u64); LOGGED_WAITS],
}

impl Default for WaitLog {
    fn default() -> Self {
        WaitLog { entries: [LoggedWaits::default(); WAIT_LOG_LEN] }
    }
}

impl WaitLog {
    /// Keeps that the submission of `value` waited on `waits` (timeline keys and values), in place
    /// of the value [`WAIT_LOG_LEN`] before it.
    fn record(&mut self, value: u64, waits: impl Iterator<Item = (u64, u64)>) {
        let mut entry = LoggedWaits { value, ..LoggedWaits::default() };
        for (slot, wait) in entry.waits.iter_mut().zip(waits) {
            *slot = wait;
            entry.count += 1;
        }
        self.entries[value as usize % WAIT_LOG_LEN] = entry;
    }

    /// Whether the submission of `value` (still kept) waited on the timeline named `key` reaching
    /// `reached` or more.
    fn shows(&self, value: u64, key: u64, reached: u64) -> bool {
        let entry = &self.entries[value as usize % WAIT_LOG_LEN];
        entry.value == value && entry.waits[..entry.count].iter().any(|&(k, v)| k == key && v >= reached)
    }
}

impl Timeline {
    fn new(gpu: &Arc<Gpu>, watch: Duration, counts: Arc<ThreadCounters>) -> Result<Timeline> {
        let mut kind =
            vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: a valid create info; destroyed in `Drop`.
        let semaphore =
            unsafe { gpu.device.create_semaphore(&info, None) }.map_err(|e| from_vk("vkCreateSemaphore", e))?;
        Ok(Timeline {
            gpu: gpu.clone(),
            semaphore,
            issued: Mutex::new(Issued::default()),
            issued_value: AtomicU64::new(0),
            issued_changed: Condvar::new(),
            seen_reached: AtomicU64::new(0),
            watch,
            counts,
            waited: Mutex::default(),
            key: {
                static NEXT_KEY: AtomicU64 = AtomicU64::new(1);
                NEXT_KEY.fetch_add(1, Ordering::Relaxed)
            },
        })
    }

    /// The value the device reached.
    pub fn value(&self) -> Result<u64> {
        // SAFETY: the semaphore is a live timeline semaphore of this device.
        let reached = unsafe { self.gpu.device.get_semaphore_counter_value(self.semaphore) }
            .map_err(|e| from_vk("vkGetSemaphoreCounterValue", e))?;
        self.saw_reached(reached);
        Ok(reached)
    }

    /// Keeps that the host saw the device reach `value`.
    fn saw_reached(&self, value: u64) {
        if value > self.seen_reached.load(Ordering::Relaxed) {
            self.seen_reached.fetch_max(value, Ordering::Relaxed);
        }
    }

    /// Whether the host has seen the device reach `value`.
    fn seen_reached(&self, value: u64) -> bool {
        self.seen_reached.load(Ordering::Relaxed) >= value
    }

    /// Waits up to `timeout` for `value`: whether it was reached.
    pub fn wait(&self, value: u64, timeout: Duration) -> Result<bool> {
        let semaphores = [self.semaphore];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
        let nanos = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the semaphore is live; the info's arrays outlive the call.
        match unsafe { self.gpu.device.wait_semaphores(&info, nanos) } {
            Ok(()) => {
                self.saw_reached(value);
                Ok(true)
            }
            Err(vk::Result::TIMEOUT) => Ok(false),
            Err(e) => Err(from_vk("vkWaitSemaphores", e)),
        }
    }

    /// Blocks until `value` is reached: first until its signal was issued (submitted, or signalled
    /// from the host), then in one `vkWaitSemaphores` without a timeout. Untimed, because NVIDIA's
    /// driver wakes a timed wait far later (a host round trip measured about ten times the raw
    /// untimed wait's); only once issued, because lavapipe's untimed wait for a value whose signal
    /// is submitted after the wait began never returned (a CI run hung in it).
    pub(crate) fn wait_forever(&self, value: u64) -> Result<()> {
        self.wait_issued(value);
        while !self.wait(value, Duration::MAX)? {}
        Ok(())
    }

    /// Keeps what the submission of `value` waits on, before its signal is issued.
    fn log_waits(&self, value: u64, waits: &Marks) {
        lock(&self.waited).record(value, waits.iter().map(|(timeline, waited)| (timeline.key, *waited)));
    }

    /// Whether this timeline reaching `value`, whose signal was issued, shows that `other` reached
    /// `reached` (see [`WaitLog`]).
    fn shows_reached(&self, value: u64, other: &Timeline, reached: u64) -> bool {
        lock(&self.waited).shows(value, other.key, reached)
    }

    /// Whether the signal of `value` was issued.
    fn is_issued(&self, value: u64) -> bool {
        self.issued_value.load(Ordering::Acquire) >= value
    }

    pub(crate) fn set_issued(&self, value: u64) {
        let mut issued = lock(&self.issued);
        issued.value = issued.value.max(value);
        self.issued_value.store(issued.value, Ordering::Release);
        if issued.sleepers > 0 {
            self.issued_changed.notify_all();
        }
    }

    /// Blocks until the signal of `value` was issued: watches for it a while first (see
    /// `host_waits`), since a submit thread waiting on another stream's value would otherwise pay
    /// a wake-up on every cross-queue hop.
    fn wait_issued(&self, value: u64) {
        let issued = || self.is_issued(value);
        let mut contention = host_waits::Contention::default();
        let seen = issued() || host_waits::watch(self.watch, &mut contention, issued);
        if contention.cut_short_count() > 0 {
            self.counts.watch_cut_short();
        }
        if seen {
            return;
        }
        let mut state = lock(&self.issued);
        if state.value < value {
            self.counts.signal_wait_slept();
        }
        while state.value < value {
            state.sleepers += 1;
            state = wait(&self.issued_changed, state);
            state.sleepers -= 1;
        }
    }

    /// Signals `value` from the host.
    fn signal(&self, value: u64) -> Result<()> {
        let info = vk::SemaphoreSignalInfo::default().semaphore(self.semaphore).value(value);
        // SAFETY: the semaphore is live and `value` is above its current value (values only grow
        // on this stream, and its previous value was reached before this is called).
        unsafe { self.gpu.device.signal_semaphore(&info) }.map_err(|e| from_vk("vkSignalSemaphore", e))
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        // SAFETY: the stream drained before its timeline drops, and events holding it are gone.
        unsafe { self.gpu.device.destroy_semaphore(self.semaphore, None) };
    }
}

/// A point of a stream: its timeline reaching `value`.
type Mark = (Arc<Timeline>, u64);

/// A submission's waits on other streams, inline: a steady-state submission allocates nothing.
type Marks = SmallVec<[Mark; 4]>;

/// Semaphores and values of one `vkQueueSubmit`, inline (its own timeline, an embedder's point and
/// the waits on other streams fit).
pub(crate) type SubmitList<T> = SmallVec<[T; 8]>;

/// One submission for the submit thread.
pub(crate) struct Item {
    work: Option<Arc<Work>>,
    pub(crate) value: u64,
    waits: Marks,
}

#[cfg(test)]
impl Item {
    /// An item with no work, for tests of the submit path's bookkeeping.
    pub(crate) fn for_test(value: u64) -> Item {
        Item { work: None, value, waits: Marks::new() }
    }
}

/// The submit thread's queue of items.
#[derive(Default)]
struct Items {
    queue: VecDeque<Item>,
    /// Set when the stream drops: the thread returns once the queue is empty.
    closing: bool,
    /// Set while the submit thread sleeps on `items_changed`: only then does a push notify it.
    sleeping: bool,
}

/// A stream's state shared with its submit thread.
pub(crate) struct StreamShared {
    pub(crate) gpu: Arc<Gpu>,
    queue: usize,
    /// The index of the Vulkan queue it submits to (see [`Gpu::queue_index`]).
    vk_queue: u32,
    pub(crate) timeline: Arc<Timeline>,
    items: Mutex<Items>,
    items_changed: Condvar,
    /// Items pushed so far: the idle submit thread watches it without the lock (see `host_waits`).
    pushed: AtomicU64,
    tuning: WaitTuning,
    /// The submissions built and not yet handed to `vkQueueSubmit`, held by the thread issuing on
    /// the stream: its submit thread while it takes items, or a submitter issuing its own (see
    /// [`VulkanStream::issue_here`]). The command pool is used only under it.
    issuer: Mutex<Batch>,
    /// What the device's host threads did (a diagnostic).
    counts: Arc<ThreadCounters>,
    /// Set once the submit thread has issued the stream's first items: until then every item goes
    /// to it (see [`VulkanStream::issue_here`]).
    thread_submitted: AtomicBool,
    pool: Arc<CommandPool>,
    in_flight: Arc<Mutex<HashMap<u64, InFlight>>>,
    checker: Arc<VulkanExecutable>,
    externals: Arc<ExternalWaits>,
}

impl StreamShared {
    /// Where what its threads do is counted (a diagnostic).
    pub(crate) fn counts(&self) -> &ThreadCounters {
        &self.counts
    }

    /// The Vulkan queue the stream submits to, locked (it is externally synchronized).
    pub(crate) fn lock_queue(&self) -> std::sync::MutexGuard<'_, vk::Queue> {
        lock(self.gpu.queue(self.vk_queue))
    }

    /// Takes work `id`'s entry out of the submissions in flight (its command buffer goes back as
    /// it drops).
    pub(crate) fn forget_in_flight(&self, id: u64) -> Option<InFlight> {
        lock(&self.in_flight).remove(&id)
    }
}

/// What a submission holds until it completes: its command buffer (or the recording it replays),
/// its buffers and executables, its timestamps when profiled.
pub(crate) struct InFlight {
    cmd: Option<(Arc<CommandPool>, vk::CommandBuffer)>,
    _lease: Option<Lease>,
    _keep: Keep,
    timing: Option<SubmissionTiming>,
    /// The count checks' scratch and the command index of each indirect dispatch.
    checks: Option<(Arc<Block>, Vec<usize>)>,
    /// When host-side work ran, for a profiled submission (recorded when it retires, so that
    /// records keep the stream's order).
    host_time: Option<(Instant, Instant)>,
    /// The staging buffer a read of an embedder's buffer copied into, handed to the read when it
    /// retires.
    read_back: Option<Arc<Block>>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some((pool, cmd)) = self.cmd.take() {
            pool.release(cmd);
        }
    }
}

/// A stream: a timeline, the values handed out, waits for the next submission, a submit thread.
pub struct VulkanStream {
    shared: Arc<StreamShared>,
    /// The last value handed out (under the issue lock, so plain state behind a lock).
    state: Mutex<StreamState>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct StreamState {
    enqueued: u64,
    waits: Marks,
}

impl VulkanStream {
    fn push(&self, work: Option<Arc<Work>>) -> u64 {
        let mut state = lock(&self.state);
        state.enqueued += 1;
        let item = Item { work, value: state.enqueued, waits: std::mem::take(&mut state.waits) };
        let value = item.value;
        // Under the stream's state lock: no later value is handed out meanwhile.
        let Err(item) = self.issue_here(item) else { return value };
        let mut items = lock(&self.shared.items);
        items.queue.push_back(item);
        self.shared.pushed.fetch_add(1, Ordering::Release);
        if items.sleeping {
            self.shared.items_changed.notify_one();
        }
        value
    }

    /// Issues `item` on the calling thread when the submit thread would only add a hand-off: the
    /// host has seen the stream reach the previous value (so nothing is queued or gathered before
    /// it, and a chain of submissions, which the submit thread gathers into one call, goes there
    /// instead), nobody else is issuing on the stream, the item waits on no other stream, and it is
    /// recorded work or an empty submission (host work waits for the device first). `Err(item)`:
    /// the submit thread takes it.
    ///
    /// Items with waits on other streams stay with the submit thread: issued here too, they left
    /// NVIDIA processes far more often with every fan-out/fan-in round about twice as long for
    /// their whole life. The stream's first submission stays there too. Both rules predate
    /// finding that slow state's cause (a submit thread on the CPU taking the GPU's interrupts, see
    /// `interrupt_cpus`) and were not measured again since (see
    /// `docs/decisions.md#vulkan-issue-on-the-caller`).
    fn issue_here(&self, item: Item) -> std::result::Result<(), Item> {
        let stream = &self.shared;
        if !stream.tuning.issue_on_caller
            || !stream.thread_submitted.load(Ordering::Acquire)
            || !item.waits.is_empty()
            || !stream.timeline.seen_reached(item.value - 1)
            || !is_recorded_or_empty(&item)
        {
            return Err(item);
        }
        let Some(mut batch) = try_lock(&stream.issuer) else { return Err(item) };
        // Items queued (or gathered) before it go first: the submit thread takes it after them.
        if !batch.is_empty() || !lock(&stream.items).queue.is_empty() {
            return Err(item);
        }
        stream.counts.issued_by_caller();
        match issue(stream, &item, &mut batch) {
            Ok(()) => attach(stream, &mut batch, item),
            Err(e) => {
                // Failed before anything was gathered: an empty submission still reaches its
                // value in the stream's order, on the device, without blocking this thread.
                if let Some(work) = &item.work {
                    work.fail(e);
                }
                match submit(stream, &item, None, Submitted::default(), &mut batch) {
                    Ok(()) => attach(stream, &mut batch, item),
                    Err(e) => fail_item(stream, &item, e),
                }
            }
        }
        batch.flush(stream);
        Ok(())
    }
}

/// Whether `item` is an empty submission or recorded work (host work, and embedders' points,
/// wait on the host or register first).
fn is_recorded_or_empty(item: &Item) -> bool {
    match item.work.as_ref().map(|work| &work.op) {
        None | Some(QueueOp::Transfer(_)) => true,
        Some(QueueOp::Execute { collectives, .. }) => collectives.is_empty(),
        Some(_) => false,
    }
}

impl Drop for VulkanStream {
    fn drop(&mut self) {
        {
            let mut items = lock(&self.shared.items);
            items.closing = true;
            self.shared.items_changed.notify_one();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // Command buffers and the timeline are destroyed once nothing runs on them.
        let enqueued = lock(&self.state).enqueued;
        if let Err(e) = self.shared.timeline.wait_forever(enqueued) {
            tracing::error!(queue = self.shared.queue, %e, "vulkan: draining a stream at teardown");
        }
        // The timeline reached its last value, but the driver may still be finishing the
        // submission that signalled it: lavapipe's queue thread touched the semaphore and the
        // command buffers after a waiter saw the value, and destroying them then crashed it. An
        // idle queue has finished with both. Every submission on the queue completes (each was
        // submitted only behind signals already issued), so this wait is bounded.
        let queue = lock(self.shared.gpu.queue(self.shared.vk_queue));
        // SAFETY: the queue is locked (it is externally synchronized).
        if let Err(e) = unsafe { self.shared.gpu.device.queue_wait_idle(*queue) } {
            tracing::error!(queue = self.shared.queue, %e, "vulkan: vkQueueWaitIdle at a stream's teardown");
        }
    }
}

/// An event: the stream point of its latest recording (none: never recorded, complete).
#[derive(Default)]
pub struct VulkanEvent {
    mark: Mutex<Option<Mark>>,
}

impl VulkanEvent {
    fn mark(&self) -> Option<Mark> {
        lock(&self.mark).clone()
    }
}

/// Streams on one Vulkan device.
pub struct VulkanStreams {
    gpu: Arc<Gpu>,
    /// Where the device's queues start among the GPU's Vulkan queues.
    first_queue: usize,
    /// The indirect count checker ([`crate::commands::CHECK_COUNT_WGSL`]).
    checker: Arc<VulkanExecutable>,
    in_flight: Arc<Mutex<HashMap<u64, InFlight>>>,
    /// The clock anchor of the profiling session (measured at its start).
    anchor: Mutex<Option<ClockAnchor>>,
    /// The waits on embedders' timeline values its queues submitted (released at teardown).
    externals: Arc<ExternalWaits>,
    /// How long host threads watch before they sleep.
    tuning: WaitTuning,
    /// Items one `vkQueueSubmit` takes at most.
    batch_limit: usize,
    /// What the host threads of its streams did (a diagnostic).
    counts: Arc<ThreadCounters>,
}

impl VulkanStreams {
    /// The model of `gpu`; `checker` checks indirect dispatches' counts.
    pub(crate) fn new(
        gpu: &Arc<Gpu>,
        first_queue: usize,
        checker: Arc<VulkanExecutable>,
        tuning: WaitTuning,
        batch_limit: usize,
    ) -> Self {
        VulkanStreams {
            first_queue,
            tuning,
            batch_limit,
            gpu: gpu.clone(),
            checker,
            in_flight: Arc::default(),
            anchor: Mutex::new(None),
            externals: ExternalWaits::new(gpu),
            counts: Arc::default(),
        }
    }

    /// What the host threads of its streams did (a diagnostic).
    pub(crate) fn thread_counts(&self) -> HostThreadCounts {
        self.counts.snapshot()
    }

    /// The index in its family of the Vulkan queue HAL queue `queue` submits to.
    pub(crate) fn queue_index(&self, queue: usize) -> u32 {
        self.gpu.queue_index(self.first_queue, queue)
    }

    /// The waits on embedders' timeline values (for the device's teardown).
    pub(crate) fn externals(&self) -> &ExternalWaits {
        &self.externals
    }

    /// `OutOfRange` for the first indirect dispatch whose count was past the device's limits.
    fn check_counts(&self, scratch: &Block, dispatches: &[usize]) -> Result<()> {
        let limits = self.gpu.physical.limits.max_compute_work_group_count;
        let ptr = scratch.ptr()?;
        for (k, index) in dispatches.iter().enumerate() {
            let mut words = [0u32; 8];
            // SAFETY: the scratch holds 32 bytes per indirect dispatch, written by the completed
            // submission (made visible to the host by its last barrier).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    ptr.as_ptr().add(k * CHECK_SLOT_BYTES as usize),
                    words.as_mut_ptr().cast::<u8>(),
                    CHECK_SLOT_BYTES as usize,
                )
            };
            if words[3] != 0 {
                return Err(Error::out_of_range(format!(
                    "vulkan: indirect dispatch at command {index}: workgroup count {:?} exceeds the device's limit \
                     {limits:?}; it ran no workgroup",
                    [words[4], words[5], words[6]]
                )));
            }
        }
        Ok(())
    }

    /// Submissions not retired yet (for leak checks).
    pub fn in_flight(&self) -> usize {
        lock(&self.in_flight).len()
    }

    /// Lets go of what `work` held (its command buffer is handed back as the entry drops).
    fn finish(&self, work: &Work) -> Option<InFlight> {
        lock(&self.in_flight).remove(&work.id)
    }

    /// Adds a completed submission's timestamps to its profile.
    fn record_times(&self, work: &Work, timing: &SubmissionTiming) -> Result<()> {
        let (Some(sink), Some(anchor)) = (work.profile(), *lock(&self.anchor)) else {
            return Ok(());
        };
        let ticks = timing.pool.results(timing.query_count())?;
        let at = |query: usize| anchor.host_time(ticks[query]);
        if sink.options().records_queue_operations() {
            sink.record_queue_operation(work, at(0), at(1));
        }
        let commands = match &work.op {
            QueueOp::Execute { command_buffer, .. } => command_buffer.commands(),
            QueueOp::Transfer(command) => Arc::from(vec![(**command).clone()]),
            _ => return Ok(()),
        };
        for (k, &index) in timing.dispatches.iter().enumerate() {
            if let Some(command) = commands.get(index) {
                sink.record_dispatch(work, index, command, None, at(2 + 2 * k), at(3 + 2 * k));
            }
        }
        Ok(())
    }
}

impl StreamModel for VulkanStreams {
    type Stream = VulkanStream;
    type Event = VulkanEvent;

    /// HAL devices on one physical device share its `VkDevice` (see `gpu::shared`), so their
    /// streams wait on each other's timelines on the device; a timeline of another `VkDevice` is
    /// waited on by the submit thread, on the host.
    const SHARES_EVENTS_ACROSS_DEVICES: bool = true;

    fn create_stream(&self, queue: usize) -> Result<VulkanStream> {
        let timeline = Arc::new(Timeline::new(&self.gpu, self.tuning.submit_watch, self.counts.clone())?);
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(self.gpu.physical.queue_family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER | vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: a valid create info; destroyed when the stream drops.
        let pool = unsafe { self.gpu.device.create_command_pool(&info, None) }
            .map_err(|e| from_vk("vkCreateCommandPool", e))?;
        let shared = Arc::new(StreamShared {
            gpu: self.gpu.clone(),
            queue,
            vk_queue: self.queue_index(queue),
            timeline,
            items: Mutex::new(Items::default()),
            items_changed: Condvar::new(),
            pushed: AtomicU64::new(0),
            tuning: self.tuning,
            issuer: Mutex::new(Batch::new(self.batch_limit)),
            counts: self.counts.clone(),
            thread_submitted: AtomicBool::new(false),
            pool: Arc::new(CommandPool::new(self.gpu.clone(), pool)),
            in_flight: self.in_flight.clone(),
            checker: self.checker.clone(),
            externals: self.externals.clone(),
        });
        let runner = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("hal-vulkan-q{queue}"))
            .spawn(move || submit_thread(&runner))
            .map_err(|e| Error::resource_exhausted(format!("vulkan: starting queue {queue}'s submit thread: {e}")))?;
        Ok(VulkanStream { shared, state: Mutex::new(StreamState::default()), thread: Some(thread) })
    }

    fn create_event(&self) -> Result<VulkanEvent> {
        Ok(VulkanEvent::default())
    }

    fn record_event(&self, event: &VulkanEvent, stream: &VulkanStream) -> Result<()> {
        // Waits not yet attached to a submission get one of their own, so the mark covers them.
        let pending = !lock(&stream.state).waits.is_empty();
        if pending {
            stream.push(None);
        }
        let value = lock(&stream.state).enqueued;
        *lock(&event.mark) = Some((stream.shared.timeline.clone(), value));
        Ok(())
    }

    fn wait_event(&self, stream: &VulkanStream, event: &VulkanEvent) -> Result<()> {
        let Some((timeline, value)) = event.mark() else { return Ok(()) };
        if Arc::ptr_eq(&timeline, &stream.shared.timeline) {
            return Ok(()); // the stream's own point: reached in order anyway
        }
        lock(&stream.state).waits.push((timeline, value));
        Ok(())
    }

    fn query_event(&self, event: &VulkanEvent) -> Result<bool> {
        match event.mark() {
            None => Ok(true),
            Some((timeline, value)) => Ok(timeline.value()? >= value),
        }
    }

    fn synchronize_event(&self, event: &VulkanEvent) -> Result<()> {
        match event.mark() {
            None => Ok(()),
            Some((timeline, value)) => timeline.wait_forever(value),
        }
    }

    /// A host waiter polls the timeline's counter for a while (`host_waits`), then parks on its
    /// semaphore, which the completion thread's retirement wakes. It never blocks in
    /// `vkWaitSemaphores` itself: that wait would have to be timed (to call `stop`), and NVIDIA's
    /// driver wakes timed waits late (see `Timeline::wait_forever`).
    fn host_wait(&self, event: &VulkanEvent, deadline: Option<Instant>, stop: &dyn Fn() -> bool) -> Option<Result<()>> {
        let Some((timeline, value)) = event.mark() else { return Some(Ok(())) };
        host_waits::poll(self.tuning.host_poll, deadline, stop, || match timeline.value() {
            Ok(reached) => (reached >= value).then_some(Ok(())),
            Err(e) => Some(Err(e)),
        })
    }

    fn enqueue(&self, stream: &VulkanStream, work: &Arc<Work>) -> Result<()> {
        stream.push(Some(work.clone()));
        Ok(())
    }

    /// Work with nothing to run retires at submission where the scheduler can (its queue idle, its
    /// waits reached on the host): the submit thread would only hand the device an empty submission
    /// that signals the stream's timeline, and `complete` has nothing to do for it. So do an alloca
    /// and a dealloca, which are host work the submit thread would run once the stream reached
    /// them: on an idle queue it already has, and the call is made here
    /// ([`run_at_submission`](StreamModel::run_at_submission)).
    fn retires_at_submission(&self, op: &QueueOp) -> bool {
        op.runs_nothing_on_a_stream() || matches!(op, QueueOp::Alloca(_) | QueueOp::Dealloca(_))
    }

    fn run_at_submission(&self, _stream: &VulkanStream, op: &QueueOp) -> Result<()> {
        match op {
            QueueOp::Alloca(_) | QueueOp::Dealloca(_) => run_on_host(op),
            _ => Ok(()),
        }
    }

    fn complete(&self, work: &Work) -> Result<()> {
        external::complete(&work.op)?;
        match self.finish(work) {
            Some(done) => {
                if let Some((scratch, dispatches)) = &done.checks {
                    self.check_counts(scratch, dispatches)?;
                }
                if let (Some(staging), QueueOp::Read { length, target, .. }) = (&done.read_back, &work.op) {
                    let mut bytes = vec![0u8; *length as usize];
                    let ptr = staging.ptr()?;
                    // SAFETY: the staging block holds at least `length` bytes, written by the
                    // completed submission (made visible to the host by its last barrier).
                    unsafe { std::ptr::copy_nonoverlapping(ptr.as_ptr(), bytes.as_mut_ptr(), bytes.len()) };
                    target.stage(bytes);
                }
                if let (Some((start, end)), Some(sink)) = (done.host_time, work.profile()) {
                    sink.record_queue_operation(work, start, end);
                }
                match &done.timing {
                    Some(timing) => self.record_times(work, timing),
                    None => Ok(()),
                }
            }
            None => Ok(()),
        }
    }

    fn discard(&self, work: &Work) {
        external::discard(&work.op);
        drop(self.finish(work));
    }

    fn clock_method(&self) -> String {
        "Vulkan timestamp queries (vkCmdWriteTimestamp), put on the host clock by an anchor timestamp whose \
         host time is bracketed by its submit call and fence wait (measured when profiling begins)"
            .to_owned()
    }

    fn begin_profiling(&self, sink: &Arc<hal::driver::ProfileSink>) -> Result<()> {
        if self.gpu.physical.timestamp_bits == 0 {
            return Err(Error::unimplemented("vulkan: the compute queue has no timestamps (timestampValidBits 0)"));
        }
        let anchor = ClockAnchor::measure(&self.gpu)?;
        sink.widen_uncertainty(anchor.uncertainty);
        *lock(&self.anchor) = Some(anchor);
        Ok(())
    }

    fn synchronize_stream(&self, stream: &VulkanStream) -> Result<()> {
        let enqueued = lock(&stream.state).enqueued;
        stream.shared.timeline.wait_forever(enqueued)
    }
}

/// The submit thread: waits for items without the issuer lock (a submitter may issue its own
/// meanwhile), then takes them in order under it, gathering those already queued into one
/// `vkQueueSubmit` (see `submit_batch`), and hands the batch over before letting go of the lock.
fn submit_thread(stream: &StreamShared) {
    if stream.tuning.avoid_interrupt_cpus {
        let left_out = crate::interrupt_cpus::keep_this_thread_off();
        if !left_out.is_empty() {
            stream.counts.thread_kept_off_interrupts();
            tracing::debug!(queue = stream.queue, ?left_out, "vulkan: submit thread kept off the GPU's interrupt cpus");
        }
    }
    let mut contention = host_waits::Contention::default();
    let mut taken = 0u64;
    loop {
        {
            let mut items = lock(&stream.items);
            let mut watched = false;
            while items.queue.is_empty() {
                if items.closing {
                    return;
                }
                if !watched {
                    // Watch for the next item before sleeping: a submitter then pays no wake-up.
                    watched = true;
                    if contention.paused() {
                        stream.counts.watch_paused();
                    }
                    let seen = stream.pushed.load(Ordering::Acquire);
                    drop(items);
                    let cut_before = contention.cut_short_count();
                    host_waits::watch(stream.tuning.submit_watch, &mut contention, || {
                        stream.pushed.load(Ordering::Acquire) != seen
                    });
                    if contention.cut_short_count() > cut_before {
                        stream.counts.watch_cut_short();
                    }
                    items = lock(&stream.items);
                    continue;
                }
                stream.counts.submit_thread_slept();
                items.sleeping = true;
                items = wait(&stream.items_changed, items);
                items.sleeping = false;
            }
        }
        let mut batch = lock(&stream.issuer);
        loop {
            let Some(item) = lock(&stream.items).queue.pop_front() else { break };
            taken += 1;
            take(stream, item, &mut batch);
            if batch.is_full() || stream.pushed.load(Ordering::Acquire) == taken {
                batch.flush(stream);
            }
        }
        // Nothing more to gather.
        batch.flush(stream);
        stream.thread_submitted.store(true, Ordering::Release);
    }
}

/// Issues `item` on the submit thread into `batch`: waits for its waits' signals to be issued
/// first, handing over what was gathered if it must.
fn take(stream: &StreamShared, item: Item, batch: &mut Batch) {
    if !item.waits.is_empty() {
        stream.timeline.log_waits(item.value, &item.waits);
    }
    if item.waits.iter().any(|(timeline, value)| !timeline.is_issued(*value)) {
        // The stream that issues it may be waiting for one of the values gathered here.
        batch.flush(stream);
    }
    for (timeline, value) in &item.waits {
        timeline.wait_issued(*value);
    }
    match issue(stream, &item, batch) {
        Ok(()) => attach(stream, batch, item),
        Err(e) => {
            batch.flush(stream);
            fail_item(stream, &item, e);
        }
    }
}

/// Hands an issued item to the entry its issue gathered into `batch`; one its issue finished on
/// the host (its value signalled there) is issued already.
fn attach(stream: &StreamShared, batch: &mut Batch, item: Item) {
    if let Err(item) = batch.attach(item) {
        stream.timeline.set_issued(item.value);
    }
}

/// Fails an item that could not be submitted: its value is still reached, after everything before
/// it, or waiters hang; so is an embedder's value the work was to signal.
pub(crate) fn fail_item(stream: &StreamShared, item: &Item, e: Error) {
    if let Some(work) = &item.work {
        work.fail(e);
    }
    let reached = wait_all(stream, item).and_then(|()| {
        if let Some(Ok(Some(op))) = item.work.as_ref().map(|work| ExternalOp::of(&work.op)) {
            op.settle_on_host();
        }
        stream.timeline.signal(item.value)
    });
    if let Err(e) = reached {
        tracing::error!(queue = stream.queue, %e, "vulkan: a failed submission could not signal its value");
    }
    stream.timeline.set_issued(item.value);
}

/// Blocks until the item's waits and its stream's previous value are reached.
fn wait_all(stream: &StreamShared, item: &Item) -> Result<()> {
    stream.timeline.wait_forever(item.value - 1)?;
    for (timeline, value) in &item.waits {
        timeline.wait_forever(*value)?;
    }
    Ok(())
}

/// What running an item takes.
enum Plan<'a> {
    /// Nothing on the device: a submission with only waits and the signal.
    Empty,
    /// Recorded into a command buffer.
    Device(Body<'a>),
    /// A submission with no commands that also waits on, or also signals, an embedder's value.
    External(&'a Arc<Point>),
    /// Host work after the waits, then a host signal.
    Host(&'a QueueOp),
}

/// What a command buffer records.
enum Body<'a> {
    /// An execute's commands.
    Commands(&'a [hal::driver::Command]),
    /// One transfer.
    One(&'a hal::driver::Command),
    /// A read of `length` bytes at `offset` of an embedder's buffer, copied into `staging`.
    ReadBack { source: &'a hal::Buffer, offset: u64, length: u64, staging: Arc<Block> },
}

impl Body<'_> {
    /// The HAL commands it records (none for a read-back).
    fn listed(&self) -> &[hal::driver::Command] {
        match self {
            Body::Commands(commands) => commands,
            Body::One(command) => std::slice::from_ref(*command),
            Body::ReadBack { .. } => &[],
        }
    }
}

/// Whether `buffer` is memory not mapped here (device memory the host cannot see, a range of an
/// embedder's `VkBuffer`, memory shared through a file descriptor), reached only through device
/// copies.
fn is_external(buffer: &hal::Buffer) -> bool {
    resolve(buffer).is_ok_and(|(block, _)| block.is_unmapped())
}

fn issue(stream: &StreamShared, item: &Item, batch: &mut Batch) -> Result<()> {
    let Some(work) = &item.work else { return submit(stream, item, None, Submitted::default(), batch) };
    let external_op = ExternalOp::of(&work.op)?;
    if let Some(op) = external_op {
        op.check_signal()?;
    }
    let external = external_op.map(ExternalOp::point);
    // Work that will not run still signals an embedder's value (on the device, in order).
    let failed = Submitted { external: external.filter(|point| !point.is_wait()).cloned(), ..Submitted::default() };
    if let Some(fault) = work.upstream_fault() {
        work.fault.set(fault);
        return submit(stream, item, None, failed, batch);
    }
    if work.cancel_requested() {
        work.fail(Error::cancelled("vulkan: cancelled before it started"));
        return submit(stream, item, None, failed, batch);
    }
    let commands;
    let update;
    let mut prepared = None;
    let plan = match &work.op {
        QueueOp::Execute { command_buffer, collectives } => {
            if !collectives.is_empty() {
                let e = Error::unimplemented("vulkan: collectives are not implemented");
                for call in collectives {
                    call.abandon(e.clone());
                }
                return Err(e);
            }
            commands = command_buffer.commands();
            prepared = command_buffer.prepared();
            Plan::Device(Body::Commands(&commands))
        }
        QueueOp::Transfer(command) => Plan::Device(Body::One(command)),
        QueueOp::Barrier => Plan::Empty,
        QueueOp::Collective(call) => {
            let e = Error::unimplemented("vulkan: collectives are not implemented");
            call.abandon(e.clone());
            return Err(e);
        }
        // An embedder's buffer has no mapping here: the write is an update through staging.
        QueueOp::Write { data, target, offset } if is_external(target) => {
            target.check_range(*offset, data.len() as u64)?;
            update = hal::driver::Command::Update { target: target.clone(), offset: *offset, data: data.clone() };
            Plan::Device(Body::One(&update))
        }
        QueueOp::Read { source, offset, length, .. } if is_external(source) => {
            source.check_range(*offset, *length)?;
            let staging =
                Arc::new(Block::new(&stream.gpu, *length, None, "hal read-back", Placement::Readback, false)?);
            Plan::Device(Body::ReadBack { source, offset: *offset, length: *length, staging })
        }
        QueueOp::Native(_) => match external {
            Some(point) => Plan::External(point),
            None => return Err(Error::internal("vulkan: a native operation without its payload")),
        },
        op => Plan::Host(op),
    };
    match plan {
        Plan::Empty => {
            keep_host_time(stream, work, Instant::now());
            submit(stream, item, None, Submitted::default(), batch)
        }
        Plan::External(point) => {
            if point.is_wait() && !stream.externals.register(point) {
                // The device is being dropped: the wait is not submitted.
                work.fail(Error::cancelled(format!(
                    "vulkan: device destroyed before its queue submitted the {}",
                    work.op.describe()
                )));
                return submit(stream, item, None, Submitted::default(), batch);
            }
            keep_host_time(stream, work, Instant::now());
            submit(stream, item, None, Submitted { external: Some(point.clone()), ..Submitted::default() }, batch)
        }
        Plan::Device(body) => {
            let timing = timing_for(stream, work, body.listed())?;
            let prepared = prepared.as_ref().and_then(|p| p.as_any().downcast_ref::<VulkanPreparedCommands>());
            // A profiled execute times its own recording.
            if let (Some(prepared), None, Body::Commands(commands)) = (prepared, &timing, &body)
                && let Some(replays) = &prepared.replays
            {
                let mut keep = Keep::default();
                let lease = lease_recording(stream, replays, commands, prepared.bound, item.value, &mut keep)?;
                let recording = lease.recording();
                let (cmd, checks, wait_stages) = (recording.cmd, recording.checks.clone(), recording.wait_stages);
                let submitted = Submitted { keep, checks, wait_stages, lease: Some(lease), ..Submitted::default() };
                return submit(stream, item, Some(cmd), submitted, batch);
            }
            let mut keep = Keep::default();
            let checks = count_checks_for(stream, body.listed())?;
            let read_back = match &body {
                Body::ReadBack { staging, .. } => Some(staging.clone()),
                _ => None,
            };
            let cmd = stream.pool.acquire()?;
            let recorded = begin(stream, cmd, vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT).and_then(|()| {
                let recorder = Recorder::new(&stream.gpu, cmd, &mut keep);
                record(stream, cmd, recorder, body, timing.as_ref(), checks.as_ref())
            });
            let wait_stages = match recorded {
                Ok(stages) => stages,
                Err(e) => {
                    stream.pool.release_failed(cmd);
                    return Err(e);
                }
            };
            submit(
                stream,
                item,
                Some(cmd),
                Submitted { keep, timing, checks, read_back, wait_stages, ..Submitted::default() },
                batch,
            )
        }
        Plan::Host(op) => {
            batch.flush(stream);
            wait_all(stream, item)?;
            let start = Instant::now();
            match run_on_host(op) {
                Ok(()) => keep_host_time(stream, work, start),
                Err(e) => work.fail(e),
            }
            stream.timeline.signal(item.value)
        }
    }
}

/// The recording the execute of `commands` (for `value`) replays: for a binding-table command
/// buffer, one whose sets hold its table already, pending or not; else one whose last submission
/// completed, its sets given the table's descriptors that differ; else one recorded now (kept
/// below the bound). The descriptors' memory goes into `keep`.
fn lease_recording(
    stream: &StreamShared,
    replays: &Replays,
    commands: &[hal::driver::Command],
    bound: bool,
    value: u64,
    keep: &mut Keep,
) -> Result<Lease> {
    // The execute's descriptors, resolved once for every recording it looks at (a fixed-binding
    // command buffer has none to resolve, and skips this).
    let wanted = if bound { replays.descriptors(&stream.pool, commands, keep)? } else { None };
    if let Some(wanted) = &wanted
        && let Some(lease) = replays.lease_holding(&stream.pool, wanted, keep, value)
    {
        return Ok(lease);
    }
    let lease = match replays.lease(&stream.pool, || stream.timeline.value(), value)? {
        Some(lease) => lease,
        None => replays.add(record_for_replay(stream, commands, bound)?, value),
    };
    if let Some(sets) = &lease.recording().sets {
        let wanted = match wanted {
            Some(wanted) => wanted,
            None => sets.descriptors(commands, keep)?,
        };
        // Not pending: the lease saw the recording's last submission complete (or it is new).
        sets.write(&wanted, keep);
    }
    Ok(lease)
}

/// Keeps a host-side queue operation's time (from `start` to now) for its retirement, when its
/// submission records queue operations.
fn keep_host_time(stream: &StreamShared, work: &Work, start: Instant) {
    if work.profile().is_some_and(|sink| sink.options().records_queue_operations()) {
        let entry = InFlight {
            cmd: None,
            _lease: None,
            _keep: Keep::default(),
            timing: None,
            checks: None,
            host_time: Some((start, Instant::now())),
            read_back: None,
        };
        lock(&stream.in_flight).insert(work.id, entry);
    }
}

/// The timestamps a profiled submission needs: none unless it records something.
fn timing_for(stream: &StreamShared, work: &Work, listed: &[hal::driver::Command]) -> Result<Option<SubmissionTiming>> {
    let Some(options) = work.profile().map(|sink| sink.options()) else { return Ok(None) };
    if !options.records_anything() {
        return Ok(None);
    }
    let dispatches = listed
        .iter()
        .enumerate()
        .filter(|(index, command)| {
            matches!(command, hal::driver::Command::Dispatch { .. } | hal::driver::Command::DispatchIndirect { .. })
                && options.records_command(*index)
        })
        .map(|(index, _)| index)
        .collect::<Vec<_>>();
    let pool = QueryPool::new(&stream.gpu, 2 + 2 * dispatches.len() as u32)?;
    Ok(Some(SubmissionTiming { pool, dispatches }))
}

/// The scratch for the count checks of the indirect dispatches among the commands, and their
/// command indices; none without indirect dispatches.
fn count_checks_for(
    stream: &StreamShared,
    listed: &[hal::driver::Command],
) -> Result<Option<(Arc<Block>, Vec<usize>)>> {
    let indirect: Vec<usize> = listed
        .iter()
        .enumerate()
        .filter(|(_, command)| matches!(command, hal::driver::Command::DispatchIndirect { .. }))
        .map(|(index, _)| index)
        .collect();
    if indirect.is_empty() {
        return Ok(None);
    }
    let bytes = CHECK_SLOT_BYTES * indirect.len() as u64;
    let scratch = Block::new(&stream.gpu, bytes, None, "hal indirect counts", Placement::Readback, false)?;
    Ok(Some((Arc::new(scratch), indirect)))
}

/// Records `commands` into a command buffer of the stream's pool to submit many times; `bound`:
/// its dispatches bind update-after-bind sets, written at each execute (see `commands/bound.rs`).
fn record_for_replay(stream: &StreamShared, commands: &[hal::driver::Command], bound: bool) -> Result<Recording> {
    let mut keep = Keep::default();
    let checks = count_checks_for(stream, commands)?;
    let mut sets = bound.then(|| BoundSets::new(&stream.gpu, commands)).transpose()?;
    let cmd = stream.pool.acquire()?;
    let usage = if Recording::simultaneous_use(checks.as_ref()) {
        vk::CommandBufferUsageFlags::SIMULTANEOUS_USE
    } else {
        vk::CommandBufferUsageFlags::empty()
    };
    let recorded = begin(stream, cmd, usage).and_then(|()| {
        let mut recorder = Recorder::new(&stream.gpu, cmd, &mut keep);
        if let Some(sets) = sets.as_mut() {
            recorder = recorder.with_bound_sets(sets);
        }
        record(stream, cmd, recorder, Body::Commands(commands), None, checks.as_ref())
    });
    match recorded {
        Ok(wait_stages) => Ok(Recording::new(stream.pool.clone(), cmd, keep, checks, sets, wait_stages)),
        Err(e) => {
            stream.pool.release_failed(cmd);
            Err(e)
        }
    }
}

/// Begins recording `cmd`, an idle buffer of the stream's pool.
fn begin(stream: &StreamShared, cmd: vk::CommandBuffer, flags: vk::CommandBufferUsageFlags) -> Result<()> {
    let begin = vk::CommandBufferBeginInfo::default().flags(flags);
    // SAFETY: `cmd` is an idle buffer of the stream's pool, which only this thread uses; beginning
    // it resets it (the pool allows that).
    unsafe { stream.gpu.device.begin_command_buffer(cmd, &begin) }.map_err(|e| from_vk("vkBeginCommandBuffer", e))
}

/// Records `body` with `recorder`, whose command buffer `cmd` was begun: the stages its
/// submissions wait at (see `Recorder::wait_stages`).
fn record<'a>(
    stream: &'a StreamShared,
    cmd: vk::CommandBuffer,
    mut recorder: Recorder<'a>,
    body: Body<'_>,
    timing: Option<&'a SubmissionTiming>,
    checks: Option<&(Arc<Block>, Vec<usize>)>,
) -> Result<vk::PipelineStageFlags> {
    let device = &stream.gpu.device;
    if let Some((scratch, _)) = checks {
        let pipeline = stream.checker.pipelines.first().ok_or_else(|| Error::internal("vulkan: no count checker"))?;
        recorder = recorder.with_count_checks(CountChecks { pipeline, scratch: scratch.clone(), next: 0 });
    }
    if let Some(timing) = timing {
        // SAFETY: `cmd` is recording; the pool holds `query_count` queries.
        unsafe { device.cmd_reset_query_pool(cmd, timing.pool.pool, 0, timing.query_count()) };
        recorder = recorder.with_timing(timing.pool.pool, &timing.dispatches);
        recorder.timestamp(timing.pool.pool, 0);
    }
    match body {
        Body::Commands(commands) => recorder.commands(commands)?,
        Body::One(command) => recorder.command(command)?,
        Body::ReadBack { source, offset, length, staging } => recorder.read_back(source, offset, length, staging)?,
    }
    if let Some(timing) = timing {
        recorder.timestamp(timing.pool.pool, 1);
    }
    // Only where the host may look at what it wrote: on NVIDIA the barrier cost about 1 us of
    // device time a submission (see `docs/decisions.md#vulkan-host-barrier-where-needed`).
    if recorder.host_may_access() {
        recorder.host_barrier();
    }
    let wait_stages = recorder.wait_stages();
    // SAFETY: `cmd` is recording.
    unsafe { device.end_command_buffer(cmd) }.map_err(|e| from_vk("vkEndCommandBuffer", e))?;
    Ok(wait_stages)
}

/// What a recorded submission keeps until it completes, and the embedder's value it waits on or
/// signals.
#[derive(Default)]
struct Submitted {
    keep: Keep,
    timing: Option<SubmissionTiming>,
    checks: Option<(Arc<Block>, Vec<usize>)>,
    /// The replayed recording (its command buffer is the recording's, not handed back).
    lease: Option<Lease>,
    /// The staging buffer of a read of an embedder's buffer.
    read_back: Option<Arc<Block>>,
    /// An embedder's timeline value the submission also waits on or signals.
    external: Option<Arc<Point>>,
    /// The stages its command buffer runs, which its waits hold back (empty: no command buffer,
    /// and the waits name `ALL_COMMANDS`).
    wait_stages: vk::PipelineStageFlags,
}

impl Submitted {
    /// Whether the submission holds anything until it retires (an entry in `in_flight`): a replay
    /// of a kept recording without per-execute state, with no timestamps, count checks or read-back,
    /// holds nothing (its work holds the command buffer, which keeps the recording).
    fn holds_anything(&self) -> bool {
        self.lease.as_ref().is_none_or(Lease::needs_holding)
            || !self.keep.blocks.is_empty()
            || !self.keep.executables.is_empty()
            || self.timing.is_some()
            || self.checks.is_some()
            || self.read_back.is_some()
    }
}

/// Builds the submission of `cmd` (or nothing) behind the item's waits, signalling its value, into
/// `batch` (see `submit_batch`).
fn submit(
    stream: &StreamShared,
    item: &Item,
    cmd: Option<vk::CommandBuffer>,
    submitted: Submitted,
    batch: &mut Batch,
) -> Result<()> {
    let mut waits: SubmitList<vk::Semaphore> = SubmitList::new();
    let mut wait_values: SubmitList<u64> = SubmitList::new();
    // Behind the stream's previous value, unless a value it waits on shows that reached (its
    // signal is issued by now).
    let previous = item.value - 1;
    let ordered = item.waits.iter().any(|(timeline, value)| timeline.shows_reached(*value, &stream.timeline, previous));
    if !ordered {
        waits.push(stream.timeline.semaphore);
        wait_values.push(previous);
    }
    let mut signals: SubmitList<vk::Semaphore> = smallvec![stream.timeline.semaphore];
    let mut signal_values: SubmitList<u64> = smallvec![item.value];
    if let Some(point) = &submitted.external {
        let (semaphore, value) = point.timeline();
        if point.is_wait() {
            waits.push(semaphore);
            wait_values.push(value);
        } else {
            signals.push(semaphore);
            signal_values.push(value);
        }
    }
    for (timeline, value) in &item.waits {
        if Arc::ptr_eq(&timeline.gpu, &stream.gpu) {
            waits.push(timeline.semaphore);
            wait_values.push(*value);
        } else {
            // Another VkDevice's semaphore cannot be waited on here: the host waits instead (after
            // handing over what was gathered, which that wait may be behind).
            batch.flush(stream);
            timeline.wait_forever(*value)?;
        }
    }
    let stage =
        if submitted.wait_stages.is_empty() { vk::PipelineStageFlags::ALL_COMMANDS } else { submitted.wait_stages };
    let stages: SubmitList<vk::PipelineStageFlags> = smallvec![stage; waits.len()];
    let mut in_flight = None;
    if let Some(work) = item.work.as_ref().filter(|_| cmd.is_some() && submitted.holds_anything()) {
        lock(&stream.in_flight).insert(
            work.id,
            InFlight {
                cmd: cmd.filter(|_| submitted.lease.is_none()).map(|c| (stream.pool.clone(), c)),
                _lease: submitted.lease,
                _keep: submitted.keep,
                timing: submitted.timing,
                checks: submitted.checks,
                host_time: None,
                read_back: submitted.read_back,
            },
        );
        in_flight = Some(work.id);
    }
    let external_signal = submitted.external.filter(|point| !point.is_wait());
    batch.push(Entry {
        waits,
        wait_values,
        stages,
        signals,
        signal_values,
        cmd,
        external_signal,
        in_flight,
        item: None,
        value: item.value,
    });
    Ok(())
}

/// Host work in queue order: copies through the mapping, alloca and dealloca.
fn run_on_host(op: &QueueOp) -> Result<()> {
    match op {
        QueueOp::Alloca(buffer) => VulkanMemory::of(buffer)?.commit(buffer),
        QueueOp::Dealloca(buffer) => VulkanMemory::of(buffer)?.release(buffer),
        QueueOp::Write { data, target, offset } => {
            target.check_range(*offset, data.len() as u64)?;
            let (block, base) = resolve(target)?;
            let ptr = block.ptr()?;
            // SAFETY: the range lies inside the buffer (checked) so inside the block's mapping,
            // which `block` keeps alive; racing device access is a program error with some mix of
            // bytes as its outcome, as on every driver.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr().add((base + offset) as usize), data.len())
            };
            Ok(())
        }
        QueueOp::Read { source, offset, length, target } => {
            source.check_range(*offset, *length)?;
            let (block, base) = resolve(source)?;
            let ptr = block.ptr()?;
            let mut bytes = vec![0u8; *length as usize];
            // SAFETY: as for writes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    ptr.as_ptr().add((base + offset) as usize),
                    bytes.as_mut_ptr(),
                    bytes.len(),
                )
            };
            target.stage(bytes);
            Ok(())
        }
        other => Err(Error::internal(format!("vulkan: {} is not host work", other.kind()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_log_shows_what_a_kept_value_waited_on() {
        let mut log = WaitLog::default();
        log.record(5, [(7, 3), (9, 12)].into_iter());
        assert!(log.shows(5, 7, 3));
        assert!(log.shows(5, 7, 2), "reaching 3 shows 2 reached");
        assert!(!log.shows(5, 7, 4), "nor more than it waited on");
        assert!(log.shows(5, 9, 12));
        assert!(!log.shows(5, 8, 1), "a timeline it did not wait on");
        assert!(!log.shows(6, 7, 1), "a value not recorded");
        // Nothing recorded yet: value 0 of an empty entry shows nothing.
        assert!(!WaitLog::default().shows(0, 0, 0));
    }

    #[test]
    fn a_wait_log_forgets_a_value_once_its_place_is_taken_and_keeps_the_first_waits() {
        let mut log = WaitLog::default();
        log.record(3, [(7, 1)].into_iter());
        log.record(3 + WAIT_LOG_LEN as u64, [(8, 2)].into_iter());
        assert!(!log.shows(3, 7, 1), "overwritten by a later value in its place");
        assert!(log.shows(3 + WAIT_LOG_LEN as u64, 8, 2));
        let many = (0..LOGGED_WAITS as u64 + 2).map(|key| (key + 100, 1));
        log.record(4, many);
        assert!(log.shows(4, 100 + LOGGED_WAITS as u64 - 1, 1));
        assert!(!log.shows(4, 100 + LOGGED_WAITS as u64, 1), "only the first waits are kept");
    }
}
