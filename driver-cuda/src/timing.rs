//! Device timings: per-submission times ([`CudaOptions::submission_timings`](crate::CudaOptions))
//! and profiling ([`hal::ProfileOptions`]), both from *timing events* (created without
//! `DISABLE_TIMING`, pooled apart from the scheduler's events).
//!
//! - A timed submission is bracketed by two timing events: one recorded before its work and one
//!   after. With `submission_timings`, `cuEventElapsedTime` between them is put on the submission's
//!   `complete` span as `device_ns` (and `hal run --trace` draws it). That time includes waiting for
//!   earlier work of the same stream still running when the start event was reached, as with any
//!   pair of CUDA events.
//! - A profiled dispatch is bracketed the same way, inside its command buffer's replay (which then
//!   goes command by command: a graph launch has no point between its kernels where the stream
//!   could record an event).
//! - Profiled times are put on the host's clock through an [`Anchor`]: a timing event recorded on
//!   an idle stream of its own while the host spins on it, so the device reached it between two host
//!   instants a few microseconds apart. A record's host time is the anchor's midpoint plus
//!   `cuEventElapsedTime(anchor, event)`; the anchor is renewed when it is over a second old, so the
//!   f32 milliseconds of that call keep sub-microsecond precision and clock drift stays small.
//!
//! No stream ever waits on a timing event, so returning one to the pool once its submission
//! completed cannot break a wait.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUevent_flags, CUstream, CUstream_flags};
use hal::driver::lock;
use hal::driver::stream_model::Work;
use hal::{Error, Result};

use crate::counted_fifo::{CountedFifo, Locked};
use crate::event::CudaEvent;
use crate::queue_stream::CudaStream;
use crate::sys::context::{Bound, Context};
use crate::sys::result;

/// How old an anchor may get before timings are measured against a new one.
const ANCHOR_LIFETIME: Duration = Duration::from_secs(1);

/// Attempts per anchor; the tightest host bracket wins.
const ANCHOR_ATTEMPTS: usize = 3;

/// The timing events of one device and, per queue in stream order, the timed submissions still open.
pub struct SubmissionTimer {
    context: Arc<Context>,
    free: Mutex<Vec<CudaEvent>>,
    created: AtomicUsize,
    open: Vec<CountedFifo<Timed>>,
}

/// The timing events of one submission on its way through a stream.
pub struct Timed {
    work: u64,
    /// Around the whole submission.
    whole: Option<(CudaEvent, CudaEvent)>,
    /// Around each timed dispatch: (command index, start, end).
    dispatches: Vec<(usize, CudaEvent, CudaEvent)>,
    /// What profiled times are measured against (`None`: not profiled).
    anchor: Option<Arc<Anchor>>,
    /// Events recorded for timings an error cut short: only given back.
    loose: Vec<CudaEvent>,
}

impl Timed {
    /// Nothing recorded yet, for submission `work`.
    fn new(work: u64, anchor: Option<Arc<Anchor>>) -> Self {
        Timed { work, whole: None, dispatches: Vec::new(), anchor, loose: Vec::new() }
    }

    /// The events around the whole submission.
    fn set_whole(&mut self, start: CudaEvent, end: CudaEvent) {
        self.whole = Some((start, end));
    }

    /// The events around the dispatch at command `index`.
    pub fn push_dispatch(&mut self, index: usize, start: CudaEvent, end: CudaEvent) {
        self.dispatches.push((index, start, end));
    }

    /// Keeps a pair only to give it back with the others.
    pub fn hold_pair(&mut self, start: CudaEvent, end: CudaEvent) {
        self.loose.extend([start, end]);
    }

    /// Keeps `event` only to give it back with the others.
    pub fn hold(&mut self, event: Option<CudaEvent>) {
        self.loose.extend(event);
    }

    fn event_count(&self) -> usize {
        2 * (usize::from(self.whole.is_some()) + self.dispatches.len()) + self.loose.len()
    }

    fn events(self) -> impl Iterator<Item = CudaEvent> {
        let whole = self.whole.into_iter().flat_map(|(s, e)| [s, e]);
        let dispatches = self.dispatches.into_iter().flat_map(|(_, s, e)| [s, e]);
        whole.chain(dispatches).chain(self.loose)
    }
}

/// The dispatches of one execute that a profile times, and where their timing events go.
pub struct DispatchTiming<'a> {
    /// Command indices of the timed dispatches, ascending.
    pub indices: &'a [usize],
    /// Where the events come from.
    pub timer: &'a SubmissionTimer,
    /// The submission's timings, which keep the events until it retires.
    pub out: &'a mut Timed,
}

/// A new timing event of `context`'s device.
pub(crate) fn timing_event(context: &Arc<Context>) -> Result<CudaEvent> {
    // Timing events: no DISABLE_TIMING flag, and not BLOCKING_SYNC (nobody blocks on them).
    CudaEvent::create(context, CUevent_flags::CU_EVENT_DEFAULT as u32)
}

