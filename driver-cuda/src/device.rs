//! The CUDA device: the primary context, memory, modules, command buffers, and the shared scheduler
//! over [`CudaStreams`] (one non-blocking stream and one completion thread per queue).

use std::sync::Arc;

use cudarc::driver::sys::{self, CUdevice, CUdevice_attribute};
use hal::driver::lock;
use hal::driver::scheduler::Scheduler;
use hal::driver::{BindingState, Command};
use hal::driver::{
    BufferBackend, ExecutableBackend, ImportedHostMemory, PreparedCommands, QueueScheduler, ScheduledDevice,
};
use hal::{
    BufferParams, CommandBufferMode, DeviceId, DeviceInfo, Error, ExecutableKind, ExecutableSource, MemoryType,
    PoolUsage, ResourceUsage, Result,
};

use crate::command_buffer::CudaPreparedCommands;
use crate::context::Context;
use crate::event::CompletionWait;
use crate::indirect_node::NodeUpdater;
use crate::memory::{CudaMemory, MemoryCounter};
use crate::module::CudaExecutable;
use crate::result;
use crate::stream::CudaStreams;

/// How to build a CUDA device.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Queues, each with its own non-blocking stream and completion thread.
    pub queue_count: usize,
    /// How completion threads wait for events.
    pub completion_wait: CompletionWait,
    /// While a completion wait spins, the time between two `cuEventQuery` calls (each takes driver
    /// locks that submitting threads need).
    pub poll_interval: std::time::Duration,
    /// One-shot command buffers with at least this many commands (barriers not counted) replay as
    /// CUDA graphs; shorter ones launch directly (a buffer executed once pays a graph's
    /// instantiation for a single launch).
    pub graph_min_commands: usize,
    /// The same for reusable command buffers, which pay the instantiation once for every execute. A
    /// one-kernel graph launch costs less than the kernel launch itself (figures in
    /// `docs/benchmarks.md`), so by default even one command replays as a graph.
    pub reusable_graph_min_commands: usize,
    /// Executable instances of one command buffer's graph kept for executes with binding tables:
    /// an execute whose table matches one launches it without node updates; otherwise the least
    /// recently launched is updated in place. 1 updates a single instance every time.
    pub bound_graph_instances: usize,
    /// Time every submission on the device with a pair of timing events; the time appears as
    /// `device_ns` on the submission's `complete` span (see the crate docs, "Device timings per submission"). Costs two event
    /// records per submission.
    pub submission_timings: bool,
    /// Indirect dispatches in command buffers that replay as graphs become graph nodes whose grid
    /// a kernel sets on the device (see the crate docs, "Indirect dispatches"); needs CUDA 12.4 and
    /// CUDA's device runtime library. Off, or where that is missing, the host reads each count
    /// and launches (one host round trip per dispatch).
    pub indirect_on_device: bool,
    /// Completion threads and host waiters learn that work finished from a word of pinned memory
    /// each mark's stream writes after its record, instead of querying the event (see
    /// `src/progress_word.rs`): no driver lock taken while work is in flight, one more stream write
    /// per record.
    pub completion_word: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            queue_count: 4,
            completion_wait: CompletionWait::default(),
            poll_interval: std::time::Duration::from_micros(10),
            graph_min_commands: 2,
            reusable_graph_min_commands: 1,
            bound_graph_instances: 4,
            submission_timings: false,
            indirect_on_device: true,
            completion_word: false,
        }
    }
}

/// The environment variable that picks [`CudaOptions::completion_wait`] for [`CudaOptions::from_env`].
pub const ENV_COMPLETION: &str = "HAL_CUDA_COMPLETION";
/// The environment variable that turns on [`CudaOptions::submission_timings`] (`1`) in
/// [`CudaOptions::from_env`].
pub const ENV_TIMINGS: &str = "HAL_CUDA_TIMINGS";
/// The environment variable that picks where indirect dispatches read their counts
/// ([`CudaOptions::indirect_on_device`]): `device` (the default) or `host`, for
/// [`CudaOptions::from_env`].
pub const ENV_INDIRECT: &str = "HAL_CUDA_INDIRECT";
/// The environment variable that turns on [`CudaOptions::completion_word`] (`1`) or off (`0`), for
/// [`CudaOptions::from_env`].
pub const ENV_COMPLETION_WORD: &str = "HAL_CUDA_COMPLETION_WORD";
/// The environment variable that sets [`CudaOptions::poll_interval`], in microseconds (1 to 10000),
/// for [`CudaOptions::from_env`].
pub const ENV_POLL_US: &str = "HAL_CUDA_POLL_US";
/// The environment variable that sets the polling budget of
/// [`CompletionWait::PollThenSleep`], in microseconds (0 to
/// 10000: how long a completion thread queries `poll_interval` apart before it sleeps between
/// queries), for [`CudaOptions::from_env`]. It applies to the `poll` completion only.
pub const ENV_POLL_BUDGET_US: &str = "HAL_CUDA_POLL_BUDGET_US";

