//! The stream model on real CUDA: one non-blocking `CUstream` per queue for the device's lifetime,
//! pooled `CUevent`s, and the mapping of each queue operation onto stream work.
//!
//! | operation | on the stream |
//! | --- | --- |
//! | execute | `cuGraphLaunch` of the prepared graph, or the commands launched one by one |
//! | fill | `cuMemsetD8/D16/D32Async` by pattern length |
//! | update, write | bytes copied into a pinned staging block, then `cuMemcpyAsync` from it |
//! | copy | `cuMemcpyAsync` |
//! | read | `cuMemcpyAsync` into a pinned staging block; the completion hands the bytes over |
//! | alloca / dealloca | `cuMemAllocFromPoolAsync` / `cuMemFreeAsync` with the device's default pool |
//! | barrier | nothing (the scheduler's event does the ordering) |
//!
//! Every method binds the device's context first (the scheduler calls them from any thread) and
//! hands the [`Bound`] token down to what it enqueues.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use cudarc::driver::sys::CUmemoryPool;
use hal::driver::Command;
use hal::driver::CommandBufferExt;
use hal::driver::QueueOp;
use hal::driver::lock;
use hal::driver::stream_model::{StreamModel, Work};
use hal::{Buffer, Error, Result};
use smallvec::SmallVec;

use crate::commands::indirect_node::IndirectRun;
use crate::commands::{CudaPreparedCommands, enqueue_command};
use crate::counted_fifo::CountedFifo;
use crate::event::CudaEvent;
use crate::host_copy::{CopyEnd, copy_async};
use crate::indirect_launcher::IndirectLauncher;
use crate::memory::{CudaMemory, resolve_address};
use crate::options::{CompletionWait, CudaOptions};
use crate::queue_stream::CudaStream;
use crate::staging::{StagingBlock, StagingPool};
use crate::sys::context::{Bound, Context};
use crate::sys::result;
use crate::timing::{DispatchTiming, ProfileClock, SubmissionTimer};

/// The CUDA stream model of one device.
pub struct CudaStreams {
    context: Arc<Context>,
    wait: CompletionWait,
    poll_interval: Duration,
    pool: CUmemoryPool,
    staging: Arc<StagingPool>,
    /// Per queue, in stream order: staging blocks of enqueued writes and reads, released when their
    /// submission completes (and with it everything before it on the stream).
    staged: Vec<Mutex<VecDeque<Staged>>>,
    /// The timing events of timed submissions and profiled dispatches.
    timer: SubmissionTimer,
    /// Brackets every submission with timing events (`CudaOptions::submission_timings`).
    time_every_submission: bool,
    /// Puts profiled times on the host's clock; made at the first `begin_profiling`.
    clock: OnceLock<ProfileClock>,
    /// Launches indirect dispatches once their counts are final (shared with the streams).
    indirect: Arc<IndirectLauncher>,
    /// Per queue, in stream order: the graph launches with indirect dispatch nodes, whose faults
    /// are read when their submission completes.
    indirect_runs: Vec<CountedFifo<(u64, IndirectRun)>>,
    /// Streams get progress words (`CudaOptions::completion_word`).
    completion_word: bool,
}

// SAFETY: the memory pool handle is a driver object used only with the context bound; the rest is
// `Send + Sync` already.
unsafe impl Send for CudaStreams {}
// SAFETY: see `Send`.
unsafe impl Sync for CudaStreams {}

struct Staged {
    work: u64,
    block: StagingBlock,
}

