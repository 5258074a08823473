//! The object-safe traits a driver implements. Handles (`Device`, `Buffer`, ...) hold an
//! `Arc<dyn ...>` of these: one virtual call per API call at this edge, static dispatch inside.
//!
//! The handles validate what every driver would validate (ranges, usages, recording state, value
//! order), so a driver sees only well-formed requests: a backend is reachable only through its
//! handle, never by an embedder directly.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::buffer::{Buffer, BufferParams, HostView};
use crate::collective::{AbandonFn, ChannelBackend, ChannelId, CollectiveCall};
use crate::command_buffer::{Command, CommandBuffer, CommandBufferMode};
use crate::device::{Device, DeviceInfo, ResourceUsage};
use crate::driver::{BindingState, ImportedHostMemory, ReleaseOnce};
use crate::error::Result;
use crate::executable::{EntryPointInfo, ExecutableSource};
use crate::external::{ExternalMemory, ExternalTimepoint, ExternalUse};
use crate::profile::{Profile, ProfileOptions};
use crate::queue::HostCallFlags;
use crate::semaphore::{Semaphore, SemaphoreValue};

/// A driver: a factory of devices, found by name in a [`crate::Registry`].
pub trait Driver: Send + Sync {
    /// The name users select it by (`"cpu-sim"`, `"cuda"`).
    fn name(&self) -> &str;

    /// `Ok` when the driver can create devices here; otherwise `Unavailable` with the reason (no
    /// libcuda, no GPU). Never panics.
    fn probe(&self) -> Result<()>;

    /// The devices it can create, with their properties.
    fn enumerate(&self) -> Result<Vec<DeviceInfo>>;

    /// Creates device `ordinal` (an index into `enumerate`).
    fn create_device(&self, ordinal: usize) -> Result<Device>;
}

/// A device's implementation.
pub trait DeviceBackend: Send + Sync {
    /// What the device is.
    fn info(&self) -> &DeviceInfo;

