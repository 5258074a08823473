//! IREE's device profiling, answered from the HAL's own: a session of `iree_hal_device_profiling_*`
//! is a HAL profiling session ([`hal::Device::begin_profiling`]) whose records are written to
//! IREE's profile sink in IREE's profile schema.
//!
//! - Families: dispatch events (`DISPATCH_EVENTS`, the HAL's per-dispatch device times), device
//!   queue events (`DEVICE_QUEUE_EVENTS`, its per-queue-operation device times), queue events
//!   (`QUEUE_EVENTS`: when each queue operation was submitted and became ready on the host, its
//!   wait and signal counts and payload, from the same HAL records), executable metadata, and on
//!   cpu-sim, whose queues run their work on host threads, host execution events
//!   (`HOST_EXECUTION_EVENTS`: the operations' spans, which there are host times). Host execution
//!   on a GPU device, memory events, counters and traces are `UNIMPLEMENTED`. Queue events come
//!   with the HAL's records of completed work, so an operation that failed or never ran has none.
//! - Clock: the HAL puts device timestamps on the host's monotonic clock, so the profile's device
//!   ticks are nanoseconds of that clock; each clock-correlation record samples it bracketed by
//!   IREE's own host time (one at begin, one per flush, one at end).
//! - What a HAL record stands for in IREE's terms (a queue dispatch or a command buffer's
//!   dispatch, its IREE command index, executable and function) comes from the recording the
//!   bridge made when it replayed the IREE command into a HAL command buffer ([`Recording`]),
//!   matched by the HAL command buffer's id and command index.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::ffi::{self, sys};

/// The IREE profile data families a session may ask for.
const DISPATCH_EVENTS: u64 =
    sys::iree_hal_device_profiling_data_family_bits_t_IREE_HAL_DEVICE_PROFILING_DATA_DISPATCH_EVENTS as u64;
const DEVICE_QUEUE_EVENTS: u64 =
    sys::iree_hal_device_profiling_data_family_bits_t_IREE_HAL_DEVICE_PROFILING_DATA_DEVICE_QUEUE_EVENTS as u64;
const EXECUTABLE_METADATA: u64 =
    sys::iree_hal_device_profiling_data_family_bits_t_IREE_HAL_DEVICE_PROFILING_DATA_EXECUTABLE_METADATA as u64;
const QUEUE_EVENTS: u64 =
    sys::iree_hal_device_profiling_data_family_bits_t_IREE_HAL_DEVICE_PROFILING_DATA_QUEUE_EVENTS as u64;
const HOST_EXECUTION_EVENTS: u64 =
    sys::iree_hal_device_profiling_data_family_bits_t_IREE_HAL_DEVICE_PROFILING_DATA_HOST_EXECUTION_EVENTS as u64;
const SUPPORTED: u64 = DISPATCH_EVENTS | DEVICE_QUEUE_EVENTS | QUEUE_EVENTS | EXECUTABLE_METADATA;
/// The families of the HAL's per-queue-operation records.
const QUEUE_OPERATIONS: u64 = DEVICE_QUEUE_EVENTS | QUEUE_EVENTS | HOST_EXECUTION_EVENTS;

mod content {
    pub(super) const SESSION: &str = "application/vnd.iree.hal.profile.session";
    pub(super) const DEVICES: &str = "application/vnd.iree.hal.profile.devices";
    pub(super) const QUEUES: &str = "application/vnd.iree.hal.profile.queues";
    pub(super) const EXECUTABLES: &str = "application/vnd.iree.hal.profile.executables";
    pub(super) const EXECUTABLE_FUNCTIONS: &str = "application/vnd.iree.hal.profile.executable-functions";
    pub(super) const COMMAND_BUFFERS: &str = "application/vnd.iree.hal.profile.command-buffers";
    pub(super) const COMMAND_OPERATIONS: &str = "application/vnd.iree.hal.profile.command-operations";
    pub(super) const CLOCK_CORRELATIONS: &str = "application/vnd.iree.hal.profile.clock-correlations";
    pub(super) const DISPATCH_EVENTS: &str = "application/vnd.iree.hal.profile.dispatch-events";
    pub(super) const QUEUE_DEVICE_EVENTS: &str = "application/vnd.iree.hal.profile.queue-device-events";
    pub(super) const QUEUE_EVENTS: &str = "application/vnd.iree.hal.profile.queue-events";
    pub(super) const HOST_EXECUTION_EVENTS: &str = "application/vnd.iree.hal.profile.host-execution-events";
}

/// The IREE command-operation type of each recorded command kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OperationKind {
    Barrier,
    Dispatch,
    Fill,
    Copy,
    Update,
    /// Commands IREE's schema has no operation type for (events, advice, flushes, collectives).
    Other,
}

impl OperationKind {
    fn iree_type(self) -> Option<sys::iree_hal_profile_command_operation_type_t> {
        Some(match self {
            OperationKind::Barrier => {
                sys::iree_hal_profile_command_operation_type_e_IREE_HAL_PROFILE_COMMAND_OPERATION_TYPE_BARRIER
            }
            OperationKind::Dispatch => {
                sys::iree_hal_profile_command_operation_type_e_IREE_HAL_PROFILE_COMMAND_OPERATION_TYPE_DISPATCH
            }
            OperationKind::Fill => {
                sys::iree_hal_profile_command_operation_type_e_IREE_HAL_PROFILE_COMMAND_OPERATION_TYPE_FILL
            }
            OperationKind::Copy => {
                sys::iree_hal_profile_command_operation_type_e_IREE_HAL_PROFILE_COMMAND_OPERATION_TYPE_COPY
            }
            OperationKind::Update => {
                sys::iree_hal_profile_command_operation_type_e_IREE_HAL_PROFILE_COMMAND_OPERATION_TYPE_UPDATE
            }
            OperationKind::Other => return None,
        } as sys::iree_hal_profile_command_operation_type_t)
    }
}

