//! Queues: the operations a device runs in order, each gated by a wait list and announcing its
//! completion through a signal list. Every call checks its arguments here, once for all drivers, and
//! never blocks on device progress.

use std::fmt;
use std::sync::Arc;

use bytemuck::Pod;

use crate::buffer::{Buffer, BufferParams, BufferUsage};
use crate::collective::{Channel, CollectiveArgs, CollectiveCall};
use crate::command_buffer::{BufferBinding, Claim, Command, CommandBuffer};
use crate::device::Device;
use crate::driver::{QueueOp, Submission};
use crate::error::{Error, Result};
use crate::external::{ExternalTimepoint, ExternalUse};
use crate::fill_pattern::FillPattern;
use crate::host_data::{as_bytes, element_offset};
use crate::readback::Readback;
use crate::semaphore::SemaphoreValue;

bitflags::bitflags! {
    /// How a [`Queue::host_call_with`] runs.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct HostCallFlags: u32 {
        /// Later work on the queue need not wait for the call to return (it still starts after
        /// its waits and after the work submitted before it).
        const NON_BLOCKING = 1 << 0;
    }
}

/// One queue of a device: operations run in the order their waits allow, never blocking the
/// submitting thread. Cheap to clone.
///
/// ```
/// use hal::{BufferParams, SemaphoreValue as SV, Timeout};
///
/// let device = driver_cpu_sim::create_device()?;
/// let (q0, q1) = (device.queue(0)?, device.queue(1)?);
/// let timeline = device.create_semaphore(0)?;
/// let (a, b) = (
///     device.allocate_buffer(BufferParams::device_local(), 64)?,
///     device.allocate_buffer(BufferParams::device_local(), 64)?,
/// );
/// // Submitted first, runs second: queue 1's copy waits for queue 0's fill.
/// q1.copy(&[SV::new(&timeline, 1)], &a, 0, &b, 0, 64, &[SV::new(&timeline, 2)])?;
/// q0.fill(&[], &a, 0, 64, 0x0102_0304u32, &[SV::new(&timeline, 1)])?;
/// let words = q1.read(&[SV::new(&timeline, 2)], &b, 0, 64, &[])?.wait_as::<u32>(Timeout::Infinite)?;
/// assert!(words.iter().all(|&w| w == 0x0102_0304));
/// # Ok::<(), hal::Error>(())
/// ```
#[derive(Clone)]
pub struct Queue {
    device: Device,
    index: usize,
}

impl Queue {
    pub(crate) fn new(device: Device, index: usize) -> Self {
        Queue { device, index }
    }

    /// The queue's index on its device (its affinity).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Signal values must be ahead of their semaphores; a failed semaphore returns its failure. A
    /// signal that would surely complete behind a value its semaphore already reached is refused too:
    /// the same semaphore twice in `signals`, or a signal to no more than a value the operation
    /// itself waits for on that semaphore.
    fn check_signals(&self, waits: &[SemaphoreValue], signals: &[SemaphoreValue]) -> Result<()> {
        for (at, entry) in signals.iter().enumerate() {
            if entry.semaphore.is_host_signal_only() {
                return Err(Error::invalid_argument(format!(
                    "queue {}: {} is signalled by the host only (SemaphoreFlags::HOST_SIGNAL_ONLY); a queue \
                     cannot signal it (to {})",
                    self.index, entry.semaphore, entry.value
                )));
            }
            if let Some(earlier) = signals[..at].iter().find(|e| e.semaphore.same_as(&entry.semaphore)) {
                return Err(Error::invalid_argument(format!(
                    "queue {}: {} appears twice in the signal list (to {} and to {}); signal it \
                     once, to the larger value",
                    self.index, entry.semaphore, earlier.value, entry.value
                )));
            }
            if let Some(wait) = waits.iter().find(|w| w.semaphore.same_as(&entry.semaphore) && w.value >= entry.value) {
                return Err(Error::invalid_argument(format!(
                    "queue {}: signal of {} to {} would complete behind the value {} the operation \
                     waits for on it",
                    self.index, entry.semaphore, entry.value, wait.value
                )));
            }
            let current = entry.semaphore.query()?;
            if entry.value <= current {
                return Err(Error::invalid_argument(format!(
                    "queue {}: signal of {} to {} but its value is already {current}",
                    self.index, entry.semaphore, entry.value
                )));
            }
        }
        Ok(())
    }