impl SubmissionTimer {
    /// A timer for `queue_count` queues of `context`'s device.
    pub fn new(context: &Arc<Context>, queue_count: usize) -> Self {
        SubmissionTimer {
            context: context.clone(),
            free: Mutex::new(Vec::new()),
            created: AtomicUsize::new(0),
            open: (0..queue_count).map(|_| CountedFifo::new()).collect(),
        }
    }

    /// Timing events created so far, and how many are recorded and not yet read back.
    pub fn usage(&self) -> (usize, usize) {
        let open: usize = self.open.iter().map(|q| q.lock().iter().map(Timed::event_count).sum::<usize>()).sum();
        (self.created.load(Ordering::Relaxed), open)
    }

    /// A pooled timing event (not recorded by this call).
    pub fn acquire(&self) -> Result<CudaEvent> {
        if let Some(event) = lock(&self.free).pop() {
            return Ok(event);
        }
        let event = timing_event(&self.context)?;
        self.created.fetch_add(1, Ordering::Relaxed);
        Ok(event)
    }

    fn release(&self, events: impl IntoIterator<Item = CudaEvent>) {
        lock(&self.free).extend(events);
    }

    fn queue(&self, queue: usize) -> Result<Locked<'_, Timed>> {
        let fifo = self.open.get(queue).ok_or_else(|| Error::internal(format!("cuda: queue {queue} has no timer")))?;
        Ok(fifo.lock())
    }

    /// Records a timing event on `stream` now (a pooled one; back to the pool if the record fails).
    pub fn record(&self, bound: &Bound<'_>, stream: &CudaStream) -> Result<CudaEvent> {
        let event = self.acquire()?;
        match result::event_record(bound, event.raw(), stream.raw()) {
            Ok(()) => Ok(event),
            Err(e) => {
                self.release([event]);
                Err(e)
            }
        }
    }

    /// Enqueues submission `work` on `stream` through `enqueue` (the plain enqueue), bracketed by
    /// two timing events if `whole`; `enqueue` may add events of its own (timed dispatches) to the
    /// submission's timings it is handed. The timings are kept until the submission retires
    /// ([`take`](Self::take)), or given back at once if anything fails.
    pub fn enqueue_timed(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        work: &Work,
        whole: bool,
        anchor: Option<Arc<Anchor>>,
        enqueue: impl FnOnce(&mut Timed) -> Result<()>,
    ) -> Result<()> {
        let mut timed = Timed::new(work.id, anchor);
        match self.bracket(bound, stream, whole, &mut timed, enqueue) {
            Ok(()) => self.keep(work.queue, timed),
            Err(e) => {
                self.abandon(timed);
                Err(e)
            }
        }
    }

    /// Runs `enqueue`, between two recorded timing events if `whole`.
    fn bracket(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        whole: bool,
        timed: &mut Timed,
        enqueue: impl FnOnce(&mut Timed) -> Result<()>,
    ) -> Result<()> {
        if !whole {
            return enqueue(timed);
        }
        let start = self.record(bound, stream)?;
        match enqueue(timed).and_then(|()| self.record(bound, stream)) {
            Ok(end) => {
                timed.set_whole(start, end);
                Ok(())
            }
            Err(e) => {
                timed.hold(Some(start));
                Err(e)
            }
        }
    }

    /// Keeps `timed` (its events all recorded after its submission's earlier work on queue `queue`)
    /// until the submission retires.
    fn keep(&self, queue: usize, timed: Timed) -> Result<()> {
        match self.open.get(queue) {
            Some(fifo) => {
                fifo.lock().push_back(timed);
                Ok(())
            }
            None => {
                self.abandon(timed);
                Err(Error::internal(format!("cuda: queue {queue} has no timer")))
            }
        }
    }

    /// Gives back the events of work that could not be enqueued.
    fn abandon(&self, timed: Timed) {
        self.release(timed.events());
    }

    /// The timings of submission `work` of `queue`, which completed. Timings of earlier submissions
    /// still open (they faulted, so nothing read them) go back to the pool on the way.
    pub fn take(&self, queue: usize, work: u64) -> Result<Option<Timed>> {
        // Nothing timed on the queue (the usual case: timings are off): no lock.
        if self.open.get(queue).is_some_and(CountedFifo::is_empty) {
            return Ok(None);
        }
        let mut fifo = self.queue(queue)?;
        while let Some(timed) = fifo.pop_front() {
            if timed.work == work {
                return Ok(Some(timed));
            }
            self.release(timed.events());
        }
        Ok(None)
    }

    /// Reads back what `timed` measured for `work` (completed): its device time onto `work`, and
    /// its records into `work`'s profile; the events go back to the pool.
    pub fn read(&self, work: &Work, timed: Timed) -> Result<()> {
        let bound = self.context.bind()?;
        let outcome = read_timed(&bound, work, &timed);
        self.release(timed.events());
        outcome
    }

    /// Drops the open timings of submission `work` (it faulted and will never be read).
    pub fn discard(&self, queue: usize, work: u64) {
        if self.open.get(queue).is_some_and(CountedFifo::is_empty) {
            return;
        }
        if let Ok(mut fifo) = self.queue(queue) {
            while let Some(index) = fifo.iter().position(|timed| timed.work == work) {
                if let Some(timed) = fifo.remove(index) {
                    self.release(timed.events());
                }
            }
        }
    }
}