/// A dispatch as IREE recorded it.
#[derive(Clone, Debug)]
pub(crate) struct DispatchInfo {
    /// The IREE executable's profile id (its address, noted with [`Profiling::note_executable`]).
    pub executable: u64,
    pub function_ordinal: u32,
    /// The recorded count; unused for an indirect dispatch (the HAL record has the count read).
    pub workgroup_count: [u32; 3],
    /// The workgroup size it runs with (each at least 1).
    pub workgroup_size: [u32; 3],
    pub binding_count: u32,
    pub indirect: bool,
}

/// One IREE command replayed into the HAL command buffer.
#[derive(Clone, Debug)]
pub(crate) struct Operation {
    /// Its index among the IREE command buffer's commands.
    pub iree_index: u32,
    /// The index of the HAL command it became, if it became one.
    pub hal_index: Option<u32>,
    pub kind: OperationKind,
    pub dispatch: Option<DispatchInfo>,
}

/// Where a replay came from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Origin {
    /// `queue_dispatch`: one dispatch with no command buffer (no command index).
    QueueDispatch,
    /// `queue_execute` of an IREE command buffer (its address: the profile's command-buffer id).
    CommandBuffer { id: u64, mode: u64, categories: u64, affinity: u64 },
}

/// What the bridge recorded while replaying IREE commands into one HAL command buffer, for the
/// HAL's profile records of its execution.
#[derive(Debug)]
pub(crate) struct Recording {
    pub origin: Origin,
    pub operations: Vec<Operation>,
}

impl Recording {
    pub(crate) fn new(origin: Origin) -> Self {
        Recording { origin, operations: Vec::new() }
    }

    fn command_buffer_id(&self) -> u64 {
        match self.origin {
            Origin::QueueDispatch => 0,
            Origin::CommandBuffer { id, .. } => id,
        }
    }

    fn by_hal_index(&self, hal_index: usize) -> Option<&Operation> {
        self.operations.iter().find(|op| op.hal_index.is_some_and(|i| i as usize == hal_index))
    }
}

/// The device's profiling switch and session.
pub(crate) struct Profiling {
    active: AtomicBool,
    session: Mutex<Option<Session>>,
}

/// An executable's profile metadata, taken while it was live (at submission).
struct ExecutableMeta {
    id: u64,
    functions: Vec<FunctionMeta>,
    written: bool,
}

struct FunctionMeta {
    ordinal: u32,
    name: String,
    constant_count: u32,
    binding_count: u32,
    parameter_count: u32,
    workgroup_size: [u32; 3],
}

/// The sink, retained for the session.
struct Sink(*mut sys::iree_hal_profile_sink_t);

// SAFETY: IREE's sinks are called from whichever thread profiles (IREE's devices flush from any
// thread); the session's lock serializes this bridge's calls.
unsafe impl Send for Sink {}

impl Drop for Sink {
    fn drop(&mut self) {
        // SAFETY: the reference `begin` took.
        unsafe { sys::iree_hal_profile_sink_release(self.0) };
    }
}

/// IREE's capture filter, copied.
struct Filter {
    flags: u32,
    pattern: String,
    command_buffer_id: u64,
    command_index: u32,
    physical_device_ordinal: u32,
    queue_ordinal: u32,
}

impl Filter {
    fn has(&self, bit: u32) -> bool {
        self.flags & bit != 0
    }

    /// Whether work of `queue` (of physical device 0) is captured.
    fn queue_matches(&self, queue: u32) -> bool {
        let device_filtered = self.has(
            sys::iree_hal_profile_capture_filter_flag_bits_t_IREE_HAL_PROFILE_CAPTURE_FILTER_FLAG_PHYSICAL_DEVICE_ORDINAL,
        ) && self.physical_device_ordinal != 0;
        let queue_filtered = self
            .has(sys::iree_hal_profile_capture_filter_flag_bits_t_IREE_HAL_PROFILE_CAPTURE_FILTER_FLAG_QUEUE_ORDINAL)
            && queue != self.queue_ordinal;
        !device_filtered && !queue_filtered
    }