    fn check_buffer(&self, buffer: &Buffer) -> Result<()> {
        if buffer.device() != self.device.id() {
            return Err(Error::invalid_argument(format!(
                "queue {}: {} belongs to {}, not {}",
                self.index,
                buffer,
                buffer.device(),
                self.device.id()
            )));
        }
        Ok(())
    }

    fn check_command_buffer(&self, command_buffer: &CommandBuffer) -> Result<()> {
        if command_buffer.device() != self.device.id() {
            return Err(Error::invalid_argument(format!(
                "queue {}: {} was recorded for another device",
                self.index, command_buffer
            )));
        }
        Ok(())
    }

    fn submit(&self, op: impl Into<Submission>, waits: &[SemaphoreValue], signals: &[SemaphoreValue]) -> Result<()> {
        self.check_signals(waits, signals)?;
        self.submit_checked(op, waits, signals)
    }

    /// [`submit`](Self::submit) for callers that already checked `signals` (before claiming something
    /// the submission would have to give back).
    fn submit_checked(
        &self,
        op: impl Into<Submission>,
        waits: &[SemaphoreValue],
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        let op = op.into();
        let _span = tracing::trace_span!("submit", queue = self.index, op = op.kind()).entered();
        self.device.backend().submit(self.index, op, waits, signals)
    }

    /// Runs an ended command buffer once `waits` are reached; applies `signals` when it completes.
    /// Its collectives, if it holds any, take their places on their channels now, at submission
    /// (see [`CommandBuffer::collective`]).
    pub fn execute(
        &self,
        waits: &[SemaphoreValue],
        command_buffer: &CommandBuffer,
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        self.check_command_buffer(command_buffer)?;
        self.check_signals(waits, signals)?;
        // One lock of the buffer's state claims the execution and numbers its collectives.
        let collectives = match command_buffer.claim_execution()? {
            Claim::Claimed(collectives) => collectives,
            Claim::NeedsTable(slots) => {
                return Err(Error::invalid_argument(format!(
                    "queue {}: {command_buffer} names {slots} binding slots: execute it with execute_with_bindings",
                    self.index
                )));
            }
        };
        let op = QueueOp::Execute { command_buffer: command_buffer.clone(), collectives };
        let result = self.submit_checked(op, waits, signals);
        if result.is_err() {
            command_buffer.cancel_execution();
        }
        result
    }

    /// Claims one execution of `claimed` and submits `run` (the buffer itself, or its commands
    /// resolved for a binding table); a refused submission gives the execution back.
    fn submit_execution(
        &self,
        claimed: &CommandBuffer,
        run: CommandBuffer,
        waits: &[SemaphoreValue],
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        claimed.begin_execution()?;
        // Numbered now, in command order: the place of this execute's collectives on their channels.
        let collectives = run.collective_calls();
        let result = self.submit_checked(QueueOp::Execute { command_buffer: run, collectives }, waits, signals);
        if result.is_err() {
            claimed.cancel_execution();
        }
        result
    }

