//! cpu-sim streams: one worker thread per stream running a FIFO of work, event markers and
//! event waits, in order, as a GPU stream does. Dispatches fan out over the device's workgroup pool.
//! The model checks the stream model's rules as it goes (see `stream_rules`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use hal::driver::CommandBufferExt;
use hal::driver::QueueOp;
use hal::driver::stream_model::{StreamModel, Work};
use hal::driver::{lock, wait};
use hal::{Error, Result};

use crate::collective::CpuChannel;
use crate::commands::{CancelSignal, DispatchTimes, estimated_ns, execute_command, execute_timed};
use crate::event::{CpuEvent, EventState, NewRecord, WaitTarget};
use crate::memory::{commit_buffer, read_buffer, release_buffer, write_buffer};
use crate::stream_rules::{RuleLog, StreamRule};
use crate::workgroup_pool::WorkgroupPool;

/// The cpu-sim stream model: streams are worker threads, events are completion points.
pub struct CpuStreams {
    pool: Arc<WorkgroupPool>,
    /// Whether light work runs on the issuing thread (`CpuSimOptions::light_work_at_issue`).
    light_work_at_issue: bool,
    /// Where its calls, and its streams when dropped, record broken stream-model rules.
    rules: Arc<RuleLog>,
}

impl CpuStreams {
    /// Streams whose dispatches run on `pool`.
    pub fn new(pool: Arc<WorkgroupPool>) -> Self {
        CpuStreams { pool, light_work_at_issue: false, rules: RuleLog::new() }
    }

    /// The same streams, running light work on the issuing thread where `on` (see
    /// `CpuSimOptions::with_light_work_at_issue`).
    pub fn with_light_work_at_issue(mut self, on: bool) -> Self {
        self.light_work_at_issue = on;
        self
    }

    /// The stream-model rules its callers broke so far (see `stream_rules`).
    pub fn rule_log(&self) -> &Arc<RuleLog> {
        &self.rules
    }

    /// Records the rules a record of `event` on `stream` broke (see [`NewRecord::breaks_rules`]).
    #[cold]
    fn record_broke_rules(&self, event: &EventState, stream: &CpuStream, record: NewRecord) {
        let (id, epoch) = (event.id(), record.epoch);
        let on = stream.shared.describe();
        if record.pending_waits > 0 {
            self.rules.broken(
                StreamRule::RecordUnderPendingWait,
                format!(
                    "event {id} recorded again (epoch {epoch}) on {on} while {} stream wait(s) enqueued on its \
                     epoch {} or earlier had not run: they may observe the new record",
                    record.pending_waits, record.waited
                ),
            );
        }
        if record.previous_running {
            self.rules.broken(
                StreamRule::RecordBeforeCompletion,
                format!("event {id} recorded again (epoch {epoch}) on {on} before its epoch {} completed", epoch - 1),
            );
        }
    }
}

/// Numbers streams for messages.
static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);

/// One in-order stream and its worker thread; dropping it drains the FIFO and joins the worker.
pub struct CpuStream {
    shared: Arc<StreamShared>,
    worker: Option<JoinHandle<()>>,
}

struct StreamShared {
    items: Mutex<VecDeque<Item>>,
    more: Condvar,
    /// Items pushed and not finished yet (the one the worker runs included). A record counts as
    /// finished just before it completes its event, so whoever sees the completion sees the count.
    unfinished: AtomicUsize,
    /// The model's log, for a drop that breaks a rule.
    rules: Arc<RuleLog>,
    /// Process-unique, for messages.
    serial: u64,
    queue: usize,
}

enum Item {
    Run(Arc<Work>),
    Record(Arc<EventState>, u64),
    Wait(Arc<EventState>, u64),
    Stop,
}

impl StreamShared {
    fn items(&self) -> MutexGuard<'_, VecDeque<Item>> {
        lock(&self.items)
    }

    /// "stream 3 (queue 1)", for messages.
    fn describe(&self) -> String {
        format!("stream {} (queue {})", self.serial, self.queue)
    }

    /// The worker finished an item (see `unfinished`).
    fn finished(&self) {
        self.unfinished.fetch_sub(1, Ordering::Release);
    }

    fn push(&self, item: Item) {
        self.unfinished.fetch_add(1, Ordering::Relaxed);
        let mut items = self.items();
        // The worker sleeps on `more` only when it found the FIFO empty: only the push that ends an
        // empty stretch needs the notify (a system call). Workers do not watch for work before they
        // sleep (as the scheduler's completion threads do): two watching workers take the cores
        // that the work they wait for needs, which made the cross-queue hop slower, not faster.
        let was_empty = items.is_empty();
        items.push_back(item);
        drop(items);
        if was_empty {
            self.more.notify_one();
        }
    }
}