    /// Whether a dispatch at this place, of a function named `name`, is captured. A queue
    /// dispatch has no command index and never matches a command-index filter.
    fn matches(&self, command_buffer_id: u64, command_index: Option<u32>, queue: u32, name: &str) -> bool {
        let f = |bit| self.has(bit);
        if f(sys::iree_hal_profile_capture_filter_flag_bits_t_IREE_HAL_PROFILE_CAPTURE_FILTER_FLAG_COMMAND_BUFFER_ID)
            && command_buffer_id != self.command_buffer_id
        {
            return false;
        }
        if f(sys::iree_hal_profile_capture_filter_flag_bits_t_IREE_HAL_PROFILE_CAPTURE_FILTER_FLAG_COMMAND_INDEX)
            && command_index != Some(self.command_index)
        {
            return false;
        }
        if f(sys::iree_hal_profile_capture_filter_flag_bits_t_IREE_HAL_PROFILE_CAPTURE_FILTER_FLAG_PHYSICAL_DEVICE_ORDINAL)
            && self.physical_device_ordinal != 0
        {
            return false;
        }
        if f(sys::iree_hal_profile_capture_filter_flag_bits_t_IREE_HAL_PROFILE_CAPTURE_FILTER_FLAG_QUEUE_ORDINAL)
            && queue != self.queue_ordinal
        {
            return false;
        }
        if f(sys::iree_hal_profile_capture_filter_flag_bits_t_IREE_HAL_PROFILE_CAPTURE_FILTER_FLAG_EXECUTABLE_FUNCTION_PATTERN)
        {
            // SAFETY: both views are live strings for the call.
            return unsafe { sys::iree_string_view_match_pattern(ffi::view(name), ffi::view(&self.pattern)) };
        }
        true
    }
}

/// The HAL's host-clock instants as the profile's device ticks (nanoseconds of IREE's monotonic
/// clock, which is the clock `Instant` reads).
#[derive(Clone, Copy)]
struct Clock {
    anchor: Instant,
    anchor_ns: i64,
}

impl Clock {
    /// The two clocks read together: the tightest of a few brackets of IREE's reads around an
    /// `Instant` read, at its midpoint (a thread preempted between the reads would otherwise put
    /// every tick of the session off by the preemption).
    fn now() -> Self {
        let read = || {
            // SAFETY: plain clock reads.
            let before = unsafe { sys::iree_time_now() };
            let anchor = Instant::now();
            // SAFETY: as above.
            let after = unsafe { sys::iree_time_now() };
            let width = after.saturating_sub(before);
            (width, Clock { anchor, anchor_ns: before + width / 2 })
        };
        let (mut width, mut clock) = read();
        for _ in 1..5 {
            let (w, c) = read();
            if w < width {
                (width, clock) = (w, c);
            }
        }
        clock
    }

    fn tick(&self, at: Instant) -> u64 {
        let ns = match at.checked_duration_since(self.anchor) {
            Some(after) => self.anchor_ns.saturating_add(after.as_nanos() as i64),
            None => self.anchor_ns.saturating_sub(self.anchor.duration_since(at).as_nanos() as i64),
        };
        ns.max(1) as u64
    }
}

struct Session {
    sink: Sink,
    id: u64,
    families: u64,
    filter: Filter,
    clock: Clock,
    queue_count: u32,
    next_sample: u64,
    /// The first clock sample's tick: no profiled work started before it.
    begin_tick: u64,
    next_event: u64,
    /// What the HAL command buffers executed in this session stand for, by their ids.
    recordings: HashMap<u64, Arc<Recording>>,
    /// Executable metadata taken at submission, not written yet.
    executables: Vec<ExecutableMeta>,
    command_buffers_written: HashSet<u64>,
}