    /// Runs an ended command buffer with `bindings` as its binding table: entry `n` is what its
    /// commands' slot `n` names (see [`BufferRef`](crate::BufferRef)). The table's buffers stay
    /// alive until the execute's signals are reached. Every command is checked against the table
    /// before anything is submitted; a table shorter than the buffer's
    /// [`binding_slots`](CommandBuffer::binding_slots) is `InvalidArgument`. Two executes of one
    /// command buffer may overlap, with the same or different tables: each is its own submission.
    ///
    /// ```
    /// use hal::{BufferBinding, BufferRef, CommandBufferMode, BufferParams, SemaphoreValue as SV, Timeout};
    ///
    /// let device = driver_cpu_sim::create_device()?;
    /// let (queue, done) = (device.queue(0)?, device.create_semaphore(0)?);
    /// // Recorded once: fill slot 0's first 8 bytes, then copy them to slot 1.
    /// let function = device.create_command_buffer(CommandBufferMode::Reusable)?;
    /// function.fill(BufferRef::slot(0), 0, 8, 0xABu8)?;
    /// function.barrier()?;
    /// function.copy(BufferRef::slot(0), 0, BufferRef::slot(1), 0, 8)?;
    /// function.end()?;
    /// assert_eq!(function.binding_slots(), 2);
    /// for call in 1..=3u64 {
    ///     let (input, output) = (
    ///         device.allocate_buffer(BufferParams::host_visible(), 8)?,
    ///         device.allocate_buffer(BufferParams::host_visible(), 8)?,
    ///     );
    ///     let table = [BufferBinding::whole(&input), BufferBinding::whole(&output)];
    ///     queue.execute_with_bindings(&[SV::new(&done, call - 1)], &function, &table, &[SV::new(&done, call)])?;
    ///     done.wait(call, Timeout::Infinite)?;
    ///     assert_eq!(output.read_to_vec()?, [0xAB; 8]);
    /// }
    /// # Ok::<(), hal::Error>(())
    /// ```
    pub fn execute_with_bindings(
        &self,
        waits: &[SemaphoreValue],
        command_buffer: &CommandBuffer,
        bindings: &[BufferBinding],
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        self.check_command_buffer(command_buffer)?;
        for (slot, entry) in bindings.iter().enumerate() {
            // Another device's buffer may serve copies only: resolving the table checks each use.
            if !self.device.backend().copies_with(&entry.buffer) {
                self.check_buffer(&entry.buffer)?;
            }
            entry
                .buffer
                .check_range(entry.offset, entry.length)
                .map_err(|e| e.context(format!("binding slot {slot}")))?;
        }
        self.check_signals(waits, signals)?;
        if command_buffer.binding_slots() == 0 {
            // Nothing to resolve: the buffer runs as it is (the table is not needed).
            return self.submit_execution(command_buffer, command_buffer.clone(), waits, signals);
        }
        // Resolved and prepared before the execution is claimed: a refused table uses nothing up.
        let resolved = command_buffer.resolved(command_buffer.resolve(bindings)?)?;
        resolved.begin_execution()?;
        self.submit_execution(command_buffer, resolved, waits, signals)
    }

    /// Runs a collective on `channel` (made on this queue's device) in queue order, once `waits` are
    /// reached; it completes when every rank's part is done. Every rank must submit the collectives
    /// of a channel in the same order. If one rank's part cannot run (its wait failed), the
    /// collective fails on every rank. `InvalidArgument` / `OutOfRange` for arguments that do not
    /// fit the operation (see [`crate::CollectiveArgs`]); nothing is signalled then.
    pub fn collective(
        &self,
        waits: &[SemaphoreValue],
        channel: &Channel,
        args: CollectiveArgs,
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        if channel.device() != self.device.id() {
            return Err(Error::invalid_argument(format!(
                "queue {}: {channel} was made on {}, not {}",
                self.index,
                channel.device(),
                self.device.id()
            )));
        }
        for binding in args.send.iter().chain(&args.recv) {
            self.check_buffer(&binding.buffer)?;
        }
        args.check(channel)?;
        self.check_signals(waits, signals)?;
        self.submit(QueueOp::Collective(Box::new(CollectiveCall::new(channel.clone(), args))), waits, signals)
    }

    /// Returns a buffer of `size` bytes whose memory is committed in queue order once `waits` are
    /// reached, and usable by work that waits on `signals`. Never blocks the host. Its contents
    /// are not defined: drivers reuse released memory as it is (as CUDA's stream-ordered pools do).
    pub fn alloca(
        &self,
        waits: &[SemaphoreValue],
        params: BufferParams,
        size: u64,
        signals: &[SemaphoreValue],
    ) -> Result<Buffer> {
        self.device.check_allocation(params, size)?;
        self.check_signals(waits, signals)?;
        let backend = self.device.backend().allocate_transient(params, size)?;
        let buffer = Buffer::transient_from_backend(self.device.id(), params, backend);
        self.submit_checked(QueueOp::Alloca(buffer.clone()), waits, signals)?;
        Ok(buffer)
    }

    /// Releases a `queue_alloca` buffer's memory in queue order once `waits` are reached. A buffer
    /// that did not come from [`alloca`](Self::alloca) is `InvalidArgument`, a second dealloca of the
    /// same buffer `FailedPrecondition`, both at the call.
    pub fn dealloca(&self, waits: &[SemaphoreValue], buffer: &Buffer, signals: &[SemaphoreValue]) -> Result<()> {
        self.check_buffer(buffer)?;
        self.check_signals(waits, signals)?;
        buffer.claim_dealloca().map_err(|e| e.context(format!("queue {}", self.index)))?;
        let result = self.submit_checked(QueueOp::Dealloca(buffer.clone()), waits, signals);
        if result.is_err() {
            buffer.unclaim_dealloca();
        }
        result
    }