impl CudaStreams {
    /// The model for `options.queue_count` queues of `context`'s device: completion threads wait as
    /// `options.completion_wait` says, and submissions are timed if `options.submission_timings`. Sets
    /// the device's default memory pool to keep freed memory for reuse (by default the pool gives it
    /// back to the system at each synchronisation, making `queue_alloca` slow), and never to make an
    /// allocating stream wait for another stream's pending free: an alloca made on an idle stream
    /// is then done when the call returns, and retires at submission
    /// ([`retires_at_submission`](StreamModel::retires_at_submission)).
    pub fn new(context: &Arc<Context>, options: &CudaOptions, max_workgroup_count: [u32; 3]) -> Result<Self> {
        let bound = context.bind()?;
        let pool = result::device_get_default_mem_pool(&bound, context.device())?;
        result::mem_pool_set_release_threshold(&bound, pool, u64::MAX)?;
        result::mem_pool_forbid_internal_dependencies(&bound, pool)?;
        let queue_count = options.queue_count;
        let staging = StagingPool::new(context);
        Ok(CudaStreams {
            context: context.clone(),
            wait: options.completion_wait,
            poll_interval: options.poll_interval,
            pool,
            indirect: Arc::new(IndirectLauncher::new(context, max_workgroup_count)),
            staging,
            staged: (0..queue_count).map(|_| Mutex::new(VecDeque::new())).collect(),
            indirect_runs: (0..queue_count).map(|_| CountedFifo::new()).collect(),
            completion_word: options.completion_word,
            timer: SubmissionTimer::new(context, queue_count),
            time_every_submission: options.submission_timings,
            clock: OnceLock::new(),
        })
    }

    /// The timing events (for resource usage).
    pub fn timer(&self) -> &SubmissionTimer {
        &self.timer
    }

    /// The staging pool (for resource usage).
    pub fn staging(&self) -> &StagingPool {
        &self.staging
    }