static NEXT_SESSION_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Profiling {
    pub(crate) fn new() -> Self {
        Profiling { active: AtomicBool::new(false), session: Mutex::new(None) }
    }

    /// Whether a session is in progress (replays then keep their [`Recording`]s).
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    fn lock(&self) -> Result<MutexGuard<'_, Option<Session>>, hal::Error> {
        self.session.lock().map_err(|_| hal::Error::internal("the profiling session's lock is poisoned"))
    }

    /// Begins a session for `options` on `hal`; `runs_on_host`: the device's queues run their work
    /// on host threads (cpu-sim), so its operations' spans are host execution events.
    ///
    /// # Safety
    /// `options` is IREE's valid profiling options (its sink live or NULL, its pattern readable).
    pub(crate) unsafe fn begin(
        &self,
        hal: &hal::Device,
        options: &sys::iree_hal_device_profiling_options_t,
        runs_on_host: bool,
    ) -> Result<(), hal::Error> {
        let mut session = self.lock()?;
        if session.is_some() {
            return Err(hal::Error::failed_precondition("a profiling session is already in progress"));
        }
        let families = options.data_families;
        let supported = if runs_on_host { SUPPORTED | HOST_EXECUTION_EVENTS } else { SUPPORTED };
        if families & !supported != 0 {
            return Err(hal::Error::unimplemented(format!(
                "profiling data families {:#x}: only dispatch events, device queue events, queue events{} and \
                 executable metadata are recorded",
                families & !supported,
                if runs_on_host {
                    ", host execution events"
                } else {
                    " (this device runs its work on the device, not on host threads)"
                }
            )));
        }
        if options.counter_set_count != 0 {
            return Err(hal::Error::unimplemented("hardware counter sets are not recorded"));
        }
        if options.sink.is_null() {
            return Err(hal::Error::invalid_argument("profiling needs a sink to write its records to"));
        }
        // Filters are applied to the records (IREE's command indices are not the HAL's). A
        // session of executable metadata alone times nothing.
        let hal_options = match (families & DISPATCH_EVENTS != 0, families & QUEUE_OPERATIONS != 0) {
            (true, true) => Some(hal::ProfileOptions::everything()),
            (true, false) => Some(hal::ProfileOptions::dispatches()),
            (false, true) => Some(hal::ProfileOptions::queue_operations()),
            (false, false) => None,
        };
        let filter = &options.capture_filter;
        // SAFETY: the caller's contract: the pattern is readable.
        let pattern = unsafe { ffi::text(filter.executable_function_pattern) }.into_owned();
        let filter = Filter {
            flags: filter.flags,
            pattern,
            command_buffer_id: filter.command_buffer_id,
            command_index: filter.command_index,
            physical_device_ordinal: filter.physical_device_ordinal,
            queue_ordinal: filter.queue_ordinal,
        };
        // SAFETY: a live sink (the caller's contract), retained for the session.
        unsafe { sys::iree_hal_profile_sink_retain(options.sink) };
        let mut new = Session {
            sink: Sink(options.sink),
            id: NEXT_SESSION_ID.fetch_add(1, Ordering::Relaxed),
            families,
            filter,
            clock: Clock::now(),
            queue_count: hal.queue_count() as u32,
            next_sample: 1,
            begin_tick: 0,
            next_event: 1,
            recordings: HashMap::new(),
            executables: Vec::new(),
            command_buffers_written: HashSet::new(),
        };
        new.start()?;
        if let Some(Err(error)) = hal_options.map(|options| hal.begin_profiling(options)) {
            let _ = new.finish(Some(error.code()));
            return Err(error);
        }
        *session = Some(new);
        self.active.store(true, Ordering::Release);
        Ok(())
    }

    /// Notes what the HAL command buffer `hal_id`, about to be executed, stands for. Called before
    /// the execute, while the IREE objects it names are live.
    pub(crate) fn submitted(&self, hal_id: u64, recording: Recording) -> Result<(), hal::Error> {
        let mut session = self.lock()?;
        let Some(session) = session.as_mut() else { return Ok(()) };
        session.recordings.insert(hal_id, Arc::new(recording));
        Ok(())
    }

    /// Takes `executable`'s metadata while it is live (a dispatch of it is being recorded), to be
    /// written before any event naming it; returns its profile id.
    ///
    /// # Safety
    /// `executable` is a live IREE executable.
    pub(crate) unsafe fn note_executable(&self, executable: *mut sys::iree_hal_executable_t) -> u64 {
        if let Ok(mut session) = self.lock()
            && let Some(session) = session.as_mut()
        {
            // SAFETY: the caller's contract.
            unsafe { session.note_executable(executable) };
        }
        executable as u64
    }

    /// Writes the records of work completed so far.
    pub(crate) fn flush(&self, hal: &hal::Device) -> Result<(), hal::Error> {
        let mut session = self.lock()?;
        let Some(session) = session.as_mut() else { return Ok(()) };
        let profile = if session.times_events() { Some(hal.collect_profile()?) } else { None };
        session.write_profile(profile.as_ref())
    }

    /// Ends the session: the last records, a last clock sample, the end of the sink's session.
    /// With no session in progress there is nothing to end (as IREE's own devices answer).
    pub(crate) fn end(&self, hal: &hal::Device) -> Result<(), hal::Error> {
        let mut slot = self.lock()?;
        let Some(mut session) = slot.take() else { return Ok(()) };
        self.active.store(false, Ordering::Release);
        let profile = if session.times_events() { hal.end_profiling().map(Some) } else { Ok(None) };
        let written = profile.and_then(|profile| session.write_profile(profile.as_ref()));
        let code = written.as_ref().err().map(hal::Error::code);
        let ended = session.finish(code);
        written.and(ended)
    }
}

/// Bytes of `records` (plain C structs) for the sink.
fn bytes_of<T: Copy>(records: &[T]) -> &[u8] {
    // SAFETY: `T` is one of IREE's `repr(C)` plain-data records (no padding this bridge reads
    // back, no pointers); the slice covers exactly their bytes.
    unsafe { std::slice::from_raw_parts(records.as_ptr().cast::<u8>(), std::mem::size_of_val(records)) }
}

fn record_length<T>() -> u32 {
    std::mem::size_of::<T>() as u32
}

impl Session {
    fn metadata(&self, content_type: &'static str) -> sys::iree_hal_profile_chunk_metadata_t {
        sys::iree_hal_profile_chunk_metadata_t {
            content_type: ffi::view(content_type),
            session_id: self.id,
            physical_device_ordinal: u32::MAX,
            queue_ordinal: u32::MAX,
            ..Default::default()
        }
    }

    fn write(&self, metadata: sys::iree_hal_profile_chunk_metadata_t, payload: &[u8]) -> Result<(), hal::Error> {
        let span = sys::iree_const_byte_span_t { data: payload.as_ptr(), data_length: payload.len() };
        // SAFETY: the retained sink; the metadata's strings and the payload live across the call.
        ffi::into_result(unsafe { sys::iree_hal_profile_sink_write(self.sink.0, &metadata, 1, &span) })
            .map_err(|e| e.context("the profile sink's write"))
    }