    fn transfer(&self, waits: &[SemaphoreValue], command: Command, signals: &[SemaphoreValue]) -> Result<()> {
        let copy = matches!(command, Command::Copy { .. });
        for buffer in command.buffers() {
            // A copy may name another device's buffer when the driver copies between its devices.
            if !(copy && buffer.device() != self.device.id() && self.device.backend().copies_with(buffer)) {
                self.check_buffer(buffer)?;
            }
        }
        command.validate_transfer()?;
        self.submit(QueueOp::Transfer(Box::new(command)), waits, signals)
    }

    /// Fills `length` bytes at `offset` with `pattern` repeated (`0xABu8`, `7u32`, `1.0f32`: see
    /// [`FillPattern`]), in queue order. Offset and length are multiples of the pattern's width.
    pub fn fill(
        &self,
        waits: &[SemaphoreValue],
        target: &Buffer,
        offset: u64,
        length: u64,
        pattern: impl Into<FillPattern>,
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        self.transfer(waits, Command::fill(target.clone(), offset, length, pattern.into()), signals)
    }

    /// Writes `data` (copied now) to `target` at `offset`, in queue order.
    pub fn update(
        &self,
        waits: &[SemaphoreValue],
        target: &Buffer,
        offset: u64,
        data: &[u8],
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        self.transfer(waits, Command::Update { target: target.clone(), offset, data: Arc::from(data) }, signals)
    }

    /// Copies `length` bytes between buffers, in queue order.
    #[allow(clippy::too_many_arguments)]
    pub fn copy(
        &self,
        waits: &[SemaphoreValue],
        source: &Buffer,
        source_offset: u64,
        target: &Buffer,
        target_offset: u64,
        length: u64,
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        let command =
            Command::Copy { source: source.clone(), source_offset, target: target.clone(), target_offset, length };
        self.transfer(waits, command, signals)
    }

    /// Copies host bytes into `target` at `offset`, in queue order (no copy of `data` is made when it
    /// is already an `Arc<[u8]>`).
    pub fn write(
        &self,
        waits: &[SemaphoreValue],
        target: &Buffer,
        offset: u64,
        data: impl Into<Arc<[u8]>>,
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        let data = data.into();
        self.check_buffer(target)?;
        target.check_usage(BufferUsage::TRANSFER_TARGET)?;
        target.check_range(offset, data.len() as u64)?;
        self.submit(QueueOp::Write { data, target: target.clone(), offset }, waits, signals)
    }

    /// [`write`](Self::write) of typed values: `values` as the bytes they are in host memory (one
    /// copy), from element `first` of `target` on (counted in `T`s, like `values`).
    pub fn write_values<T: Pod>(
        &self,
        waits: &[SemaphoreValue],
        target: &Buffer,
        first: u64,
        values: &[T],
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        self.write(waits, target, element_offset::<T>(first, target)?, as_bytes(values), signals)
    }

    /// Copies `length` bytes of `source` at `offset` to the host, in queue order. The returned
    /// [`Readback`] can be waited on or awaited for the bytes (or typed values); they are there once
    /// `signals` are reached.
    pub fn read(
        &self,
        waits: &[SemaphoreValue],
        source: &Buffer,
        offset: u64,
        length: u64,
        signals: &[SemaphoreValue],
    ) -> Result<Readback> {
        self.check_buffer(source)?;
        source.check_usage(BufferUsage::TRANSFER_SOURCE)?;
        source.check_range(offset, length)?;
        let what = format!("read of {} [{offset}, +{length}) on queue {}", source, self.index);
        let (readback, target) = Readback::new(what, length, waits, signals);
        self.submit(QueueOp::Read { source: source.clone(), offset, length, target }, waits, signals)?;
        Ok(readback)
    }

    /// Waits, then signals, running nothing: joins or forks dependencies.
    pub fn barrier(&self, waits: &[SemaphoreValue], signals: &[SemaphoreValue]) -> Result<()> {
        self.submit(QueueOp::Barrier, waits, signals)
    }

