//! IREE's device profiling on a thal device, through IREE's own API and a sink written here: the
//! session's chunks arrive in schema order (session, device, queues, clock samples, events, end),
//! a queue operation's device time lies between the clock samples around it, work that never ran
//! records nothing, a fill's queue event and host execution span share its submission and come in
//! time order (submitted, ready, run), and the refusals (a second session, families the HAL does
//! not record, no sink) are the statuses IREE's callers expect; an end without a session ends
//! nothing, as on IREE's own devices.

mod common;

use std::ptr::null_mut;
use std::sync::Mutex;

use common::iree_device::{Opened, allocate, open, release, semaphore, timeout, with_lists};
use hal::StatusCode;
use hal_iree::eerie_sys::runtime as sys;

/// One chunk the sink was given: its content type, metadata ordinals and payload.
#[derive(Clone, Debug)]
struct Chunk {
    content_type: String,
    queue_ordinal: u32,
    payload: Vec<u8>,
}

/// A profile sink recording every call (IREE's resource header first, as IREE's sinks are laid out).
#[repr(C)]
struct RecordingSink {
    resource: sys::iree_hal_resource_t,
    calls: Mutex<Vec<Chunk>>,
}

fn content_type(metadata: *const sys::iree_hal_profile_chunk_metadata_t) -> String {
    // SAFETY: IREE's sinks are called with live metadata whose content type is readable.
    unsafe {
        let view = (*metadata).content_type;
        String::from_utf8_lossy(std::slice::from_raw_parts(view.data.cast::<u8>(), view.size)).into_owned()
    }
}

fn sink_of<'a>(sink: *mut sys::iree_hal_profile_sink_t) -> &'a RecordingSink {
    // SAFETY: the only sinks these callbacks are installed on are `RecordingSink`s the test keeps.
    unsafe { &*sink.cast::<RecordingSink>() }
}

unsafe extern "C" fn destroy(_sink: *mut sys::iree_hal_profile_sink_t) {
    // The test owns the sink.
}

unsafe extern "C" fn begin_session(
    sink: *mut sys::iree_hal_profile_sink_t,
    metadata: *const sys::iree_hal_profile_chunk_metadata_t,
) -> sys::iree_status_t {
    let chunk = Chunk { content_type: format!("begin {}", content_type(metadata)), queue_ordinal: 0, payload: vec![] };
    sink_of(sink).calls.lock().unwrap().push(chunk);
    null_mut()
}

unsafe extern "C" fn write(
    sink: *mut sys::iree_hal_profile_sink_t,
    metadata: *const sys::iree_hal_profile_chunk_metadata_t,
    iovec_count: usize,
    iovecs: *const sys::iree_const_byte_span_t,
) -> sys::iree_status_t {
    let mut payload = Vec::new();
    for i in 0..iovec_count {
        // SAFETY: IREE passes `iovec_count` readable spans.
        unsafe {
            let span = *iovecs.add(i);
            payload.extend_from_slice(std::slice::from_raw_parts(span.data, span.data_length));
        }
    }
    // SAFETY: live metadata.
    let queue_ordinal = unsafe { (*metadata).queue_ordinal };
    sink_of(sink).calls.lock().unwrap().push(Chunk { content_type: content_type(metadata), queue_ordinal, payload });
    null_mut()
}

unsafe extern "C" fn end_session(
    sink: *mut sys::iree_hal_profile_sink_t,
    metadata: *const sys::iree_hal_profile_chunk_metadata_t,
    code: sys::iree_status_code_t,
) -> sys::iree_status_t {
    let chunk =
        Chunk { content_type: format!("end {} {code}", content_type(metadata)), queue_ordinal: 0, payload: vec![] };
    sink_of(sink).calls.lock().unwrap().push(chunk);
    null_mut()
}

static VTABLE: sys::iree_hal_profile_sink_vtable_t = sys::iree_hal_profile_sink_vtable_t {
    destroy: Some(destroy),
    begin_session: Some(begin_session),
    write: Some(write),
    end_session: Some(end_session),
};

