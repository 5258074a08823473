//! cpu-sim streams: one worker thread per stream running a FIFO of work, event markers and
//! event waits, in order, as a GPU stream does. Dispatches fan out over the device's workgroup pool.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use hal::driver::QueueOp;
use hal::stream_model::{StreamModel, Work};
use hal::{Error, Result};

use crate::command_exec::{execute_command, execute_commands, read_buffer, write_buffer};
use crate::event::{CpuEvent, EventState};
use crate::memory::{commit_buffer, release_buffer};
use crate::workgroup_pool::WorkgroupPool;

/// The cpu-sim stream model: streams are worker threads, events are completion points.
pub struct CpuStreams {
    pool: Arc<WorkgroupPool>,
}

impl CpuStreams {
    /// Streams whose dispatches run on `pool`.
    pub fn new(pool: Arc<WorkgroupPool>) -> Self {
        CpuStreams { pool }
    }
}

/// One in-order stream and its worker thread; dropping it drains the FIFO and joins the worker.
pub struct CpuStream {
    shared: Arc<StreamShared>,
    worker: Option<JoinHandle<()>>,
}

struct StreamShared {
    items: Mutex<VecDeque<Item>>,
    more: Condvar,
}

enum Item {
    Run(Arc<Work>),
    Record(Arc<EventState>, u64),
    Wait(Arc<EventState>, u64),
    Stop,
}

impl StreamShared {
    fn items(&self) -> MutexGuard<'_, VecDeque<Item>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, item: Item) {
        let mut items = self.items();
        // The worker sleeps on `more` only when it found the FIFO empty: only the push that ends an
        // empty stretch needs the notify (a system call). Workers do not watch for work before they
        // sleep (as the scheduler's completion threads do): tried on the 2-core development machine,
        // two watching workers took a cross-queue ping-pong from about 3 to 12 us per hop.
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

    fn start(queue: usize, pool: Arc<WorkgroupPool>) -> Result<Self> {
        let shared = Arc::new(StreamShared { items: Mutex::new(VecDeque::new()), more: Condvar::new() });
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
        // Drain: the worker finishes everything queued before `Stop`.
        self.shared.push(Item::Stop);
        // The worker itself may drop the last handle to its device (it ran work holding the last
        // reference): it then stops at `Stop` on its own and must not join itself.
        if let Some(worker) = self.worker.take()
            && worker.thread().id() != std::thread::current().id()
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
                items = shared.more.wait(items).unwrap_or_else(|p| p.into_inner());
            }
        };
        match item {
            Item::Run(work) => {
                // Work behind a faulted producer does not run and carries the producer's status.
                match work.take_upstream_fault() {
                    Some(upstream) => work.fault.set(upstream),
                    None => {
                        if let Err(fault) = run_work(&work, pool) {
                            work.fail(fault);
                        }
                    }
                }
            }
            Item::Record(event, epoch) => event.complete(epoch),
            Item::Wait(event, epoch) => event.wait_for(epoch),
            Item::Stop => return,
        }
    }
}

/// Runs one operation; an error becomes the submission's fault.
fn run_work(work: &Work, pool: &WorkgroupPool) -> Result<()> {
    match &work.op {
        QueueOp::Execute(command_buffer) => execute_commands(&command_buffer.commands(), pool),
        QueueOp::Alloca(buffer) => commit_buffer(buffer),
        QueueOp::Dealloca(buffer) => release_buffer(buffer),
        QueueOp::Transfer(command) => execute_command(command, pool),
        QueueOp::Write { data, target, offset } => write_buffer(target, *offset, data),
        QueueOp::Read { source, offset, length, target } => {
            target.complete(read_buffer(source, *offset, *length)?);
            Ok(())
        }
        QueueOp::Barrier => Ok(()),
        QueueOp::HostCall(_) => Err(Error::internal("cpu-sim: a host call reached a stream")),
    }
}

impl StreamModel for CpuStreams {
    type Stream = CpuStream;
    type Event = CpuEvent;

    fn create_stream(&self, queue: usize) -> Result<CpuStream> {
        CpuStream::start(queue, self.pool.clone())
    }

    fn create_event(&self) -> Result<CpuEvent> {
        Ok(CpuEvent::new())
    }

    fn record_event(&self, event: &CpuEvent, stream: &CpuStream) -> Result<()> {
        let epoch = event.inner.begin_record(stream.id());
        stream.shared.push(Item::Record(event.inner.clone(), epoch));
        Ok(())
    }

    fn wait_event(&self, stream: &CpuStream, event: &CpuEvent) -> Result<()> {
        let (epoch, recorded_on) = event.inner.latest();
        // Never recorded: nothing to wait for (CUDA's rule). Recorded on this very stream: everything
        // pushed from now on already runs after the marker.
        if epoch > 0 && recorded_on != stream.id() {
            stream.shared.push(Item::Wait(event.inner.clone(), epoch));
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

    fn enqueue(&self, stream: &CpuStream, work: &Arc<Work>) -> Result<()> {
        stream.shared.push(Item::Run(work.clone()));
        Ok(())
    }

    fn synchronize_stream(&self, stream: &CpuStream) -> Result<()> {
        let marker = CpuEvent::new();
        self.record_event(&marker, stream)?;
        self.synchronize_event(&marker)
    }
}