/// Milliseconds from `start` to `end`, both completed timing events of one context.
fn elapsed(bound: &Bound<'_>, start: &CudaEvent, end: &CudaEvent) -> Result<Duration> {
    let ms = result::event_elapsed_time(bound, start.raw(), end.raw())?;
    Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
}

fn read_timed(bound: &Bound<'_>, work: &Work, timed: &Timed) -> Result<()> {
    if let Some((start, end)) = &timed.whole {
        work.set_device_time(elapsed(bound, start, end)?);
    }
    let (Some(profile), Some(anchor)) = (work.profile(), &timed.anchor) else { return Ok(()) };
    let at = |event: &CudaEvent| -> Result<Instant> { Ok(anchor.host + elapsed(bound, &anchor.event, event)?) };
    if let Some((start, end)) = &timed.whole
        && profile.options().records_queue_operations()
    {
        profile.record_queue_operation(work, at(start)?, at(end)?);
    }
    if let hal::driver::QueueOp::Execute { command_buffer, .. } = &work.op {
        use hal::driver::CommandBufferExt;
        let commands = command_buffer.commands();
        for (index, start, end) in &timed.dispatches {
            if let Some(command) = commands.get(*index) {
                profile.record_dispatch(work, *index, command, None, at(start)?, at(end)?);
            }
        }
    }
    Ok(())
}

/// A timing event the device reached at `host` (on the host's clock), give or take `uncertainty`.
pub struct Anchor {
    event: CudaEvent,
    host: Instant,
    /// Half the host bracket around the event.
    pub uncertainty: Duration,
}

/// The device's clock anchors: an idle stream of their own (kept for the device's lifetime once
/// made) and the current anchor.
pub struct ProfileClock {
    context: Arc<Context>,
    stream: CUstream,
    current: Mutex<Option<Arc<Anchor>>>,
}

// SAFETY: the stream is a driver handle used only under `current`'s lock with the context bound, and
// destroyed once on drop.
unsafe impl Send for ProfileClock {}
// SAFETY: see `Send`.
unsafe impl Sync for ProfileClock {}

impl ProfileClock {
    /// A clock with its own stream on `context`'s device.
    pub fn new(context: &Arc<Context>) -> Result<Self> {
        let stream = result::stream_create(&context.bind()?, CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
            .map_err(|e| e.context("the profiling clock's stream"))?;
        Ok(ProfileClock { context: context.clone(), stream, current: Mutex::new(None) })
    }

    /// The current anchor, renewed first when it is missing or over `ANCHOR_LIFETIME` old (which
    /// blocks for a few microseconds: the anchor stream is idle).
    pub fn anchor(&self) -> Result<Arc<Anchor>> {
        let mut current = lock(&self.current);
        if let Some(anchor) = current.as_ref()
            && anchor.host.elapsed() < ANCHOR_LIFETIME
        {
            return Ok(anchor.clone());
        }
        let anchor = Arc::new(self.measure()?);
        *current = Some(anchor.clone());
        Ok(anchor)
    }

    /// Records a timing event on the idle clock stream and spins until the device reached it: the
    /// device's time of the event lies between the host instants before the record and after the
    /// query that saw it complete. The tightest of `ANCHOR_ATTEMPTS` brackets is kept.
    fn measure(&self) -> Result<Anchor> {
        let bound = self.context.bind()?;
        let mut best: Option<Anchor> = None;
        for _ in 0..ANCHOR_ATTEMPTS {
            let event = timing_event(&self.context)?;
            let before = Instant::now();
            result::event_record(&bound, event.raw(), self.stream)?;
            while !event.query()? {
                std::hint::spin_loop();
            }
            let after = Instant::now();
            let half = (after - before) / 2;
            if best.as_ref().is_none_or(|b| half < b.uncertainty) {
                best = Some(Anchor { event, host: before + half, uncertainty: half });
            }
        }
        best.ok_or_else(|| Error::internal("cuda: no clock anchor measured"))
    }
}

impl Drop for ProfileClock {
    fn drop(&mut self) {
        let Ok(bound) = self.context.bind() else {
            tracing::warn!("cannot bind the context to destroy the profiling clock's stream");
            return;
        };
        // Only anchor records ran on it, each seen complete; drain anyway before destroying.
        let drained = result::stream_synchronize(&bound, self.stream);
        // SAFETY: destroyed once, here; nothing else enqueues on it.
        let destroyed = unsafe { result::stream_destroy(&bound, self.stream) };
        if let Err(e) = drained.and(destroyed) {
            tracing::warn!(%e, "profiling clock stream teardown failed");
        }
    }
}