    /// Runs `call` on a host thread once `waits` are reached and the work submitted before it on
    /// this queue has completed; an `Err` (or a panic) fails `signals` with it. Later work on this
    /// queue starts only after the call returns (IREE's meaning), except what the call submits
    /// itself: it may submit to and wait on any queue, its own included. The call runs on a thread
    /// of the HAL's, never under a scheduler lock; it may block, though nothing behind it on this
    /// queue runs meanwhile. [`host_call_with`](Self::host_call_with) takes flags.
    pub fn host_call(
        &self,
        waits: &[SemaphoreValue],
        call: impl FnOnce() -> Result<()> + Send + 'static,
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        self.host_call_with(waits, call, HostCallFlags::empty(), signals)
    }

    /// [`host_call`](Self::host_call) with `flags`: [`HostCallFlags::NON_BLOCKING`] lets later work
    /// on this queue run while the call runs.
    pub fn host_call_with(
        &self,
        waits: &[SemaphoreValue],
        call: impl FnOnce() -> Result<()> + Send + 'static,
        flags: HostCallFlags,
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        self.submit(Submission::HostCall(crate::driver::HostCall::new(call, flags)), waits, signals)
    }

    /// Signals `signals` once `waits` are reached and then `external`, a point on another API's
    /// queue, is reached, waiting for it on the device: a CUDA stream's work enqueued before this
    /// call, or a timeline semaphore's value (a Vulkan `VkSemaphore`, or one imported into CUDA).
    /// Later work on this queue runs after it too
    /// (queue order); another library's result thus feeds HAL work with no host wait between.
    ///
    /// A driver takes the kinds of its own API (`Unimplemented`, naming the kind, otherwise). What
    /// the queue waits for never comes when the other API's work never finishes: host waits on
    /// `signals` then end at their timeouts, and dropping the device cancels the wait (the signals
    /// fail with `Cancelled`) instead of hanging. See `docs/interop.md`.
    ///
    /// # Safety
    /// `external` names a live object of the device's own API (a `CUstream` of the device's CUDA
    /// context, a `CUexternalSemaphore` imported on its GPU, a timeline `VkSemaphore` of its
    /// `VkDevice`) that the caller keeps alive until `signals` are reached or failed. The HAL
    /// neither destroys it nor, but for the semaphores a driver made itself (which the operation
    /// holds), keeps it.
    pub unsafe fn wait_external(
        &self,
        waits: &[SemaphoreValue],
        external: ExternalTimepoint,
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        self.submit_external(waits, external, ExternalUse::Wait, signals)
    }

    /// Makes `external`, a point on another API's queue, reached once `waits` are reached and the
    /// work submitted before this on this queue is done, on the device: work enqueued on a CUDA
    /// stream after this call waits for it, or a timeline semaphore (Vulkan's, or one imported
    /// into CUDA) is signalled to a value.
    /// Then `signals` are signalled. Another library's work thus follows HAL work with no host wait
    /// between.
    ///
    /// A driver takes the kinds of its own API (`Unimplemented`, naming the kind, otherwise). When
    /// `waits` fail, or the device is dropped before they are reached, `signals` fail and the
    /// other API is released anyway where it cannot be told of a failure (a CUDA stream runs on, so
    /// check `signals` before trusting what it computed), so that it never hangs on the HAL. See
    /// `docs/interop.md`.
    ///
    /// # Safety
    /// As for [`wait_external`](Self::wait_external): `external` is a live object of the device's
    /// API, kept alive by the caller until `signals` are reached or failed.
    pub unsafe fn signal_external(
        &self,
        waits: &[SemaphoreValue],
        external: ExternalTimepoint,
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        self.submit_external(waits, external, ExternalUse::Signal, signals)
    }

    /// Checks `signals`, has the driver prepare its part of `external` (enqueuing the other API's
    /// part now), and submits it.
    fn submit_external(
        &self,
        waits: &[SemaphoreValue],
        external: ExternalTimepoint,
        use_: ExternalUse,
        signals: &[SemaphoreValue],
    ) -> Result<()> {
        self.check_signals(waits, signals)?;
        let op = self.device.backend().prepare_external(self.index, external, use_)?;
        self.submit_checked(QueueOp::Native(op), waits, signals)
    }

    /// Hands batched submissions to the device now.
    pub fn flush(&self) -> Result<()> {
        self.device.backend().flush(self.index)
    }
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Queue({} queue {})", self.device.id(), self.index)
    }
}