    /// Allocates `size` bytes now. `params` were validated and are among the device's memory types.
    fn allocate(&self, params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>>;

    /// A buffer with no memory yet, for `queue_alloca`: the memory is committed when the alloca runs
    /// in queue order and released by the matching `queue_dealloca` (or when the last handle drops).
    fn allocate_transient(&self, params: BufferParams, size: u64) -> Result<Arc<dyn BufferBackend>>;

    /// A buffer over host memory the embedder lends (`params` were validated, `memory.length()` is
    /// not 0). The backend keeps `memory`'s release until the memory is no longer used, and drops it
    /// (running the release) on every error path. The default: `Unimplemented`, releasing at once.
    fn import_host_memory(&self, params: BufferParams, memory: ImportedHostMemory) -> Result<Arc<dyn BufferBackend>> {
        let _ = params;
        drop(memory);
        Err(crate::error::Error::unimplemented(format!("{}: cannot import host memory", self.info().driver)))
    }

    /// A buffer over device memory another library allocated (`params` were validated,
    /// `memory.length()` is not 0). As for host memory, the backend keeps `release` until the
    /// memory is no longer used and drops it on every error path. An
    /// [`ExternalMemory::OpaqueFd`]'s descriptor is only lent for the call (the HAL closes it when
    /// the call returns): a backend that keeps the memory imports a duplicate of it, and closes the
    /// duplicate itself where its API refuses it. The default: `Unimplemented`, releasing at once.
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

    /// What queue `queue` enqueues to wait on or signal `timepoint` (`use_`), prepared now, at the
    /// call: a CUDA stream's point is taken when the embedder asks, not when the queue issues the
    /// work. The scheduler then submits it as [`QueueOp::Native`]. The default: `Unimplemented`.
    fn prepare_external(&self, queue: usize, timepoint: ExternalTimepoint, use_: ExternalUse) -> Result<NativeOp> {
        let _ = (queue, use_);
        Err(crate::external::unsupported_timepoint(&self.info().driver, &timepoint))
    }

    /// The backend itself, for a driver's interop functions to downcast to their device type
    /// (see [`DeviceExt::backend_as`](crate::driver::DeviceExt::backend_as)).
    fn as_any(&self) -> &dyn Any;

    /// A semaphore this device can signal and wait on from its queues.
    fn create_semaphore(&self, initial: u64) -> Result<Semaphore>;

    /// A semaphore with `flags` (not empty; checked by the caller). The default makes a host
    /// semaphore with those flags: a backend that does something with a flag overrides this.
    fn create_semaphore_with(&self, initial: u64, flags: crate::SemaphoreFlags) -> Result<Semaphore> {
        Ok(Semaphore::with_flags(initial, flags))
    }

    /// Loads an executable. `source` names its entry points; the driver checks they exist.
    fn load_executable(&self, source: &ExecutableSource) -> Result<Arc<dyn ExecutableBackend>>;

    /// Turns a finished recording into what the driver replays (a CUDA graph, a command list).
    /// Called once, at `CommandBuffer::end`; `mode` says whether it will be executed once or many
    /// times (a driver may prepare a reusable buffer more thoroughly). The list is shared: a driver
    /// keeps it by cloning the `Arc`, not the commands.
    fn prepare_commands(&self, commands: &Arc<[Command]>, mode: CommandBufferMode)
    -> Result<Arc<dyn PreparedCommands>>;

    /// Prepares one execute of a command buffer recorded against binding slots: `commands` are its
    /// commands resolved for that execute's table, checked. Every execute of one command buffer
    /// passes the same `state`, which the driver may use to keep what it built for an earlier
    /// execute (a CUDA graph whose nodes it updates in place) instead of preparing anew. Executes
    /// of one buffer may be issued in any order, and overlap: what one execute prepared must run
    /// with its own buffers whatever the others did to the shared state. The default prepares a
    /// one-shot buffer every time.
    fn prepare_bound(&self, commands: &Arc<[Command]>, state: &BindingState) -> Result<Arc<dyn PreparedCommands>> {
        let _ = state;
        self.prepare_commands(commands, CommandBufferMode::OneShot)
    }

    /// Enqueues `op` on queue `queue` (validated: in range, buffers of this device, signal values
    /// ahead of their semaphores). Must not block on device progress.
    fn submit(&self, queue: usize, op: Submission, waits: &[SemaphoreValue], signals: &[SemaphoreValue]) -> Result<()>;

    /// Hands any batched submissions of `queue` to the device.
    fn flush(&self, queue: usize) -> Result<()>;

    /// What every pending action waits on, every in-flight submission: the hang report.
    fn report(&self) -> String;

    /// Whether this device's queues and command buffers can copy to and from `buffer`, a buffer of
    /// another device (the handles refuse it otherwise). A driver that says yes makes such copies
    /// work in `enqueue` and in its prepared command buffers. The default: no.
    fn copies_with(&self, buffer: &Buffer) -> bool {
        let _ = buffer;
        false
    }

    /// A new channel id (rank 0 calls this; see [`crate::ChannelId`]). The default:
    /// `Unimplemented`.
    fn create_channel_id(&self) -> Result<ChannelId> {
        Err(crate::error::Error::unimplemented(format!("{}: no collectives", self.info().driver)))
    }

    /// This device's end of channel `id` as `rank` of `count` (checked: `rank < count`), and what
    /// to do when one of its collectives is dropped without having run. The default:
    /// `Unimplemented`.
    fn create_channel(
        &self,
        id: &ChannelId,
        rank: usize,
        count: usize,
    ) -> Result<(Arc<dyn ChannelBackend>, Option<AbandonFn>)> {
        let _ = (id, rank, count);
        Err(crate::error::Error::unimplemented(format!("{}: no collectives", self.info().driver)))
    }

    /// Starts profiling the submissions issued from now on. The default: `Unimplemented`.
    fn begin_profiling(&self, options: ProfileOptions) -> Result<()> {
        let _ = options;
        Err(crate::error::Error::unimplemented(format!("{}: cannot profile", self.info().driver)))
    }

    /// The records of profiled submissions that completed since the last call.
    fn collect_profile(&self) -> Result<Profile> {
        Err(crate::error::Error::unimplemented(format!("{}: cannot profile", self.info().driver)))
    }

    /// Stops profiling; the records not collected yet.
    fn end_profiling(&self) -> Result<Profile> {
        Err(crate::error::Error::unimplemented(format!("{}: cannot profile", self.info().driver)))
    }

    /// Pool and queue occupancy (events, timepoints, pending actions), for leak checks.
    fn resource_usage(&self) -> ResourceUsage;

    /// Gives back memory kept for reuse (see [`Device::trim`](crate::Device::trim)); by default
    /// there is none.
    fn trim(&self) -> Result<()> {
        Ok(())
    }
}

/// A buffer's memory.
///
/// # Safety
/// [`Buffer`] copies host bytes through what [`host_view`](Self::host_view) returns, checking
/// ranges only against [`size`](Self::size), so an implementer guarantees:
/// - `size` returns the same value for the backend's whole life;
/// - every [`HostView`] returned by `host_view` points to `size` bytes that are valid for reads and
///   writes (allocated, initialized, not reached through a Rust reference elsewhere) for as long as
///   the view lives, whatever happens meanwhile on any thread: a `queue_dealloca` releasing the
///   memory must leave it allocated while a view of it lives, either because the view keeps it
///   alive ([`HostView::kept_alive`]) or because the memory lives as long as the backend
///   ([`HostView::borrowed`]);
/// - `host_view` returns `None` rather than a view of memory that is gone or not there yet.
///
/// `device_address` is only passed to the driver's own code, which checks it; the HAL trusts it for
/// nothing.
///
/// Safe code cannot implement it, so it cannot hand the HAL memory it does not have:
///
/// ```compile_fail,E0200
/// // A safe impl like this one would make `Buffer::write` write to a dangling address.
/// use hal::driver::HostView;
///
/// /// Claims a megabyte of host memory at a dangling address.
/// struct Forged;
///
/// impl hal::driver::BufferBackend for Forged {
///     fn size(&self) -> u64 { 1 << 20 }
///     fn host_view(&self) -> Option<HostView<'_>> { Some(HostView::borrowed(std::ptr::NonNull::dangling())) }
///     fn device_address(&self) -> u64 { 0 }
///     fn as_any(&self) -> &dyn std::any::Any { self }
/// }
/// ```
pub unsafe trait BufferBackend: Send + Sync + Any {
    /// Size of the memory in bytes (also the [`Buffer`]'s size).
    fn size(&self) -> u64;

