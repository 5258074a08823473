//! A Vulkan device: the HAL's scheduler over [`VulkanStreams`], buffers from gpu-allocator and
//! SPIR-V executables.

use std::sync::Arc;

use ash::vk;
use ash::vk::Handle;
use hal::driver::scheduler::Scheduler;
use hal::driver::{
    BindingState, BufferBackend, Command, ExecutableBackend, ImportedHostMemory, NativeOp, PreparedCommands,
    QueueScheduler, ReleaseOnce, ScheduledDevice,
};
use hal::{
    BufferParams, CommandBufferMode, DeviceId, DeviceInfo, ExecutableKind, ExecutableSource, ExternalMemory,
    ExternalTimepoint, ExternalUse, MemoryType, PoolUsage, ResourceUsage, Result,
};

use crate::commands::replay::Replays;
use crate::commands::{CHECK_COUNT_SPIRV, VulkanPreparedCommands, check_binding_range};
use crate::executable::VulkanExecutable;
use crate::gpu::{Gpu, PhysicalInfo};
use crate::memory::{Block, MemoryCounter, VulkanMemory};
use crate::stream::VulkanStreams;

/// The property saying how executes with a binding table run: `replayed` (recordings kept and
/// replayed, each execute writing its buffers into their update-after-bind descriptor sets) or
/// `recorded` (at each execute).
pub const BINDING_TABLE_EXECUTES: &str = "binding_table_executes";

/// HAL queues per device; they share the device's Vulkan queues round robin where it has fewer.
pub const QUEUE_COUNT: usize = 4;

/// Vulkan queues a logical device asks for (as many as its compute family has, up to this): enough
/// for two HAL devices on one GPU to have queues of their own (see [`Gpu::first_queues`]).
pub const VULKAN_QUEUES_WANTED: usize = 2 * QUEUE_COUNT;

/// The memory types the driver offers: all are mapped memory underneath (see `memory`).
pub fn memory_types() -> Vec<MemoryType> {
    vec![MemoryType::DEVICE_LOCAL, MemoryType::HOST_LOCAL | MemoryType::HOST_CACHED]
}

/// The device's memory types, one per entry: their flags and the size of their heap, e.g.
/// `DEVICE_LOCAL (80 GiB); HOST_VISIBLE|HOST_COHERENT (1007 GiB)`.
fn memory_types_text(types: &[(ash::vk::MemoryPropertyFlags, u64)]) -> String {
    use ash::vk::MemoryPropertyFlags as F;
    let names = [
        (F::DEVICE_LOCAL, "DEVICE_LOCAL"),
        (F::HOST_VISIBLE, "HOST_VISIBLE"),
        (F::HOST_COHERENT, "HOST_COHERENT"),
        (F::HOST_CACHED, "HOST_CACHED"),
        (F::LAZILY_ALLOCATED, "LAZILY_ALLOCATED"),
        (F::PROTECTED, "PROTECTED"),
    ];
    let one = |(flags, heap): &(F, u64)| {
        let set: Vec<&str> = names.iter().filter(|(f, _)| flags.contains(*f)).map(|(_, n)| *n).collect();
        let set = if set.is_empty() { "NONE".to_string() } else { set.join("|") };
        format!("{set} ({} MiB)", heap >> 20)
    };
    types.iter().map(one).collect::<Vec<_>>().join("; ")
}