    /// The session's beginning: the sink's session, the device, its queues, a clock sample.
    fn start(&mut self) -> Result<(), hal::Error> {
        let metadata = self.metadata(content::SESSION);
        // SAFETY: the retained sink; the metadata's strings live across the call.
        ffi::into_result(unsafe { sys::iree_hal_profile_sink_begin_session(self.sink.0, &metadata) })
            .map_err(|e| e.context("the profile sink's begin_session"))?;
        let device = sys::iree_hal_profile_device_record_t {
            record_length: record_length::<sys::iree_hal_profile_device_record_t>(),
            physical_device_ordinal: 0,
            queue_count: self.queue_count.max(1),
            ..Default::default()
        };
        self.write(self.metadata(content::DEVICES), bytes_of(&[device]))?;
        let queues: Vec<sys::iree_hal_profile_queue_record_t> = (0..self.queue_count.max(1))
            .map(|queue| sys::iree_hal_profile_queue_record_t {
                record_length: record_length::<sys::iree_hal_profile_queue_record_t>(),
                physical_device_ordinal: 0,
                queue_ordinal: queue,
                stream_id: u64::from(queue) + 1,
                ..Default::default()
            })
            .collect();
        self.write(self.metadata(content::QUEUES), bytes_of(&queues))?;
        self.sample_clock()
    }

    /// Whether the HAL times anything for this session.
    fn times_events(&self) -> bool {
        self.families & (DISPATCH_EVENTS | QUEUE_OPERATIONS) != 0
    }

    /// Ends the sink's session with `code` (`None`: OK).
    fn finish(&mut self, code: Option<hal::StatusCode>) -> Result<(), hal::Error> {
        let metadata = self.metadata(content::SESSION);
        let iree_code = code.map_or(0, ffi::iree_code);
        // SAFETY: the retained sink; the metadata's strings live across the call.
        ffi::into_result(unsafe {
            sys::iree_hal_profile_sink_end_session(self.sink.0, &metadata, iree_code as sys::iree_status_code_t)
        })
        .map_err(|e| e.context("the profile sink's end_session"))
    }

    /// One clock-correlation record: the clock read between two of IREE's host-time reads.
    fn sample_clock(&mut self) -> Result<(), hal::Error> {
        // SAFETY: plain clock reads.
        let begin = unsafe { sys::iree_time_now() };
        let now = Instant::now();
        // SAFETY: as above.
        let end = unsafe { sys::iree_time_now() };
        let tick = self.clock.tick(now);
        if self.begin_tick == 0 {
            self.begin_tick = tick;
        }
        let flags = sys::iree_hal_profile_clock_correlation_flag_bits_t_IREE_HAL_PROFILE_CLOCK_CORRELATION_FLAG_DEVICE_TICK
            | sys::iree_hal_profile_clock_correlation_flag_bits_t_IREE_HAL_PROFILE_CLOCK_CORRELATION_FLAG_HOST_CPU_TIMESTAMP
            | sys::iree_hal_profile_clock_correlation_flag_bits_t_IREE_HAL_PROFILE_CLOCK_CORRELATION_FLAG_HOST_SYSTEM_TIMESTAMP
            | sys::iree_hal_profile_clock_correlation_flag_bits_t_IREE_HAL_PROFILE_CLOCK_CORRELATION_FLAG_HOST_TIME_BRACKET;
        let record = sys::iree_hal_profile_clock_correlation_record_t {
            record_length: record_length::<sys::iree_hal_profile_clock_correlation_record_t>(),
            flags: flags as sys::iree_hal_profile_clock_correlation_flags_t,
            physical_device_ordinal: 0,
            sample_id: self.next_sample,
            device_tick: tick,
            host_cpu_timestamp_ns: tick,
            host_system_timestamp: tick,
            host_system_frequency_hz: 1_000_000_000,
            host_time_begin_ns: begin,
            host_time_end_ns: end.max(begin),
            ..Default::default()
        };
        self.next_sample += 1;
        self.write(self.metadata(content::CLOCK_CORRELATIONS), bytes_of(&[record]))
    }

    fn next_event_id(&mut self) -> u64 {
        let id = self.next_event;
        self.next_event += 1;
        id
    }

    /// Takes `executable`'s metadata now, unless taken already.
    ///
    /// # Safety
    /// `executable` is a live IREE executable.
    unsafe fn note_executable(&mut self, executable: *mut sys::iree_hal_executable_t) {
        let id = executable as u64;
        if self.executables.iter().any(|e| e.id == id) {
            return;
        }
        // SAFETY: the caller's contract.
        let count = unsafe { sys::iree_hal_executable_function_count(executable) };
        let functions = (0..count as u32)
            .map(|ordinal| {
                let mut info = sys::iree_hal_executable_function_info_t::default();
                let function = sys::iree_hal_executable_function_t { value: u64::from(ordinal) };
                // SAFETY: a live executable (the caller's contract) and a writable info; a failure
                // leaves the defaults.
                let known = ffi::into_result(unsafe {
                    sys::iree_hal_executable_function_info(executable, function, &mut info)
                })
                .is_ok();
                FunctionMeta {
                    ordinal,
                    // SAFETY: the name lives as long as the executable, which is live here.
                    name: if known { unsafe { ffi::text(info.name) }.into_owned() } else { String::new() },
                    constant_count: u32::from(info.constant_count),
                    binding_count: u32::from(info.binding_count),
                    parameter_count: u32::from(info.parameter_count),
                    workgroup_size: info.workgroup_size,
                }
            })
            .collect();
        self.executables.push(ExecutableMeta { id, functions, written: false });
    }

    /// The function name a filter matches for `dispatch`.
    fn function_name(&self, dispatch: &DispatchInfo) -> String {
        let id = dispatch.executable;
        self.executables
            .iter()
            .find(|e| e.id == id)
            .and_then(|e| e.functions.iter().find(|f| f.ordinal == dispatch.function_ordinal))
            .map(|f| f.name.clone())
            .unwrap_or_default()
    }