impl CudaOptions {
    /// The defaults, changed by the environment: `HAL_CUDA_COMPLETION` = `poll` (the default),
    /// `spin`, `blocking`, `spin-then-block` or `host-callback`; `HAL_CUDA_TIMINGS` = `1` or `0`;
    /// `HAL_CUDA_POLL_US` = microseconds between a completion thread's event queries (default 10);
    /// `HAL_CUDA_POLL_BUDGET_US` = microseconds a `poll` completion thread queries before it sleeps;
    /// `HAL_CUDA_INDIRECT` = `device` (the default) or `host`; `HAL_CUDA_COMPLETION_WORD` = `0` (the
    /// default) or `1`.
    /// [`crate::register`] and [`crate::create_device`] use it, so an embedding application can switch
    /// modes without a rebuild. An unknown value is an `InvalidArgument` naming the variable.
    pub fn from_env() -> Result<Self> {
        CudaOptions::from_lookup(|name| std::env::var(name).ok())
    }

    /// The defaults changed by the variables `lookup` finds (`None`: not set); see
    /// [`from_env`](Self::from_env).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut options = CudaOptions::default();
        if let Some(value) = lookup(ENV_COMPLETION) {
            options.completion_wait = match value.as_str() {
                "poll" => CompletionWait::default(),
                "spin" => CompletionWait::Spin,
                "blocking" => CompletionWait::Blocking,
                "spin-then-block" => CompletionWait::SpinThenBlock(std::time::Duration::from_micros(100)),
                "host-callback" => CompletionWait::HostCallback,
                other => {
                    return Err(Error::invalid_argument(format!(
                        "cuda: {ENV_COMPLETION}='{other}' is not one of poll, spin, blocking, spin-then-block, \
                         host-callback"
                    )));
                }
            };
        }
        if let Some(value) = lookup(ENV_TIMINGS) {
            options.submission_timings = match value.as_str() {
                "1" => true,
                "0" => false,
                other => {
                    return Err(Error::invalid_argument(format!("cuda: {ENV_TIMINGS}='{other}' is not 0 or 1")));
                }
            };
        }
        if let Some(value) = lookup(ENV_COMPLETION_WORD) {
            options.completion_word = match value.as_str() {
                "1" => true,
                "0" => false,
                other => {
                    return Err(Error::invalid_argument(format!(
                        "cuda: {ENV_COMPLETION_WORD}='{other}' is not 0 or 1"
                    )));
                }
            };
        }
        if let Some(value) = lookup(ENV_INDIRECT) {
            options.indirect_on_device = match value.as_str() {
                "device" => true,
                "host" => false,
                other => {
                    return Err(Error::invalid_argument(format!(
                        "cuda: {ENV_INDIRECT}='{other}' is not device or host"
                    )));
                }
            };
        }
        if let Some(value) = lookup(ENV_POLL_US) {
            options.poll_interval = micros(ENV_POLL_US, &value, 1)?;
        }
        if let Some(value) = lookup(ENV_POLL_BUDGET_US) {
            let budget = micros(ENV_POLL_BUDGET_US, &value, 0)?;
            match options.completion_wait {
                CompletionWait::PollThenSleep(_) => options.completion_wait = CompletionWait::PollThenSleep(budget),
                other => {
                    return Err(Error::invalid_argument(format!(
                        "cuda: {ENV_POLL_BUDGET_US}='{value}' applies to the poll completion, not {other:?}"
                    )));
                }
            }
        }
        Ok(options)
    }
}

/// `value` of the variable `name` as microseconds from `min` to 10000, or an `InvalidArgument`
/// naming both.
fn micros(name: &str, value: &str, min: u64) -> Result<std::time::Duration> {
    match value.parse::<u64>() {
        Ok(us) if (min..=10_000).contains(&us) => Ok(std::time::Duration::from_micros(us)),
        _ => Err(Error::invalid_argument(format!(
            "cuda: {name}='{value}' is not a number of microseconds from {min} to 10000"
        ))),
    }
}

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
    let driver_version = crate::loader::probe().map(|p| p.driver_version).unwrap_or(0);
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