impl CpuStream {
    /// An id unique among live streams, never 0: the address of its shared state.
    fn id(&self) -> usize {
        Arc::as_ptr(&self.shared) as usize
    }

    fn start(queue: usize, pool: Arc<WorkgroupPool>, rules: Arc<RuleLog>) -> Result<Self> {
        let shared = Arc::new(StreamShared {
            items: Mutex::new(VecDeque::new()),
            more: Condvar::new(),
            unfinished: AtomicUsize::new(0),
            rules,
            serial: NEXT_STREAM.fetch_add(1, Ordering::Relaxed),
            queue,
        });
        let worker_shared = shared.clone();
        let worker = std::thread::Builder::new()
            .name(format!("cpu-sim-stream-{queue}"))
            .spawn(move || run_stream(&worker_shared, &pool))
            .map_err(|e| Error::resource_exhausted(format!("cpu-sim: cannot start stream {queue}: {e}")))?;
        Ok(CpuStream { shared, worker: Some(worker) })
    }
}

impl Drop for CpuStream {
    fn drop(&mut self) {
        // The worker itself may drop the last handle to its device (it ran work holding the last
        // reference): it is inside an item then, stops at `Stop` on its own and must not join itself.
        let worker = self.worker.take().filter(|w| w.thread().id() != std::thread::current().id());
        // Acquire: pairs with `finished`, so work whose completion the dropping thread saw counts
        // as run.
        let unfinished = self.shared.unfinished.load(Ordering::Acquire);
        if worker.is_some() && unfinished > 0 {
            self.shared.rules.broken(
                StreamRule::DropWithWorkInFlight,
                format!(
                    "{} destroyed with {unfinished} item(s) enqueued and not yet run (work, event records or \
                     stream waits)",
                    self.shared.describe()
                ),
            );
        }
        // Drain anyway: the worker finishes everything queued before `Stop`.
        self.shared.push(Item::Stop);
        if let Some(worker) = worker
            && worker.join().is_err()
        {
            tracing::error!("cpu-sim stream worker panicked");
        }
    }
}

fn run_stream(shared: &StreamShared, pool: &WorkgroupPool) {
    loop {
        let item = {
            let mut items = shared.items();
            loop {
                if let Some(item) = items.pop_front() {
                    break item;
                }
                items = wait(&shared.more, items);
            }
        };
        match item {
            Item::Run(work) => {
                // Work behind a faulted producer does not run and carries the producer's status;
                // cancelled work does not start.
                match work.upstream_fault() {
                    Some(upstream) => {
                        abandon_collective(&work, &upstream);
                        work.fault.set(upstream);
                    }
                    None if work.cancel_requested() => {
                        let status = Error::cancelled("cancelled before it started");
                        abandon_collective(&work, &status);
                        work.fail(status);
                    }
                    None => {
                        if let Err(fault) = run_work(&work, pool) {
                            work.fail(fault);
                        }
                    }
                }
                shared.finished();
            }
            Item::Record(event, epoch) => {
                shared.finished();
                event.complete(epoch);
            }
            Item::Wait(event, epoch) => {
                event.watch_then_wait_for(epoch);
                event.wait_passed();
                shared.finished();
            }
            Item::Stop => return,
        }
    }
}

/// How long work may be estimated to take and still run on the issuing thread (see
/// `StreamModel::run_at_issue`). Work this short runs on one thread on the stream too (only grids
/// estimated over milliseconds spread over the workgroup pool), so running it at the call costs no
/// parallelism within it; the two thread wake-ups it saves cost tens of microseconds on a loaded
/// machine; and independent submissions the issuing thread now runs one after another (on
/// several queues they could have run side by side) lose at most this much each.
const RUN_AT_ISSUE_LIMIT: std::time::Duration = std::time::Duration::from_micros(100);

/// The largest queue allocation, write or read run on the issuing thread.
const RUN_AT_ISSUE_BYTES: u64 = 64 << 10;

