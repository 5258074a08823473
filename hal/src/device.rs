//! Devices: what a driver created, with its properties, queues, allocator and object factories.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use bytemuck::Pod;

use crate::buffer::{Buffer, BufferParams, BufferUsage, MemoryType};
use crate::collective::{Channel, ChannelId};
use crate::command_buffer::{CommandBuffer, CommandBufferMode};
use crate::driver::{DeviceBackend, ImportedHostMemory, ReleaseOnce};
use crate::error::{Error, Result};
use crate::executable::{EntryPointInfo, Executable, ExecutableSource};
use crate::executable_kind::ExecutableKind;
use crate::external::ExternalMemory;
use crate::profile::{Profile, ProfileOptions};
use crate::queue::Queue;
use crate::semaphore::{Semaphore, SemaphoreFlags, SemaphoreValue, WaitMode, wait_semaphores};
use crate::timeout::Timeout;

/// Identifies a created device (unique in the process), so objects can tell whose they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(u64);

impl DeviceId {
    /// A fresh id. Drivers call this once per device they create.
    pub fn next() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        DeviceId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// The number, for messages.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}", self.0)
    }
}

/// What a device is and what it offers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceInfo {
    /// The driver's name (`"cpu-sim"`, `"cuda"`).
    pub driver: String,
    /// The device's name, as its driver reports it (a GPU's product name).
    pub name: String,
    /// Index among the driver's devices (may change when devices come and go, or with
    /// `CUDA_VISIBLE_DEVICES`).
    pub ordinal: usize,
    /// An id that names this device the same way in every process and run (CUDA: the GPU's UUID,
    /// `GPU-xxxxxxxx-...` as `nvidia-smi -L` prints it); a device path may use it (see
    /// [`Registry::create_device_at`](crate::Registry::create_device_at)).
    pub stable_id: String,
    /// Number of queues (each with its own dispatch stream).
    pub queue_count: usize,
    /// Memory types it can allocate, most preferred first.
    pub memory_types: Vec<MemoryType>,
    /// Largest single allocation in bytes.
    pub max_allocation_size: u64,
    /// Largest workgroup (threads in x*y*z).
    pub max_workgroup_threads: u32,
    /// Largest workgroup size per axis (x, y, z), checked when an executable declaring its entry
    /// points' sizes is loaded (CUDA: `MAX_BLOCK_DIM_X/Y/Z`, 1024 x 1024 x 64 on current GPUs).
    pub max_workgroup_size: [u32; 3],
    /// Largest workgroup count of a dispatch per axis (x, y, z); a dispatch beyond it is refused when
    /// recorded (CUDA: `MAX_GRID_DIM_X/Y/Z`, 2^31-1 x 65535 x 65535 on current GPUs).
    pub max_workgroup_count: [u32; 3],
    /// Longest range one dispatch binding may have, in bytes; a longer binding is refused when
    /// recorded (`OutOfRange`, naming the limit). Vulkan: `maxStorageBufferRange` (128 MiB on
    /// lavapipe), since a binding reaches the kernel as a storage-buffer descriptor; `u64::MAX`
    /// where bindings are plain addresses (CUDA, cpu-sim).
    pub max_binding_length: u64,
    /// What a dispatch binding's first byte must be a multiple of: its buffer's byte 0 plus the
    /// subspan's and the binding's offsets. A binding off it is refused when recorded
    /// (`InvalidArgument`, naming the alignment), or, for a binding-table slot, when the execute
    /// gives the table. Vulkan: `minStorageBufferOffsetAlignment`; 1 where bindings are plain
    /// addresses (CUDA, cpu-sim). Allocations start aligned to it.
    pub binding_alignment: u64,
    /// The kinds of executable [`Device::load_executable`] accepts, the driver's preferred first
    /// (cpu-sim: native, shared library; CUDA: PTX, cubin, fatbin). Tools and suites choose a
    /// kernel's form from this list (see [`DeviceInfo::loads`]), never from the driver's name.
    pub executable_kinds: Vec<ExecutableKind>,
    /// Driver-specific properties, name and value (compute capability, memory size, ...).
    pub properties: Vec<(String, String)>,
}