/// What a CUDA device loads ([`crate::module::CudaExecutable::load`]): module images the driver
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
}

impl Drop for CudaDevice {
    /// Its ranks leave their channels before its queues are torn down (see [`crate::nccl`]).
    fn drop(&mut self) {
        crate::nccl::device_dropped(self.id);
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
        Ok(CudaDevice {
            scheduler,
            id,
            info,
            options: options.clone(),
            memory,
            context,
            peers: std::sync::Mutex::new(Vec::new()),
            updater: std::sync::OnceLock::new(),
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
        crate::nccl::unique_id()
    }

    /// An NCCL communicator (blocks until every rank joined; see [`crate::nccl`]).
    fn create_channel(
        &self,
        id: &hal::ChannelId,
        rank: usize,
        count: usize,
    ) -> Result<(Arc<dyn hal::driver::ChannelBackend>, Option<hal::driver::AbandonFn>)> {
        crate::nccl::NcclChannel::create(self.id, &self.context, &self.memory, id, rank, count)
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
    }

    fn trim(&self) -> Result<()> {
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
    use hal::StatusCode;

    /// `from_lookup` over a fixed list of variables.
    fn options(vars: &[(&str, &str)]) -> Result<CudaOptions> {
        CudaOptions::from_lookup(|name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string()))
    }

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

    #[test]
    fn options_from_environment_values() {
        let defaults = options(&[]).unwrap();
        assert_eq!(defaults.completion_wait, CompletionWait::default());
        assert!(!defaults.submission_timings);
        assert_eq!(defaults.poll_interval, std::time::Duration::from_micros(10));
        let callback = options(&[(ENV_COMPLETION, "host-callback"), (ENV_TIMINGS, "1")]).unwrap();
        assert_eq!(callback.completion_wait, CompletionWait::HostCallback);
        assert!(callback.submission_timings);
        let spin = options(&[(ENV_COMPLETION, "spin"), (ENV_TIMINGS, "0")]).unwrap();
        assert_eq!(spin.completion_wait, CompletionWait::Spin);
        assert_eq!(options(&[(ENV_COMPLETION, "blocking")]).unwrap().completion_wait, CompletionWait::Blocking);
        let slow = options(&[(ENV_POLL_US, "50")]).unwrap();
        assert_eq!(slow.poll_interval, std::time::Duration::from_micros(50));
        let sleepy = options(&[(ENV_POLL_BUDGET_US, "0")]).unwrap();
        assert_eq!(sleepy.completion_wait, CompletionWait::PollThenSleep(std::time::Duration::ZERO));
        assert!(defaults.indirect_on_device && !defaults.completion_word);
        let other = options(&[(ENV_INDIRECT, "host"), (ENV_COMPLETION_WORD, "1")]).unwrap();
        assert!(!other.indirect_on_device && other.completion_word);
        assert!(options(&[(ENV_INDIRECT, "device"), (ENV_COMPLETION_WORD, "0")]).unwrap().indirect_on_device);
    }

    #[test]
    fn bad_environment_values_are_named_errors() {
        let e = options(&[(ENV_COMPLETION, "callback")]).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        assert!(e.message().contains("HAL_CUDA_COMPLETION='callback'"), "{e}");
        let e = options(&[(ENV_TIMINGS, "yes")]).unwrap_err();
        assert!(e.message().contains("HAL_CUDA_TIMINGS='yes'"), "{e}");
        for bad in ["0", "10001", "fast", "-5"] {
            let e = options(&[(ENV_POLL_US, bad)]).unwrap_err();
            assert!(e.message().contains(&format!("HAL_CUDA_POLL_US='{bad}'")), "{e}");
        }
        let e = options(&[(ENV_POLL_BUDGET_US, "10001")]).unwrap_err();
        assert!(e.message().contains("HAL_CUDA_POLL_BUDGET_US='10001'"), "{e}");
        let e = options(&[(ENV_COMPLETION, "spin"), (ENV_POLL_BUDGET_US, "0")]).unwrap_err();
        assert!(e.message().contains("applies to the poll completion, not Spin"), "{e}");
        let e = options(&[(ENV_INDIRECT, "gpu")]).unwrap_err();
        assert!(e.message().contains("HAL_CUDA_INDIRECT='gpu'"), "{e}");
        let e = options(&[(ENV_COMPLETION_WORD, "yes")]).unwrap_err();
        assert!(e.message().contains("HAL_CUDA_COMPLETION_WORD='yes'"), "{e}");
    }
}
