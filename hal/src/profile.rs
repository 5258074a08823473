//! Per-dispatch and per-queue-operation profiling: device timestamps, on the host's clock.
//!
//! [`Device::begin_profiling`](crate::Device::begin_profiling) turns it on for the submissions
//! issued from then on; each one that completes adds its records, which
//! [`Device::collect_profile`](crate::Device::collect_profile) takes and
//! [`Device::end_profiling`](crate::Device::end_profiling) takes as it turns profiling off.
//!
//! Every time is a host [`Instant`]: the driver maps its device clock onto the host's (CUDA:
//! timing events measured against anchor events whose host time is bracketed; cpu-sim: the host
//! clock itself), and [`ClockCorrelation`] says how far the mapping may be off. Durations between
//! two records of one device are as precise as the device's timer (CUDA events: about 0.5 us).
//!
//! ```
//! use hal::{CommandBufferMode, ProfileOptions, Registry, Timeout};
//!
//! let mut registry = Registry::new();
//! driver_cpu_sim::register(&mut registry);
//! let device = registry.create_default_device()?;
//! device.begin_profiling(ProfileOptions::everything())?;
//! let buffer = device.allocate_buffer(hal::BufferParams::device_local(), 64)?;
//! let commands = device.create_command_buffer(CommandBufferMode::OneShot)?;
//! commands.fill(&buffer, 0, 64, 7u8)?;
//! commands.end()?;
//! let done = device.create_semaphore(0)?;
//! device.queue(0)?.execute(&[], &commands, &[hal::SemaphoreValue::new(&done, 1)])?;
//! done.wait(1, Timeout::Infinite)?;
//! let profile = device.end_profiling()?;
//! let execute = &profile.queue_operations[0];
//! assert_eq!(execute.operation, "execute");
//! assert!(execute.end >= execute.start);
//! # Ok::<(), hal::Error>(())
//! ```

use std::fmt;
use std::ops::Range;
use std::time::{Duration, Instant};

/// What a profile records. Made with [`everything`](Self::everything),
/// [`queue_operations`](Self::queue_operations) or [`dispatches`](Self::dispatches), narrowed with
/// [`only_commands`](Self::only_commands).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileOptions {
    queue_operations: bool,
    dispatches: bool,
    commands: Option<Vec<Range<usize>>>,
}

impl ProfileOptions {
    /// Every queue operation and every dispatch of every executed command buffer.
    pub fn everything() -> Self {
        ProfileOptions { queue_operations: true, dispatches: true, commands: None }
    }

    /// Queue operations only (execute, fill, copy, alloca, ...): one record per submission that runs
    /// on a device stream. Host calls run on host threads and are not recorded.
    pub fn queue_operations() -> Self {
        ProfileOptions { queue_operations: true, dispatches: false, commands: None }
    }

    /// The dispatches (direct and indirect) of executed command buffers only.
    pub fn dispatches() -> Self {
        ProfileOptions { queue_operations: false, dispatches: true, commands: None }
    }

    /// Times only the dispatches at command indices `range` (positions in the recording, counting
    /// every recorded command, barriers included, from 0). Calls add up: `.only_commands(0..2)
    /// .only_commands(9..10)` times commands 0, 1 and 9. Other dispatches run without timing
    /// instrumentation.
    pub fn only_commands(mut self, range: Range<usize>) -> Self {
        self.commands.get_or_insert_with(Vec::new).push(range);
        self
    }

    /// Whether queue operations are recorded.
    pub fn records_queue_operations(&self) -> bool {
        self.queue_operations
    }

    /// Whether dispatches are recorded at all.
    pub fn records_dispatches(&self) -> bool {
        self.dispatches
    }

    /// Whether anything at all is recorded (queue operations, or dispatches at some index).
    pub fn records_anything(&self) -> bool {
        self.queue_operations
            || (self.dispatches && self.commands.as_ref().is_none_or(|ranges| ranges.iter().any(|r| !r.is_empty())))
    }

    /// Whether the dispatch at command index `index` is recorded.
    pub fn records_command(&self, index: usize) -> bool {
        self.dispatches && self.commands.as_ref().is_none_or(|ranges| ranges.iter().any(|r| r.contains(&index)))
    }
}

/// How the device's timestamps were put on the host's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockCorrelation {
    /// How it was done, in words.
    pub method: String,
    /// How far any record's host time may be off from when the device reached it, at most (0 when
    /// the device's clock is the host's). Within one device, differences are more precise.
    pub uncertainty: Duration,
}