impl RecordingSink {
    fn new() -> Box<RecordingSink> {
        Box::new(RecordingSink {
            resource: sys::iree_hal_resource_t { ref_count: 1, vtable: (&raw const VTABLE).cast() },
            calls: Mutex::new(Vec::new()),
        })
    }

    fn as_sink(&self) -> *mut sys::iree_hal_profile_sink_t {
        (self as *const RecordingSink).cast_mut().cast()
    }

    fn chunks(&self) -> Vec<Chunk> {
        self.calls.lock().unwrap().clone()
    }
}

const SHORT: &str = "application/vnd.iree.hal.profile.";

fn short(chunk: &Chunk) -> String {
    chunk.content_type.replace(SHORT, "")
}

fn begin(device: &Opened, families: u32, sink: *mut sys::iree_hal_profile_sink_t) -> Result<(), hal::Error> {
    let options =
        sys::iree_hal_device_profiling_options_t { data_families: u64::from(families), sink, ..Default::default() };
    // SAFETY: a live device and options that live across the call.
    unsafe { hal_iree::check(sys::iree_hal_device_profiling_begin(device.device, &options)) }
}

fn end(device: &Opened) -> Result<(), hal::Error> {
    // SAFETY: a live device.
    unsafe { hal_iree::check(sys::iree_hal_device_profiling_end(device.device)) }
}

fn records<T: Copy>(chunk: &Chunk) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    assert_eq!(chunk.payload.len() % size, 0, "{}: whole records", chunk.content_type);
    chunk
        .payload
        .chunks_exact(size)
        // SAFETY: `size` bytes of one of IREE's plain records, read unaligned.
        .map(|bytes| unsafe { bytes.as_ptr().cast::<T>().read_unaligned() })
        .collect()
}

fn host_visible_buffer(device: &Opened, size: usize) -> *mut sys::iree_hal_buffer_t {
    let params = sys::iree_hal_buffer_params_t {
        usage: sys::iree_hal_buffer_usage_bits_t_IREE_HAL_BUFFER_USAGE_TRANSFER
            | sys::iree_hal_buffer_usage_bits_t_IREE_HAL_BUFFER_USAGE_MAPPING,
        access: sys::iree_hal_memory_access_bits_t_IREE_HAL_MEMORY_ACCESS_ALL as _,
        type_: sys::iree_hal_memory_type_bits_t_IREE_HAL_MEMORY_TYPE_HOST_LOCAL
            | sys::iree_hal_memory_type_bits_t_IREE_HAL_MEMORY_TYPE_DEVICE_VISIBLE,
        ..Default::default()
    };
    allocate(device, params, size)
}

fn fill(
    device: &Opened,
    wait: (*mut sys::iree_hal_semaphore_t, u64),
    signal: (*mut sys::iree_hal_semaphore_t, u64),
    buffer: *mut sys::iree_hal_buffer_t,
    length: usize,
) -> Result<(), hal::Error> {
    let pattern = 0xA5A5_A5A5u32;
    with_lists(wait, signal, |w, s| {
        // SAFETY: live objects; the pattern lives across the call.
        unsafe {
            sys::iree_hal_device_queue_fill(
                device.device,
                u64::MAX,
                w,
                s,
                buffer,
                0,
                length as _,
                (&raw const pattern).cast(),
                4,
                0,
            )
        }
    })
}

fn wait(semaphore: *mut sys::iree_hal_semaphore_t, value: u64) -> Result<(), hal::Error> {
    // SAFETY: a live semaphore.
    unsafe { hal_iree::check(sys::iree_hal_semaphore_wait(semaphore, value, timeout(20_000), 0)) }
}

const DEVICE_QUEUE_EVENTS: u32 =
    sys::iree_hal_device_profiling_data_family_bits_t_IREE_HAL_DEVICE_PROFILING_DATA_DEVICE_QUEUE_EVENTS;