impl DeviceInfo {
    /// Device `ordinal` of driver `driver`, called `name`, with one queue, no memory types, no
    /// executable kinds, no properties and CUDA's usual workgroup limits; the driver fills in the
    /// rest field by field.
    pub fn new(driver: impl Into<String>, name: impl Into<String>, ordinal: usize) -> Self {
        DeviceInfo {
            driver: driver.into(),
            name: name.into(),
            ordinal,
            stable_id: String::new(),
            queue_count: 1,
            memory_types: Vec::new(),
            max_allocation_size: 0,
            max_workgroup_threads: 1024,
            max_workgroup_size: [1024, 1024, 64],
            max_workgroup_count: [i32::MAX as u32, 65535, 65535],
            max_binding_length: u64::MAX,
            binding_alignment: 1,
            executable_kinds: Vec::new(),
            properties: Vec::new(),
        }
    }

    /// Whether [`Device::load_executable`] accepts executables of `kind`.
    pub fn loads(&self, kind: ExecutableKind) -> bool {
        self.executable_kinds.contains(&kind)
    }

    /// The first of `preferred` this device loads, or `Unimplemented` naming the kinds it offers
    /// (for a caller that has its kernel in several forms).
    pub fn choose_executable_kind(&self, preferred: &[ExecutableKind]) -> Result<ExecutableKind> {
        preferred.iter().copied().find(|&kind| self.loads(kind)).ok_or_else(|| {
            Error::unimplemented(format!(
                "{} device '{}' loads executables of kinds [{}]; the kernel is available as [{}]",
                self.driver,
                self.name,
                ExecutableKind::list(&self.executable_kinds),
                ExecutableKind::list(preferred)
            ))
        })
    }
}

/// Occupancy of one pool or queue of a device.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolUsage {
    /// What is counted ("events", "pending actions").
    pub name: &'static str,
    /// Entries in use now.
    pub in_use: usize,
    /// Entries created so far (in use or free for reuse).
    pub created: usize,
}

impl PoolUsage {
    /// Pool `name` with `in_use` of its `created` entries in use.
    pub fn new(name: &'static str, in_use: usize, created: usize) -> Self {
        PoolUsage { name, in_use, created }
    }
}

/// Occupancy of a device's pools; all zero in use when the device is idle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResourceUsage {
    /// One entry per pool.
    pub pools: Vec<PoolUsage>,
    /// Bytes of device memory allocated now (informational: buffers the user holds count here).
    pub memory_in_use: u64,
    /// Bytes the device keeps for reuse after the buffers that held them dropped (CUDA keeps the
    /// pinned host memory of host-visible buffers); [`Device::trim`] gives them back.
    pub memory_kept: u64,
}

impl ResourceUsage {
    /// Usage of `pools` and `memory_in_use` bytes.
    pub fn new(pools: Vec<PoolUsage>, memory_in_use: u64) -> Self {
        ResourceUsage { pools, memory_in_use, memory_kept: 0 }
    }

    /// Whether nothing is in use.
    pub fn is_idle(&self) -> bool {
        self.pools.iter().all(|p| p.in_use == 0)
    }
}

impl fmt::Display for ResourceUsage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> =
            self.pools.iter().map(|p| format!("{} {} in use / {} created", p.name, p.in_use, p.created)).collect();
        write!(f, "{}; memory {} bytes", parts.join(", "), self.memory_in_use)?;
        if self.memory_kept > 0 {
            write!(f, " (and {} bytes kept for reuse)", self.memory_kept)?;
        }
        Ok(())
    }
}

/// A device: its queues, and the factory of its buffers, semaphores, executables and command
/// buffers. Cheap to clone; clones are the same device. Created by a [`Registry`](crate::Registry).
///
/// ```
/// use hal::{BufferParams, Registry};
///
/// let mut registry = Registry::new();
/// driver_cpu_sim::register(&mut registry);
/// let device = registry.create_default_device()?;
/// assert!(device.queue_count() >= 1);
/// assert!(device.queue(device.queue_count()).is_err(), "no such queue");
/// let buffer = device.allocate_buffer(BufferParams::host_visible(), 256)?;
/// assert_eq!((buffer.size(), buffer.device()), (256, device.id()));
/// assert!(device.resource_usage().is_idle());
/// # Ok::<(), hal::Error>(())
/// ```
#[derive(Clone)]
pub struct Device {
    shared: Arc<Shared>,
}

struct Shared {
    id: DeviceId,
    backend: Arc<dyn DeviceBackend>,
}