/// Whether `op` is light enough to run on the issuing thread: an execute or transfer whose
/// estimate (`commands::estimated_ns`) is under [`RUN_AT_ISSUE_LIMIT`], or a small allocation,
/// release, write or read. Never a collective.
fn runs_at_issue(op: &QueueOp) -> bool {
    let light = |commands: &[hal::driver::Command]| {
        estimated_ns(commands).is_some_and(|ns| u128::from(ns) < RUN_AT_ISSUE_LIMIT.as_nanos())
    };
    match op {
        QueueOp::Execute { command_buffer, collectives } => collectives.is_empty() && light(&command_buffer.commands()),
        QueueOp::Transfer(command) => light(std::slice::from_ref(command)),
        QueueOp::Alloca(buffer) | QueueOp::Dealloca(buffer) => buffer.size() <= RUN_AT_ISSUE_BYTES,
        QueueOp::Write { data, .. } => data.len() as u64 <= RUN_AT_ISSUE_BYTES,
        QueueOp::Read { length, .. } => *length <= RUN_AT_ISSUE_BYTES,
        QueueOp::Barrier | QueueOp::Collective(_) | QueueOp::Native(_) => false,
    }
}

/// Tells the other ranks that `work`'s collectives (a collective's, an execute's) will not run,
/// with `status`.
fn abandon_collective(work: &Work, status: &Error) {
    for call in work.op.collectives() {
        call.abandon(status.clone());
    }
}

/// Runs one operation, timing it as its profile asks; an error becomes the submission's fault.
fn run_work(work: &Arc<Work>, pool: &WorkgroupPool) -> Result<()> {
    let Some(profile) = work.profile() else { return run_op(work, pool, None) };
    let mut times = DispatchTimes::new(profile.options());
    let start = Instant::now();
    run_op(work, pool, Some(&mut times))?;
    let end = Instant::now();
    // Only work that finished records anything.
    if profile.options().records_queue_operations() {
        profile.record_queue_operation(work, start, end);
    }
    if let QueueOp::Execute { command_buffer, .. } = &work.op {
        let commands = command_buffer.commands();
        for (index, grid, start, end) in times.times {
            if let Some(command) = commands.get(index) {
                profile.record_dispatch(work, index, command, grid, start, end);
            }
        }
    }
    Ok(())
}

fn run_op(work: &Arc<Work>, pool: &WorkgroupPool, times: Option<&mut DispatchTimes<'_>>) -> Result<()> {
    match &work.op {
        QueueOp::Execute { command_buffer, collectives } => {
            let times = times.filter(|t| t.selects_any());
            let result = execute_timed(&command_buffer.commands(), collectives, pool, &CancelSignal::of(work), times);
            if let Err(e) = &result {
                // Stopped part-way: the collectives not reached fail on the other ranks too.
                abandon_collective(work, e);
            }
            result
        }
        QueueOp::Collective(call) => match CpuChannel::of(call) {
            Ok(channel) => channel.run(call, &|| work.cancel_requested()),
            Err(e) => {
                call.abandon(e.clone());
                Err(e)
            }
        },
        QueueOp::Alloca(buffer) => commit_buffer(buffer),
        QueueOp::Dealloca(buffer) => release_buffer(buffer),
        QueueOp::Transfer(command) => execute_command(command, pool, &CancelSignal::of(work)),
        QueueOp::Write { data, target, offset } => write_buffer(target, *offset, data),
        QueueOp::Read { source, offset, length, target } => {
            target.stage(read_buffer(source, *offset, *length)?);
            Ok(())
        }
        QueueOp::Barrier => Ok(()),
        // cpu-sim prepares none (it has no external timepoints): another driver's operation.
        QueueOp::Native(_) => {
            Err(Error::invalid_argument(format!("cpu-sim: {} was prepared by another driver", work.op.describe())))
        }
    }
}

impl StreamModel for CpuStreams {
    type Stream = CpuStream;
    type Event = CpuEvent;

    fn create_stream(&self, queue: usize) -> Result<CpuStream> {
        CpuStream::start(queue, self.pool.clone(), self.rules.clone())
    }

    /// Events are host objects every stream thread can wait on, whichever device recorded them.
    const SHARES_EVENTS_ACROSS_DEVICES: bool = true;

    fn create_event(&self) -> Result<CpuEvent> {
        Ok(CpuEvent::new())
    }

