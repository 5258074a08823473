//! Where a driver puts the timings of profiled submissions ([`crate::ProfileOptions`]).
//!
//! While a device profiles, the scheduler hands each submission it issues the device's
//! [`ProfileSink`] ([`Work::profile`]). The driver times what the sink asks for and adds the records
//! before the submission retires (cpu-sim when the work ran, CUDA in `StreamModel::complete`), so a
//! host that waited for the submission's signal finds them in the next
//! [`Device::collect_profile`](crate::Device::collect_profile). Faulted or cancelled work adds
//! nothing: its times would describe work that did not finish.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::command_buffer::Command;
use crate::driver::stream_model::Work;
use crate::profile::{ClockCorrelation, DispatchTiming, Profile, ProfileOptions, QueueOperationTiming};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Mutex, lock};

/// The records of one profiling session of one device.
pub struct ProfileSink {
    options: ProfileOptions,
    records: Mutex<Profile>,
}

impl ProfileSink {
    /// A sink for `options`; `clock_method` says how the driver maps device time onto the host's.
    pub fn new(options: ProfileOptions, clock_method: impl Into<String>) -> Self {
        let clock = ClockCorrelation { method: clock_method.into(), uncertainty: Duration::ZERO };
        ProfileSink { options, records: Mutex::new(Profile::new(clock)) }
    }

    /// What to record.
    pub fn options(&self) -> &ProfileOptions {
        &self.options
    }

    /// Notes that some record's host time may be off by up to `uncertainty` (the profile reports the
    /// largest).
    pub fn widen_uncertainty(&self, uncertainty: Duration) {
        let mut records = lock(&self.records);
        records.clock.uncertainty = records.clock.uncertainty.max(uncertainty);
    }

    /// Adds `work`'s time on its stream.
    pub fn record_queue_operation(&self, work: &Work, start: Instant, end: Instant) {
        let submitted = work.submitted();
        let record = QueueOperationTiming {
            queue: work.queue,
            submission: work.id,
            operation: work.op.kind(),
            command_buffer: executed(work),
            submitted: submitted.map_or(start, |s| s.at),
            ready: submitted.map_or(start, |s| s.ready),
            wait_count: submitted.map_or(0, |s| s.waits),
            signal_count: submitted.map_or(0, |s| s.signals),
            payload_bytes: work.op.payload_bytes(),
            start,
            end,
        };
        lock(&self.records).queue_operations.push(record);
    }

    /// Adds the time of dispatch `command` (at `command_index` of `work`'s command buffer).
    /// `workgroups` overrides the recorded count (an indirect dispatch's, when the driver read it).
    pub fn record_dispatch(
        &self,
        work: &Work,
        command_index: usize,
        command: &Command,
        workgroups: Option<[u32; 3]>,
        start: Instant,
        end: Instant,
    ) {
        let (executable, entry_point_index, recorded) = match command {
            Command::Dispatch { executable, entry_point, workgroups, .. } => {
                (executable, *entry_point, Some(*workgroups))
            }
            Command::DispatchIndirect { executable, entry_point, .. } => (executable, *entry_point, None),
            _ => return,
        };
        let record = DispatchTiming {
            queue: work.queue,
            submission: work.id,
            command_buffer: executed(work).unwrap_or_default(),
            command_index,
            executable: executable.id(),
            entry_point_index,
            entry_point: entry_name(executable, entry_point_index),
            workgroups: workgroups.or(recorded),
            start,
            end,
        };
        lock(&self.records).dispatches.push(record);
    }

    /// Takes the records so far (the clock stays).
    pub(crate) fn take(&self) -> Profile {
        let mut records = lock(&self.records);
        let clock = records.clock.clone();
        std::mem::replace(&mut *records, Profile::new(clock))
    }
}

/// The id of the command buffer `work` executes, if it is an execute.
fn executed(work: &Work) -> Option<u64> {
    match &work.op {
        crate::driver::QueueOp::Execute { command_buffer, .. } => Some(command_buffer.id()),
        _ => None,
    }
}

fn entry_name(executable: &crate::Executable, entry_point: u32) -> String {
    executable.entry_point_info(entry_point).map_or_else(|_| format!("entry point {entry_point}"), |e| e.name.clone())
}

/// A device's profiling switch: the sink of the session in progress, if any. Read once per issue;
/// one relaxed load when profiling is off.
pub(crate) struct ProfileSwitch {
    on: AtomicBool,
    sink: Mutex<Option<Arc<ProfileSink>>>,
}

impl ProfileSwitch {
    /// Off.
    pub(crate) fn new() -> Self {
        ProfileSwitch { on: AtomicBool::new(false), sink: Mutex::new(None) }
    }

    /// Whether a session is in progress (one relaxed load).
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// The sink submissions issued now record into.
    pub(crate) fn current(&self) -> Option<Arc<ProfileSink>> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        lock(&self.sink).clone()
    }

    /// Starts a session with `sink`, unless one is in progress (then `sink` is handed back).
    pub(crate) fn begin(&self, sink: Arc<ProfileSink>) -> std::result::Result<(), Arc<ProfileSink>> {
        let mut current = lock(&self.sink);
        if current.is_some() {
            return Err(sink);
        }
        *current = Some(sink);
        self.on.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The session in progress.
    pub(crate) fn session(&self) -> Option<Arc<ProfileSink>> {
        lock(&self.sink).clone()
    }

    /// Ends the session in progress and returns its sink.
    pub(crate) fn end(&self) -> Option<Arc<ProfileSink>> {
        let mut current = lock(&self.sink);
        self.on.store(false, Ordering::Relaxed);
        current.take()
    }
}