    /// Writes executables noted since the last write (their records stay known for names).
    fn write_executables(&mut self) -> Result<(), hal::Error> {
        // An executable IREE reports no functions of has no record (IREE's schema wants some).
        let unwritten: Vec<&ExecutableMeta> =
            self.executables.iter().filter(|e| !e.written && !e.functions.is_empty()).collect();
        if unwritten.is_empty() {
            return Ok(());
        }
        let records: Vec<sys::iree_hal_profile_executable_record_t> = unwritten
            .iter()
            .map(|e| sys::iree_hal_profile_executable_record_t {
                record_length: record_length::<sys::iree_hal_profile_executable_record_t>(),
                executable_id: e.id,
                function_count: e.functions.len() as u32,
                ..Default::default()
            })
            .collect();
        let mut functions = Vec::new();
        for executable in &unwritten {
            for f in &executable.functions {
                let record = sys::iree_hal_profile_executable_function_record_t {
                    record_length: (record_length::<sys::iree_hal_profile_executable_function_record_t>() as usize
                        + f.name.len()) as u32,
                    executable_id: executable.id,
                    function_ordinal: f.ordinal,
                    constant_count: f.constant_count,
                    binding_count: f.binding_count,
                    parameter_count: f.parameter_count,
                    workgroup_size: f.workgroup_size,
                    name_length: f.name.len() as u32,
                    ..Default::default()
                };
                functions.extend_from_slice(bytes_of(&[record]));
                functions.extend_from_slice(f.name.as_bytes());
            }
        }
        self.write(self.metadata(content::EXECUTABLES), bytes_of(&records))?;
        self.write(self.metadata(content::EXECUTABLE_FUNCTIONS), &functions)?;
        for executable in &mut self.executables {
            executable.written = true;
        }
        Ok(())
    }

    /// Writes a command buffer's metadata and operations the first time one of its events is.
    fn write_command_buffer(&mut self, recording: &Recording) -> Result<(), hal::Error> {
        let Origin::CommandBuffer { id, mode, categories, affinity } = recording.origin else { return Ok(()) };
        if !self.command_buffers_written.insert(id) {
            return Ok(());
        }
        let record = sys::iree_hal_profile_command_buffer_record_t {
            record_length: record_length::<sys::iree_hal_profile_command_buffer_record_t>(),
            command_buffer_id: id,
            mode,
            command_categories: categories,
            queue_affinity: affinity,
            physical_device_ordinal: 0,
            ..Default::default()
        };
        self.write(self.metadata(content::COMMAND_BUFFERS), bytes_of(&[record]))?;
        let operations: Vec<sys::iree_hal_profile_command_operation_record_t> = recording
            .operations
            .iter()
            .filter_map(|op| {
                let kind = op.kind.iree_type()?;
                let mut record = sys::iree_hal_profile_command_operation_record_t {
                    record_length: record_length::<sys::iree_hal_profile_command_operation_record_t>(),
                    type_: kind,
                    command_index: op.iree_index,
                    command_buffer_id: id,
                    source_ordinal: u32::MAX,
                    target_ordinal: u32::MAX,
                    target_block_ordinal: u32::MAX,
                    alternate_block_ordinal: u32::MAX,
                    function_ordinal: u32::MAX,
                    ..Default::default()
                };
                if let Some(d) = &op.dispatch {
                    record.executable_id = d.executable;
                    record.function_ordinal = d.function_ordinal;
                    record.binding_count = d.binding_count;
                    record.workgroup_count = if d.indirect { [0; 3] } else { d.workgroup_count };
                    record.workgroup_size = d.workgroup_size;
                }
                Some(record)
            })
            .collect();
        if !operations.is_empty() {
            self.write(self.metadata(content::COMMAND_OPERATIONS), bytes_of(&operations))?;
        }
        Ok(())
    }