    /// A record that replaces one still running or still awaited by a stream wait breaks a rule:
    /// recorded as such, and then made as CUDA would make it.
    fn record_event(&self, event: &CpuEvent, stream: &CpuStream) -> Result<()> {
        let record = event.inner.begin_record(stream.id());
        stream.shared.push(Item::Record(event.inner.clone(), record.epoch));
        if record.breaks_rules() {
            self.record_broke_rules(&event.inner, stream, record);
        }
        Ok(())
    }

    fn wait_event(&self, stream: &CpuStream, event: &CpuEvent) -> Result<()> {
        match event.inner.begin_wait(stream.id()) {
            // Nothing to wait for (CUDA's rule), and a broken rule: the scheduler never waits on an
            // event before recording it.
            WaitTarget::NeverRecorded => self.rules.broken(
                StreamRule::WaitOnUnrecordedEvent,
                format!(
                    "{} waited on event {}, which was never recorded (the wait orders nothing)",
                    stream.shared.describe(),
                    event.inner.id()
                ),
            ),
            // Everything pushed from now on already runs after the marker.
            WaitTarget::SameStream => {}
            WaitTarget::Epoch(epoch) => stream.shared.push(Item::Wait(event.inner.clone(), epoch)),
        }
        Ok(())
    }

    fn query_event(&self, event: &CpuEvent) -> Result<bool> {
        Ok(event.inner.is_complete())
    }

    fn synchronize_event(&self, event: &CpuEvent) -> Result<()> {
        let (epoch, _) = event.inner.latest();
        event.inner.wait_for(epoch);
        Ok(())
    }

