//! The device every driver builds on the HAL's scheduler: what is the same in all of them
//! (semaphores, submissions, flushing, profiling, the hang report, pool occupancy) is written here
//! once over [`Scheduler`]; a driver implements [`ScheduledDevice`] with only what differs
//! (memory, executables, prepared commands, collectives) and gets [`DeviceBackend`] for it.
//!
//! The device hands its scheduler over as a [`QueueScheduler`], which erases the stream model: a
//! driver's streams and events stay private to it, and the one indirect call this adds per
//! submission is not measurable beside the handle's own virtual call.

use std::sync::Arc;

use crate::buffer::{Buffer, BufferParams};
use crate::collective::{AbandonFn, ChannelBackend, ChannelId};
use crate::command_buffer::{Command, CommandBufferMode};
use crate::device::{DeviceInfo, ResourceUsage};
use crate::driver::scheduler::Scheduler;
use crate::driver::stream_model::StreamModel;
use crate::driver::{
    BindingState, BufferBackend, DeviceBackend, ExecutableBackend, ImportedHostMemory, NativeOp, PreparedCommands,
    ReleaseOnce, Submission,
};
use crate::error::{Error, Result};
use crate::executable::ExecutableSource;
use crate::external::{ExternalMemory, ExternalTimepoint, ExternalUse};
use crate::profile::{Profile, ProfileOptions};
use crate::semaphore::{Semaphore, SemaphoreValue};

/// A device whose queues the HAL's [`Scheduler`] runs over the driver's stream model: the driver's
/// part of a [`DeviceBackend`]. Every type that implements it is a `DeviceBackend`: semaphores,
/// submissions, profiling, the report and resource usage go to [`scheduler`](Self::scheduler); the
/// rest to the methods below, whose documentation is that of the `DeviceBackend` method of the same
/// name.
///
/// The device owns its scheduler and declares it first among its fields, so that dropping the
/// device drains its queues while its memory and executables are still alive.
pub trait ScheduledDevice: Send + Sync {
    /// The scheduler that runs this device's queues (a [`Scheduler`] of any stream model).
    fn scheduler(&self) -> &dyn QueueScheduler;

    /// What the device is.
    fn info(&self) -> &DeviceInfo;