    /// A host view of byte 0 when the host can reach the memory now; `None` for device-only memory
    /// or a transient buffer whose alloca has not run or whose dealloca ran.
    fn host_view(&self) -> Option<HostView<'_>>;

    /// The address the device uses for byte 0 (a CUdeviceptr on CUDA), 0 when not committed yet.
    fn device_address(&self) -> u64;

    /// For downcasting to the driver's type.
    fn as_any(&self) -> &dyn Any;
}

/// A loaded executable.
pub trait ExecutableBackend: Send + Sync + Any {
    /// Its entry points, in ordinal order.
    fn entry_points(&self) -> &[EntryPointInfo];

    /// For downcasting to the driver's type.
    fn as_any(&self) -> &dyn Any;
}

/// A recorded command buffer in the driver's replayable form.
pub trait PreparedCommands: Send + Sync + Any {
    /// For downcasting to the driver's type.
    fn as_any(&self) -> &dyn Any;
}

/// Work run on the host in queue order by [`crate::Queue::host_call`]; an `Err` fails the signals.
/// The cell makes the one-shot closure shareable inside a submission; it is taken once, to run.
pub struct HostCall {
    call: crate::sync::Mutex<Option<HostFn>>,
    flags: HostCallFlags,
}

/// The closure of a host call.
pub type HostFn = Box<dyn FnOnce() -> Result<()> + Send>;

impl HostCall {
    /// Wraps `call`, run as `flags` say.
    pub fn new(call: impl FnOnce() -> Result<()> + Send + 'static, flags: HostCallFlags) -> Self {
        HostCall { call: crate::sync::Mutex::new(Some(Box::new(call))), flags }
    }

    /// Takes the closure out (once); `None` if it was taken before.
    pub fn take(&self) -> Option<HostFn> {
        crate::sync::lock(&self.call).take()
    }

    /// How it runs.
    pub fn flags(&self) -> HostCallFlags {
        self.flags
    }

