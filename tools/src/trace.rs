//! The `--trace` timeline: a [`tracing_subscriber::Layer`] that records the HAL's spans and events,
//! and a writer of Chrome trace JSON (the `traceEvents` format that Perfetto and `chrome://tracing`
//! open).
//!
//! What is recorded, with timestamps in microseconds since the recorder was made:
//! - the HAL's spans `submit` (the calling thread, in `Queue`), `issue` (waits satisfied or covered
//!   by device events: the work goes onto the queue's stream) and `complete` (the queue's completion
//!   thread retires it and applies its signals), each with its fields `queue`, `action`, `op`, as
//!   `"X"` events with `tid` = queue index, one process per span name; a `complete` span also carries
//!   `device_ns`, the time the GPU spent on the submission, when the driver timed it (`hal run
//!   --trace` turns CUDA's submission timings on);
//! - semaphore values reached ([`crate::probe`] events) as `"C"` counter events, one track per
//!   semaphore;
//! - other HAL events (warnings, failures) as `"i"` instant events;
//! - slices a caller adds with [`TraceRecorder::add_slice`] (`hal run` adds one per submission on
//!   its queue's track in the "device queues" process).
//!
//! A recorder made with [`TraceRecorder::streaming`] writes each event to its [`TraceFile`] as it is
//! recorded (through a small buffer, so memory stays bounded however long the run) and closes the
//! JSON at [`TraceRecorder::finish`]; viewers order events by their timestamps. One made with
//! [`TraceRecorder::new`] keeps its events in memory for [`TraceRecorder::chrome_json`].
//!
//! ```
//! use tools::trace::TraceRecorder;
//! let recorder = TraceRecorder::new();
//! recorder.add_slice(0, "dispatch", std::time::Duration::ZERO, std::time::Duration::from_micros(5));
//! let json = recorder.chrome_json();
//! assert!(json.starts_with("{\"traceEvents\":["));
//! ```

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Serialize, Serializer};
use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record as SpanValues};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::probe::SEMAPHORE_TARGET;
use crate::trace_file::TraceFile;

/// Process id of the per-submission slices a caller adds (and of the semaphore counters).
pub const PID_QUEUES: u32 = 1;
/// Process id of the `submit` spans.
pub const PID_SUBMIT: u32 = 2;
/// Process id of the `issue` spans.
pub const PID_ISSUE: u32 = 3;
/// Process id of the `complete` spans.
pub const PID_COMPLETE: u32 = 4;
/// Process id of everything else the HAL emits (events, spans of other names).
pub const PID_OTHER: u32 = 5;
/// Process id of the device's own timestamps (a profiled run: `hal run --trace`): per queue, a
/// track of queue operations (`tid` = 2 x queue) and one of dispatches (`tid` = 2 x queue + 1).
pub const PID_DEVICE: u32 = 6;
/// The `tid` of spans and events that name no queue.
pub const TID_NO_QUEUE: u64 = 1000;

/// Bits of a track's `tid` below its device index (see [`queue_track`]).
const DEVICE_SHIFT: u32 = 16;

/// The `tid` of queue `queue` of the run's device `device`: the queue index on device 0 (a track
/// named "queue Q", as the HAL's own spans use), else named "device D queue Q".
pub fn queue_track(device: usize, queue: usize) -> u64 {
    ((device as u64) << DEVICE_SHIFT) | queue as u64
}

/// Bytes a streaming recorder buffers before writing to its file.
const STREAM_BUFFER: usize = 64 * 1024;

/// Everything one run recorded. Cheap to clone; clones share the records.
#[derive(Clone)]
pub struct TraceRecorder {
    inner: Arc<Inner>,
}

struct Inner {
    epoch: Instant,
    state: Mutex<State>,
}

/// Where records go, and what is kept of them for [`TraceRecorder::span_counts`].
struct State {
    sink: Sink,
    /// (span name, queue, spans recorded) of the HAL's spans.
    span_counts: Vec<(String, u64, usize)>,
}

enum Sink {
    /// Kept for [`TraceRecorder::chrome_json`].
    Memory(Vec<Record>),
    /// Written as recorded.
    Stream(Stream),
    /// [`TraceRecorder::finish`]ed: later records are dropped.
    Finished,
}