/// A reference to a [`Device`] that does not keep it alive: [`upgrade`](Self::upgrade) gives the
/// device while some `Device` (or queue) still holds it. For an embedder's objects that must reach
/// their device without delaying its teardown (a language binding's buffers, for one).
///
/// ```
/// let device = driver_cpu_sim::create_device()?;
/// let weak = device.downgrade();
/// let buffer = device.allocate_buffer(hal::BufferParams::host_visible(), 64)?;
/// let queue = device.queue(0)?;
/// drop(device);
/// assert!(weak.upgrade().is_some(), "a queue holds its device");
/// drop(queue);
/// assert!(weak.upgrade().is_none(), "buffers do not: the device is torn down");
/// drop(buffer);
/// # Ok::<(), hal::Error>(())
/// ```
#[derive(Clone)]
pub struct WeakDevice {
    shared: std::sync::Weak<Shared>,
}

impl WeakDevice {
    /// The device, unless every `Device` and queue of it has been dropped.
    pub fn upgrade(&self) -> Option<Device> {
        self.shared.upgrade().map(|shared| Device { shared })
    }
}

impl fmt::Debug for WeakDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.shared.upgrade() {
            Some(shared) => write!(f, "WeakDevice({})", shared.id),
            None => f.write_str("WeakDevice(dropped)"),
        }
    }
}

impl Device {
    /// A reference that does not keep the device alive.
    pub fn downgrade(&self) -> WeakDevice {
        WeakDevice { shared: Arc::downgrade(&self.shared) }
    }

    /// Wraps a driver's device. `id` must be the one its objects carry.
    pub(crate) fn wrap(id: DeviceId, backend: Arc<dyn DeviceBackend>) -> Self {
        Device { shared: Arc::new(Shared { id, backend }) }
    }

    /// The id its objects carry.
    pub fn id(&self) -> DeviceId {
        self.shared.id
    }

    /// What it is.
    pub fn info(&self) -> &DeviceInfo {
        self.shared.backend.info()
    }

    /// The driver's object.
    pub(crate) fn backend(&self) -> &Arc<dyn DeviceBackend> {
        &self.shared.backend
    }

    /// Number of queues.
    pub fn queue_count(&self) -> usize {
        self.info().queue_count
    }

    /// Queue `index` (`OutOfRange` for an unknown queue affinity).
    pub fn queue(&self, index: usize) -> Result<Queue> {
        if index >= self.queue_count() {
            return Err(Error::out_of_range(format!(
                "{}: queue {index} does not exist (it has {})",
                self.id(),
                self.queue_count()
            )));
        }
        Ok(Queue::new(self.clone(), index))
    }

    /// Allocates a buffer of `size` bytes now.
    pub fn allocate_buffer(&self, params: BufferParams, size: u64) -> Result<Buffer> {
        self.check_allocation(params, size)?;
        let backend = self.shared.backend.allocate(params, size)?;
        Ok(Buffer::wrap(self.id(), params, backend))
    }