#[test]
fn a_fill_is_a_device_queue_event_between_the_clock_samples_and_unrun_work_records_nothing() {
    let device = open("thal-cpu-sim");
    let sink = RecordingSink::new();
    let buffer = host_visible_buffer(&device, 256);
    let (ready, done, failed, never) =
        (semaphore(&device, 0), semaphore(&device, 0), semaphore(&device, 0), semaphore(&device, 0));
    begin(&device, DEVICE_QUEUE_EVENTS, sink.as_sink()).expect("a session begins");
    fill(&device, (ready, 0), (done, 1), buffer, 256).expect("the fill is submitted");
    wait(done, 1).expect("the fill completes");
    // A fill whose wait failed never runs: it has no device time.
    // SAFETY: a live semaphore; the status is the semaphore's to keep.
    unsafe {
        let message = "failed on purpose";
        let view = sys::iree_string_view_t { data: message.as_ptr().cast(), size: message.len() };
        let code = sys::iree_status_code_e_IREE_STATUS_ABORTED as sys::iree_status_code_t;
        let status = sys::iree_status_allocate(code, c"profiling.rs".as_ptr(), 0, view);
        sys::iree_hal_semaphore_fail(failed, status);
    }
    fill(&device, (failed, 1), (never, 1), buffer, 256).expect("a fill behind a failed wait is accepted");
    assert!(wait(never, 1).is_err(), "the fill behind a failed wait fails its signal");
    end(&device).expect("the session ends");

    let chunks = sink.chunks();
    let names: Vec<String> = chunks.iter().map(short).collect();
    assert_eq!(
        names,
        [
            "begin session",
            "devices",
            "queues",
            "clock-correlations",
            "queue-device-events",
            "clock-correlations",
            "end session 0",
        ],
        "chunks in schema order"
    );
    let clocks: Vec<sys::iree_hal_profile_clock_correlation_record_t> =
        chunks.iter().filter(|c| short(c) == "clock-correlations").flat_map(records).collect();
    let events: Vec<sys::iree_hal_profile_queue_device_event_t> = records(&chunks[4]);
    assert_eq!(events.len(), 1, "one event: the fill that ran");
    let fill_type = sys::iree_hal_profile_queue_event_type_e_IREE_HAL_PROFILE_QUEUE_EVENT_TYPE_FILL;
    assert_eq!(events[0].type_, fill_type as sys::iree_hal_profile_queue_event_type_t);
    assert_eq!(events[0].queue_ordinal, chunks[4].queue_ordinal);
    assert!(events[0].submission_id != 0 && events[0].event_id != 0);
    assert!(
        clocks[0].device_tick <= events[0].start_tick
            && events[0].start_tick <= events[0].end_tick
            && events[0].end_tick <= clocks[1].device_tick,
        "the fill's ticks {}..{} lie between the clock samples {} and {}",
        events[0].start_tick,
        events[0].end_tick,
        clocks[0].device_tick,
        clocks[1].device_tick
    );
    for clock in &clocks {
        assert!(clock.host_time_begin_ns <= clock.host_time_end_ns, "a host bracket around each sample");
        // Within a millisecond: the same clock, read a thread preemption apart at most.
        let (begin, end) = (clock.host_time_begin_ns as u64, clock.host_time_end_ns as u64);
        assert!(
            begin <= clock.device_tick + 1_000_000 && clock.device_tick <= end + 1_000_000,
            "device ticks are on IREE's host clock: {clock:?}"
        );
    }
    // SAFETY: the test's own references.
    unsafe { sys::iree_hal_buffer_release(buffer) };
    release(&[ready, done, failed, never]);
}