    /// Writes `profile`'s records: metadata first, then events, then a clock sample after them.
    fn write_profile(&mut self, profile: Option<&hal::Profile>) -> Result<(), hal::Error> {
        self.write_executables()?;
        let Some(profile) = profile else { return self.sample_clock() };
        // The HAL maps device times onto the host's clock within `profile.clock.uncertainty`; the
        // work ran after the session began and before these records were collected, so a mapped
        // time outside that interval is brought to its edge (the next clock sample is later).
        let (clock, first) = (self.clock, self.begin_tick);
        let collected = clock.tick(Instant::now());
        let span = move |start: Instant, end: Instant| {
            let start = clock.tick(start).clamp(first, collected);
            (start, clock.tick(end).clamp(start, collected))
        };
        let mut dispatches = Vec::new();
        if self.families & DISPATCH_EVENTS != 0 {
            for timing in &profile.dispatches {
                let Some(recording) = self.recordings.get(&timing.command_buffer).cloned() else { continue };
                let Some(op) = recording.by_hal_index(timing.command_index) else { continue };
                let Some(dispatch) = &op.dispatch else { continue };
                let command_index = match recording.origin {
                    Origin::QueueDispatch => None,
                    Origin::CommandBuffer { .. } => Some(op.iree_index),
                };
                let name = self.function_name(dispatch);
                if !self.filter.matches(recording.command_buffer_id(), command_index, timing.queue as u32, &name) {
                    continue;
                }
                self.write_command_buffer(&recording)?;
                let mut flags = 0;
                if command_index.is_some() {
                    flags |= sys::iree_hal_profile_dispatch_event_flag_bits_t_IREE_HAL_PROFILE_DISPATCH_EVENT_FLAG_COMMAND_BUFFER;
                }
                if dispatch.indirect {
                    flags |=
                        sys::iree_hal_profile_dispatch_event_flag_bits_t_IREE_HAL_PROFILE_DISPATCH_EVENT_FLAG_INDIRECT_PARAMETERS;
                }
                let workgroup_count =
                    if dispatch.indirect { timing.workgroups.unwrap_or([0; 3]) } else { dispatch.workgroup_count };
                let (start_tick, end_tick) = span(timing.start, timing.end);
                dispatches.push(sys::iree_hal_profile_dispatch_event_t {
                    record_length: record_length::<sys::iree_hal_profile_dispatch_event_t>(),
                    flags: flags as sys::iree_hal_profile_dispatch_event_flags_t,
                    event_id: self.next_event_id(),
                    submission_id: timing.submission + 1,
                    command_buffer_id: recording.command_buffer_id(),
                    executable_id: dispatch.executable,
                    command_index: command_index.unwrap_or(u32::MAX),
                    function_ordinal: dispatch.function_ordinal,
                    workgroup_count,
                    workgroup_size: dispatch.workgroup_size,
                    start_tick,
                    end_tick,
                });
            }
        }
        if !dispatches.is_empty() {
            let mut metadata = self.metadata(content::DISPATCH_EVENTS);
            metadata.physical_device_ordinal = 0;
            self.write(metadata, bytes_of(&dispatches))?;
        }
        if self.families & DEVICE_QUEUE_EVENTS != 0 {
            let mut by_queue: HashMap<u32, Vec<sys::iree_hal_profile_queue_device_event_t>> = HashMap::new();
            for timing in &profile.queue_operations {
                let recording = timing.command_buffer.and_then(|id| self.recordings.get(&id).cloned());
                let Some(kind) = queue_event_type(timing.operation, recording.as_deref()) else { continue };
                let operation_count = match recording.as_deref() {
                    Some(r) => r.operations.iter().filter(|op| op.kind.iree_type().is_some()).count().max(1) as u32,
                    None => 1,
                };
                let queue = timing.queue as u32;
                let (start_tick, end_tick) = span(timing.start, timing.end);
                let event = sys::iree_hal_profile_queue_device_event_t {
                    record_length: record_length::<sys::iree_hal_profile_queue_device_event_t>(),
                    type_: kind,
                    event_id: self.next_event_id(),
                    submission_id: timing.submission + 1,
                    command_buffer_id: recording.as_deref().map_or(0, Recording::command_buffer_id),
                    stream_id: u64::from(queue) + 1,
                    physical_device_ordinal: 0,
                    queue_ordinal: queue,
                    operation_count,
                    start_tick,
                    end_tick,
                    ..Default::default()
                };
                by_queue.entry(queue).or_default().push(event);
            }
            let mut queues: Vec<_> = by_queue.into_iter().collect();
            queues.sort_by_key(|(queue, _)| *queue);
            for (queue, events) in queues {
                let mut metadata = self.metadata(content::QUEUE_DEVICE_EVENTS);
                metadata.physical_device_ordinal = 0;
                metadata.queue_ordinal = queue;
                metadata.stream_id = u64::from(queue) + 1;
                self.write(metadata, bytes_of(&events))?;
            }
        }
        if self.families & (QUEUE_EVENTS | HOST_EXECUTION_EVENTS) != 0 {
            self.write_host_events(profile)?;
        }
        // Records of completed executes are not needed again.
        let done: HashSet<u64> = profile.queue_operations.iter().filter_map(|t| t.command_buffer).collect();
        self.recordings.retain(|id, _| !done.contains(id));
        self.sample_clock()
    }
}

