//! The stream model of an inline driver: an operation runs to its end inside `enqueue`, on the
//! issuing thread, so there is nothing to wait for afterwards. A stream is nothing, an event only
//! remembers that it was recorded (everything before it already ran), and a stream wait has
//! nothing left to wait for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use hal::driver::QueueOp;
use hal::driver::stream_model::{StreamModel, Work};
use hal::{Error, Result};

use crate::commands;

/// The inline stream model (no state: every operation finishes where it is issued).
pub(crate) struct InlineStreams;

/// An event: recorded or not. A recorded event has completed, since the work before it ran inline.
pub(crate) struct InlineEvent {
    recorded: AtomicBool,
}

impl StreamModel for InlineStreams {
    type Stream = ();
    type Event = InlineEvent;

    fn create_stream(&self, _queue: usize) -> Result<()> {
        Ok(())
    }

    fn create_event(&self) -> Result<InlineEvent> {
        Ok(InlineEvent { recorded: AtomicBool::new(false) })
    }

    fn record_event(&self, event: &InlineEvent, _stream: &()) -> Result<()> {
        event.recorded.store(true, Ordering::Release);
        Ok(())
    }

    fn wait_event(&self, _stream: &(), _event: &InlineEvent) -> Result<()> {
        // The scheduler waits only on recorded events, and a recorded event has completed.
        Ok(())
    }

    fn query_event(&self, event: &InlineEvent) -> Result<bool> {
        Ok(event.recorded.load(Ordering::Acquire))
    }

    fn synchronize_event(&self, _event: &InlineEvent) -> Result<()> {
        // Only recorded events are waited on, and they completed when they were recorded.
        Ok(())
    }

    fn enqueue(&self, _stream: &(), work: &Arc<Work>) -> Result<()> {
        // A failure while running is the work's fault (its signals fail with it), not a refusal to
        // enqueue; work behind a faulted producer does not run and carries the producer's status.
        let outcome = match work.upstream_fault() {
            Some(upstream) => Err(upstream),
            None if work.cancel_requested() => Err(Error::cancelled("cancelled before it started")),
            None => run_timed(work),
        };
        if let Err(fault) = outcome {
            work.fail(fault);
        }
        Ok(())
    }

    /// Operations run on the host, so the host's clock times them.
    fn clock_method(&self) -> String {
        "the host's clock around each operation, which runs inline".to_owned()
    }

    fn begin_profiling(&self, _sink: &Arc<hal::driver::ProfileSink>) -> Result<()> {
        Ok(())
    }

    fn enqueues_nothing(&self, work: &Work) -> bool {
        work.op.runs_nothing_on_a_stream()
    }

    fn retires_at_submission(&self, op: &QueueOp) -> bool {
        op.runs_nothing_on_a_stream()
    }

    /// Records cost nothing here: each submission gets its own event.
    fn leaves_marks_open(&self) -> bool {
        false
    }

    fn synchronize_stream(&self, _stream: &()) -> Result<()> {
        Ok(())
    }
}

/// Runs `work`'s operation; a profiled one also records how long it took (only when it succeeded).
/// A command buffer's dispatches are never timed: the skeleton runs no kernels.
fn run_timed(work: &Work) -> Result<()> {
    let Some(profile) = work.profile() else { return run(&work.op) };
    let start = Instant::now();
    run(&work.op)?;
    if profile.options().records_queue_operations() {
        profile.record_queue_operation(work, start, Instant::now());
    }
    Ok(())
}

/// Runs one queue operation to its end.
fn run(op: &QueueOp) -> Result<()> {
    match op {
        QueueOp::Execute { command_buffer, .. } => commands::execute(command_buffer),
        QueueOp::Transfer(command) => commands::run(command),
        QueueOp::Write { data, target, offset } => commands::write(target, *offset, data),
        QueueOp::Read { source, offset, length, target } => {
            target.stage(commands::read(source, *offset, *length)?);
            Ok(())
        }
        QueueOp::Alloca(buffer) => crate::memory::HostMemory::of(buffer)?.commit(buffer),
        QueueOp::Dealloca(buffer) => crate::memory::HostMemory::of(buffer)?.release(buffer),
        QueueOp::Barrier => Ok(()),
        QueueOp::Collective(_) => Err(Error::unimplemented(format!("{}: no collectives", crate::DRIVER_NAME))),
        // The skeleton prepares no external timepoints (the default refuses them): another
        // driver's operation.
        QueueOp::Native(_) => Err(Error::invalid_argument(format!(
            "{}: {} was prepared by another driver",
            crate::DRIVER_NAME,
            op.kind()
        ))),
    }
}