    fn staged(&self, queue: usize) -> Result<MutexGuard<'_, VecDeque<Staged>>> {
        let fifo = self
            .staged
            .get(queue)
            .ok_or_else(|| Error::internal(format!("cuda: queue {queue} has no staging list")))?;
        Ok(lock(fifo))
    }

    /// Copies `data` through a staging block into `target` at `offset`.
    fn upload(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        work: &Work,
        data: &[u8],
        target: &Buffer,
        offset: u64,
    ) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let dst = resolve_address(target, offset, data.len() as u64)?;
        let block = self.staging.acquire(data.len())?;
        // SAFETY: the block holds at least `data.len()` bytes and is ours until it goes back to the
        // pool, which happens only after the copy below completed (or now, if it is not enqueued).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), block.as_ptr(), data.len()) };
        let dst = CopyEnd { address: dst, host: CudaMemory::of(target)?.is_host() };
        let src = CopyEnd { address: block.as_ptr() as u64, host: true };
        // SAFETY: the block is pinned and holds at least `data.len()` bytes; it stays on loan, untouched
        // by the host, until the copy's submission completed (`staged`, then `complete_op`); the
        // target range is live memory its buffer keeps until then.
        unsafe { copy_async(bound, dst, src, data.len(), stream.raw()) }?;
        self.staged(stream.queue())?.push_back(Staged { work: work.id, block });
        Ok(())
    }

    /// Copies `length` bytes of `source` at `offset` into a staging block.
    fn download(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        work: &Work,
        source: &Buffer,
        offset: u64,
        length: u64,
    ) -> Result<()> {
        if length == 0 {
            return Ok(());
        }
        let src = resolve_address(source, offset, length)?;
        let len = usize::try_from(length)
            .map_err(|_| Error::resource_exhausted(format!("read of {length} bytes does not fit the address space")))?;
        let block = self.staging.acquire(len)?;
        let src = CopyEnd { address: src, host: CudaMemory::of(source)?.is_host() };
        let dst = CopyEnd { address: block.as_ptr() as u64, host: true };
        // SAFETY: the block is pinned and holds at least `len` bytes; it stays on loan, untouched by the
        // host, until the copy's submission completed (`staged`, then `complete_op`); the source range
        // is live memory its buffer keeps until then.
        unsafe { copy_async(bound, dst, src, len, stream.raw()) }?;
        self.staged(stream.queue())?.push_back(Staged { work: work.id, block });
        Ok(())
    }

    /// Takes `work`'s staging block; blocks of earlier work on the same stream (completed too, but
    /// not retired through `complete` because they faulted) are released on the way.
    /// Takes `work`'s graph launches with indirect nodes (and any left by earlier work of its
    /// queue, which completed or was discarded before it).
    fn take_indirect_runs(&self, work: &Work) -> SmallVec<[IndirectRun; 1]> {
        let mut taken = SmallVec::new();
        let Some(fifo) = self.indirect_runs.get(work.queue) else { return taken };
        // Almost every submission launched no graph with indirect nodes: no lock then.
        if fifo.is_empty() {
            return taken;
        }
        let mut fifo = fifo.lock();
        if let Some(last) = fifo.iter().rposition(|(id, _)| *id == work.id) {
            for (id, run) in fifo.drain(..=last) {
                if id == work.id {
                    taken.push(run);
                }
            }
        }
        taken
    }

    fn take_staged(&self, work: &Work) -> Result<StagingBlock> {
        let mut fifo = self.staged(work.queue)?;
        while let Some(entry) = fifo.pop_front() {
            if entry.work == work.id {
                return Ok(entry.block);
            }
        }
        Err(Error::internal(format!("cuda: queue {} action {}: staging block missing", work.queue, work.id)))
    }

    /// Enqueues an alloca (`cuMemAllocFromPoolAsync` from the device's pool) or a dealloca
    /// (`cuMemFreeAsync`) on `stream`, a failure naming the buffer; nothing for any other op.
    fn enqueue_memory_op(&self, bound: &Bound<'_>, stream: &CudaStream, op: &QueueOp) -> Result<()> {
        match op {
            QueueOp::Alloca(buffer) => CudaMemory::of(buffer)?
                .commit_async(bound, stream, self.pool)
                .map_err(|e| e.context(format!("{buffer}"))),
            QueueOp::Dealloca(buffer) => {
                CudaMemory::of(buffer)?.release_async(bound, stream).map_err(|e| e.context(format!("{buffer}")))
            }
            _ => Ok(()),
        }
    }

    /// Enqueues `work`'s operation on `stream`: the plain enqueue. `dispatches`, for an execute
    /// that a profile times dispatches of, brackets each of those with timing events.
    fn enqueue_op(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        work: &Arc<Work>,
        dispatches: Option<DispatchTiming<'_>>,
    ) -> Result<()> {
        match &work.op {
            QueueOp::Execute { command_buffer, .. } => {
                let prepared = CudaPreparedCommands::of(command_buffer)?;
                match dispatches {
                    Some(timing) => prepared.enqueue_timed(bound, stream, work, timing),
                    None => {
                        if let Some(run) = prepared.enqueue(bound, stream, work)?
                            && let Some(fifo) = self.indirect_runs.get(work.queue)
                        {
                            fifo.lock().push_back((work.id, run));
                        }
                        Ok(())
                    }
                }
            }
            QueueOp::Alloca(_) | QueueOp::Dealloca(_) => self.enqueue_memory_op(bound, stream, &work.op),
            QueueOp::Transfer(command) => match &**command {
                Command::Update { target, offset, data } => self.upload(bound, stream, work, data, target, *offset),
                command => enqueue_command(bound, command, stream, None, None),
            },
            QueueOp::Write { data, target, offset } => self.upload(bound, stream, work, data, target, *offset),
            QueueOp::Read { source, offset, length, .. } => {
                self.download(bound, stream, work, source, *offset, *length)
            }
            QueueOp::Barrier => Ok(()),
            QueueOp::Collective(call) => crate::collective::NcclChannel::of(call)?.enqueue(bound, stream, call),
            QueueOp::Native(op) => crate::interop::external::enqueue(bound, stream, op),
        }
    }

    /// What happens on the host when `work` completed: a read hands over its staged bytes, a write
    /// gives its staging block back.
    fn complete_op(&self, work: &Work) -> Result<()> {
        match &work.op {
            QueueOp::Read { length, target, .. } => {
                if *length == 0 {
                    target.stage(Vec::new());
                    return Ok(());
                }
                let block = self.take_staged(work)?;
                let mut bytes = vec![0u8; *length as usize];
                // SAFETY: the copy into the block completed (this runs after the work's event), and
                // the block holds at least `length` bytes (acquired for them).
                unsafe { std::ptr::copy_nonoverlapping(block.as_ptr(), bytes.as_mut_ptr(), bytes.len()) };
                drop(block);
                target.stage(bytes);
                Ok(())
            }
            op if uploads_through_staging(op) => {
                drop(self.take_staged(work)?);
                Ok(())
            }
            // Nothing was staged on the host for these.
            QueueOp::Write { .. }
            | QueueOp::Transfer(_)
            | QueueOp::Execute { .. }
            | QueueOp::Collective(_)
            | QueueOp::Alloca(_)
            | QueueOp::Dealloca(_)
            | QueueOp::Barrier => Ok(()),
            QueueOp::Native(op) => crate::interop::external::complete(op),
        }
    }
}