    /// Allocates a buffer holding `values` (as the bytes they are in host memory; `size_of_val(values)`
    /// bytes), uploaded before this returns: wgpu's `create_buffer_init`, cudarc's `clone_htod`. A
    /// mappable buffer (`HOST_VISIBLE` with the `MAPPING` usage) is written through a mapping; any
    /// other needs the `TRANSFER_TARGET` usage and is written on queue 0, which this waits for.
    ///
    /// ```
    /// use hal::{BufferParams, Timeout};
    ///
    /// let device = driver_cpu_sim::create_device()?;
    /// let weights = device.allocate_buffer_init(BufferParams::device_local(), &[0.5f32, 0.25, 0.125])?;
    /// assert_eq!(weights.size(), 12);
    /// let readback = device.queue(0)?.read(&[], &weights, 0, 12, &[])?;
    /// assert_eq!(readback.wait_as::<f32>(Timeout::Infinite)?, [0.5, 0.25, 0.125]);
    /// # Ok::<(), hal::Error>(())
    /// ```
    pub fn allocate_buffer_init<T: Pod>(&self, params: BufferParams, values: &[T]) -> Result<Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(values);
        let buffer = self.allocate_buffer(params, bytes.len() as u64)?;
        let mappable =
            params.memory_type.contains(MemoryType::HOST_VISIBLE) && params.usage.contains(BufferUsage::MAPPING);
        if bytes.is_empty() {
            return Ok(buffer);
        }
        if mappable {
            buffer.write(0, bytes)?;
        } else {
            let uploaded = self.create_semaphore(0)?;
            self.queue(0)?.write(&[], &buffer, 0, bytes, &[SemaphoreValue::new(&uploaded, 1)])?;
            uploaded.wait(1, Timeout::Infinite)?;
        }
        Ok(buffer)
    }

    /// Lends the device `length` bytes of host memory the embedder owns, at `ptr`, as a buffer
    /// (CUDA: registered, device-mapped host memory): kernels and transfers use it in place.
    /// `release` runs exactly once, when the HAL no longer uses the memory: after the last handle of
    /// the buffer (and of its subspans) is dropped and every queue operation using it has retired,
    /// or before this returns an error. `params.memory_type` must be host-visible and among the
    /// device's memory types; an empty range is `InvalidArgument`.
    ///
    /// # Safety
    /// Until `release` runs: `ptr` is valid for reads and writes of `length` bytes, the memory is
    /// neither freed nor moved, and the embedder's own accesses to it that may race with queue work
    /// are atomic or ordered by the semaphores that work signals (as for a [`crate::Mapping`]).
    ///
    /// ```
    /// use std::ptr::NonNull;
    /// use std::sync::mpsc;
    /// use hal::{BufferParams, SemaphoreValue as SV, Timeout};
    ///
    /// /// The embedder's words while the HAL has them.
    /// struct Lent(*mut [u32]);
    /// // SAFETY: the words are lent whole; only the release touches the pointer again.
    /// unsafe impl Send for Lent {}
    ///
    /// let device = driver_cpu_sim::create_device()?;
    /// let words: Box<[u32]> = vec![1; 256].into_boxed_slice();
    /// let (length, lent) = (std::mem::size_of_val(&*words) as u64, Lent(Box::into_raw(words)));
    /// let ptr = NonNull::new(lent.0.cast::<u8>()).unwrap();
    /// let (returned, back) = mpsc::channel();
    /// let release = move || {
    ///     let lent = lent;
    ///     // SAFETY: the pointer came from `Box::into_raw` above and the HAL is done with it.
    ///     let _ = returned.send(unsafe { Box::from_raw(lent.0) });
    /// };
    /// // SAFETY: the box stays allocated until `release` takes it back; nothing else touches it.
    /// let buffer = unsafe { device.import_host_memory(ptr, length, BufferParams::host_visible(), release) }?;
    /// let (queue, done) = (device.queue(0)?, device.create_semaphore(0)?);
    /// queue.fill(&[], &buffer, 0, 512, 7u32, &[SV::new(&done, 1)])?;
    /// done.wait(1, Timeout::Infinite)?;
    /// drop(buffer);
    /// let words = back.recv().unwrap(); // the release ran: the memory is the embedder's again
    /// assert_eq!((words[0], words[127], words[128]), (7, 7, 1));
    /// # Ok::<(), hal::Error>(())
    /// ```
    pub unsafe fn import_host_memory(
        &self,
        ptr: NonNull<u8>,
        length: u64,
        params: BufferParams,
        release: impl FnOnce() + Send + 'static,
    ) -> Result<Buffer> {
        let release = ReleaseOnce::new(release);
        let refuse = |message: String| {
            Err(Error::invalid_argument(format!("{}: import of {length} bytes at {ptr:p}: {message}", self.id())))
        };
        if length == 0 {
            return refuse("an empty range".to_owned());
        }
        if !params.memory_type.contains(MemoryType::HOST_VISIBLE) {
            return refuse(format!("memory type {} is not host-visible", params.memory_type));
        }
        self.check_allocation(params, length)?;
        // SAFETY: the caller's contract is `ImportedHostMemory::new`'s.
        let memory = unsafe { ImportedHostMemory::new(ptr, length, release) };
        let backend = self.shared.backend.import_host_memory(params, memory)?;
        if backend.size() != length {
            return Err(Error::internal(format!(
                "{}: an import of {length} bytes gave {} bytes",
                self.id(),
                backend.size()
            )));
        }
        Ok(Buffer::wrap(self.id(), params, backend))
    }

    /// A buffer over device memory another library allocated (`memory`: a CUDA device pointer, a
    /// range of a `VkBuffer`), used by this device's queues and kernels like its own. `release`
    /// runs exactly once, when the buffer and every queued use of it are done (or at once when the
    /// import is refused): the HAL never frees the memory. A driver takes the kinds of its own API
    /// and checks what it can (that a CUDA pointer's range is device memory of this device's GPU);
    /// other kinds are `Unimplemented`, naming the kind. See `docs/interop.md`.
    ///
    /// An [`ExternalMemory::OpaqueFd`]'s descriptor is the HAL's from the call on: it is closed
    /// before the call returns, on success and on every refusal alike (the driver imports a
    /// duplicate); see [file descriptors](ExternalMemory#file-descriptors).
    ///
    /// # Safety
    /// The memory stays allocated, and is not used by anyone else in a way that races with the
    /// HAL's uses of it (other than through semaphores or external timepoints that order them),
    /// until `release` runs. An `OpaqueFd`'s descriptor is open and handed over: the caller owns
    /// it, and neither uses nor closes it after the call.
    pub unsafe fn import_external_memory(
        &self,
        memory: ExternalMemory,
        params: BufferParams,
        release: impl FnOnce() + Send + 'static,
    ) -> Result<Buffer> {
        let release = ReleaseOnce::new(release);
        // Taken over first, so that every way out below closes it (the guard drops at the end).
        let _descriptor = memory.take_descriptor().map_err(|e| e.context(self.id().to_string()))?;
        let length = memory.length();
        if length == 0 {
            return Err(Error::invalid_argument(format!("{}: import of {memory}: an empty range", self.id())));
        }
        self.check_allocation(params, length)?;
        let backend = self.shared.backend.import_external_memory(params, memory, release)?;
        if backend.size() != length {
            return Err(Error::internal(format!("{}: an import of {memory} gave {} bytes", self.id(), backend.size())));
        }
        Ok(Buffer::wrap(self.id(), params, backend))
    }

    /// Checks params and size against what the device offers.
    pub(crate) fn check_allocation(&self, params: BufferParams, size: u64) -> Result<()> {
        // A 0-byte buffer is legal, as in IREE (empty tensors): it binds, maps and reads as empty.
        params.validate()?;
        let info = self.info();
        if size > info.max_allocation_size {
            return Err(Error::resource_exhausted(format!(
                "{}: allocation of {size} bytes exceeds the largest allocation of {} bytes",
                self.id(),
                info.max_allocation_size
            )));
        }
        if !info.memory_types.iter().any(|t| t.contains(params.memory_type)) {
            return Err(Error::invalid_argument(format!(
                "{}: no memory type offers {} (it has {})",
                self.id(),
                params.memory_type,
                info.memory_types.iter().map(|t| format!("[{t}]")).collect::<Vec<_>>().join(", ")
            )));
        }
        Ok(())
    }

    /// A timeline semaphore at `initial` that this device's queues wait on and signal device-side.
    pub fn create_semaphore(&self, initial: u64) -> Result<Semaphore> {
        self.shared.backend.create_semaphore(initial)
    }

    /// A timeline semaphore at `initial` with `flags` (see [`SemaphoreFlags`]); with none, the same
    /// as [`create_semaphore`](Self::create_semaphore). With
    /// [`SemaphoreFlags::HOST_SIGNAL_ONLY`] only the host signals it: a queue operation that would
    /// signal it is refused, and work waiting on it is held on the host until the signal.
    ///
    /// ```
    /// use hal::{SemaphoreFlags, SemaphoreValue, Timeout};
    ///
    /// let device = driver_cpu_sim::create_device()?;
    /// let gate = device.create_semaphore_with(0, SemaphoreFlags::HOST_SIGNAL_ONLY)?;
    /// let done = device.create_semaphore(0)?;
    /// let queue = device.queue(0)?;
    /// queue.barrier(&[SemaphoreValue::new(&gate, 1)], &[SemaphoreValue::new(&done, 1)])?;
    /// assert!(queue.barrier(&[], &[SemaphoreValue::new(&gate, 2)]).is_err(), "queues never signal it");
    /// gate.signal(1)?;
    /// done.wait(1, Timeout::Infinite)?;
    /// # Ok::<(), hal::Error>(())
    /// ```
    pub fn create_semaphore_with(&self, initial: u64, flags: SemaphoreFlags) -> Result<Semaphore> {
        if flags.is_empty() {
            return self.create_semaphore(initial);
        }
        self.shared.backend.create_semaphore_with(initial, flags)
    }

    /// Loads an executable.
    pub fn load_executable(&self, source: &ExecutableSource) -> Result<Executable> {
        // Declared parameter layouts are checked before a driver sees them, and again as loaded
        // (a shared library declares its entry points itself).
        match source {
            ExecutableSource::Bytes { entry_points, .. } => entry_points.iter().try_for_each(EntryPointInfo::check)?,
            ExecutableSource::Native(entries) => entries.iter().try_for_each(|e| e.info.check())?,
            _ => {}
        }
        let backend = self.shared.backend.load_executable(source)?;
        backend.entry_points().iter().try_for_each(EntryPointInfo::check)?;
        Ok(Executable::wrap(self.id(), backend))
    }

    /// A command buffer to record into.
    pub fn create_command_buffer(&self, mode: CommandBufferMode) -> Result<CommandBuffer> {
        let limits = crate::command_buffer::DispatchLimits::of(self.info());
        Ok(CommandBuffer::new(self.id(), Arc::downgrade(&self.shared.backend), limits, mode))
    }

    /// Waits on semaphores from the host (any semaphores, this device's or not).
    pub fn wait_semaphores(&self, mode: WaitMode, list: &[SemaphoreValue], timeout: Timeout) -> Result<()> {
        wait_semaphores(mode, list, timeout)
    }

    /// A new id for a channel of which this device's rank is 0: pass it to the other ranks (in this
    /// process or others) for [`create_channel`](Self::create_channel). `Unimplemented` for a driver
    /// without collectives; CUDA: `Unavailable` when NCCL cannot be loaded.
    pub fn create_channel_id(&self) -> Result<ChannelId> {
        self.shared.backend.create_channel_id()
    }

    /// This device's end of channel `id`, as `rank` of `count` ranks (see [`crate::Channel`]).
    /// `InvalidArgument` for `count` 0 or `rank >= count`; the driver refuses a rank taken twice or
    /// a count that differs from the other ranks'.
    pub fn create_channel(&self, id: &ChannelId, rank: usize, count: usize) -> Result<Channel> {
        if count == 0 || rank >= count {
            return Err(Error::invalid_argument(format!("{}: rank {rank} of a channel of {count} ranks", self.id())));
        }
        let (backend, abandon) = self.shared.backend.create_channel(id, rank, count)?;
        Ok(Channel::wrap(self.id(), rank, count, backend, abandon))
    }

    /// Starts profiling: every submission issued from now on (to any queue) records device
    /// timestamps as `options` ask (queue operations, dispatches, which command indices), until
    /// [`end_profiling`](Self::end_profiling). Host times of the records are on the host's clock;
    /// see [`crate::Profile`]. `InvalidArgument` for options that record nothing,
    /// `FailedPrecondition` while a session is in progress, `Unimplemented` for a driver that
    /// cannot time work.
    ///
    /// Profiling costs device work (CUDA: two timing events per queue operation and per timed
    /// dispatch; a command buffer whose dispatches are timed replays command by command instead of
    /// as one graph), so time only what you look at.
    pub fn begin_profiling(&self, options: ProfileOptions) -> Result<()> {
        if !options.records_anything() {
            return Err(Error::invalid_argument(format!(
                "{}: profile options record nothing (no queue operations, no dispatch index): {options:?}",
                self.id()
            )));
        }
        self.shared.backend.begin_profiling(options)
    }

    /// Takes the records of profiled submissions that completed since the last collect (a
    /// submission's records are there once its signals are reached). Never blocks.
    /// `FailedPrecondition` when not profiling.
    pub fn collect_profile(&self) -> Result<Profile> {
        self.shared.backend.collect_profile()
    }

    /// Stops profiling and returns the records not collected yet. Submissions still in flight add
    /// nothing more: wait for them first. `FailedPrecondition` when not profiling.
    pub fn end_profiling(&self) -> Result<Profile> {
        self.shared.backend.end_profiling()
    }

    /// The hang report: every pending action, what it waits on, and the current values.
    pub fn report(&self) -> String {
        self.shared.backend.report()
    }

    /// Pool occupancy.
    pub fn resource_usage(&self) -> ResourceUsage {
        self.shared.backend.resource_usage()
    }

    /// Gives back the memory the device keeps for reuse after the buffers that held it dropped
    /// ([`ResourceUsage::memory_kept`]); later allocations make new memory. Buffers still held
    /// and work in flight are not touched.
    ///
    /// On CUDA that memory is pinned host memory (dropped host-visible buffers'), and freeing it
    /// waits until every kernel running on the GPU has finished, holding back every thread's
    /// submissions meanwhile: call it when the device is idle. CUDA also unloads the modules of
    /// dropped executables here (the `kept modules` pool), on a thread of its own. Drivers that keep
    /// nothing do nothing.
    ///
    /// ```
    /// let device = driver_cpu_sim::create_device()?;
    /// device.trim()?;
    /// assert_eq!(device.resource_usage().memory_kept, 0);
    /// # Ok::<(), hal::Error>(())
    /// ```
    pub fn trim(&self) -> Result<()> {
        self.shared.backend.trim()
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} ({} '{}')", self.id(), self.info().driver, self.info().name)?;
        f.write_str(&self.report())
    }
}
