//! The CUDA device: the primary context, memory, modules, command buffers, and the shared scheduler
//! over [`CudaStreams`] (one non-blocking stream and one completion thread per queue).

use std::sync::Arc;

use cudarc::driver::sys::{self, CUdevice, CUdevice_attribute};
use hal::driver::lock;
use hal::driver::scheduler::Scheduler;
use hal::driver::{BindingState, Command};
use hal::driver::{
    BufferBackend, ExecutableBackend, ImportedHostMemory, NativeOp, PreparedCommands, QueueScheduler, ReleaseOnce,
    ScheduledDevice,
};
use hal::{
    BufferParams, CommandBufferMode, DeviceId, DeviceInfo, Error, ExecutableKind, ExecutableSource, ExternalMemory,
    ExternalTimepoint, ExternalUse, MemoryType, PoolUsage, ResourceUsage, Result,
};

use crate::commands::CudaPreparedCommands;
use crate::commands::indirect_node::NodeUpdater;
use crate::executable::CudaExecutable;
use crate::interop::semaphore::SemaphoreWaits;
use crate::interop::word_slots::WordSlots;
use crate::memory::{CudaMemory, MemoryCounter};
use crate::options::CudaOptions;
use crate::stream::CudaStreams;
use crate::sys::context::Context;
use crate::sys::result;

/// The memory types a CUDA device offers: device-local, and pinned host memory the device maps.
pub(crate) fn memory_types() -> Vec<MemoryType> {
    vec![MemoryType::DEVICE_LOCAL, MemoryType::HOST_LOCAL | MemoryType::HOST_CACHED]
}

fn attribute(device: CUdevice, attribute: CUdevice_attribute) -> Result<i32> {
    result::device_get_attribute(device, attribute)
}