/// What device `ordinal` (described by `physical`) offers.
pub fn device_info(ordinal: usize, physical: &PhysicalInfo) -> DeviceInfo {
    let limits = &physical.limits;
    let mut info = DeviceInfo::new(crate::DRIVER_NAME, physical.name.clone(), ordinal);
    info.stable_id = physical.uuid.iter().map(|b| format!("{b:02x}")).collect();
    info.queue_count = QUEUE_COUNT;
    info.memory_types = memory_types();
    info.max_allocation_size = physical.max_allocation;
    info.max_workgroup_threads = limits.max_compute_work_group_invocations;
    info.max_workgroup_size = limits.max_compute_work_group_size;
    info.max_workgroup_count = limits.max_compute_work_group_count;
    info.max_binding_length = u64::from(limits.max_storage_buffer_range);
    info.binding_alignment = limits.min_storage_buffer_offset_alignment.max(1);
    info.executable_kinds = vec![ExecutableKind::Spirv];
    let version = |v: u32| {
        format!("{}.{}.{}", ash::vk::api_version_major(v), ash::vk::api_version_minor(v), ash::vk::api_version_patch(v))
    };
    info.properties = vec![
        ("api_version".to_string(), version(physical.api_version)),
        ("driver_version".to_string(), physical.driver_version.to_string()),
        ("vulkan_queues".to_string(), physical.family_queues.to_string()),
        ("queue_family".to_string(), physical.queue_family.to_string()),
        ("push_descriptors".to_string(), physical.push_descriptors.to_string()),
        ("max_push_descriptors".to_string(), physical.max_push_descriptors.unwrap_or(0).to_string()),
        (
            BINDING_TABLE_EXECUTES.to_string(),
            if physical.update_after_bind.is_some() { "replayed" } else { "recorded" }.to_string(),
        ),
        ("host_memory_import".to_string(), physical.host_import_alignment.is_some().to_string()),
        ("external_memory_fd".to_string(), physical.fd_sharing.memory_fd_extension.to_string()),
        ("external_semaphore_fd".to_string(), physical.fd_sharing.semaphore_fd_extension.to_string()),
        ("memory_fd_export".to_string(), physical.fd_sharing.memory_export.to_string()),
        ("memory_fd_import".to_string(), physical.fd_sharing.memory_import.to_string()),
        ("timeline_fd_export".to_string(), physical.fd_sharing.timeline_export.to_string()),
        ("timeline_fd_import".to_string(), physical.fd_sharing.timeline_import.to_string()),
        ("robust_buffer_access".to_string(), physical.robust_buffer_access.to_string()),
        ("shader_int64".to_string(), physical.shader_features.int64.to_string()),
        ("shader_float64".to_string(), physical.shader_features.float64.to_string()),
        ("shader_float16".to_string(), physical.shader_features.float16.to_string()),
        ("max_storage_buffer_range".to_string(), limits.max_storage_buffer_range.to_string()),
        ("min_storage_buffer_offset_alignment".to_string(), limits.min_storage_buffer_offset_alignment.to_string()),
        ("max_push_constants_size".to_string(), limits.max_push_constants_size.to_string()),
        ("max_compute_shared_memory_size".to_string(), limits.max_compute_shared_memory_size.to_string()),
        ("largest_memory_heap".to_string(), physical.heap_bytes.to_string()),
        ("device_memory".to_string(), if physical.device_memory_mapped() { "mapped" } else { "unmapped" }.to_string()),
        ("memory_types".to_string(), memory_types_text(&physical.memory_types)),
    ];
    info
}

/// Refuses a collective, and a binding past the device's storage-buffer range (both refused when
/// recorded, or when an execute resolves its binding table).
fn check_commands(gpu: &Gpu, commands: &[Command]) -> Result<()> {
    let limit = gpu.physical.limits.max_storage_buffer_range;
    for (index, command) in commands.iter().enumerate() {
        let bindings = match command {
            Command::Dispatch { bindings, .. } | Command::DispatchIndirect { bindings, .. } => bindings,
            Command::Collective { .. } => {
                return Err(hal::Error::unimplemented(
                    "vulkan: collectives are not implemented (Vulkan has no collective library)",
                ));
            }
            _ => continue,
        };
        for (at, binding) in bindings.iter().enumerate() {
            check_binding_range(at, &binding.buffer, binding.length, limit)
                .map_err(|e| e.context(format!("command {index}")))?;
        }
    }
    Ok(())
}

/// A Vulkan device.
pub struct VulkanDevice {
    // Dropped first: drains the streams while memory and executables are still alive.
    scheduler: Scheduler<VulkanStreams>,
    info: DeviceInfo,
    gpu: Arc<Gpu>,
    memory: Arc<MemoryCounter>,
}

impl VulkanDevice {
    /// Device `ordinal` on `gpu`, tagged `id`.
    pub fn new(id: DeviceId, ordinal: usize, gpu: Arc<Gpu>) -> Result<Self> {
        let info = device_info(ordinal, &gpu.physical);
        if gpu.push.is_none() {
            return Err(hal::Error::unavailable(format!(
                "vulkan: device {ordinal} ({}) has no VK_KHR_push_descriptor, which this driver binds buffers with",
                info.name
            )));
        }
        let checker = ExecutableSource::Bytes {
            format: hal::ExecutableFormat::Spirv,
            data: CHECK_COUNT_SPIRV.iter().flat_map(|word| word.to_le_bytes()).collect::<Vec<u8>>().into(),
            entry_points: vec![hal::EntryPointInfo::new("check_count", 1, 2, 4)],
        };
        let checker = Arc::new(VulkanExecutable::load(&gpu, &checker, &info)?);
        let scheduler = Scheduler::new(
            id,
            VulkanStreams::new(
                &gpu,
                gpu.first_queues(QUEUE_COUNT),
                checker,
                crate::host_waits::WaitTuning::from_env()?,
                crate::submit_batch::limit_from_env()?,
            ),
            QUEUE_COUNT,
        )?;
        Ok(VulkanDevice { scheduler, info, gpu, memory: Arc::default() })
    }

    /// The logical device (for tools that record raw Vulkan beside the HAL, like the bench).
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// The index in its family of the Vulkan queue HAL queue `queue` submits to.
    pub fn queue_index(&self, queue: usize) -> u32 {
        self.scheduler.model().queue_index(queue)
    }