#[test]
fn a_fill_has_a_queue_event_and_a_host_execution_span_of_the_same_submission_in_time_order() {
    let device = open("thal-cpu-sim");
    let sink = RecordingSink::new();
    let buffer = host_visible_buffer(&device, 256);
    let (ready, done) = (semaphore(&device, 0), semaphore(&device, 0));
    let families = sys::iree_hal_device_profiling_data_family_bits_t_IREE_HAL_DEVICE_PROFILING_DATA_QUEUE_EVENTS
        | sys::iree_hal_device_profiling_data_family_bits_t_IREE_HAL_DEVICE_PROFILING_DATA_HOST_EXECUTION_EVENTS;
    begin(&device, families, sink.as_sink()).expect("cpu-sim records host-side families");
    fill(&device, (ready, 1), (done, 1), buffer, 256).expect("the fill is submitted");
    // Ready only once its wait is signalled, a while after its submission.
    std::thread::sleep(std::time::Duration::from_millis(20));
    // SAFETY: a live semaphore.
    unsafe { hal_iree::check(sys::iree_hal_semaphore_signal(ready, 1, std::ptr::null())) }.expect("a host signal");
    wait(done, 1).expect("the fill completes");
    end(&device).expect("the session ends");

    let chunks = sink.chunks();
    let names: Vec<String> = chunks.iter().map(short).collect();
    assert!(!names.iter().any(|n| n == "queue-device-events"), "device events were not asked for: {names:?}");
    let queue_events: Vec<sys::iree_hal_profile_queue_event_t> =
        chunks.iter().filter(|c| short(c) == "queue-events").flat_map(records).collect();
    let spans: Vec<sys::iree_hal_profile_host_execution_event_t> =
        chunks.iter().filter(|c| short(c) == "host-execution-events").flat_map(records).collect();
    assert_eq!((queue_events.len(), spans.len()), (1, 1), "one of each for the one fill: {names:?}");
    let (queued, span) = (queue_events[0], spans[0]);
    let fill_type = sys::iree_hal_profile_queue_event_type_e_IREE_HAL_PROFILE_QUEUE_EVENT_TYPE_FILL;
    assert_eq!((queued.type_, span.type_), (fill_type as _, fill_type as _));
    assert_eq!(queued.submission_id, span.submission_id, "the same submission");
    assert!(queued.submission_id != 0 && queued.event_id != span.event_id);
    assert_eq!((queued.wait_count, queued.signal_count, queued.operation_count), (1, 1, 1));
    assert_eq!((queued.payload_length, span.payload_length), (256, 256));
    assert_eq!(span.status_code, 0, "OK");
    assert!(
        queued.host_time_ns + 15_000_000 <= queued.ready_host_time_ns
            && queued.ready_host_time_ns <= span.start_host_time_ns
            && span.start_host_time_ns <= span.end_host_time_ns,
        "submitted, then ready about 20 ms later, then run: {queued:?} {span:?}"
    );
    // SAFETY: the test's own reference.
    unsafe { sys::iree_hal_buffer_release(buffer) };
    release(&[ready, done]);
}

#[test]
fn sessions_refuse_what_they_cannot_record() {
    let device = open("thal-cpu-sim");
    let sink = RecordingSink::new();
    let code = |r: Result<(), hal::Error>| r.expect_err("refused").code();
    end(&device).expect("an end without a begin ends nothing");
    let memory_events = sys::iree_hal_device_profiling_data_family_bits_t_IREE_HAL_DEVICE_PROFILING_DATA_MEMORY_EVENTS;
    let refused = begin(&device, DEVICE_QUEUE_EVENTS | memory_events, sink.as_sink()).expect_err("memory events");
    assert_eq!(refused.code(), StatusCode::Unimplemented, "{refused}");
    assert!(refused.message().contains("0x80"), "names the family: {refused}");
    assert_eq!(code(begin(&device, DEVICE_QUEUE_EVENTS, null_mut())), StatusCode::InvalidArgument, "no sink");
    begin(&device, 0, sink.as_sink()).expect("no family: IREE begins nothing");
    assert!(sink.chunks().is_empty(), "a refused begin writes nothing: {:?}", sink.chunks());
    begin(&device, DEVICE_QUEUE_EVENTS, sink.as_sink()).expect("a session begins");
    let other = RecordingSink::new();
    assert_eq!(code(begin(&device, DEVICE_QUEUE_EVENTS, other.as_sink())), StatusCode::FailedPrecondition, "twice");
    end(&device).expect("the session ends");
    assert!(other.chunks().is_empty(), "the refused second session wrote nothing");
    end(&device).expect("a second end ends nothing");
    let ended = sink.chunks().iter().filter(|c| c.content_type.starts_with("end ")).count();
    assert_eq!(ended, 1, "one session ended once");
    assert_eq!(sink.resource.ref_count, 1, "the session gave its reference to the sink back");
}