/// One queue operation's time on its device stream: from when the stream reached it (its waits
/// satisfied, earlier work of the stream done) to when its work finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueOperationTiming {
    /// The queue it ran on.
    pub queue: usize,
    /// The device's submission number (as in traces and hang reports: `action`).
    pub submission: u64,
    /// Its kind: `execute`, `fill`, `copy`, `update`, `write`, `read`, `alloca`, `dealloca`,
    /// `barrier`.
    pub operation: &'static str,
    /// The executed command buffer's [`id`](crate::CommandBuffer::id), for an execute.
    pub command_buffer: Option<u64>,
    /// When it was submitted, on the host.
    pub submitted: Instant,
    /// When its waits were resolved and it was handed to its stream, on the host.
    pub ready: Instant,
    /// How many semaphores it waited on.
    pub wait_count: u32,
    /// How many semaphores it signalled.
    pub signal_count: u32,
    /// The bytes it moves or allocates (a fill's, copy's, update's, read's or write's length, an
    /// alloca's or dealloca's buffer size); 0 for executes and barriers.
    pub payload_bytes: u64,
    /// When the stream started it.
    pub start: Instant,
    /// When it finished.
    pub end: Instant,
}

/// One dispatch of an executed command buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatchTiming {
    /// The queue it ran on.
    pub queue: usize,
    /// The submission (the execute) it belongs to.
    pub submission: u64,
    /// The executed command buffer's [`id`](crate::CommandBuffer::id).
    pub command_buffer: u64,
    /// Its position in the command buffer's recording.
    pub command_index: usize,
    /// The dispatched executable's [`id`](crate::Executable::id).
    pub executable: u64,
    /// The entry point's index in that executable.
    pub entry_point_index: u32,
    /// The entry point's name.
    pub entry_point: String,
    /// Its workgroup count; `None` for an indirect dispatch whose count the driver did not report.
    pub workgroups: Option<[u32; 3]>,
    /// When the device started it.
    pub start: Instant,
    /// When it finished.
    pub end: Instant,
}

macro_rules! duration_of {
    ($record:ty) => {
        impl $record {
            /// `end - start`.
            pub fn duration(&self) -> Duration {
                self.end.saturating_duration_since(self.start)
            }
        }
    };
}
duration_of!(QueueOperationTiming);
duration_of!(DispatchTiming);

/// The records of one device's profiled submissions that completed, each list in completion order
/// (queue by queue; dispatches of one execute in command order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// How device times were mapped onto the host's clock.
    pub clock: ClockCorrelation,
    /// One record per profiled queue operation.
    pub queue_operations: Vec<QueueOperationTiming>,
    /// One record per profiled dispatch.
    pub dispatches: Vec<DispatchTiming>,
}

impl Profile {
    /// An empty profile.
    pub fn new(clock: ClockCorrelation) -> Self {
        Profile { clock, queue_operations: Vec::new(), dispatches: Vec::new() }
    }

    /// The dispatches of submission `submission`, in command order.
    pub fn dispatches_of(&self, submission: u64) -> impl Iterator<Item = &DispatchTiming> {
        self.dispatches.iter().filter(move |d| d.submission == submission)
    }
}

impl fmt::Display for Profile {
    /// A table, one line per record, times in microseconds from the earliest record.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = self.queue_operations.iter().map(|q| q.start).chain(self.dispatches.iter().map(|d| d.start)).min();
        let Some(origin) = origin else {
            return writeln!(f, "no records");
        };
        let us = |t: Instant| t.saturating_duration_since(origin).as_secs_f64() * 1e6;
        writeln!(f, "clock: {} (uncertainty {:?})", self.clock.method, self.clock.uncertainty)?;
        for q in &self.queue_operations {
            writeln!(
                f,
                "queue {} action {} {}: {:.1}..{:.1} us",
                q.queue,
                q.submission,
                q.operation,
                us(q.start),
                us(q.end)
            )?;
        }
        for d in &self.dispatches {
            writeln!(
                f,
                "queue {} action {} command {} '{}': {:.1}..{:.1} us",
                d.queue,
                d.submission,
                d.command_index,
                d.entry_point,
                us(d.start),
                us(d.end)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_filter_selects_dispatch_indices() {
        let all = ProfileOptions::everything();
        assert!(all.records_command(0) && all.records_command(1000));
        let some = ProfileOptions::dispatches().only_commands(2..4).only_commands(9..10);
        let chosen: Vec<usize> = (0..12).filter(|&i| some.records_command(i)).collect();
        assert_eq!(chosen, vec![2, 3, 9]);
        assert!(!some.records_queue_operations());
        let none = ProfileOptions::queue_operations().only_commands(0..5);
        assert!(!none.records_command(1), "dispatches are off, whatever the filter");
        let empty = ProfileOptions::dispatches().only_commands(4..4);
        assert!(!empty.records_command(4), "an empty range selects nothing");
        assert!(!empty.records_anything());
        assert!(some.records_anything() && none.records_anything());
    }
}