    /// What the host threads of its streams did so far (a diagnostic).
    pub fn host_thread_counts(&self) -> crate::HostThreadCounts {
        self.scheduler.model().thread_counts()
    }

    /// The count of its buffers' memory.
    pub(crate) fn memory_counter(&self) -> &Arc<MemoryCounter> {
        &self.memory
    }
}

impl Drop for VulkanDevice {
    /// Its queues stop waiting on embedders' timeline values before they are torn down (see
    /// [`crate::interop`]): teardown drains the streams, which must not wait on values that may
    /// never come.
    fn drop(&mut self) {
        self.scheduler.model().externals().release_all();
    }
}

impl ScheduledDevice for VulkanDevice {
    fn scheduler(&self) -> &dyn QueueScheduler {
        &self.scheduler
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn allocate(&self, params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>> {
        Ok(Arc::new(VulkanMemory::allocate(&self.gpu, &self.memory, params.memory_type, size)?))
    }

    fn allocate_transient(&self, params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>> {
        Ok(Arc::new(VulkanMemory::transient(&self.gpu, &self.memory, params.memory_type, size)))
    }

    fn import_host_memory(&self, params: BufferParams, memory: ImportedHostMemory) -> Result<Arc<dyn BufferBackend>> {
        Ok(Arc::new(VulkanMemory::import(&self.gpu, &self.memory, params.memory_type, memory)?))
    }

    fn import_external_memory(
        &self,
        params: BufferParams,
        memory: ExternalMemory,
        release: ReleaseOnce,
    ) -> Result<Arc<dyn BufferBackend>> {
        let supported = matches!(memory, ExternalMemory::VulkanBuffer { .. } | ExternalMemory::OpaqueFd { .. });
        if !supported {
            return Err(hal::Error::unimplemented(format!(
                "vulkan: cannot import a {} ({memory}); the Vulkan driver imports Vulkan buffers and opaque file \
                 descriptors",
                memory.kind()
            )));
        }
        if params.memory_type.contains(MemoryType::HOST_VISIBLE) {
            return Err(hal::Error::invalid_argument(format!(
                "vulkan: import of {memory}: memory type {} is host-visible, and an imported buffer has no host view \
                 (its memory is not mapped here)",
                params.memory_type
            )));
        }
        match memory {
            ExternalMemory::VulkanBuffer { buffer, offset, length } => {
                let block = Block::external(&self.gpu, vk::Buffer::from_raw(buffer), offset, length, release)?;
                Ok(Arc::new(VulkanMemory::external(&self.gpu, &self.memory, block)))
            }
            #[cfg(unix)]
            ExternalMemory::OpaqueFd { fd, length, dedicated } => {
                let block = Block::import_fd(&self.gpu, fd, length, dedicated, release)?;
                Ok(Arc::new(VulkanMemory::shared(&self.gpu, &self.memory, length, block)))
            }
            _ => Err(hal::Error::unimplemented(format!("vulkan: cannot import a {} here ({memory})", memory.kind()))),
        }
    }

    fn prepare_external(&self, queue: usize, timepoint: ExternalTimepoint, use_: ExternalUse) -> Result<NativeOp> {
        crate::interop::external::prepare(&self.gpu, queue, timepoint, use_)
    }

    fn copies_with(&self, buffer: &hal::Buffer) -> bool {
        VulkanMemory::of(buffer).is_ok_and(|memory| memory.is_on(&self.gpu))
    }

    fn load_executable(&self, source: &ExecutableSource) -> Result<Arc<dyn ExecutableBackend>> {
        Ok(Arc::new(VulkanExecutable::load(&self.gpu, source, &self.info)?))
    }

    fn prepare_commands(
        &self,
        commands: &Arc<[Command]>,
        mode: CommandBufferMode,
    ) -> Result<Arc<dyn PreparedCommands>> {
        check_commands(&self.gpu, commands)?;
        let replays = match mode {
            CommandBufferMode::Reusable => Replays::for_commands(commands).map(Arc::new),
            // Runs once: recording it at its execute costs the same.
            _ => None,
        };
        Ok(Arc::new(VulkanPreparedCommands { replays, bound: false }))
    }

    fn prepare_bound(&self, commands: &Arc<[Command]>, state: &BindingState) -> Result<Arc<dyn PreparedCommands>> {
        check_commands(&self.gpu, commands)?;
        let replays = crate::commands::bound::replays_for(&self.gpu, commands, state);
        Ok(Arc::new(VulkanPreparedCommands { replays, bound: true }))
    }

    fn extend_usage(&self, usage: &mut ResourceUsage) {
        let in_flight = self.scheduler.model().in_flight();
        usage.pools.push(PoolUsage::new("submissions in flight", in_flight, in_flight));
        usage.memory_in_use = self.memory.in_use();
    }
}

impl std::fmt::Debug for VulkanDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VulkanDevice(vulkan:{} '{}')", self.info.ordinal, self.info.name)
    }
}