/// An open trace file with the array of events begun.
struct Stream {
    out: BufWriter<File>,
    path: PathBuf,
    /// The `(pid, tid)` tracks named so far (each gets its `thread_name` event before its first).
    named: Vec<(u32, u64)>,
    /// The first write that failed: later records are dropped, [`TraceRecorder::finish`] reports it.
    error: Option<io::Error>,
}

/// One recorded thing.
#[derive(Clone, Debug)]
enum Record {
    Slice { pid: u32, tid: u64, name: String, start: Duration, end: Duration, args: Vec<(&'static str, Value)> },
    Counter { name: String, at: Duration, value: u64 },
    Instant { pid: u32, tid: u64, name: String, at: Duration, args: Vec<(&'static str, Value)> },
}

impl Record {
    fn at(&self) -> Duration {
        match self {
            Record::Slice { start, .. } => *start,
            Record::Counter { at, .. } | Record::Instant { at, .. } => *at,
        }
    }
}

impl TraceRecorder {
    /// An empty recorder that keeps its events in memory; its epoch (time zero of the trace) is now.
    pub fn new() -> Self {
        TraceRecorder::with_sink(Sink::Memory(Vec::new()))
    }

    /// A recorder that writes each event to `file` as it is recorded, from an epoch of now; the file
    /// is emptied first. Call [`finish`](Self::finish) to close the JSON. An error names the file.
    pub fn streaming(file: TraceFile) -> Result<Self, String> {
        let path = file.path().to_path_buf();
        let error = |e: io::Error| format!("cannot write the trace to {}: {e}", path.display());
        let mut out = BufWriter::with_capacity(STREAM_BUFFER, file.start()?);
        // Flushed now, so a file that takes no bytes (a full disk, `/dev/full`) fails before the run.
        write_header(&mut out).and_then(|()| out.flush()).map_err(error)?;
        Ok(TraceRecorder::with_sink(Sink::Stream(Stream { out, path, named: Vec::new(), error: None })))
    }

    fn with_sink(sink: Sink) -> Self {
        let state = Mutex::new(State { sink, span_counts: Vec::new() });
        TraceRecorder { inner: Arc::new(Inner { epoch: Instant::now(), state }) }
    }

    /// Time zero of the trace.
    pub fn epoch(&self) -> Instant {
        self.inner.epoch
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Whole records only: a poisoned lock still holds a consistent state (a stream cut mid-event
        // is reported by its writer's error).
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Duration {
        self.inner.epoch.elapsed()
    }

    /// Keeps or writes `record`.
    fn push(&self, record: Record) {
        let mut state = self.state();
        // The HAL's spans have a handful of names; the caller's slices (one name per step) are not counted.
        if let Record::Slice { pid, tid, name, .. } = &record
            && *pid != PID_QUEUES
            && *pid != PID_DEVICE
        {
            match state.span_counts.iter_mut().find(|(n, q, _)| n == name && q == tid) {
                Some((_, _, count)) => *count += 1,
                None => state.span_counts.push((name.clone(), *tid, 1)),
            }
        }
        match &mut state.sink {
            Sink::Memory(records) => records.push(record),
            Sink::Stream(stream) if stream.error.is_none() => {
                if let Err(e) = write_event(&mut stream.out, &record, &mut stream.named) {
                    stream.error = Some(e);
                }
            }
            Sink::Stream(_) | Sink::Finished => {}
        }
    }

    /// Adds a slice `name` on queue `queue`'s track of the "device queues" process, from `start` to
    /// `end` (times since [`epoch`](Self::epoch)).
    pub fn add_slice(&self, queue: u64, name: &str, start: Duration, end: Duration) {
        self.push(Record::Slice {
            pid: PID_QUEUES,
            tid: queue,
            name: name.to_string(),
            start,
            end: end.max(start),
            args: Vec::new(),
        });
    }

    /// Adds `profile`'s records as slices of the "device timestamps" process: each queue operation on
    /// its queue's operations track, each dispatch (named by its entry point, with its command
    /// index and workgroups) on its queue's dispatches track. Records from before the epoch start
    /// at 0.
    pub fn add_profile(&self, profile: &hal::Profile) {
        let since = |at: Instant| at.saturating_duration_since(self.inner.epoch);
        for op in &profile.queue_operations {
            self.push(Record::Slice {
                pid: PID_DEVICE,
                tid: 2 * op.queue as u64,
                name: op.operation.to_string(),
                start: since(op.start),
                end: since(op.end).max(since(op.start)),
                args: vec![("action", op.submission.into())],
            });
        }
        for dispatch in &profile.dispatches {
            let workgroups = dispatch.workgroups.map_or_else(|| "indirect".to_string(), |w| format!("{w:?}"));
            self.push(Record::Slice {
                pid: PID_DEVICE,
                tid: 2 * dispatch.queue as u64 + 1,
                name: dispatch.entry_point.clone(),
                start: since(dispatch.start),
                end: since(dispatch.end).max(since(dispatch.start)),
                args: vec![
                    ("action", dispatch.submission.into()),
                    ("command", dispatch.command_index.into()),
                    ("workgroups", workgroups.into()),
                ],
            });
        }
    }

    /// The layer to install on a `tracing_subscriber` registry.
    pub fn layer(&self) -> ChromeLayer {
        ChromeLayer { recorder: self.clone() }
    }

    /// Installs a registry with this recorder's layer as the process-wide `tracing` subscriber (the
    /// HAL's completion and stream threads emit spans too, so a thread-local default would miss
    /// them). Fails if a global subscriber is already set.
    pub fn install_global(&self) -> Result<(), String> {
        let subscriber = tracing_subscriber::registry().with(self.layer());
        tracing::subscriber::set_global_default(subscriber)
            .map_err(|e| format!("cannot install the trace recorder: {e}"))
    }

    /// How many HAL spans named `name` were recorded on each queue, as (queue, count), by queue
    /// (the slices a caller adds are not counted).
    pub fn span_counts(&self, name: &str) -> Vec<(u64, usize)> {
        let mut counts: Vec<(u64, usize)> =
            self.state().span_counts.iter().filter(|(n, ..)| n == name).map(|(_, q, c)| (*q, *c)).collect();
        counts.sort();
        counts
    }

    /// Ends the recording: a streaming recorder closes the JSON and flushes its file, and reports
    /// the first write that failed, naming the file. Later records are dropped (the recorder may
    /// stay installed as the global subscriber). An in-memory recorder keeps its events.
    pub fn finish(&self) -> Result<(), String> {
        let mut state = self.state();
        if matches!(state.sink, Sink::Memory(_)) {
            return Ok(());
        }
        let Sink::Stream(mut stream) = std::mem::replace(&mut state.sink, Sink::Finished) else { return Ok(()) };
        drop(state);
        let closed = match stream.error.take() {
            Some(e) => Err(e),
            None => write_footer(&mut stream.out).and_then(|()| stream.out.flush()),
        };
        closed.map_err(|e| format!("cannot write the trace to {}: {e}", stream.path.display()))
    }

    /// The Chrome trace JSON of everything an in-memory recorder recorded so far, events in time
    /// order. A streaming recorder's events are in its file: this gives an empty trace for it.
    pub fn chrome_json(&self) -> String {
        let mut records = match &self.state().sink {
            Sink::Memory(records) => records.clone(),
            Sink::Stream(_) | Sink::Finished => Vec::new(),
        };
        records.sort_by_key(Record::at);
        let mut out = Vec::with_capacity(64 + records.len() * 160);
        let mut named = Vec::new();
        // Writing to a `Vec` cannot fail.
        let _ = write_header(&mut out);
        for record in &records {
            let _ = write_event(&mut out, record, &mut named);
        }
        let _ = write_footer(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }
}

impl Default for TraceRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for TraceRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state().sink {
            Sink::Memory(records) => write!(f, "TraceRecorder({} records)", records.len()),
            Sink::Stream(stream) => write!(f, "TraceRecorder(streaming to {})", stream.path.display()),
            Sink::Finished => write!(f, "TraceRecorder(finished)"),
        }
    }
}

/// The processes of the trace, each with its name (in this order in viewers).
const PROCESSES: [(u32, &str); 6] = [
    (PID_QUEUES, "device queues (per submission: ready -> signal reached)"),
    (PID_SUBMIT, "hal submit (calling thread)"),
    (PID_ISSUE, "hal issue (waits satisfied -> on the stream)"),
    (PID_COMPLETE, "hal complete (completion thread applies signals)"),
    (PID_OTHER, "hal events"),
    (PID_DEVICE, "device timestamps (profiled queue operations and dispatches)"),
];

/// One event as the viewers read it, its fields in this order; `None` fields are left out.
#[derive(Serialize)]
struct ChromeEvent<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    ph: &'static str,
    /// An instant event's scope: `"t"`, its track.
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    pid: u32,
    tid: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    #[serde(serialize_with = "object")]
    args: &'a [(&'static str, Value)],
}

impl<'a> ChromeEvent<'a> {
    /// A metadata (`"M"`) event: the name or order of a process or track.
    fn metadata(name: &'a str, pid: u32, tid: u64, args: &'a [(&'static str, Value)]) -> Self {
        ChromeEvent { name, cat: None, ph: "M", s: None, pid, tid, ts: None, dur: None, args }
    }

    /// Writes the event on a line of its own after the one before it.
    fn write_next(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(b",\n")?;
        Ok(serde_json::to_writer(out, self)?)
    }
}

/// `args` as a JSON object.
fn object<S: Serializer>(args: &&[(&'static str, Value)], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_map(args.iter().map(|(name, value)| (name, value)))
}

/// The start of the JSON: the array of events, opened with the processes' names and order. Each
/// event is on its own line.
fn write_header(out: &mut impl Write) -> io::Result<()> {
    out.write_all(b"{\"traceEvents\":[\n")?;
    for (i, (pid, name)) in PROCESSES.into_iter().enumerate() {
        if i > 0 {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut *out, &ChromeEvent::metadata("process_name", pid, 0, &[("name", name.into())]))?;
        ChromeEvent::metadata("process_sort_index", pid, 0, &[("sort_index", pid.into())]).write_next(out)?;
    }
    Ok(())
}

/// One event after the header, preceded by its track's name the first time the track appears.
fn write_event(out: &mut impl Write, record: &Record, named: &mut Vec<(u32, u64)>) -> io::Result<()> {
    if let Record::Slice { pid, tid, .. } | Record::Instant { pid, tid, .. } = record
        && !named.contains(&(*pid, *tid))
    {
        named.push((*pid, *tid));
        ChromeEvent::metadata("thread_name", *pid, *tid, &[("name", track_name(*pid, *tid).into())]).write_next(out)?;
    }
    match record {
        Record::Slice { pid, tid, name, start, end, args } => ChromeEvent {
            name,
            cat: Some("hal"),
            ph: "X",
            s: None,
            pid: *pid,
            tid: *tid,
            ts: Some(micros(*start)),
            dur: Some(micros(end.saturating_sub(*start))),
            args,
        }
        .write_next(out),
        Record::Counter { name, at, value } => ChromeEvent {
            name,
            cat: Some("semaphore"),
            ph: "C",
            s: None,
            pid: PID_QUEUES,
            tid: 0,
            ts: Some(micros(*at)),
            dur: None,
            args: &[("value", (*value).into())],
        }
        .write_next(out),
        Record::Instant { pid, tid, name, at, args } => ChromeEvent {
            name,
            cat: Some("hal"),
            ph: "i",
            s: Some("t"),
            pid: *pid,
            tid: *tid,
            ts: Some(micros(*at)),
            dur: None,
            args,
        }
        .write_next(out),
    }
}

/// The name of track `tid` of process `pid`.
fn track_name(pid: u32, tid: u64) -> String {
    match (pid, tid) {
        (PID_DEVICE, tid) if tid % 2 == 0 => format!("queue {} operations", tid / 2),
        (PID_DEVICE, tid) => format!("queue {} dispatches", tid / 2),
        (_, TID_NO_QUEUE) => "no queue".to_string(),
        (_, tid) if tid >> DEVICE_SHIFT > 0 => {
            format!("device {} queue {}", tid >> DEVICE_SHIFT, tid & ((1 << DEVICE_SHIFT) - 1))
        }
        (_, tid) => format!("queue {tid}"),
    }
}

/// A duration in microseconds (the unit of `ts` and `dur`) to the nanosecond: below 2^43 µs (101
/// days) the double is written back as the three decimals it was made from.
fn micros(duration: Duration) -> f64 {
    duration.as_nanos() as f64 / 1e3
}

/// The end of the JSON.
fn write_footer(out: &mut impl Write) -> io::Result<()> {
    out.write_all(b"\n],\"displayTimeUnit\":\"ms\"}\n")
}

fn pid_of_span(name: &str) -> u32 {
    match name {
        "submit" => PID_SUBMIT,
        "issue" => PID_ISSUE,
        "complete" => PID_COMPLETE,
        _ => PID_OTHER,
    }
}

/// Whether a callsite is the HAL's (or the tools' own probes): everything else is ignored.
fn wanted(metadata: &Metadata<'_>) -> bool {
    let target = metadata.target();
    target == "hal" || target.starts_with("hal::") || target.starts_with("driver_") || target == SEMAPHORE_TARGET
}

/// The layer: records spans and events into its [`TraceRecorder`].
pub struct ChromeLayer {
    recorder: TraceRecorder,
}

/// What the layer keeps in a span's extensions while it is open.
struct OpenSpan {
    fields: Fields,
    entered: Option<Duration>,
}

/// The fields the HAL puts on its spans and events.
#[derive(Default)]
struct Fields {
    queue: Option<u64>,
    action: Option<u64>,
    op: Option<String>,
    semaphore: Option<u64>,
    value: Option<u64>,
    label: Option<String>,
    message: Option<String>,
    other: Vec<(&'static str, Value)>,
}

impl Fields {
    fn args(&self) -> Vec<(&'static str, Value)> {
        let mut args = Vec::new();
        if let Some(action) = self.action {
            args.push(("action", action.into()));
        }
        if let Some(op) = &self.op {
            args.push(("op", op.as_str().into()));
        }
        args.extend(self.other.iter().cloned());
        args
    }
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "queue" => self.queue = Some(value),
            "action" => self.action = Some(value),
            "semaphore" => self.semaphore = Some(value),
            "value" => self.value = Some(value),
            name => self.other.push((name, value.into())),
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        match u64::try_from(value) {
            Ok(value) => self.record_u64(field, value),
            Err(_) => self.other.push((field.name(), value.to_string().into())),
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "op" => self.op = Some(value.to_string()),
            "label" => self.label = Some(value.to_string()),
            "message" => self.message = Some(value.to_string()),
            name => self.other.push((name, value.into())),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

impl<S> Layer<S> for ChromeLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if wanted(metadata) { Interest::always() } else { Interest::never() }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        wanted(metadata)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(OpenSpan { fields, entered: None });
        }
    }

    fn on_record(&self, id: &Id, values: &SpanValues<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(open) = span.extensions_mut().get_mut::<OpenSpan>()
        {
            values.record(&mut open.fields);
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(open) = span.extensions_mut().get_mut::<OpenSpan>()
        {
            open.entered.get_or_insert(self.recorder.now());
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let end = self.recorder.now();
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        let Some(open) = extensions.get_mut::<OpenSpan>() else { return };
        let Some(start) = open.entered.take() else { return };
        let name = span.name();
        let record = Record::Slice {
            pid: pid_of_span(name),
            tid: open.fields.queue.unwrap_or(TID_NO_QUEUE),
            name: name.to_string(),
            start,
            end,
            args: open.fields.args(),
        };
        drop(extensions);
        self.recorder.push(record);
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let at = self.recorder.now();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let record = match (fields.semaphore, fields.value) {
            (Some(semaphore), Some(value)) => {
                let name = match &fields.label {
                    Some(label) => format!("{label} (semaphore {semaphore})"),
                    None => format!("semaphore {semaphore}"),
                };
                Record::Counter { name, at, value }
            }
            _ => {
                let mut args = fields.args();
                args.push(("level", event.metadata().level().as_str().into()));
                if let Some(semaphore) = fields.semaphore {
                    args.push(("semaphore", semaphore.into()));
                }
                if let Some(label) = &fields.label {
                    args.push(("label", label.as_str().into()));
                }
                let name = fields.message.clone().unwrap_or_else(|| event.metadata().name().to_string());
                Record::Instant { pid: PID_OTHER, tid: fields.queue.unwrap_or(TID_NO_QUEUE), name, at, args }
            }
        };
        self.recorder.push(record);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The events of a whole trace, checked for what every viewer needs: the envelope, a `ph`,
    /// `name` and `pid` on every event, a `ts` on every one but metadata, a `dur` on every slice.
    fn events(text: &str) -> Vec<Value> {
        let trace: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        assert_eq!(trace["displayTimeUnit"], "ms", "{text}");
        let events = trace["traceEvents"].as_array().expect("a traceEvents array").clone();
        for event in &events {
            let ph = event["ph"].as_str().expect("ph");
            assert!(event["name"].is_string() && event["pid"].is_u64() && event["tid"].is_u64(), "{event}");
            assert_eq!(ph != "M", event["ts"].is_f64(), "{event}");
            assert_eq!(ph == "X", event["dur"].is_f64(), "{event}");
        }
        events
    }

    /// The events of `events` whose `ph` is `ph`, and their names.
    fn names<'a>(events: &'a [Value], ph: &str) -> Vec<&'a str> {
        events.iter().filter(|e| e["ph"] == ph).map(|e| e["name"].as_str().unwrap()).collect()
    }

    /// The one event named `name`.
    fn event<'a>(events: &'a [Value], name: &str) -> &'a Value {
        let mut found = events.iter().filter(|e| e["name"] == name);
        let event = found.next().unwrap_or_else(|| panic!("no event '{name}'"));
        assert!(found.next().is_none(), "more than one event '{name}'");
        event
    }

    #[test]
    fn an_empty_trace_names_and_orders_every_process() {
        let events = events(&TraceRecorder::new().chrome_json());
        assert_eq!(events.len(), 2 * PROCESSES.len());
        let sorted: Vec<(u64, u64)> = events
            .iter()
            .filter(|e| e["name"] == "process_sort_index")
            .map(|e| (e["pid"].as_u64().unwrap(), e["args"]["sort_index"].as_u64().unwrap()))
            .collect();
        assert_eq!(sorted, PROCESSES.map(|(pid, _)| (u64::from(pid), u64::from(pid))));
        let named: Vec<&str> = events
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(named, PROCESSES.map(|(_, name)| name));
    }

    #[test]
    fn times_are_microseconds_to_the_nanosecond() {
        let text = |nanos: u64| serde_json::to_string(&micros(Duration::from_nanos(nanos))).unwrap();
        assert_eq!(text(1_234_567), "1234.567");
        assert_eq!(text(1), "0.001");
        assert_eq!(text(100 * 86_400 * 1_000_000_000 + 999), "8640000000000.999");
    }

    #[test]
    fn names_with_quotes_and_control_characters_stay_json() {
        let recorder = TraceRecorder::new();
        let name = "a\"b\\c\nd\u{1}é";
        recorder.add_slice(0, name, Duration::ZERO, Duration::from_nanos(1_500));
        let events = events(&recorder.chrome_json());
        assert_eq!(event(&events, name)["dur"], 1.5);
    }

    #[test]
    fn records_hal_spans_and_probe_counters_with_a_scoped_subscriber() {
        let recorder = TraceRecorder::new();
        let subscriber = tracing_subscriber::registry().with(recorder.layer());
        tracing::subscriber::with_default(subscriber, || {
            {
                let _span = tracing::trace_span!(target: "hal::queue", "submit", queue = 1u64, op = "copy").entered();
            }
            tracing::trace!(target: SEMAPHORE_TARGET, semaphore = 7u64, label = "q0", value = 3u64);
            tracing::warn!(target: "hal::driver::scheduler", queue = 0u64, "issue failed");
            tracing::info!(target: "elsewhere", "ignored");
        });
        assert_eq!(recorder.span_counts("submit"), vec![(1, 1)]);
        let events = events(&recorder.chrome_json());
        assert_eq!(names(&events, "X"), ["submit"]);
        assert_eq!(names(&events, "C"), ["q0 (semaphore 7)"]);
        assert_eq!(names(&events, "i"), ["issue failed"]);
        assert_eq!(events.len(), 2 * PROCESSES.len() + 2 + 3, "two tracks named, three events");

        let submit = event(&events, "submit");
        assert_eq!((&submit["cat"], &submit["pid"], &submit["tid"]), (&json!("hal"), &json!(PID_SUBMIT), &json!(1)));
        assert_eq!(submit["args"], json!({ "op": "copy" }));
        let counter = event(&events, "q0 (semaphore 7)");
        assert_eq!((&counter["cat"], &counter["args"]), (&json!("semaphore"), &json!({ "value": 3 })));
        let warning = event(&events, "issue failed");
        assert_eq!((&warning["pid"], &warning["tid"], &warning["s"]), (&json!(PID_OTHER), &json!(0), &json!("t")));
        assert_eq!(warning["args"]["level"], "WARN");
        let tracks: Vec<(&Value, &Value, &Value)> = events
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| (&e["pid"], &e["tid"], &e["args"]["name"]))
            .collect();
        assert_eq!(
            tracks,
            [(&json!(PID_SUBMIT), &json!(1), &json!("queue 1")), (&json!(PID_OTHER), &json!(0), &json!("queue 0"))]
        );
    }

    #[test]
    fn a_streaming_recorder_writes_events_as_they_come_and_keeps_none() {
        let path = std::env::temp_dir().join(format!("hal-trace-stream-{}.json", std::process::id()));
        let recorder = TraceRecorder::streaming(TraceFile::create(&path).unwrap()).unwrap();
        let header = std::fs::metadata(&path).unwrap().len();
        // More than the write buffer: some of it reaches the file before the run ends.
        let steps = 2 * STREAM_BUFFER as u64 / 100;
        for step in 0..steps {
            recorder.add_slice(
                step % 2,
                &format!("stencil {step}"),
                Duration::from_micros(step),
                Duration::from_micros(step + 1),
            );
        }
        assert!(std::fs::metadata(&path).unwrap().len() > header + STREAM_BUFFER as u64 / 2, "nothing streamed yet");
        assert_eq!(
            recorder.chrome_json(),
            TraceRecorder::new().chrome_json(),
            "the events are in the file, not in memory"
        );
        let subscriber = tracing_subscriber::registry().with(recorder.layer());
        tracing::subscriber::with_default(subscriber, || {
            let _span = tracing::trace_span!(target: "hal::queue", "issue", queue = 1u64, op = "copy").entered();
        });
        assert_eq!(recorder.span_counts("issue"), vec![(1, 1)]);
        assert_eq!(recorder.span_counts("stencil 3"), vec![], "the caller's slices are not counted");
        recorder.finish().unwrap();
        recorder.add_slice(0, "after the end", Duration::ZERO, Duration::ZERO);
        assert!(recorder.finish().is_ok(), "finishing twice is harmless");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();

        let events = events(&text);
        let slices = names(&events, "X");
        assert_eq!(slices.len() as u64, steps + 1, "every slice and the span, nothing after the end");
        assert!(slices.iter().take(steps as usize).enumerate().all(|(i, name)| *name == format!("stencil {i}")));
        assert_eq!(slices.last(), Some(&"issue"));
        assert_eq!(event(&events, "stencil 1000")["ts"], 1000.0);
        assert_eq!(names(&events, "M").iter().filter(|n| **n == "thread_name").count(), 3, "each track named once");
        // The envelope on its first and last lines, one event on each line between.
        assert_eq!(text.lines().count(), events.len() + 2, "{text}");
    }

    #[test]
    fn device_time_recorded_on_a_complete_span_reaches_its_args() {
        let recorder = TraceRecorder::new();
        let subscriber = tracing_subscriber::registry().with(recorder.layer());
        tracing::subscriber::with_default(subscriber, || {
            // As the scheduler does: the field is declared empty and recorded once the device time is known.
            let span = tracing::trace_span!(
                target: "hal::driver::scheduler::completion",
                "complete",
                queue = 0u64,
                action = 9u64,
                device_ns = tracing::field::Empty
            )
            .entered();
            span.record("device_ns", 12_345u64);
        });
        let events = events(&recorder.chrome_json());
        assert_eq!(event(&events, "complete")["args"], json!({ "action": 9, "device_ns": 12_345 }));
    }
}