    /// See [`DeviceBackend::allocate`].
    fn allocate(&self, params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>>;

    /// See [`DeviceBackend::allocate_transient`].
    fn allocate_transient(&self, params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>>;

    /// See [`DeviceBackend::import_host_memory`]. The default: `Unimplemented`, releasing at once.
    fn import_host_memory(&self, params: BufferParams, memory: ImportedHostMemory) -> Result<Arc<dyn BufferBackend>> {
        let _ = params;
        drop(memory);
        Err(Error::unimplemented(format!("{}: cannot import host memory", self.info().driver)))
    }

    /// See [`DeviceBackend::import_external_memory`]. The default: `Unimplemented`, releasing at
    /// once.
    fn import_external_memory(
        &self,
        params: BufferParams,
        memory: ExternalMemory,
        release: ReleaseOnce,
    ) -> Result<Arc<dyn BufferBackend>> {
        let _ = params;
        drop(release);
        Err(crate::external::unsupported_memory(&self.info().driver, &memory))
    }

    /// See [`DeviceBackend::prepare_external`]. The default: `Unimplemented`.
    fn prepare_external(&self, queue: usize, timepoint: ExternalTimepoint, use_: ExternalUse) -> Result<NativeOp> {
        let _ = (queue, use_);
        Err(crate::external::unsupported_timepoint(&self.info().driver, &timepoint))
    }

    /// See [`DeviceBackend::copies_with`]. The default: no.
    fn copies_with(&self, buffer: &Buffer) -> bool {
        let _ = buffer;
        false
    }

    /// See [`DeviceBackend::load_executable`].
    fn load_executable(&self, source: &ExecutableSource) -> Result<Arc<dyn ExecutableBackend>>;

    /// See [`DeviceBackend::prepare_commands`].
    fn prepare_commands(&self, commands: &Arc<[Command]>, mode: CommandBufferMode)
    -> Result<Arc<dyn PreparedCommands>>;

    /// See [`DeviceBackend::prepare_bound`]. The default prepares a one-shot buffer every time.
    fn prepare_bound(&self, commands: &Arc<[Command]>, state: &BindingState) -> Result<Arc<dyn PreparedCommands>> {
        let _ = state;
        self.prepare_commands(commands, CommandBufferMode::OneShot)
    }

    /// See [`DeviceBackend::flush`]. The default does nothing: the scheduler hands a submission to
    /// its stream as it issues it.
    fn flush(&self, queue: usize) -> Result<()> {
        let _ = queue;
        Ok(())
    }

    /// See [`DeviceBackend::create_channel_id`]. The default: `Unimplemented`.
    fn create_channel_id(&self) -> Result<ChannelId> {
        Err(Error::unimplemented(format!("{}: no collectives", self.info().driver)))
    }

    /// See [`DeviceBackend::create_channel`]. The default: `Unimplemented`.
    fn create_channel(
        &self,
        id: &ChannelId,
        rank: usize,
        count: usize,
    ) -> Result<(Arc<dyn ChannelBackend>, Option<AbandonFn>)> {
        let _ = (id, rank, count);
        Err(Error::unimplemented(format!("{}: no collectives", self.info().driver)))
    }

    /// See [`DeviceBackend::trim`]. The default: nothing is kept.
    fn trim(&self) -> Result<()> {
        Ok(())
    }

    /// Appends what the driver knows beyond the scheduler to the hang report (the default: nothing).
    fn extend_report(&self, report: &mut String) {
        let _ = report;
    }

    /// Fills in the driver's part of the usage the scheduler measured: the memory in use (and kept),
    /// and the driver's own pools.
    fn extend_usage(&self, usage: &mut ResourceUsage);
}

impl<D: ScheduledDevice + 'static> DeviceBackend for D {
    fn info(&self) -> &DeviceInfo {
        ScheduledDevice::info(self)
    }

    fn import_external_memory(
        &self,
        params: BufferParams,
        memory: ExternalMemory,
        release: ReleaseOnce,
    ) -> Result<Arc<dyn BufferBackend>> {
        ScheduledDevice::import_external_memory(self, params, memory, release)
    }

    fn prepare_external(&self, queue: usize, timepoint: ExternalTimepoint, use_: ExternalUse) -> Result<NativeOp> {
        ScheduledDevice::prepare_external(self, queue, timepoint, use_)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn allocate(&self, params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>> {
        ScheduledDevice::allocate(self, params, size)
    }

    fn allocate_transient(&self, params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>> {
        ScheduledDevice::allocate_transient(self, params, size)
    }

    fn import_host_memory(&self, params: BufferParams, memory: ImportedHostMemory) -> Result<Arc<dyn BufferBackend>> {
        ScheduledDevice::import_host_memory(self, params, memory)
    }

    fn create_semaphore(&self, initial: u64) -> Result<Semaphore> {
        Ok(self.scheduler().create_semaphore(initial))
    }

    fn create_semaphore_with(&self, initial: u64, flags: crate::SemaphoreFlags) -> Result<Semaphore> {
        self.scheduler().create_semaphore_with(initial, flags)
    }

    fn load_executable(&self, source: &ExecutableSource) -> Result<Arc<dyn ExecutableBackend>> {
        ScheduledDevice::load_executable(self, source)
    }

    fn prepare_commands(
        &self,
        commands: &Arc<[Command]>,
        mode: CommandBufferMode,
    ) -> Result<Arc<dyn PreparedCommands>> {
        ScheduledDevice::prepare_commands(self, commands, mode)
    }

    fn prepare_bound(&self, commands: &Arc<[Command]>, state: &BindingState) -> Result<Arc<dyn PreparedCommands>> {
        ScheduledDevice::prepare_bound(self, commands, state)
    }

    fn submit(&self, queue: usize, op: Submission, waits: &[SemaphoreValue], signals: &[SemaphoreValue]) -> Result<()> {
        self.scheduler().submit(queue, op, waits, signals)
    }

    fn flush(&self, queue: usize) -> Result<()> {
        ScheduledDevice::flush(self, queue)
    }

    fn report(&self) -> String {
        let mut report = self.scheduler().report();
        self.extend_report(&mut report);
        report
    }

    fn copies_with(&self, buffer: &Buffer) -> bool {
        ScheduledDevice::copies_with(self, buffer)
    }

    fn create_channel_id(&self) -> Result<ChannelId> {
        ScheduledDevice::create_channel_id(self)
    }

    fn create_channel(
        &self,
        id: &ChannelId,
        rank: usize,
        count: usize,
    ) -> Result<(Arc<dyn ChannelBackend>, Option<AbandonFn>)> {
        ScheduledDevice::create_channel(self, id, rank, count)
    }

    fn begin_profiling(&self, options: ProfileOptions) -> Result<()> {
        self.scheduler().begin_profiling(options)
    }

    fn collect_profile(&self) -> Result<Profile> {
        self.scheduler().collect_profile()
    }

    fn end_profiling(&self) -> Result<Profile> {
        self.scheduler().end_profiling()
    }

    fn resource_usage(&self) -> ResourceUsage {
        let mut usage = self.scheduler().resource_usage();
        self.extend_usage(&mut usage);
        usage
    }

    fn trim(&self) -> Result<()> {
        ScheduledDevice::trim(self)
    }
}

/// What a device asks of its [`Scheduler`], with the stream model erased: implemented by every
/// `Scheduler<M>`. Each method is the scheduler's method of the same name.
pub trait QueueScheduler: Send + Sync {
    /// See [`Scheduler::create_semaphore`].
    fn create_semaphore(&self, initial: u64) -> Semaphore;

    /// See [`Scheduler::create_semaphore_with`].
    fn create_semaphore_with(&self, initial: u64, flags: crate::SemaphoreFlags) -> Result<Semaphore>;

    /// See [`Scheduler::submit`].
    fn submit(&self, queue: usize, op: Submission, waits: &[SemaphoreValue], signals: &[SemaphoreValue]) -> Result<()>;

    /// See [`Scheduler::begin_profiling`].
    fn begin_profiling(&self, options: ProfileOptions) -> Result<()>;

    /// See [`Scheduler::collect_profile`].
    fn collect_profile(&self) -> Result<Profile>;

    /// See [`Scheduler::end_profiling`].
    fn end_profiling(&self) -> Result<Profile>;

    /// See [`Scheduler::report`].
    fn report(&self) -> String;

    /// See [`Scheduler::resource_usage`].
    fn resource_usage(&self) -> ResourceUsage;
}

impl<M: StreamModel> QueueScheduler for Scheduler<M> {
    fn create_semaphore(&self, initial: u64) -> Semaphore {
        Scheduler::create_semaphore(self, initial)
    }

    fn create_semaphore_with(&self, initial: u64, flags: crate::SemaphoreFlags) -> Result<Semaphore> {
        Scheduler::create_semaphore_with(self, initial, flags)
    }

    fn submit(&self, queue: usize, op: Submission, waits: &[SemaphoreValue], signals: &[SemaphoreValue]) -> Result<()> {
        Scheduler::submit(self, queue, op, waits, signals)
    }

    fn begin_profiling(&self, options: ProfileOptions) -> Result<()> {
        Scheduler::begin_profiling(self, options)
    }

    fn collect_profile(&self) -> Result<Profile> {
        Scheduler::collect_profile(self)
    }

    fn end_profiling(&self) -> Result<Profile> {
        Scheduler::end_profiling(self)
    }

    fn report(&self) -> String {
        Scheduler::report(self)
    }

    fn resource_usage(&self) -> ResourceUsage {
        Scheduler::resource_usage(self)
    }
}
