//! The device backend: the HAL's scheduler over the inline stream model, plus the driver's own
//! parts (memory, executables, command buffers).

use std::sync::Arc;

use hal::driver::scheduler::Scheduler;
use hal::driver::{
    BufferBackend, Command, ExecutableBackend, ImportedHostMemory, PreparedCommands, QueueScheduler, ScheduledDevice,
};
use hal::{
    BufferParams, CommandBufferMode, DeviceId, DeviceInfo, Error, ExecutableSource, MemoryType, ResourceUsage, Result,
};

use crate::commands::Recorded;
use crate::memory::{HostMemory, MemoryCounter};
use crate::stream::InlineStreams;

/// Queues per device.
const QUEUE_COUNT: usize = 4;

/// The largest single allocation.
const MAX_ALLOCATION_SIZE: u64 = 1 << 30;

/// What the skeleton's device is: host memory of every type, no executable kinds.
pub(crate) fn device_info() -> DeviceInfo {
    let mut info = DeviceInfo::new(crate::DRIVER_NAME, "skeleton (inline, host memory)", 0);
    info.stable_id = "skeleton-0".to_owned();
    info.queue_count = QUEUE_COUNT;
    info.memory_types = vec![
        MemoryType::DEVICE_LOCAL,
        MemoryType::HOST_LOCAL | MemoryType::HOST_CACHED,
        MemoryType::DEVICE_LOCAL | MemoryType::HOST_LOCAL,
    ];
    info.max_allocation_size = MAX_ALLOCATION_SIZE;
    info
}

/// A skeleton device: the driver's part of it; the HAL's [`ScheduledDevice`] does the rest.
pub struct SkeletonDevice {
    // The first field, so dropped first: teardown drains the queues while memory is still counted.
    scheduler: Scheduler<InlineStreams>,
    info: DeviceInfo,
    memory: Arc<MemoryCounter>,
}

impl SkeletonDevice {
    /// Device `id`.
    pub fn new(id: DeviceId) -> Result<Self> {
        let scheduler = Scheduler::new(id, InlineStreams, QUEUE_COUNT)?;
        Ok(SkeletonDevice { scheduler, info: device_info(), memory: Arc::default() })
    }
}

impl ScheduledDevice for SkeletonDevice {
    fn scheduler(&self) -> &dyn QueueScheduler {
        &self.scheduler
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn allocate(&self, _params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>> {
        Ok(Arc::new(HostMemory::new(size, false, &self.memory)?))
    }

    fn allocate_transient(&self, _params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>> {
        Ok(Arc::new(HostMemory::new(size, true, &self.memory)?))
    }

    fn import_host_memory(&self, _params: BufferParams, memory: ImportedHostMemory) -> Result<Arc<dyn BufferBackend>> {
        Ok(Arc::new(HostMemory::import(memory, &self.memory)))
    }

    /// Every skeleton buffer is host memory: its queues copy to and from any of them.
    fn copies_with(&self, buffer: &hal::Buffer) -> bool {
        HostMemory::of(buffer).is_ok()
    }

    fn load_executable(&self, _source: &ExecutableSource) -> Result<Arc<dyn ExecutableBackend>> {
        Err(Error::unimplemented(format!(
            "{}: loads no executables (it lists no executable kinds)",
            crate::DRIVER_NAME
        )))
    }

    fn prepare_commands(
        &self,
        _commands: &Arc<[Command]>,
        _mode: CommandBufferMode,
    ) -> Result<Arc<dyn PreparedCommands>> {
        Ok(Arc::new(Recorded))
    }

    fn extend_usage(&self, usage: &mut ResourceUsage) {
        usage.memory_in_use = self.memory.in_use();
    }
}