    /// Whether later work on its queue waits until it returns (no [`HostCallFlags::NON_BLOCKING`]).
    pub fn is_blocking(&self) -> bool {
        !self.flags.contains(HostCallFlags::NON_BLOCKING)
    }
}

pub use crate::readback::ReadTarget;

/// One queue operation, as handed to [`DeviceBackend::submit`].
pub enum QueueOp {
    /// Run a command buffer (ended; one-shot buffers not run before).
    Execute {
        /// The command buffer.
        command_buffer: CommandBuffer,
        /// One call per [`Command::Collective`] of its commands, in command order, numbered for
        /// this execute: the driver runs call `n` where the `n`-th collective command is. Dropped
        /// unrun, each tells the other ranks (see [`CollectiveCall`]); a driver that stops part-way
        /// through the commands abandons those it did not reach.
        collectives: Vec<CollectiveCall>,
    },
    /// A collective on a channel (see [`crate::CollectiveOp`]). Boxed, as is a transfer: they are
    /// the large operations, and every operation is moved several times on the way to a stream.
    Collective(Box<CollectiveCall>),
    /// Commit the memory of a transient buffer.
    Alloca(Buffer),
    /// Release the memory of a transient buffer.
    Dealloca(Buffer),
    /// A single transfer command (fill, update or copy), validated like a recorded one.
    Transfer(Box<Command>),
    /// Copy host bytes into a buffer.
    Write {
        /// The bytes.
        data: Arc<[u8]>,
        /// The destination.
        target: Buffer,
        /// Byte offset in `target`.
        offset: u64,
    },
    /// Copy a buffer range out to the host.
    Read {
        /// The source.
        source: Buffer,
        /// Byte offset in `source`.
        offset: u64,
        /// Bytes to read.
        length: u64,
        /// Where the bytes land once the operation completes.
        target: ReadTarget,
    },
    /// Nothing to run: waits, then signals.
    Barrier,
    /// Work only the device's driver knows how to enqueue: a wait on or signal of another API's
    /// queue ([`crate::Queue::wait_external`], [`crate::Queue::signal_external`]), made by the
    /// driver's [`DeviceBackend::prepare_external`].
    Native(NativeOp),
}

/// Work that only one driver understands, prepared by it and carried through the scheduler to its
/// stream model, which downcasts the payload. Dropped, run or not, it must leave nothing waiting:
/// a driver whose payload holds another API's queue back releases it in the payload's `Drop`.
pub struct NativeOp {
    kind: &'static str,
    description: String,
    payload: Box<dyn Any + Send + Sync>,
}

impl NativeOp {
    /// `payload`, named `kind` in traces and described for messages and reports.
    pub fn new(kind: &'static str, description: impl Into<String>, payload: impl Any + Send + Sync) -> Self {
        NativeOp { kind, description: description.into(), payload: Box::new(payload) }
    }

    /// The payload, if it is a `T`.
    pub fn payload<T: Any>(&self) -> Option<&T> {
        self.payload.downcast_ref::<T>()
    }
}

/// What one queue submission asks for, as handed to [`DeviceBackend::submit`]: work a device
/// stream runs, or a host function that the scheduler runs itself, in queue order, on a thread of
/// its own. A driver built on the scheduler passes it on; only [`QueueOp`] reaches its streams.
pub enum Submission {
    /// Work for a device stream.
    Stream(QueueOp),
    /// A host function run in queue order ([`crate::Queue::host_call`]).
    HostCall(HostCall),
}

impl From<QueueOp> for Submission {
    fn from(op: QueueOp) -> Self {
        Submission::Stream(op)
    }
}

impl Submission {
    /// The scheduler fails this submission without running it, with `status` (see
    /// [`QueueOp::will_not_run`]; a host call is only dropped).
    pub(crate) fn will_not_run(&self, status: &crate::error::Error) {
        if let Submission::Stream(op) = self {
            op.will_not_run(status);
        }
    }

    /// Whether it is a host call that holds later work of its queue until it returns.
    pub(crate) fn is_blocking_host_call(&self) -> bool {
        matches!(self, Submission::HostCall(call) if call.is_blocking())
    }

    /// A short name for traces and reports (see [`QueueOp::kind`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Submission::Stream(op) => op.kind(),
            Submission::HostCall(_) => "host-call",
        }
    }

    /// What it runs, for messages and reports (see [`QueueOp::describe`]).
    pub fn describe(&self) -> String {
        match self {
            Submission::Stream(op) => op.describe(),
            Submission::HostCall(_) => self.kind().to_owned(),
        }
    }
}

impl fmt::Debug for Submission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