    fn host_wait(
        &self,
        event: &CpuEvent,
        deadline: Option<std::time::Instant>,
        stop: &dyn Fn() -> bool,
    ) -> Option<Result<()>> {
        // Waits in slices so a value reached another way (a host signal) wakes the waiter promptly.
        const SLICE: std::time::Duration = std::time::Duration::from_micros(500);
        let (epoch, _) = event.inner.latest();
        loop {
            let slice_end = std::time::Instant::now() + SLICE;
            let until = deadline.map_or(slice_end, |deadline| deadline.min(slice_end));
            if event.inner.wait_until(epoch, Some(until)) {
                return Some(Ok(()));
            }
            if stop() || deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline) {
                return None;
            }
        }
    }

    fn clock_method(&self) -> String {
        "host clock: cpu-sim runs its work on host threads".to_owned()
    }

    fn begin_profiling(&self, _sink: &Arc<hal::driver::ProfileSink>) -> Result<()> {
        Ok(())
    }

    fn enqueue(&self, stream: &CpuStream, work: &Arc<Work>) -> Result<()> {
        stream.shared.push(Item::Run(work.clone()));
        Ok(())
    }

    /// A barrier or an execute with no device work would only pass through the worker's FIFO.
    fn enqueues_nothing(&self, work: &Work) -> bool {
        work.op.runs_nothing_on_a_stream()
    }

    /// Such work has nothing to complete either. Nor has an alloca or a dealloca of at most
    /// [`RUN_AT_ISSUE_BYTES`]: host work the stream thread would run at once on an idle queue, made
    /// on the submitting thread instead ([`run_at_submission`](StreamModel::run_at_submission));
    /// larger ones stay on the stream thread, where committing or freeing many pages does not hold
    /// up the caller.
    fn retires_at_submission(&self, op: &QueueOp) -> bool {
        match op {
            QueueOp::Alloca(buffer) | QueueOp::Dealloca(buffer) => buffer.size() <= RUN_AT_ISSUE_BYTES,
            op => op.runs_nothing_on_a_stream(),
        }
    }

    fn run_at_submission(&self, _stream: &CpuStream, op: &QueueOp) -> Result<()> {
        match op {
            QueueOp::Alloca(buffer) => commit_buffer(buffer),
            QueueOp::Dealloca(buffer) => release_buffer(buffer),
            _ => Ok(()),
        }
    }

    /// Where the device allows it (`CpuSimOptions::light_work_at_issue`), work estimated under
    /// [`RUN_AT_ISSUE_LIMIT`] runs on the issuing thread: handing it to the stream thread and its
    /// completion to the completion thread costs two thread wake-ups, more than such work takes.
    fn light_at_issue(&self, work: &Work) -> bool {
        self.light_work_at_issue && runs_at_issue(&work.op)
    }

    fn run_at_issue(&self, work: &Arc<Work>) {
        if work.cancel_requested() {
            work.fail(Error::cancelled("cancelled before it started"));
        } else if let Err(fault) = run_work(work, &self.pool) {
            work.fail(fault);
        }
    }

    fn synchronize_stream(&self, stream: &CpuStream) -> Result<()> {
        let marker = CpuEvent::new();
        self.record_event(&marker, stream)?;
        self.synchronize_event(&marker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executable::NativeExecutable;
    use crate::memory::{HostMemory, MemoryBudget};
    use hal::driver::{BufferExt, Command, ExecutableExt};
    use hal::{
        Buffer, BufferParams, DeviceId, EntryPointInfo, Executable, ExecutableSource, NativeEntryPoint,
        NativeInvocation, NativeKernel, StatusCode,
    };
    use smallvec::SmallVec;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    fn streams() -> (CpuStreams, CpuStream) {
        let model = CpuStreams::new(Arc::new(WorkgroupPool::with_threads(2).unwrap()));
        let stream = model.create_stream(0).unwrap();
        (model, stream)
    }

    fn work(op: QueueOp) -> Arc<Work> {
        Arc::new(Work::new(7, 0, op, SmallVec::new()))
    }

    /// Work whose cancel was requested before it reached the front of its
    /// stream does not start, and fails with `Cancelled` naming the submission.
    #[test]
    fn unbounded_work_cancelled_work_does_not_start() {
        let (model, stream) = streams();
        let device = DeviceId::next();
        let memory = HostMemory::new(16, &Arc::new(MemoryBudget::unlimited())).unwrap();
        // SAFETY: cpu-sim host memory, and only this test's cpu-sim code touches it.
        let target = unsafe { Buffer::from_backend(device, BufferParams::host_visible(), Arc::new(memory)) };
        let fill = work(QueueOp::Transfer(Box::new(Command::Fill {
            target: target.clone(),
            offset: 0,
            length: 16,
            pattern: 0xAB,
            pattern_len: 1,
        })));
        fill.request_cancel();
        model.enqueue(&stream, &fill).unwrap();
        model.synchronize_stream(&stream).unwrap();
        let fault = fill.fault.get().expect("the cancelled work failed");
        assert_eq!(fault.code(), StatusCode::Cancelled);
        assert_eq!(fault.message(), format!("queue 0 action 7 (fill of {target}): cancelled before it started"));
        assert_eq!(target.read_to_vec().unwrap(), vec![0; 16], "the fill did not run");
    }

    /// A dispatch of 100 000 workgroups of 1 ms running on a stream stops
    /// soon after its work's cancel is requested, and the stream goes on with later work.
    #[test]
    fn unbounded_work_cancel_stops_a_running_dispatch() {
        let (model, stream) = streams();
        let ran = Arc::new(AtomicU64::new(0));
        let counter = ran.clone();
        let kernel: NativeKernel = Arc::new(move |_: &NativeInvocation<'_>| {
            counter.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(1));
            Ok(())
        });
        let entry = NativeEntryPoint::new(EntryPointInfo::new("slow", 1, 0, 0), kernel);
        let native = NativeExecutable::load(&ExecutableSource::Native(vec![entry])).unwrap();
        // SAFETY: a cpu-sim native executable, run only by this test's cpu-sim code.
        let executable = unsafe { Executable::from_backend(DeviceId::next(), Arc::new(native)) };
        let dispatch = work(QueueOp::Transfer(Box::new(Command::Dispatch {
            executable,
            entry_point: 0,
            workgroups: [100_000, 1, 1],
            constants: SmallVec::new(),
            bindings: SmallVec::new(),
        })));
        model.enqueue(&stream, &dispatch).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while ran.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "the dispatch never started");
            std::thread::sleep(Duration::from_millis(1));
        }
        dispatch.request_cancel();
        let cancelled_at = Instant::now();
        model.synchronize_stream(&stream).unwrap();
        let late = cancelled_at.elapsed();
        assert!(late < Duration::from_millis(500), "stream drained {late:?} after the cancel request");
        let fault = dispatch.fault.get().expect("the cancelled dispatch failed");
        assert_eq!(fault.code(), StatusCode::Cancelled, "{fault}");
        assert!(fault.message().contains("dispatch of 'slow' over [100000, 1, 1] workgroups: cancelled"), "{fault}");
        assert!(ran.load(Ordering::Relaxed) < 10_000);
        // Later work on the stream still runs.
        let barrier = work(QueueOp::Barrier);
        model.enqueue(&stream, &barrier).unwrap();
        model.synchronize_stream(&stream).unwrap();
        assert!(barrier.fault.get().is_none());
    }
}
