//! Optional per-submission device timings ([`CudaOptions::submission_timings`](crate::CudaOptions)).
//!
//! When on, every submission that runs on a stream is bracketed by two *timing* events (created
//! without `DISABLE_TIMING`, pooled apart from the scheduler's events): one recorded before its work
//! and one after. When the submission retires, `cuEventElapsedTime` gives the time the stream spent
//! on it, which the scheduler puts on the submission's `complete` span as `device_ns` (and `hal run
//! --trace` into the timeline). That time includes waiting for earlier work of the same stream that
//! was still running when the start event was reached, as with any pair of CUDA events.
//!
//! It costs two event records per submission, so it is off by default. No stream ever waits on a
//! timing event, so returning one to the pool once its submission completed cannot break a wait.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cudarc::driver::sys::CUevent_flags;
use hal::{Error, Result};

use crate::context::{Bound, Context};
use crate::event::CudaEvent;
use crate::result;
use crate::stream::CudaStream;

/// The timing events of one device and, per queue in stream order, the pairs still open.
pub struct SubmissionTimer {
    context: Arc<Context>,
    free: Mutex<Vec<CudaEvent>>,
    created: AtomicUsize,
    open: Vec<Mutex<VecDeque<Timed>>>,
}

/// One timed submission on its way through a stream.
struct Timed {
    work: u64,
    start: CudaEvent,
    end: CudaEvent,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves the data whole: a poisoned lock is still usable.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl SubmissionTimer {
    /// A timer for `queue_count` queues of `context`'s device.
    pub fn new(context: &Arc<Context>, queue_count: usize) -> Self {
        SubmissionTimer {
            context: context.clone(),
            free: Mutex::new(Vec::new()),
            created: AtomicUsize::new(0),
            open: (0..queue_count).map(|_| Mutex::new(VecDeque::new())).collect(),
        }
    }

    /// Timing events created so far, and how many are recorded and not yet read back.
    pub fn usage(&self) -> (usize, usize) {
        let open: usize = self.open.iter().map(|q| lock(q).len() * 2).sum();
        (self.created.load(Ordering::Relaxed), open)
    }

    fn acquire(&self) -> Result<CudaEvent> {
        if let Some(event) = lock(&self.free).pop() {
            return Ok(event);
        }
        // Timing events: no DISABLE_TIMING flag, and not BLOCKING_SYNC (nobody blocks on them).
        let event = CudaEvent::create(&self.context, CUevent_flags::CU_EVENT_DEFAULT as u32)?;
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(event)
    }

    fn release(&self, events: impl IntoIterator<Item = CudaEvent>) {
        lock(&self.free).extend(events);
    }

    fn queue(&self, queue: usize) -> Result<MutexGuard<'_, VecDeque<Timed>>> {
        let fifo = self.open.get(queue).ok_or_else(|| Error::internal(format!("cuda: queue {queue} has no timer")))?;
        Ok(lock(fifo))
    }

    /// Records a start event on `stream`, before the submission's work is enqueued.
    pub fn start(&self, bound: &Bound<'_>, stream: &CudaStream) -> Result<CudaEvent> {
        let start = self.acquire()?;
        match result::event_record(bound, start.raw(), stream.raw()) {
            Ok(()) => Ok(start),
            Err(e) => {
                self.release([start]);
                Err(e)
            }
        }
    }

    /// Records the end event after submission `work`'s work on `stream`, and keeps the pair until
    /// the submission retires.
    pub fn finish(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        queue: usize,
        work: u64,
        start: CudaEvent,
    ) -> Result<()> {
        let end = match self.acquire() {
            Ok(end) => end,
            Err(e) => {
                self.release([start]);
                return Err(e);
            }
        };
        if let Err(e) = result::event_record(bound, end.raw(), stream.raw()) {
            self.release([start, end]);
            return Err(e);
        }
        self.queue(queue)?.push_back(Timed { work, start, end });
        Ok(())
    }

    /// Gives back the start event of work that could not be enqueued.
    pub fn abandon(&self, start: CudaEvent) {
        self.release([start]);
    }

    /// The device time of submission `work` of `queue`, which completed. Pairs of earlier
    /// submissions still open (they faulted, so nothing read them) go back to the pool on the way.
    pub fn elapsed(&self, queue: usize, work: u64) -> Result<Option<Duration>> {
        let mut fifo = self.queue(queue)?;
        while let Some(timed) = fifo.pop_front() {
            if timed.work != work {
                self.release([timed.start, timed.end]);
                continue;
            }
            drop(fifo);
            let bound = self.context.bind()?;
            // Both are timing events, recorded in this order on one stream, and completed (the
            // submission retired through its later event).
            let ms = result::event_elapsed_time(&bound, timed.start.raw(), timed.end.raw());
            self.release([timed.start, timed.end]);
            let ms = ms?;
            return Ok(Some(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3)));
        }
        Ok(None)
    }

    /// Drops the open pair of submission `work` (it faulted and will never be read).
    pub fn discard(&self, queue: usize, work: u64) {
        if let Ok(mut fifo) = self.queue(queue) {
            while let Some(index) = fifo.iter().position(|timed| timed.work == work) {
                if let Some(timed) = fifo.remove(index) {
                    self.release([timed.start, timed.end]);
                }
            }
        }
    }
}
