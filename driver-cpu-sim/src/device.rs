//! The cpu-sim device: host memory, native executables, and the shared scheduler over cpu-sim
//! streams (one worker thread per queue) with a device-wide workgroup pool for dispatches.

use std::sync::Arc;

use hal::driver::Command;
use hal::driver::scheduler::Scheduler;
use hal::driver::{
    BufferBackend, ExecutableBackend, ImportedHostMemory, PreparedCommands, QueueScheduler, ScheduledDevice,
};
use hal::{
    BufferParams, CommandBufferMode, DeviceId, DeviceInfo, ExecutableKind, ExecutableSource, MemoryType, PoolUsage,
    ResourceUsage, Result,
};

use crate::commands::CpuPreparedCommands;
use crate::executable::{MAX_WORKGROUP_COUNT, MAX_WORKGROUP_SIZE, MAX_WORKGROUP_THREADS, NativeExecutable};
use crate::memory::{HostMemory, MemoryBudget};
use crate::options::CpuSimOptions;
use crate::stream::CpuStreams;
use crate::stream_rules::{PanicOnBrokenRules, RULE_BREAKS_POOL};
use crate::workgroup_pool::WorkgroupPool;

/// The memory types cpu-sim offers: device-local (not mappable), host-visible coherent, and both.
pub fn memory_types() -> Vec<MemoryType> {
    vec![
        MemoryType::DEVICE_LOCAL,
        MemoryType::HOST_LOCAL | MemoryType::HOST_CACHED,
        MemoryType::DEVICE_LOCAL | MemoryType::HOST_LOCAL,
    ]
}

/// What a cpu-sim device loads ([`crate::executable::NativeExecutable::load`]): native kernel tables,
/// in process or from a shared library; it has no GPU for PTX, cubin or fatbin.
pub const EXECUTABLE_KINDS: [ExecutableKind; 2] = [ExecutableKind::Native, ExecutableKind::SharedLibrary];

/// The device info a cpu-sim device with `options` reports, without making the device (what
/// [`CpuSimDriver`](crate::CpuSimDriver) enumerates).
pub fn device_info(options: &CpuSimOptions) -> DeviceInfo {
    let threads = resolved_threads(options);
    let mut info = DeviceInfo::new(crate::DRIVER_NAME, format!("cpu-sim ({} workgroup runners)", threads + 1), 0);
    // One cpu-sim device per process, the same in every run.
    info.stable_id = "cpu-sim-0".to_owned();
    info.queue_count = options.queue_count;
    info.memory_types = memory_types();
    info.max_allocation_size = options.max_allocation_size;
    info.max_workgroup_threads = MAX_WORKGROUP_THREADS;
    info.max_workgroup_size = MAX_WORKGROUP_SIZE;
    info.max_workgroup_count = MAX_WORKGROUP_COUNT;
    info.executable_kinds = EXECUTABLE_KINDS.to_vec();
    info.properties = vec![
        ("workgroup_threads".to_string(), threads.to_string()),
        ("memory_limit".to_string(), options.memory_limit.to_string()),
    ];
    info
}

/// The pool's threads: as asked, or one fewer than the cores (at least one). The stream thread that
/// runs a dispatch works through its workgroups beside the pool, so that many runners fill the
/// cores; more runners than cores let the scheduler preempt one mid-dispatch, stalling it (see
/// `WorkgroupPool::run_shared` for dispatches of several queues at once).
fn resolved_threads(options: &CpuSimOptions) -> usize {
    if options.workgroup_threads > 0 {
        options.workgroup_threads
    } else {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).saturating_sub(1).max(1)
    }
}

/// A cpu-sim device.
pub struct CpuDevice {
    id: DeviceId,
    info: DeviceInfo,
    budget: Arc<MemoryBudget>,
    scheduler: Scheduler<CpuStreams>,
    // After the drain: the channels' ranks leave, failing what their peers wait for.
    channels: crate::collective::DeviceChannels,
    /// Declared after the scheduler, so it drops after it: a stream destroyed with work in flight
    /// as the scheduler drops is seen too (see `stream_rules`).
    rules: PanicOnBrokenRules,
}

impl CpuDevice {
    /// Starts a device: its workgroup pool, one stream and completion thread per queue.
    pub fn new(id: DeviceId, options: &CpuSimOptions) -> Result<Self> {
        let pool = Arc::new(WorkgroupPool::with_threads(resolved_threads(options))?);
        let streams = CpuStreams::new(pool).with_light_work_at_issue(options.light_work_at_issue);
        let rules = PanicOnBrokenRules::new(id, streams.rule_log().clone());
        let scheduler = Scheduler::new(id, streams, options.queue_count)?;
        Ok(CpuDevice {
            id,
            info: device_info(options),
            budget: Arc::new(
                MemoryBudget::with_limit(options.memory_limit).with_transient_cache(options.transient_cache_bytes),
            ),
            scheduler,
            channels: Default::default(),
            rules,
        })
    }
}