/// Whether `op` copies host bytes in through a staging block (a write or an update with bytes).
fn uploads_through_staging(op: &QueueOp) -> bool {
    match op {
        QueueOp::Write { data, .. } => !data.is_empty(),
        QueueOp::Transfer(command) => matches!(&**command, Command::Update { data, .. } if !data.is_empty()),
        _ => false,
    }
}

/// The command indices of the dispatches of `commands` that `options` time, ascending.
fn timed_dispatches(commands: &[Command], options: &hal::ProfileOptions) -> Vec<usize> {
    let is_dispatch =
        |command: &Command| matches!(command, Command::Dispatch { .. } | Command::DispatchIndirect { .. });
    (0..commands.len()).filter(|&index| is_dispatch(&commands[index]) && options.records_command(index)).collect()
}

impl StreamModel for CudaStreams {
    type Stream = CudaStream;
    type Event = CudaEvent;

    fn create_stream(&self, queue: usize) -> Result<CudaStream> {
        CudaStream::create(&self.context, &self.indirect, queue, self.completion_word, self.wait)
    }

    fn create_event(&self) -> Result<CudaEvent> {
        CudaEvent::create(&self.context, self.wait.event_flags())
    }

    fn record_event(&self, event: &CudaEvent, stream: &CudaStream) -> Result<()> {
        let bound = self.context.bind()?;
        result::event_record(&bound, event.raw(), stream.raw())?;
        event.recorded_on(stream.raw());
        let mark = stream.progress().and_then(|word| match word.advance(&bound, stream.raw()) {
            Ok(number) => Some((word.clone(), number)),
            // The event is then queried as without a word.
            Err(e) => {
                tracing::debug!(%e, "cuda: a progress word's write was refused");
                None
            }
        });
        event.set_mark(mark);
        Ok(())
    }

    fn wait_event(&self, stream: &CudaStream, event: &CudaEvent) -> Result<()> {
        if event.last_recorded_on(stream.raw()) {
            // Recorded on this very stream: everything enqueued from now on already runs after it.
            return Ok(());
        }
        // The scheduler only waits on events that were recorded.
        result::stream_wait_event(&self.context.bind()?, stream.raw(), event.raw())
    }

    fn query_event(&self, event: &CudaEvent) -> Result<bool> {
        event.query()
    }

    fn synchronize_event(&self, event: &CudaEvent) -> Result<()> {
        event.synchronize(self.wait, self.poll_interval)
    }

    fn await_completion(
        &self,
        stream: &CudaStream,
        event: &CudaEvent,
        taken_over: &dyn Fn() -> bool,
    ) -> Option<Result<()>> {
        match stream.callback() {
            // A host function pending while an indirect dispatch waits for its kernel's launch
            // could hold that launch and wait for it forever (`IndirectLauncher::holds_unreleased`):
            // then this wait polls.
            Some(callback) if !self.indirect.holds_unreleased() => Some(callback.wait(event)),
            _ => event.await_completion(self.wait, self.poll_interval, taken_over),
        }
    }

    fn host_wait(
        &self,
        event: &CudaEvent,
        deadline: Option<std::time::Instant>,
        stop: &dyn Fn() -> bool,
    ) -> Option<Result<()>> {
        event.wait_for_host(self.wait, self.poll_interval, deadline, stop)
    }

    /// CUDA faults are sticky for the whole context: work behind a faulted producer fails by itself
    /// (its stream-wait or its own launch reports the fault), so the scheduler keeps no producers.
    const CHECKS_UPSTREAM_FAULTS: bool = false;

    /// `cuStreamWaitEvent` takes an event of any context of the process: a queue of one device (or
    /// GPU) waits on another device's event on the GPU, with no host in between.
    const SHARES_EVENTS_ACROSS_DEVICES: bool = true;

    fn clock_method(&self) -> String {
        "CUDA timing events, measured against an anchor event whose host time is bracketed by \
         spinning on it on an idle stream (renewed every second)"
            .to_owned()
    }

    fn begin_profiling(&self, sink: &Arc<hal::driver::ProfileSink>) -> Result<()> {
        let clock = match self.clock.get() {
            Some(clock) => clock,
            None => {
                let clock = ProfileClock::new(&self.context)?;
                // Two sessions cannot begin at once (the scheduler's switch), but be safe: a clock
                // made in a race is dropped, its stream destroyed.
                let _ = self.clock.set(clock);
                self.clock.get().ok_or_else(|| Error::internal("cuda: profiling clock missing"))?
            }
        };
        sink.widen_uncertainty(clock.anchor()?.uncertainty);
        Ok(())
    }