/// What device `ordinal` is, read without creating a context. The probe must have succeeded.
pub(crate) fn device_info(ordinal: usize, options: &CudaOptions) -> Result<DeviceInfo> {
    use CUdevice_attribute as A;
    let device = result::device_get(ordinal)?;
    let name = result::device_get_name(device)?;
    let uuid = result::device_get_uuid(device)?;
    let total = result::device_total_mem(device)?;
    let major = attribute(device, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attribute(device, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let sms = attribute(device, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let max_threads = attribute(device, A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?;
    let limits = |attributes: [CUdevice_attribute; 3]| -> Result<[u32; 3]> {
        let mut out = [0u32; 3];
        for (slot, attribute_id) in out.iter_mut().zip(attributes) {
            *slot = u32::try_from(attribute(device, attribute_id)?).unwrap_or(0);
        }
        Ok(out)
    };
    let max_block = limits([
        A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
        A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
        A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
    ])?;
    let max_grid = limits([
        A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
        A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
        A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
    ])?;
    let pools = attribute(device, A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)?;
    let map_host = attribute(device, A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)?;
    let unified = attribute(device, A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)?;
    let pci_bus = attribute(device, A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?;
    let driver_version = crate::sys::loader::probe().map(|p| p.driver_version).unwrap_or(0);
    let mut info = DeviceInfo::new(crate::DRIVER_NAME, name, ordinal);
    info.stable_id = uuid;
    info.queue_count = options.queue_count;
    info.memory_types = memory_types();
    info.max_allocation_size = total as u64;
    info.max_workgroup_threads = max_threads.max(0) as u32;
    info.max_workgroup_size = max_block;
    info.max_workgroup_count = max_grid;
    info.executable_kinds = EXECUTABLE_KINDS.to_vec();
    info.properties = vec![
        ("compute_capability".to_string(), format!("{major}.{minor}")),
        ("multiprocessors".to_string(), sms.to_string()),
        ("total_memory_bytes".to_string(), total.to_string()),
        ("max_threads_per_block".to_string(), max_threads.to_string()),
        ("memory_pools".to_string(), (pools != 0).to_string()),
        ("can_map_host_memory".to_string(), (map_host != 0).to_string()),
        ("unified_addressing".to_string(), (unified != 0).to_string()),
        ("pci_bus_id".to_string(), pci_bus.to_string()),
        ("driver_version".to_string(), format!("{}.{}", driver_version / 1000, (driver_version % 1000) / 10)),
        ("completion_wait".to_string(), format!("{:?}", options.completion_wait)),
        ("poll_interval_us".to_string(), options.poll_interval.as_micros().to_string()),
    ];
    Ok(info)
}

/// What a CUDA device loads ([`crate::executable::CudaExecutable::load`]): module images the driver
/// API takes, PTX first (JIT-compiled for any architecture); never native kernel tables.
pub(crate) const EXECUTABLE_KINDS: [ExecutableKind; 3] =
    [ExecutableKind::Ptx, ExecutableKind::Cubin, ExecutableKind::Fatbin];

/// A CUDA device.
pub struct CudaDevice {
    // Dropped first: fails pending actions, drains the streams, joins the completion threads and
    // destroys the streams, while memory and modules are still alive.
    scheduler: Scheduler<CudaStreams>,
    id: DeviceId,
    info: DeviceInfo,
    options: CudaOptions,
    memory: Arc<MemoryCounter>,
    context: Arc<Context>,
    /// How copies with each other GPU's memory go, found at the first such copy.
    peers: std::sync::Mutex<Vec<(usize, PeerPath)>>,
    /// The updater of indirect dispatch nodes, linked at the first command buffer with an
    /// indirect dispatch (`None`: off, or it could not be linked; the reason is logged once).
    updater: std::sync::OnceLock<Option<Arc<NodeUpdater>>>,
    /// The words its queues and foreign CUDA streams order their work through (`crate::interop`).
    words: Arc<WordSlots>,
    /// Its queues' waits on imported semaphores, for teardown to release (`crate::interop`).
    semaphore_waits: Arc<SemaphoreWaits>,
}

impl Drop for CudaDevice {
    /// Its ranks leave their channels, and its queues stop waiting on foreign streams, before its
    /// queues are torn down (see [`crate::collective`], [`crate::interop`]): teardown drains the
    /// streams, which must not wait on work that may never come.
    fn drop(&mut self) {
        crate::collective::device_dropped(self.id);
        // Semaphores first: a released wait's stream then writes its word itself.
        self.semaphore_waits.release_all();
        self.words.release_all();
    }
}

/// How copies between this device's GPU and another go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerPath {
    /// Peer access is enabled: the copy engines move the bytes GPU to GPU (NVLink or PCIe).
    Peer,
    /// The GPUs cannot reach each other's memory: CUDA stages the copy through host memory.
    Staged,
}

impl CudaDevice {
    /// The updater for `commands`' indirect dispatches: `None` if they have none, or the device
    /// reads counts on the host.
    fn updater_for(&self, commands: &[Command]) -> Option<&Arc<NodeUpdater>> {
        if commands.iter().any(|c| matches!(c, Command::DispatchIndirect { .. })) { self.updater() } else { None }
    }

    /// The updater of indirect dispatch nodes, linked at the first call (`None`: off, or it could
    /// not be linked).
    fn updater(&self) -> Option<&Arc<NodeUpdater>> {
        if !self.options.indirect_on_device {
            return None;
        }
        self.updater
            .get_or_init(|| match NodeUpdater::load(&self.context, self.info.max_workgroup_count) {
                Ok(updater) => Some(Arc::new(updater)),
                Err(e) => {
                    tracing::info!(%e, "cuda: indirect dispatches read their counts on the host");
                    None
                }
            })
            .as_ref()
    }

    /// Whether indirect dispatches in command buffers that replay as graphs have their grids set on
    /// the device ([`CudaOptions::indirect_on_device`], and the updater linked: tried at the first
    /// call if no command buffer tried it yet).
    pub fn indirect_on_device(&self) -> bool {
        self.updater().is_some()
    }

    /// How copies with GPU `ordinal`'s memory go (`None`: the same GPU). Enables peer access at
    /// the first call for a GPU that allows it.
    pub(crate) fn peer_path(&self, ordinal: usize, peer: &Context) -> Result<Option<PeerPath>> {
        if ordinal == self.context.ordinal() {
            return Ok(None);
        }
        let mut peers = lock(&self.peers);
        if let Some((_, path)) = peers.iter().find(|(o, _)| *o == ordinal) {
            return Ok(Some(*path));
        }
        let path = if result::device_can_access_peer(self.context.device(), peer.device())? {
            result::ctx_enable_peer_access(&self.context.bind()?, peer.raw())?;
            PeerPath::Peer
        } else {
            PeerPath::Staged
        };
        tracing::info!(from = self.context.ordinal(), to = ordinal, ?path, "cuda: copies between GPUs");
        peers.push((ordinal, path));
        Ok(Some(path))
    }

    /// Creates device `ordinal` with `options`. The probe must have succeeded.
    pub fn new(id: DeviceId, ordinal: usize, options: &CudaOptions) -> Result<Self> {
        let info = device_info(ordinal, options)?;
        let property = |name: &str| info.properties.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        if property("memory_pools") != Some("true") {
            return Err(Error::unavailable(format!(
                "cuda: device {ordinal} ({}) has no stream-ordered memory pools, which queue_alloca needs",
                info.name
            )));
        }
        if property("unified_addressing") != Some("true") || property("can_map_host_memory") != Some("true") {
            return Err(Error::unavailable(format!(
                "cuda: device {ordinal} ({}) lacks unified addressing or mapped host memory",
                info.name
            )));
        }
        let context = Context::retain(ordinal)?;
        let model = CudaStreams::new(&context, options, info.max_workgroup_count)?;
        let scheduler = Scheduler::new(id, model, options.queue_count)?;
        tracing::debug!(%id, ordinal, name = %info.name, "cuda device created");
        let memory = Arc::new(MemoryCounter::default());
        let words = WordSlots::new(&context)?;
        Ok(CudaDevice {
            scheduler,
            id,
            info,
            options: options.clone(),
            memory,
            context: context.clone(),
            peers: std::sync::Mutex::new(Vec::new()),
            updater: std::sync::OnceLock::new(),
            words,
            semaphore_waits: SemaphoreWaits::new(&context),
        })
    }

    /// The options it was created with.
    pub fn options(&self) -> &CudaOptions {
        &self.options
    }

    /// Its primary context.
    pub fn context(&self) -> &Arc<Context> {
        &self.context
    }

    /// Raw stream of `queue`, for interop (e.g. a baseline measured on the same stream).
    pub fn stream(&self, queue: usize) -> Option<sys::CUstream> {
        (queue < self.options.queue_count).then(|| self.scheduler.stream(queue).raw())
    }

    /// Host callbacks the driver has run to wake completion threads, over all queues (only
    /// `CompletionWait::HostCallback` launches any).
    pub fn completion_callbacks(&self) -> u64 {
        (0..self.options.queue_count)
            .filter_map(|queue| self.scheduler.stream(queue).callback().map(|c| c.callbacks_run()))
            .sum()
    }

    /// Waits until nothing is pending or in flight, or `timeout` passes (tests, teardown).
    pub fn wait_idle(&self, timeout: std::time::Duration) -> Result<()> {
        self.scheduler.wait_idle(timeout)
    }
}

impl ScheduledDevice for CudaDevice {
    fn scheduler(&self) -> &dyn QueueScheduler {
        &self.scheduler
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn allocate(&self, params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>> {
        let memory = if params.memory_type.contains(MemoryType::HOST_VISIBLE) {
            CudaMemory::host(&self.context, &self.memory, size)?
        } else {
            CudaMemory::device(&self.context, &self.memory, size)?
        };
        Ok(Arc::new(memory))
    }

    fn allocate_transient(&self, params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>> {
        let host_visible = params.memory_type.contains(MemoryType::HOST_VISIBLE);
        Ok(Arc::new(CudaMemory::transient(&self.context, &self.memory, size, host_visible)?))
    }

    fn import_host_memory(&self, _params: BufferParams, memory: ImportedHostMemory) -> Result<Arc<dyn BufferBackend>> {
        Ok(Arc::new(CudaMemory::import(&self.context, &self.memory, memory)?))
    }

    fn import_external_memory(
        &self,
        params: BufferParams,
        memory: ExternalMemory,
        release: ReleaseOnce,
    ) -> Result<Arc<dyn BufferBackend>> {
        if !matches!(memory, ExternalMemory::CudaDevicePointer { .. } | ExternalMemory::OpaqueFd { .. }) {
            return Err(Error::unimplemented(format!(
                "cuda: cannot import a {} ({memory}); the CUDA driver imports CUDA device pointers and opaque file \
                 descriptors",
                memory.kind()
            )));
        }
        if params.memory_type.contains(MemoryType::HOST_VISIBLE) {
            return Err(Error::invalid_argument(format!(
                "cuda: import of {memory}: memory type {} is host-visible, and device memory is not",
                params.memory_type
            )));
        }
        let (context, counter) = (&self.context, &self.memory);
        Ok(Arc::new(match memory {
            ExternalMemory::OpaqueFd { fd, length, dedicated } => {
                CudaMemory::import_opaque_fd(context, counter, fd, length, dedicated, release)?
            }
            ExternalMemory::CudaDevicePointer { address, length } => {
                CudaMemory::import_device(context, counter, address, length, release)?
            }
            _ => return Err(Error::internal(format!("cuda: import of {memory}: checked above"))),
        }))
    }

    fn prepare_external(&self, queue: usize, timepoint: ExternalTimepoint, use_: ExternalUse) -> Result<NativeOp> {
        crate::interop::external::prepare(&self.context, &self.words, &self.semaphore_waits, queue, timepoint, use_)
    }

    fn load_executable(&self, source: &ExecutableSource) -> Result<Arc<dyn ExecutableBackend>> {
        Ok(Arc::new(CudaExecutable::load(&self.context, source, &self.info)?))
    }

    fn prepare_commands(
        &self,
        commands: &Arc<[Command]>,
        mode: CommandBufferMode,
    ) -> Result<Arc<dyn PreparedCommands>> {
        let graph_min_commands = match mode {
            CommandBufferMode::Reusable => self.options.reusable_graph_min_commands,
            _ => self.options.graph_min_commands,
        };
        let updater = self.updater_for(commands);
        Ok(Arc::new(CudaPreparedCommands::prepare(&self.context, &self.memory, commands, graph_min_commands, updater)?))
    }

    fn prepare_bound(&self, commands: &Arc<[Command]>, state: &BindingState) -> Result<Arc<dyn PreparedCommands>> {
        let graph_min_commands = self.options.reusable_graph_min_commands;
        Ok(Arc::new(CudaPreparedCommands::prepare_bound(
            &self.context,
            &self.memory,
            commands,
            state,
            graph_min_commands,
            self.options.bound_graph_instances,
            self.updater_for(commands),
        )?))
    }

    fn create_channel_id(&self) -> Result<hal::ChannelId> {
        crate::collective::unique_id()
    }

    /// An NCCL communicator (blocks until every rank joined; see [`crate::collective`]).
    fn create_channel(
        &self,
        id: &hal::ChannelId,
        rank: usize,
        count: usize,
    ) -> Result<(Arc<dyn hal::driver::ChannelBackend>, Option<hal::driver::AbandonFn>)> {
        crate::collective::NcclChannel::create(self.id, &self.context, &self.memory, id, rank, count)
    }

    /// Another CUDA device's memory: on the same GPU a plain copy; on another GPU a peer copy where
    /// the GPUs allow it, staged by CUDA otherwise (see `PeerPath`).
    fn copies_with(&self, buffer: &hal::Buffer) -> bool {
        let Ok(memory) = CudaMemory::of(buffer) else { return false };
        match self.peer_path(memory.context().ordinal(), memory.context()) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(%e, "cuda: cannot copy with another GPU's memory");
                false
            }
        }
    }

    /// How copies with each other GPU go, after the scheduler's report.
    fn extend_report(&self, report: &mut String) {
        for (ordinal, path) in lock(&self.peers).iter() {
            *report += &format!("copies with cuda:{ordinal}: {path:?}\n");
        }
    }

    fn extend_usage(&self, usage: &mut ResourceUsage) {
        let staging = self.scheduler.model().staging();
        usage.pools.push(PoolUsage::new("staging blocks", staging.in_use(), staging.created()));
        let (created, in_use) = self.scheduler.model().timer().usage();
        usage.pools.push(PoolUsage::new("timing events", in_use, created));
        usage.memory_in_use = self.memory.in_use();
        usage.memory_kept = self.context.pinned_cache().kept_bytes() as u64;
        let kept_modules = self.context.kept_modules().len();
        usage.pools.push(PoolUsage::new("kept modules", 0, kept_modules));
    }

    fn trim(&self) -> Result<()> {
        crate::sys::unloader::unload_kept(&self.context);
        let bound = self.context.bind()?;
        self.context.pinned_cache().free_all(&bound).map_err(|e| e.context(format!("{self:?}: trim")))
    }
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDevice({} cuda:{} '{}')", self.id, self.info.ordinal, self.info.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_info_lists_module_image_kinds_only() {
        // Every CUDA device reports this list (`device_info`); checked here without a GPU.
        assert_eq!(EXECUTABLE_KINDS, [ExecutableKind::Ptx, ExecutableKind::Cubin, ExecutableKind::Fatbin]);
        for kind in EXECUTABLE_KINDS {
            assert!(kind.format().is_some(), "{kind} is not loaded from bytes");
        }
        for kind in [ExecutableKind::Native, ExecutableKind::SharedLibrary] {
            assert!(!EXECUTABLE_KINDS.contains(&kind), "cuda must not list {kind}");
        }
    }
}