impl ScheduledDevice for CpuDevice {
    fn scheduler(&self) -> &dyn QueueScheduler {
        &self.scheduler
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn allocate(&self, _params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>> {
        Ok(Arc::new(HostMemory::new(size, &self.budget)?))
    }

    fn allocate_transient(&self, _params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>> {
        Ok(Arc::new(HostMemory::transient(size, &self.budget)))
    }

    fn import_host_memory(&self, _params: BufferParams, memory: ImportedHostMemory) -> Result<Arc<dyn BufferBackend>> {
        // cpu-sim's memory is host memory: the embedder's is used as it is.
        Ok(Arc::new(HostMemory::import(memory, &self.budget)))
    }

    /// Every cpu-sim device's memory is host memory: copies between devices are plain copies.
    fn copies_with(&self, buffer: &hal::Buffer) -> bool {
        crate::memory::HostMemory::of(buffer).is_ok()
    }

    fn load_executable(&self, source: &ExecutableSource) -> Result<Arc<dyn ExecutableBackend>> {
        Ok(Arc::new(NativeExecutable::load(source)?))
    }

    fn prepare_commands(
        &self,
        commands: &Arc<[Command]>,
        _mode: CommandBufferMode,
    ) -> Result<Arc<dyn PreparedCommands>> {
        Ok(Arc::new(CpuPreparedCommands::prepare(commands)?))
    }

    fn create_channel_id(&self) -> Result<hal::ChannelId> {
        Ok(crate::collective::new_channel_id())
    }

    /// Ranks are cpu-sim devices of this process or of other processes on this host (Linux), meeting by
    /// channel id (see `collective`).
    fn create_channel(
        &self,
        id: &hal::ChannelId,
        rank: usize,
        count: usize,
    ) -> Result<(Arc<dyn hal::driver::ChannelBackend>, Option<hal::driver::AbandonFn>)> {
        let (channel, abandon) = crate::collective::join(id, rank, count)?;
        self.channels.add(&channel);
        Ok((channel, abandon))
    }

    /// The stream-model rules broken on this device, if any, after the scheduler's report.
    fn extend_report(&self, report: &mut String) {
        let broken = self.rules.log().describe();
        if !broken.is_empty() {
            report.push('\n');
            report.push_str(&broken);
        }
    }

    /// The broken stream-model rules as a pool that is never idle again once one broke (so a leak
    /// check fails; see `stream_rules`), and the memory in use.
    fn extend_usage(&self, usage: &mut ResourceUsage) {
        let broken = self.rules.log().count();
        usage.pools.push(PoolUsage::new(RULE_BREAKS_POOL, broken, broken));
        usage.memory_in_use = self.budget.in_use();
        usage.memory_kept = self.budget.transients().kept();
    }

    /// Gives back the released transient memory kept for reuse.
    fn trim(&self) -> Result<()> {
        self.budget.transients().trim();
        Ok(())
    }
}

impl std::fmt::Debug for CpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuDevice({})", self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream_rules::StreamRule;
    use hal::driver::DeviceBackend;

    /// A broken stream-model rule leaves the device never idle again (the CTS leak check fails the
    /// case), is named in its report, and in debug builds makes dropping the device panic.
    #[test]
    fn a_broken_stream_model_rule_shows_in_the_pools_and_the_report_and_fails_the_drop() {
        let options = CpuSimOptions::default().with_queue_count(1).with_workgroup_threads(1);
        let device = CpuDevice::new(DeviceId::next(), &options).unwrap();
        let rule_pool = |device: &CpuDevice| {
            let usage = device.resource_usage();
            usage.pools.iter().find(|p| p.name == RULE_BREAKS_POOL).map(|p| (p.in_use, p.created)).unwrap()
        };
        assert_eq!(rule_pool(&device), (0, 0));
        assert!(device.resource_usage().is_idle());
        assert!(!device.report().contains("stream-model"), "{}", device.report());
        device.rules.log().broken(StreamRule::DropWithWorkInFlight, "stream 9 (queue 0) destroyed".into());
        assert_eq!(rule_pool(&device), (1, 1));
        assert!(!device.resource_usage().is_idle());
        let report = device.report();
        assert!(
            report.ends_with(
                "cpu-sim stream-model rules broken 1 time(s):\n  cpu-sim stream-model rule broken (no stream \
                 destroyed with work in flight): stream 9 (queue 0) destroyed"
            ),
            "{report}"
        );
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(device)));
        assert_eq!(dropped.is_err(), cfg!(debug_assertions), "the drop panics in debug builds only");
    }
}