    fn enqueue(&self, stream: &CudaStream, work: &Arc<Work>) -> Result<()> {
        let bound = self.context.bind()?;
        let profile = work.profile();
        let time_whole = self.time_every_submission || profile.is_some_and(|p| p.options().records_queue_operations());
        let timed_dispatches = match (&work.op, profile) {
            (QueueOp::Execute { command_buffer, .. }, Some(profile)) => {
                timed_dispatches(&command_buffer.commands(), profile.options())
            }
            _ => Vec::new(),
        };
        if !time_whole && timed_dispatches.is_empty() {
            return self.enqueue_op(&bound, stream, work, None);
        }
        let anchor = match (profile, self.clock.get()) {
            (Some(profile), Some(clock)) => {
                let anchor = clock.anchor()?;
                profile.widen_uncertainty(anchor.uncertainty);
                Some(anchor)
            }
            _ => None,
        };
        self.timer.enqueue_timed(&bound, stream, work, time_whole, anchor, |timed| {
            let dispatches = (!timed_dispatches.is_empty()).then_some(DispatchTiming {
                indices: &timed_dispatches,
                timer: &self.timer,
                out: timed,
            });
            self.enqueue_op(&bound, stream, work, dispatches)
        })
    }

    /// A barrier or an execute with no device work makes no CUDA call, unless every submission
    /// is timed (`HAL_CUDA_TIMINGS`: two timing events around it).
    fn enqueues_nothing(&self, work: &Work) -> bool {
        !self.time_every_submission && work.op.runs_nothing_on_a_stream()
    }

    /// Such work has nothing to complete either: no collective, timing, indirect run or staging.
    /// Nor have an alloca and a dealloca, whose one stream call (`cuMemAllocFromPoolAsync`,
    /// `cuMemFreeAsync`) is done when it returns on an idle stream: the pool makes no stream wait
    /// for another's free (see [`CudaStreams::new`]), and a free on an idle stream has nothing
    /// before it to wait for.
    fn retires_at_submission(&self, op: &QueueOp) -> bool {
        !self.time_every_submission
            && (op.runs_nothing_on_a_stream() || matches!(op, QueueOp::Alloca(_) | QueueOp::Dealloca(_)))
    }

    fn run_at_submission(&self, stream: &CudaStream, op: &QueueOp) -> Result<()> {
        match op {
            QueueOp::Alloca(_) | QueueOp::Dealloca(_) => self.enqueue_memory_op(&self.context.bind()?, stream, op),
            _ => Ok(()),
        }
    }

    fn complete(&self, work: &Work) -> Result<()> {
        // A collective (queued, or in an execute) whose communicator was aborted while it ran may
        // have returned early.
        if let Some(status) =
            work.op.collectives().iter().find_map(|call| crate::collective::NcclChannel::of(call).ok()?.failure())
        {
            self.timer.discard(work.queue, work.id);
            return Err(status);
        }
        match self.timer.take(work.queue, work.id) {
            Ok(Some(timed)) => {
                if let Err(e) = self.timer.read(work, timed) {
                    tracing::debug!(action = work.id, %e, "no device timings for this submission");
                }
            }
            Ok(None) => {}
            Err(e) => tracing::debug!(action = work.id, %e, "no device timings for this submission"),
        }
        for run in self.take_indirect_runs(work) {
            run.check()?;
        }
        self.complete_op(work)
    }

    /// A transfer caught by a device fault never completes (the fault is sticky: its copy will not
    /// run), so its staging block goes back to the pool now. Without this the block stayed on loan
    /// until a later transfer of the same queue completed, which never happens on a poisoned context.
    fn discard(&self, work: &Work) {
        if let Ok(mut fifo) = self.staged(work.queue) {
            fifo.retain(|entry| entry.work != work.id);
        }
        drop(self.take_indirect_runs(work));
        self.timer.discard(work.queue, work.id);
    }

    fn synchronize_stream(&self, stream: &CudaStream) -> Result<()> {
        result::stream_synchronize(&self.context.bind()?, stream.raw())
    }
}