impl Session {
    /// Writes the host-side records of `profile`'s queue operations the session asked for: queue
    /// events (submission and readiness) and host execution events (the operations' spans).
    fn write_host_events(&mut self, profile: &hal::Profile) -> Result<(), hal::Error> {
        let clock = self.clock;
        let host_ns = move |at: Instant| i64::try_from(clock.tick(at)).unwrap_or(i64::MAX);
        let mut queue_events: Vec<sys::iree_hal_profile_queue_event_t> = Vec::new();
        let mut host_events: Vec<sys::iree_hal_profile_host_execution_event_t> = Vec::new();
        for timing in &profile.queue_operations {
            let recording = timing.command_buffer.and_then(|id| self.recordings.get(&id).cloned());
            let Some(kind) = queue_event_type(timing.operation, recording.as_deref()) else { continue };
            let queue = timing.queue as u32;
            if !self.filter.queue_matches(queue) {
                continue;
            }
            let operation_count = match recording.as_deref() {
                Some(r) => r.operations.iter().filter(|op| op.kind.iree_type().is_some()).count().max(1) as u32,
                None => 1,
            };
            let command_buffer_id = recording.as_deref().map_or(0, |r| match r.origin {
                Origin::QueueDispatch => 0,
                Origin::CommandBuffer { .. } => r.command_buffer_id(),
            });
            if self.families & QUEUE_EVENTS != 0 {
                queue_events.push(sys::iree_hal_profile_queue_event_t {
                    record_length: record_length::<sys::iree_hal_profile_queue_event_t>(),
                    type_: kind,
                    dependency_strategy: dependency_strategy(timing.wait_count),
                    event_id: self.next_event_id(),
                    host_time_ns: host_ns(timing.submitted),
                    submission_id: timing.submission + 1,
                    command_buffer_id,
                    stream_id: u64::from(queue) + 1,
                    physical_device_ordinal: 0,
                    queue_ordinal: queue,
                    wait_count: timing.wait_count,
                    signal_count: timing.signal_count,
                    operation_count,
                    payload_length: timing.payload_bytes,
                    ready_host_time_ns: host_ns(timing.ready),
                    ..Default::default()
                });
            }
            if self.families & HOST_EXECUTION_EVENTS != 0 {
                // A queue dispatch's span is its one dispatch's.
                let dispatch = recording
                    .as_deref()
                    .filter(|r| matches!(r.origin, Origin::QueueDispatch))
                    .and_then(|r| r.operations.iter().find_map(|op| op.dispatch.as_ref()));
                let start = host_ns(timing.start);
                host_events.push(sys::iree_hal_profile_host_execution_event_t {
                    record_length: record_length::<sys::iree_hal_profile_host_execution_event_t>(),
                    type_: kind,
                    status_code: 0,
                    event_id: self.next_event_id(),
                    submission_id: timing.submission + 1,
                    command_buffer_id,
                    executable_id: dispatch.map_or(0, |d| d.executable),
                    stream_id: u64::from(queue) + 1,
                    physical_device_ordinal: 0,
                    queue_ordinal: queue,
                    command_index: u32::MAX,
                    function_ordinal: dispatch.map_or(u32::MAX, |d| d.function_ordinal),
                    workgroup_count: dispatch.map_or([0; 3], |d| d.workgroup_count),
                    workgroup_size: dispatch.map_or([0; 3], |d| d.workgroup_size),
                    start_host_time_ns: start,
                    end_host_time_ns: host_ns(timing.end).max(start),
                    payload_length: timing.payload_bytes,
                    operation_count,
                    ..Default::default()
                });
            }
        }
        for (content_type, bytes) in
            [(content::QUEUE_EVENTS, bytes_of(&queue_events)), (content::HOST_EXECUTION_EVENTS, bytes_of(&host_events))]
        {
            if !bytes.is_empty() {
                let mut metadata = self.metadata(content_type);
                metadata.physical_device_ordinal = 0;
                self.write(metadata, bytes)?;
            }
        }
        Ok(())
    }
}

/// How a queue operation's waits were met, in IREE's terms: on the device (a HAL queue waits on its
/// semaphores' events, or on the host for another device's), or with nothing to wait for.
fn dependency_strategy(wait_count: u32) -> sys::iree_hal_profile_queue_dependency_strategy_t {
    let strategy = match wait_count {
        0 => sys::iree_hal_profile_queue_dependency_strategy_e_IREE_HAL_PROFILE_QUEUE_DEPENDENCY_STRATEGY_NONE,
        _ => {
            sys::iree_hal_profile_queue_dependency_strategy_e_IREE_HAL_PROFILE_QUEUE_DEPENDENCY_STRATEGY_DEVICE_BARRIER
        }
    };
    strategy as sys::iree_hal_profile_queue_dependency_strategy_t
}

/// The IREE queue event type of a HAL queue operation (`None`: one IREE has no type for).
fn queue_event_type(
    operation: &str,
    recording: Option<&Recording>,
) -> Option<sys::iree_hal_profile_queue_event_type_t> {
    let t = match operation {
        "execute" => match recording.map(|r| r.origin) {
            Some(Origin::QueueDispatch) => {
                sys::iree_hal_profile_queue_event_type_e_IREE_HAL_PROFILE_QUEUE_EVENT_TYPE_DISPATCH
            }
            _ => sys::iree_hal_profile_queue_event_type_e_IREE_HAL_PROFILE_QUEUE_EVENT_TYPE_EXECUTE,
        },
        "barrier" => sys::iree_hal_profile_queue_event_type_e_IREE_HAL_PROFILE_QUEUE_EVENT_TYPE_BARRIER,
        "fill" => sys::iree_hal_profile_queue_event_type_e_IREE_HAL_PROFILE_QUEUE_EVENT_TYPE_FILL,
        "copy" => sys::iree_hal_profile_queue_event_type_e_IREE_HAL_PROFILE_QUEUE_EVENT_TYPE_COPY,
        "update" => sys::iree_hal_profile_queue_event_type_e_IREE_HAL_PROFILE_QUEUE_EVENT_TYPE_UPDATE,
        "read" => sys::iree_hal_profile_queue_event_type_e_IREE_HAL_PROFILE_QUEUE_EVENT_TYPE_READ,
        "write" => sys::iree_hal_profile_queue_event_type_e_IREE_HAL_PROFILE_QUEUE_EVENT_TYPE_WRITE,
        "alloca" => sys::iree_hal_profile_queue_event_type_e_IREE_HAL_PROFILE_QUEUE_EVENT_TYPE_ALLOCA,
        "dealloca" => sys::iree_hal_profile_queue_event_type_e_IREE_HAL_PROFILE_QUEUE_EVENT_TYPE_DEALLOCA,
        _ => return None,
    };
    Some(t as sys::iree_hal_profile_queue_event_type_t)
}