impl QueueOp {
    /// The scheduler fails this op without running it, with `status`: a collective passes that
    /// status on to the other ranks of its channel (see [`CollectiveCall`]), a read to its readback.
    pub(crate) fn will_not_run(&self, status: &crate::error::Error) {
        for call in self.collectives() {
            call.will_not_run(status);
        }
        match self {
            QueueOp::Read { target, .. } => target.fail(status),
            // A dealloca that never runs releases nothing: the buffer stays usable and may be
            // deallocated again.
            QueueOp::Dealloca(buffer) => buffer.unclaim_dealloca(),
            _ => {}
        }
    }

    /// Whether it gives a device stream nothing to run: a barrier, or an execute of a command buffer
    /// that holds no device work (see [`StreamModel::enqueues_nothing`](crate::driver::stream_model::StreamModel::enqueues_nothing)).
    pub fn runs_nothing_on_a_stream(&self) -> bool {
        match self {
            QueueOp::Barrier => true,
            QueueOp::Execute { command_buffer, collectives } => {
                collectives.is_empty() && command_buffer.has_no_device_work()
            }
            _ => false,
        }
    }

    /// The collectives it runs: a collective's call, an execute's calls (in command order), or none.
    pub fn collectives(&self) -> &[CollectiveCall] {
        match self {
            QueueOp::Collective(call) => std::slice::from_ref(&**call),
            QueueOp::Execute { collectives, .. } => collectives,
            _ => &[],
        }
    }

    /// The bytes it moves or allocates, for profiles: a transfer's, read's or write's length, an
    /// alloca's or dealloca's buffer size; 0 for the rest.
    pub fn payload_bytes(&self) -> u64 {
        match self {
            QueueOp::Alloca(buffer) | QueueOp::Dealloca(buffer) => buffer.size(),
            QueueOp::Transfer(command) => match &**command {
                Command::Fill { length, .. } | Command::Copy { length, .. } => *length,
                Command::Update { data, .. } => data.len() as u64,
                _ => 0,
            },
            QueueOp::Write { data, .. } => data.len() as u64,
            QueueOp::Read { length, .. } => *length,
            QueueOp::Execute { .. } | QueueOp::Collective(_) | QueueOp::Barrier | QueueOp::Native(_) => 0,
        }
    }

    /// A short name for traces and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            QueueOp::Execute { .. } => "execute",
            QueueOp::Collective(_) => "collective",
            QueueOp::Alloca(_) => "alloca",
            QueueOp::Dealloca(_) => "dealloca",
            QueueOp::Transfer(command) => match **command {
                Command::Fill { .. } => "fill",
                Command::Update { .. } => "update",
                Command::Copy { .. } => "copy",
                _ => "transfer",
            },
            QueueOp::Write { .. } => "write",
            QueueOp::Read { .. } => "read",
            QueueOp::Barrier => "barrier",
            QueueOp::Native(op) => op.kind,
        }
    }

    /// The kind and what it runs on, with labels where the objects have them, for messages and
    /// reports: "execute of command buffer 3 'step'", "copy of buffer 1 to buffer 2 'out'"; an
    /// execute holding collectives lists their numbers ("execute of command buffer 3 (all-reduce
    /// #4, barrier #5)").
    pub fn describe(&self) -> String {
        match self {
            QueueOp::Execute { command_buffer, collectives } if collectives.is_empty() => {
                format!("execute of {command_buffer}")
            }
            QueueOp::Execute { command_buffer, collectives } => {
                // The numbers say where the execute stands on its channels (a hang report's clue).
                let calls: Vec<String> =
                    collectives.iter().map(|call| format!("{} #{}", call.args.op.name(), call.sequence)).collect();
                format!("execute of {command_buffer} ({})", calls.join(", "))
            }
            QueueOp::Collective(call) => format!("{call}"),
            QueueOp::Alloca(buffer) | QueueOp::Dealloca(buffer) => format!("{} of {buffer}", self.kind()),
            QueueOp::Transfer(command) => match &**command {
                Command::Copy { source, target, .. } => format!("copy of {source} to {target}"),
                Command::Fill { target, .. } | Command::Update { target, .. } => format!("{} of {target}", self.kind()),
                Command::Dispatch { executable, .. } => format!("dispatch of {executable}"),
                _ => self.kind().to_owned(),
            },
            QueueOp::Write { target, .. } => format!("{} of {target}", self.kind()),
            QueueOp::Read { source, .. } => format!("read of {source}"),
            QueueOp::Barrier => self.kind().to_owned(),
            QueueOp::Native(op) => op.description.clone(),
        }
    }
}

impl fmt::Debug for QueueOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}
