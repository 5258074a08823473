//! Command buffers: fill, update, copy, dispatch and execution barriers recorded once, checked as
//! they are recorded, immutable after `end()`, then executed once (one-shot) or many times (reusable).

use std::fmt;
use std::sync::{Arc, Weak};

use smallvec::SmallVec;

use crate::binding_table::{BindingRef, BufferRef, Recorded, Template, resolve, slots_needed};
use crate::buffer::{Buffer, BufferUsage};
use crate::collective::{Channel, CollectiveArgs, CollectiveCall};
use crate::device::DeviceId;
use crate::driver::{BindingState, DeviceBackend, PreparedCommands};
use crate::error::{Error, Result};
use crate::executable::Executable;
use crate::fill_pattern::FillPattern;
use crate::label::{Label, Unlabelled};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Mutex, lock};

/// Whether a command buffer runs once or many times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandBufferMode {
    /// Executed at most once; a second execute is an error.
    OneShot,
    /// Executed any number of times.
    Reusable,
}

/// A buffer range bound to a dispatch.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BufferBinding {
    /// The buffer.
    pub buffer: Buffer,
    /// Byte offset of the range (the kernel sees address + offset).
    pub offset: u64,
    /// Byte length of the range.
    pub length: u64,
}

impl BufferBinding {
    /// The whole of `buffer`.
    pub fn whole(buffer: &Buffer) -> Self {
        BufferBinding { buffer: buffer.clone(), offset: 0, length: buffer.size() }
    }

    /// `length` bytes of `buffer` from `offset`.
    pub fn range(buffer: &Buffer, offset: u64, length: u64) -> Self {
        BufferBinding { buffer: buffer.clone(), offset, length }
    }
}

/// One recorded command.
#[derive(Clone, Debug)]
pub enum Command {
    /// Fill `length` bytes at `offset` with a repeated 1-, 2- or 4-byte pattern.
    Fill {
        /// Destination.
        target: Buffer,
        /// Byte offset, a multiple of the pattern length.
        offset: u64,
        /// Byte length, a multiple of the pattern length.
        length: u64,
        /// The pattern in its low `pattern_len` bytes (little-endian).
        pattern: u32,
        /// 1, 2 or 4.
        pattern_len: u8,
    },
    /// Copy bytes captured at record time into a buffer.
    Update {
        /// Destination.
        target: Buffer,
        /// Byte offset.
        offset: u64,
        /// The bytes.
        data: Arc<[u8]>,
    },
    /// Copy between buffers (ranges may not overlap within one buffer).
    Copy {
        /// Source.
        source: Buffer,
        /// Byte offset in `source`.
        source_offset: u64,
        /// Destination.
        target: Buffer,
        /// Byte offset in `target`.
        target_offset: u64,
        /// Bytes to copy.
        length: u64,
    },
    /// Run an entry point over a grid of workgroups.
    Dispatch {
        /// The executable.
        executable: Executable,
        /// Entry point ordinal.
        entry_point: u32,
        /// Workgroups in x, y, z.
        workgroups: [u32; 3],
        /// 32-bit constants, in order.
        constants: SmallVec<[u32; 8]>,
        /// Buffer bindings, in order.
        bindings: SmallVec<[BufferBinding; 4]>,
    },
    /// Run an entry point over the workgroup count read when the dispatch runs: three `u32`s
    /// (x, y, z) at `count_offset` of `count`. A zero on any axis runs nothing; a count past the
    /// device's `max_workgroup_count` fails the execution with `OutOfRange`.
    DispatchIndirect {
        /// The executable.
        executable: Executable,
        /// Entry point ordinal.
        entry_point: u32,
        /// Holds the workgroup count.
        count: Buffer,
        /// Byte offset of the count in `count` (a multiple of 4).
        count_offset: u64,
        /// 32-bit constants, in order.
        constants: SmallVec<[u32; 8]>,
        /// Buffer bindings, in order.
        bindings: SmallVec<[BufferBinding; 4]>,
    },
    /// Commands after it start only after every command before it has finished.
    Barrier,
    /// A collective on `channel` (made on the command buffer's device), recorded by
    /// [`CommandBuffer::collective`]. It has no sequence number of its own: each execute takes one
    /// per collective at submission, in command order, and hands the driver the calls
    /// ([`QueueOp::Execute`](crate::driver::QueueOp::Execute)'s `collectives`, one per such command,
    /// in the same order).
    Collective {
        /// The channel.
        channel: Channel,
        /// The arguments (checked when recorded).
        args: CollectiveArgs,
    },
}

/// Bytes of an indirect dispatch's workgroup count: three `u32`s.
pub const INDIRECT_COUNT_BYTES: u64 = 12;

/// What an indirect dispatch runs for the count bytes it read (three little-endian `u32`s): `None`
/// when an axis is zero (a no-op), the count when it fits `limits`, `OutOfRange` naming `who` and the
/// count otherwise. Drivers call it when the dispatch runs; `who` is formatted only for the error.
pub fn indirect_workgroups(bytes: [u8; 12], limits: [u32; 3], who: &dyn std::fmt::Display) -> Result<Option<[u32; 3]>> {
    let word = |i: usize| u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
    let count = [word(0), word(1), word(2)];
    if count.contains(&0) {
        return Ok(None);
    }
    if count.iter().zip(&limits).any(|(n, limit)| n > limit) {
        return Err(Error::out_of_range(format!(
            "{who}: the workgroup count read from the device, {count:?}, exceeds the device's limits {limits:?}"
        )));
    }
    Ok(Some(count))
}

/// The workgroup count of a dispatch being recorded.
enum Grid {
    Direct([u32; 3]),
    Indirect(BufferRef, u64),
}

impl Command {
    /// A fill of `length` bytes at `offset` of `target` with `pattern`.
    pub fn fill(target: Buffer, offset: u64, length: u64, pattern: FillPattern) -> Command {
        Command::Fill { target, offset, length, pattern: pattern.bits(), pattern_len: pattern.len() }
    }

    /// Checks a transfer command's ranges, alignment and usages (`Fill`, `Update`, `Copy`).
    pub fn validate_transfer(&self) -> Result<()> {
        match self {
            Command::Fill { target, offset, length, pattern_len, .. } => {
                let p = u64::from(*pattern_len);
                if !matches!(p, 1 | 2 | 4) {
                    return Err(Error::invalid_argument(format!(
                        "fill of {}: pattern length {p} must be 1, 2 or 4",
                        target
                    )));
                }
                if offset % p != 0 || length % p != 0 {
                    return Err(Error::invalid_argument(format!(
                        "fill of {}: offset {offset} and length {length} must be multiples of the \
                         {p}-byte pattern",
                        target
                    )));
                }
                target.check_usage(BufferUsage::TRANSFER_TARGET)?;
                target.check_range(*offset, *length)
            }
            Command::Update { target, offset, data } => {
                target.check_usage(BufferUsage::TRANSFER_TARGET)?;
                target.check_range(*offset, data.len() as u64)
            }
            Command::Copy { source, source_offset, target, target_offset, length } => {
                source.check_usage(BufferUsage::TRANSFER_SOURCE)?;
                target.check_usage(BufferUsage::TRANSFER_TARGET)?;
                source.check_range(*source_offset, *length)?;
                target.check_range(*target_offset, *length)?;
                // Both ranges fit their buffers (checked above); subspans of one memory overlap too.
                if source.ranges_overlap(*source_offset, *length, target, *target_offset, *length) {
                    return Err(Error::invalid_argument(format!(
                        "copy from {source} at {source_offset} to {target} at {target_offset}: the {length}-byte ranges overlap in memory"
                    )));
                }
                Ok(())
            }
            Command::Dispatch { .. }
            | Command::DispatchIndirect { .. }
            | Command::Barrier
            | Command::Collective { .. } => Ok(()),
        }
    }

    /// The buffers the command touches, in the order its fields name them. An iterator, not a
    /// collection: an execute with a binding table walks every command's buffers once, and
    /// collecting them was a tenth of its cost.
    pub fn buffers(&self) -> impl Iterator<Item = &Buffer> {
        let none: &[BufferBinding] = &[];
        let (bindings, more, own): (&[BufferBinding], &[BufferBinding], [Option<&Buffer>; 2]) = match self {
            Command::Fill { target, .. } | Command::Update { target, .. } => (none, none, [Some(target), None]),
            Command::Copy { source, target, .. } => (none, none, [Some(source), Some(target)]),
            Command::Dispatch { bindings, .. } => (bindings, none, [None, None]),
            Command::DispatchIndirect { bindings, count, .. } => (bindings, none, [Some(count), None]),
            Command::Barrier => (none, none, [None, None]),
            Command::Collective { args, .. } => (args.send.as_slice(), args.recv.as_slice(), [None, None]),
        };
        bindings.iter().chain(more).map(|b| &b.buffer).chain(own.into_iter().flatten())
    }
}

/// A command buffer. Cheap to clone; clones are the same recording.
///
/// ```
/// use hal::{BufferParams, CommandBufferMode, SemaphoreValue as SV, StatusCode, Timeout};
///
/// let device = driver_cpu_sim::create_device()?;
/// let buffer = device.allocate_buffer(BufferParams::host_visible(), 8)?;
/// let commands = device.create_command_buffer(CommandBufferMode::Reusable)?;
/// commands.fill(&buffer, 0, 8, 7u32)?;
/// commands.end()?;
/// assert_eq!(commands.fill(&buffer, 0, 8, 7u32).unwrap_err().code(), StatusCode::FailedPrecondition);
/// let (queue, done) = (device.queue(0)?, device.create_semaphore(0)?);
/// queue.execute(&[], &commands, &[SV::new(&done, 1)])?;
/// queue.execute(&[SV::new(&done, 1)], &commands, &[SV::new(&done, 2)])?; // reusable: again
/// done.wait(2, Timeout::Infinite)?;
/// assert_eq!(buffer.read_as::<u32>()?, [7, 7]);
/// # Ok::<(), hal::Error>(())
/// ```
///
///
/// Record with the methods below, then [`end`](Self::end); submit with [`crate::Queue::execute`].
#[derive(Clone)]
pub struct CommandBuffer {
    shared: Arc<Shared>,
}

/// Refuses `command` if it names a buffer of a device other than `device`, unless it is a copy and
/// the device's driver copies with that buffer (`DeviceBackend::copies_with`).
fn check_devices(device: DeviceId, backend: &Weak<dyn DeviceBackend>, command: &Command) -> Result<()> {
    // Every execute with a binding table asks this of each dispatch: its bindings straight away.
    if let Command::Dispatch { bindings, .. } = command
        && bindings.iter().all(|b| b.buffer.device() == device)
    {
        return Ok(());
    }
    for buffer in command.buffers() {
        if buffer.device() == device {
            continue;
        }
        let copies =
            matches!(command, Command::Copy { .. }) && backend.upgrade().is_some_and(|b| b.copies_with(buffer));
        if !copies {
            return Err(Error::invalid_argument(format!("{buffer} belongs to another device")));
        }
    }
    Ok(())
}

struct Shared {
    id: u64,
    device: DeviceId,
    mode: CommandBufferMode,
    /// Weak: held work keeps command buffers alive, and a command buffer that kept its device alive
    /// would keep held work from being cancelled when the device's last handle drops.
    backend: Weak<dyn DeviceBackend>,
    /// The device's dispatch limits, read at creation (the device may be gone later).
    limits: DispatchLimits,
    state: Mutex<State>,
    label: Label,
    /// What the driver keeps between executes with binding tables (its prepared graph).
    binding_state: BindingState,
    /// Set at `end` when the buffer ended holding nothing but barriers (or nothing at all): an
    /// execute of it puts no work on a device stream. Read on every issue without the state lock.
    no_device_work: AtomicBool,
    /// What [`DeviceBackend::prepare_commands`] made of the commands, set once at `end` (none for a
    /// buffer that names binding slots): read by every execute without the state lock.
    prepared: std::sync::OnceLock<Arc<dyn PreparedCommands>>,
}

enum State {
    Recording(Vec<Recorded>),
    /// Ended. A buffer that names binding slots keeps its `template` (and has no commands or
    /// prepared form of its own): each execute resolves it against its table.
    Ended {
        commands: Arc<[Command]>,
        template: Option<(Arc<[Recorded]>, u32)>,
        executions: u64,
        /// Whether `commands` hold a collective (each execute then takes sequence numbers).
        collectives: bool,
    },
}

static NEXT_COMMAND_BUFFER_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl CommandBuffer {
    pub(crate) fn new(
        device: DeviceId,
        backend: Weak<dyn DeviceBackend>,
        limits: DispatchLimits,
        mode: CommandBufferMode,
    ) -> Self {
        let id = NEXT_COMMAND_BUFFER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self::with_id(id, device, backend, limits, mode)
    }

    fn with_id(
        id: u64,
        device: DeviceId,
        backend: Weak<dyn DeviceBackend>,
        limits: DispatchLimits,
        mode: CommandBufferMode,
    ) -> Self {
        CommandBuffer {
            shared: Arc::new(Shared {
                id,
                device,
                mode,
                backend,
                limits,
                state: Mutex::new(State::Recording(Vec::new())),
                label: Label::default(),
                binding_state: BindingState::new(),
                no_device_work: AtomicBool::new(false),
                prepared: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The id used in messages.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// Labels the command buffer for messages, [`Device::report`](crate::Device::report) and traces
    /// ("command buffer 7 'name'"). Set once: `FailedPrecondition` when it has a label already,
    /// `InvalidArgument` for an empty label, one over [`MAX_LABEL_BYTES`](crate::MAX_LABEL_BYTES)
    /// bytes or one with control characters.
    pub fn set_label(&self, label: impl Into<String>) -> Result<()> {
        self.shared.label.set(&Unlabelled("command buffer", self.shared.id), label.into())
    }

    /// The label, if one was set.
    pub fn label(&self) -> Option<&str> {
        self.shared.label.get()
    }

    /// One-shot or reusable.
    pub fn mode(&self) -> CommandBufferMode {
        self.shared.mode
    }

    /// Whether `end()` was called.
    pub fn is_ended(&self) -> bool {
        matches!(*lock(&self.shared.state), State::Ended { .. })
    }

    fn record(&self, command: Command) -> Result<()> {
        self.check_devices(&command)?;
        self.record_recorded(Recorded::Ready(command))
    }

    /// Refuses a command naming another device's buffers, except a copy the driver can make
    /// between its devices.
    fn check_devices(&self, command: &Command) -> Result<()> {
        check_devices(self.shared.device, &self.shared.backend, command).map_err(|e| e.context(format!("{self}")))
    }

    /// Records a command that names binding slots: `resolve` makes it concrete for a table (and
    /// checks it), once per execute.
    fn record_template(
        &self,
        slots: u32,
        resolve: impl Fn(&[BufferBinding]) -> Result<Command> + Send + Sync + 'static,
    ) -> Result<()> {
        let (device, backend) = (self.shared.device, self.shared.backend.clone());
        let template: Template = Arc::new(move |table, commands| {
            let command = resolve(table)?;
            check_devices(device, &backend, &command).map_err(|e| e.context("binding table"))?;
            commands.push(command);
            Ok(())
        });
        self.record_recorded(Recorded::Template { template, slots })
    }

    fn record_recorded(&self, command: Recorded) -> Result<()> {
        match &mut *lock(&self.shared.state) {
            State::Recording(commands) => {
                commands.push(command);
                Ok(())
            }
            State::Ended { .. } => Err(Error::failed_precondition(format!("{}: recording after end()", self))),
        }
    }

    /// What recording a no-op checks: that recording is still open.
    fn record_nothing(&self) -> Result<()> {
        match &*lock(&self.shared.state) {
            State::Recording(_) => Ok(()),
            State::Ended { .. } => Err(Error::failed_precondition(format!("{}: recording after end()", self))),
        }
    }

    /// Records a fill of `length` bytes at `offset` with `pattern` repeated (`0xABu8`, `7u32`,
    /// `1.0f32`: see [`FillPattern`]). Offset and length must be multiples of the pattern's width.
    /// `target` is a buffer or a binding-table slot ([`BufferRef`]).
    pub fn fill(
        &self,
        target: impl Into<BufferRef>,
        offset: u64,
        length: u64,
        pattern: impl Into<FillPattern>,
    ) -> Result<()> {
        let pattern = pattern.into();
        let fill = move |target: Buffer, offset| Command::fill(target, offset, length, pattern);
        match target.into() {
            BufferRef::Buffer(target) => {
                let command = fill(target, offset);
                command.validate_transfer()?;
                self.record(command)
            }
            slot => self.record_template(slots_needed([&slot]), move |table| {
                let (target, at) = resolve(&slot, offset, length, table)?;
                let command = fill(target, at);
                command.validate_transfer()?;
                Ok(command)
            }),
        }
    }

    /// Records an update: `data` is copied now and written to `target` (a buffer or a slot) at
    /// `offset` when executed.
    pub fn update(&self, target: impl Into<BufferRef>, offset: u64, data: &[u8]) -> Result<()> {
        let data: Arc<[u8]> = Arc::from(data);
        match target.into() {
            BufferRef::Buffer(target) => {
                let command = Command::Update { target, offset, data };
                command.validate_transfer()?;
                self.record(command)
            }
            slot => self.record_template(slots_needed([&slot]), move |table| {
                let (target, at) = resolve(&slot, offset, data.len() as u64, table)?;
                let command = Command::Update { target, offset: at, data: data.clone() };
                command.validate_transfer()?;
                Ok(command)
            }),
        }
    }

    /// Records a copy of `length` bytes; `source` and `target` are buffers or slots.
    pub fn copy(
        &self,
        source: impl Into<BufferRef>,
        source_offset: u64,
        target: impl Into<BufferRef>,
        target_offset: u64,
        length: u64,
    ) -> Result<()> {
        match (source.into(), target.into()) {
            (BufferRef::Buffer(source), BufferRef::Buffer(target)) => {
                let command = Command::Copy { source, source_offset, target, target_offset, length };
                command.validate_transfer()?;
                self.record(command)
            }
            (source, target) => self.record_template(slots_needed([&source, &target]), move |table| {
                let (source, source_offset) = resolve(&source, source_offset, length, table)?;
                let (target, target_offset) = resolve(&target, target_offset, length, table)?;
                let command = Command::Copy { source, source_offset, target, target_offset, length };
                command.validate_transfer()?;
                Ok(command)
            }),
        }
    }

    /// Records a dispatch of entry point `entry_point` over `workgroups`, with `constants` and
    /// `bindings` matching the entry point's declared ABI. A workgroup count of zero on an axis is a
    /// no-op (still validated; the command buffer's waits and signals hold as ever, as in IREE); one
    /// beyond the device's `DeviceInfo::max_workgroup_count` on an axis is `OutOfRange`. Bindings are
    pub fn dispatch(
        &self,
        executable: &Executable,
        entry_point: u32,
        workgroups: [u32; 3],
        constants: &[u32],
        bindings: &[BufferBinding],
    ) -> Result<()> {
        let bindings = bindings.iter().map(BindingRef::from).collect();
        self.dispatch_recorded(executable, entry_point, Grid::Direct(workgroups), constants, bindings)
    }

    /// Records a dispatch whose workgroup count is read from the device when it runs: three `u32`s
    /// (x, y, z) at `count_offset` (a multiple of 4) of `count`, a buffer or a binding-table slot.
    /// The count may be written by earlier commands of the same command buffer (after a barrier)
    /// or by earlier work in queue order. A zero on an axis runs nothing; a count past the
    /// device's `DeviceInfo::max_workgroup_count` fails the execution with `OutOfRange` (the
    /// submitting thread never reads the count, so this cannot be checked when recording).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use hal::{BufferBinding, BufferParams, CommandBufferMode, EntryPointInfo, ExecutableSource};
    /// use hal::{NativeEntryPoint, NativeKernel, SemaphoreValue as SV, Timeout};
    ///
    /// let device = driver_cpu_sim::create_device()?;
    /// // Each workgroup writes 1 at its index.
    /// let mark: NativeKernel = Arc::new(|wg| {
    ///     let stored = wg.bindings[0].store_u32(wg.workgroup_id[0] as usize, 1);
    ///     if stored { Ok(()) } else { Err("out of range".to_string()) }
    /// });
    /// let exe = device.load_executable(&ExecutableSource::Native(vec![NativeEntryPoint::new(
    ///     EntryPointInfo::new("mark", 1, 1, 0),
    ///     mark,
    /// )]))?;
    /// let (count, out) = (
    ///     device.allocate_buffer(BufferParams::host_visible(), 12)?,
    ///     device.allocate_buffer(BufferParams::host_visible(), 64)?,
    /// );
    /// let cb = device.create_command_buffer(CommandBufferMode::Reusable)?;
    /// cb.update(&count, 0, &[5u8, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0])?; // [5, 1, 1], written on the device
    /// cb.barrier()?;
    /// cb.dispatch_indirect(&exe, 0, &count, 0, &[], &[BufferBinding::whole(&out)])?;
    /// cb.end()?;
    /// let done = device.create_semaphore(0)?;
    /// device.queue(0)?.execute(&[], &cb, &[SV::new(&done, 1)])?;
    /// done.wait(1, Timeout::Infinite)?;
    /// assert_eq!(&out.read_as::<u32>()?[..6], &[1, 1, 1, 1, 1, 0]);
    /// # Ok::<(), hal::Error>(())
    /// ```
    pub fn dispatch_indirect(
        &self,
        executable: &Executable,
        entry_point: u32,
        count: impl Into<BufferRef>,
        count_offset: u64,
        constants: &[u32],
        bindings: &[BufferBinding],
    ) -> Result<()> {
        let bindings = bindings.iter().map(BindingRef::from).collect();
        let grid = Grid::Indirect(count.into(), count_offset);
        self.dispatch_recorded(executable, entry_point, grid, constants, bindings)
    }

    /// [`dispatch_indirect`](Self::dispatch_indirect) with bindings that may name binding-table
    /// slots.
    pub fn dispatch_indirect_refs(
        &self,
        executable: &Executable,
        entry_point: u32,
        count: impl Into<BufferRef>,
        count_offset: u64,
        constants: &[u32],
        bindings: &[BindingRef],
    ) -> Result<()> {
        let grid = Grid::Indirect(count.into(), count_offset);
        self.dispatch_recorded(executable, entry_point, grid, constants, bindings.iter().cloned().collect())
    }

    /// [`dispatch`](Self::dispatch) with bindings that may name binding-table slots
    /// ([`BindingRef::slot`]), resolved by each [`execute_with_bindings`](crate::Queue::execute_with_bindings).
    pub fn dispatch_refs(
        &self,
        executable: &Executable,
        entry_point: u32,
        workgroups: [u32; 3],
        constants: &[u32],
        bindings: &[BindingRef],
    ) -> Result<()> {
        self.dispatch_recorded(
            executable,
            entry_point,
            Grid::Direct(workgroups),
            constants,
            bindings.iter().cloned().collect(),
        )
    }

    fn dispatch_recorded(
        &self,
        executable: &Executable,
        entry_point: u32,
        grid: Grid,
        constants: &[u32],
        bindings: SmallVec<[BindingRef; 4]>,
    ) -> Result<()> {
        let info = executable.entry_point_info(entry_point)?;
        let who = || format!("dispatch of '{}' ({})", info.name, executable);
        if executable.device() != self.shared.device {
            return Err(Error::invalid_argument(format!("{}: executable belongs to another device", who())));
        }
        if bindings.len() != info.binding_count {
            return Err(Error::invalid_argument(format!(
                "{}: {} bindings given, entry point declares {}",
                who(),
                bindings.len(),
                info.binding_count
            )));
        }
        if constants.len() != info.constant_count {
            return Err(Error::invalid_argument(format!(
                "{}: {} constants given, entry point declares {}",
                who(),
                constants.len(),
                info.constant_count
            )));
        }
        let limits = self.shared.limits.max_workgroup_count;
        let workgroups = match &grid {
            Grid::Direct(workgroups) => *workgroups,
            Grid::Indirect(count, count_offset) => {
                if count_offset % 4 != 0 {
                    return Err(Error::invalid_argument(format!(
                        "{}: workgroup count offset {count_offset} is not a multiple of 4",
                        who()
                    )));
                }
                if let BufferRef::Buffer(buffer) = count {
                    check_binding(buffer, *count_offset, INDIRECT_COUNT_BYTES)
                        .map_err(|e| e.context(format!("{} workgroup count", who())))?;
                }
                [1, 1, 1]
            }
        };
        for (axis, (&count, &limit)) in ["x", "y", "z"].iter().zip(workgroups.iter().zip(&limits)) {
            if count > limit {
                return Err(Error::out_of_range(format!(
                    "{}: workgroup count {axis} = {count} exceeds the device's limit of {limit} \
                     (count {workgroups:?}, limits {limits:?})",
                    who()
                )));
            }
        }
        let max_binding = self.shared.limits.max_binding_length;
        let alignment = self.shared.limits.binding_alignment;
        for (index, binding) in bindings.iter().enumerate() {
            if let BufferRef::Buffer(buffer) = &binding.buffer {
                check_binding(buffer, binding.offset, binding.length)
                    .and_then(|()| check_binding_alignment(buffer, binding.offset, alignment))
                    .map_err(|e| e.context(format!("{} binding {index}", who())))?;
            }
            if binding.length > max_binding {
                return Err(Error::out_of_range(format!(
                    "{}: binding {index} is {} bytes, past the device's largest binding of {max_binding} bytes \
                     (DeviceInfo::max_binding_length)",
                    who(),
                    binding.length
                )));
            }
        }
        if workgroups.contains(&0) {
            // Checked like any dispatch, then left out: there is nothing to run, and drivers (CUDA
            // refuses an empty grid) never see it.
            return self.record_nothing();
        }
        let (executable, constants): (Executable, SmallVec<[u32; 8]>) =
            (executable.clone(), constants.iter().copied().collect());
        let count_ref = match &grid {
            Grid::Indirect(count, _) => Some(count),
            Grid::Direct(_) => None,
        };
        let slots = slots_needed(bindings.iter().map(|b| &b.buffer).chain(count_ref));
        let concrete = move |executable: Executable, constants, bindings, count: Option<(Buffer, u64)>| match count {
            None => Command::Dispatch { executable, entry_point, workgroups, constants, bindings },
            Some((count, count_offset)) => {
                Command::DispatchIndirect { executable, entry_point, count, count_offset, constants, bindings }
            }
        };
        if slots == 0 {
            let bindings = bindings
                .into_iter()
                .map(|b| match b.buffer {
                    BufferRef::Buffer(buffer) => Ok(BufferBinding::range(&buffer, b.offset, b.length)),
                    BufferRef::Slot(_) => Err(Error::internal("a slot among bindings that name none")),
                })
                .collect::<Result<_>>()?;
            let count = match grid {
                Grid::Indirect(BufferRef::Buffer(count), count_offset) => Some((count, count_offset)),
                _ => None,
            };
            return self.record(concrete(executable, constants, bindings, count));
        }
        let name = info.name.clone();
        self.record_template(slots, move |table| {
            let mut resolved = SmallVec::new();
            for (index, binding) in bindings.iter().enumerate() {
                let what = || format!("dispatch of '{name}' ({executable}) binding {index}");
                let (buffer, offset) =
                    resolve(&binding.buffer, binding.offset, binding.length, table).map_err(|e| e.context(what()))?;
                check_binding(&buffer, offset, binding.length)
                    .and_then(|()| check_binding_alignment(&buffer, offset, alignment))
                    .map_err(|e| e.context(what()))?;
                resolved.push(BufferBinding { buffer, offset, length: binding.length });
            }
            let count = match &grid {
                Grid::Indirect(count, count_offset) => {
                    let what = || format!("dispatch of '{name}' ({executable}) workgroup count");
                    let (buffer, offset) =
                        resolve(count, *count_offset, INDIRECT_COUNT_BYTES, table).map_err(|e| e.context(what()))?;
                    if offset % 4 != 0 {
                        return Err(Error::invalid_argument(format!(
                            "{}: offset {offset} is not a multiple of 4",
                            what()
                        )));
                    }
                    check_binding(&buffer, offset, INDIRECT_COUNT_BYTES).map_err(|e| e.context(what()))?;
                    Some((buffer, offset))
                }
                Grid::Direct(_) => None,
            };
            // `from_slice`: a copy of the words, where `clone` pushed them one by one.
            Ok(concrete(executable.clone(), SmallVec::from_slice(&constants), resolved, count))
        })
    }

    /// The binding-table entries an execute must pass: one past the highest slot a command names
    /// (0 when none does, or before `end`).
    pub fn binding_slots(&self) -> u32 {
        match &*lock(&self.shared.state) {
            State::Ended { template: Some((_, slots)), .. } => *slots,
            _ => 0,
        }
    }

    /// The concrete commands for one execute with `table`, each checked (slots, ranges, usages,
    /// alignment, devices); `InvalidArgument` when the table has fewer entries than the buffer's slots.
    pub(crate) fn resolve(&self, table: &[BufferBinding]) -> Result<Vec<Command>> {
        let (template, slots) = match &*lock(&self.shared.state) {
            State::Ended { template: Some((template, slots)), .. } => (template.clone(), *slots),
            State::Ended { commands, .. } => return Ok(commands.to_vec()),
            State::Recording(_) => return Err(Error::failed_precondition(format!("{}: executed before end()", self))),
        };
        if (table.len() as u64) < u64::from(slots) {
            return Err(Error::invalid_argument(format!(
                "{}: names {slots} binding slots; the table has {} entries",
                self,
                table.len()
            )));
        }
        // A plain loop: each command is moved once into place (an iterator of `Result`s moved
        // every 176-byte command several times, a measurable part of an execute).
        let mut commands = Vec::with_capacity(template.len());
        for recorded in template.iter() {
            match recorded {
                Recorded::Ready(command) => commands.push(command.clone()),
                Recorded::Template { template, .. } => {
                    template(table, &mut commands).map_err(|e| e.context(format!("{}", self)))?
                }
            }
        }
        Ok(commands)
    }

    /// A one-shot command buffer of `commands` (already checked), prepared by the driver for one
    /// execute with a binding table (reusing what it kept from earlier executes): what it runs.
    pub(crate) fn resolved(&self, commands: Vec<Command>) -> Result<CommandBuffer> {
        let backend = self
            .shared
            .backend
            .upgrade()
            .ok_or_else(|| Error::failed_precondition(format!("{}: {} was destroyed", self, self.shared.device)))?;
        let commands: Arc<[Command]> = Arc::from(commands);
        let prepared =
            backend.prepare_bound(&commands, &self.shared.binding_state).map_err(|e| e.context(format!("{}", self)))?;
        // The same command buffer with its table applied: messages and profiles name this one.
        let resolved = CommandBuffer::with_id(
            self.shared.id,
            self.shared.device,
            self.shared.backend.clone(),
            self.shared.limits,
            CommandBufferMode::OneShot,
        );
        if let Some(label) = self.label() {
            let _ = resolved.set_label(label);
        }
        let collectives = has_collectives(&commands);
        let _ = resolved.shared.prepared.set(prepared);
        *lock(&resolved.shared.state) = State::Ended { commands, template: None, executions: 0, collectives };
        Ok(resolved)
    }

    /// Records an execution barrier: later commands start after earlier ones finish.
    pub fn barrier(&self) -> Result<()> {
        self.record(Command::Barrier)
    }

    /// Records a collective on `channel` (made on this command buffer's device): every rank of the
    /// channel runs its part where its own command buffer (or queue) has it. The arguments are
    /// checked now, as [`Queue::collective`](crate::Queue::collective) checks them: a channel of
    /// another device, a buffer of another device, a root or peer that does not exist, a send to
    /// oneself or a range too small is refused (`InvalidArgument` / `OutOfRange`), and nothing is
    /// recorded. The buffers are named directly (binding-table slots are not taken here: a
    /// collective's ranges are fixed when it is recorded).
    ///
    /// **Order.** A collective is paired with the other ranks' by its place on the channel, not
    /// by the command buffer: each execute takes the channel's next sequence number for each
    /// collective it holds, in command order, when it is submitted (as `Queue::collective` does
    /// when it is called). So a command buffer executed K times runs K rounds, which pair with the
    /// other ranks' K executes (or queue collectives) in submission order, and queue collectives
    /// and executes submitted on one channel keep one order. Every rank must submit them in the
    /// same order. A collective runs after every command before it in the buffer and before every
    /// command after it, as if barriers surrounded it.
    ///
    /// **Failure.** An execute that never runs (its wait failed, its device went away, it was
    /// refused after its numbers were taken) abandons every collective it holds, so they fail on
    /// every rank with a status naming this rank instead of leaving the others waiting; one that
    /// fails part-way abandons the collectives it did not reach.
    ///
    /// ```
    /// use hal::{BufferParams, CollectiveArgs, CollectiveOp, CommandBufferMode, ElementType, ReduceOp};
    /// use hal::{SemaphoreValue as SV, Timeout};
    ///
    /// let devices = [driver_cpu_sim::create_device()?, driver_cpu_sim::create_device()?];
    /// let id = devices[0].create_channel_id()?;
    /// let mut ranks = Vec::new();
    /// for (rank, device) in devices.iter().enumerate() {
    ///     let channel = device.create_channel(&id, rank, 2)?;
    ///     let buffer = device.allocate_buffer(BufferParams::host_visible(), 16)?;
    ///     // Recorded once: write this rank's input, then sum it over the ranks in place.
    ///     let step = device.create_command_buffer(CommandBufferMode::Reusable)?;
    ///     step.fill(&buffer, 0, 16, rank as u32 + 1)?;
    ///     step.collective(
    ///         &channel,
    ///         CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::U32, 4)
    ///             .send(&buffer)
    ///             .recv(&buffer),
    ///     )?;
    ///     step.end()?;
    ///     ranks.push((device.queue(0)?, step, buffer, device.create_semaphore(0)?, channel));
    /// }
    /// for round in 1..=2u64 {
    ///     for (queue, step, _, done, _) in &ranks {
    ///         queue.execute(&[SV::new(done, round - 1)], step, &[SV::new(done, round)])?;
    ///     }
    ///     for (_, _, buffer, done, _) in &ranks {
    ///         done.wait(round, Timeout::Infinite)?;
    ///         assert_eq!(buffer.read_as::<u32>()?, [3; 4]);
    ///     }
    /// }
    /// # Ok::<(), hal::Error>(())
    /// ```
    pub fn collective(&self, channel: &Channel, args: CollectiveArgs) -> Result<()> {
        if channel.device() != self.shared.device {
            return Err(Error::invalid_argument(format!(
                "{self}: {channel} was made on {}, not {}",
                channel.device(),
                self.shared.device
            )));
        }
        let command = Command::Collective { channel: channel.clone(), args };
        // No copy among them: a buffer of another device is refused whatever the driver copies.
        self.check_devices(&command)?;
        if let Command::Collective { channel, args } = &command {
            args.check(channel).map_err(|e| e.context(format!("{self}")))?;
        }
        self.record_recorded(Recorded::Ready(command))
    }

    /// One call per collective of the commands, in command order, each with the next sequence
    /// number of its channel: what one execute runs (empty for a buffer without collectives).
    pub(crate) fn collective_calls(&self) -> Vec<CollectiveCall> {
        let commands = match &*lock(&self.shared.state) {
            State::Ended { commands, collectives: true, .. } => commands.clone(),
            _ => return Vec::new(),
        };
        // Numbered outside the lock.
        calls_of(commands)
    }

    /// Finishes recording and lets the driver prepare its replayable form. Recording afterwards, or a
    /// second `end`, is a `FailedPrecondition`.
    pub fn end(&self) -> Result<()> {
        let mut state = lock(&self.shared.state);
        let commands = match &mut *state {
            State::Recording(commands) => std::mem::take(commands),
            State::Ended { .. } => {
                return Err(Error::failed_precondition(format!("{}: end() called twice", self)));
            }
        };
        let slots = commands.iter().map(Recorded::slots).max().unwrap_or(0);
        if slots > 0 {
            // Its buffers are known only at execute: each execute resolves and prepares it.
            let template = Some((Arc::from(commands), slots));
            *state = State::Ended { commands: Arc::from(Vec::new()), template, executions: 0, collectives: false };
            return Ok(());
        }
        // No slots: every command is concrete (`Ready`).
        let ready: Arc<[Command]> = commands
            .into_iter()
            .filter_map(|recorded| if let Recorded::Ready(command) = recorded { Some(command) } else { None })
            .collect();
        let reopen = |ready: &[Command]| State::Recording(ready.iter().cloned().map(Recorded::Ready).collect());
        let Some(backend) = self.shared.backend.upgrade() else {
            *state = reopen(&ready);
            return Err(Error::failed_precondition(format!("{}: {} was destroyed", self, self.shared.device)));
        };
        let prepared = match backend.prepare_commands(&ready, self.shared.mode) {
            Ok(prepared) => prepared,
            Err(e) => {
                *state = reopen(&ready);
                return Err(e.context(format!("{}", self)));
            }
        };
        let collectives = has_collectives(&ready);
        let no_device_work = ready.iter().all(|command| matches!(command, Command::Barrier));
        self.shared.no_device_work.store(no_device_work, Ordering::Release);
        // Set before the state says ended: whoever sees it ended finds the prepared form.
        let _ = self.shared.prepared.set(prepared);
        *state = State::Ended { commands: ready, template: None, executions: 0, collectives };
        Ok(())
    }

    /// Whether it ended holding no device work (no commands, or barriers only): executing it puts
    /// nothing on a stream. `false` while recording and for buffers that name binding slots.
    pub(crate) fn has_no_device_work(&self) -> bool {
        self.shared.no_device_work.load(Ordering::Acquire)
    }

    /// The recorded commands (empty while recording).
    pub(crate) fn commands(&self) -> Arc<[Command]> {
        match &*lock(&self.shared.state) {
            State::Ended { commands, .. } => commands.clone(),
            State::Recording(_) => Arc::from(Vec::new()),
        }
    }

    /// What the driver keeps across executes with binding tables.
    pub(crate) fn binding_state(&self) -> &BindingState {
        &self.shared.binding_state
    }

    /// The driver's prepared form, once ended.
    pub(crate) fn prepared(&self) -> Option<Arc<dyn PreparedCommands>> {
        self.prepared_ref().cloned()
    }

    /// [`prepared`](Self::prepared) without a clone.
    pub(crate) fn prepared_ref(&self) -> Option<&Arc<dyn PreparedCommands>> {
        self.shared.prepared.get()
    }

    /// Claims one execution: refused before `end()` and for a one-shot buffer already executed.
    pub(crate) fn begin_execution(&self) -> Result<()> {
        claim(&mut lock(&self.shared.state), self)
    }

    /// [`begin_execution`](Self::begin_execution) for a plain execute (no binding table), with the
    /// execute's collectives numbered, under one lock of the buffer's state: a buffer that names
    /// binding slots is not claimed ([`Claim::NeedsTable`]).
    pub(crate) fn claim_execution(&self) -> Result<Claim> {
        let commands = match &mut *lock(&self.shared.state) {
            State::Ended { template: Some((_, slots)), .. } if *slots > 0 => return Ok(Claim::NeedsTable(*slots)),
            state => {
                claim(state, self)?;
                match state {
                    State::Ended { commands, collectives: true, .. } => Some(commands.clone()),
                    _ => None,
                }
            }
        };
        // Numbered outside the lock, in command order.
        Ok(Claim::Claimed(commands.map_or_else(Vec::new, calls_of)))
    }

    /// Returns an execution claimed by `begin_execution` whose submission was refused.
    pub(crate) fn cancel_execution(&self) {
        if let State::Ended { executions, .. } = &mut *lock(&self.shared.state) {
            *executions = executions.saturating_sub(1);
        }
    }

    /// The device it records for.
    pub fn device(&self) -> DeviceId {
        self.shared.device
    }
}

/// What [`CommandBuffer::claim_execution`] found.
pub(crate) enum Claim {
    /// One execution claimed; the execute's collectives, numbered.
    Claimed(Vec<CollectiveCall>),
    /// Nothing claimed: the buffer names this many binding slots, so it needs a table.
    NeedsTable(u32),
}

/// Claims one execution of `buffer`, whose state is `state` (locked): refused before `end()` and
/// for a one-shot buffer already executed.
fn claim(state: &mut State, buffer: &CommandBuffer) -> Result<()> {
    match state {
        State::Recording(_) => Err(Error::failed_precondition(format!("{buffer}: executed before end()"))),
        State::Ended { executions, .. } => {
            if buffer.shared.mode == CommandBufferMode::OneShot && *executions > 0 {
                return Err(Error::failed_precondition(format!(
                    "{buffer}: one-shot command buffer executed a second time"
                )));
            }
            *executions += 1;
            Ok(())
        }
    }
}

/// The collectives among `commands`, each numbered on its channel now, in command order.
fn calls_of(commands: Arc<[Command]>) -> Vec<CollectiveCall> {
    commands
        .iter()
        .filter_map(|command| match command {
            Command::Collective { channel, args } => Some(CollectiveCall::new(channel.clone(), args.clone())),
            _ => None,
        })
        .collect()
}

/// Whether `commands` hold a collective.
fn has_collectives(commands: &[Command]) -> bool {
    commands.iter().any(|c| matches!(c, Command::Collective { .. }))
}

/// A dispatch binding's checks: storage usage and range.
/// The limits a recording checks dispatches against, from the device's [`DeviceInfo`](crate::DeviceInfo).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DispatchLimits {
    /// `DeviceInfo::max_workgroup_count`.
    pub(crate) max_workgroup_count: [u32; 3],
    /// `DeviceInfo::max_binding_length`.
    pub(crate) max_binding_length: u64,
    /// `DeviceInfo::binding_alignment`.
    pub(crate) binding_alignment: u64,
}

impl DispatchLimits {
    /// The limits `info` states.
    pub(crate) fn of(info: &crate::DeviceInfo) -> Self {
        DispatchLimits {
            max_workgroup_count: info.max_workgroup_count,
            max_binding_length: info.max_binding_length,
            binding_alignment: info.binding_alignment.max(1),
        }
    }
}

fn check_binding(buffer: &Buffer, offset: u64, length: u64) -> Result<()> {
    buffer.check_usage(BufferUsage::DISPATCH_STORAGE)?;
    buffer.check_range(offset, length)
}

/// A binding at `offset` of `buffer` must start at a multiple of the device's `alignment`: its
/// memory's byte 0 (a transient buffer's, once allocated, is aligned) plus the subspan's and the
/// binding's offsets. `InvalidArgument` naming both.
fn check_binding_alignment(buffer: &Buffer, offset: u64, alignment: u64) -> Result<()> {
    if alignment == 1 {
        // Every address is aligned (CUDA, cpu-sim): no call into the buffer's backend.
        return Ok(());
    }
    let from_memory = buffer.memory_offset().wrapping_add(offset);
    let start = buffer.backend().device_address().wrapping_add(from_memory);
    if start.is_multiple_of(alignment) {
        return Ok(());
    }
    Err(Error::invalid_argument(format!(
        "{buffer}: a binding at offset {offset} starts {} bytes past a multiple of the device's binding alignment \
         of {alignment} bytes (DeviceInfo::binding_alignment)",
        start % alignment
    )))
}

impl fmt::Display for CommandBuffer {
    /// "command buffer N", or "command buffer N 'label'" when it has a label.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.label.write_name(f, "command buffer", self.shared.id)
    }
}

impl fmt::Debug for CommandBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandBuffer")
            .field("id", &self.shared.id)
            .field("mode", &self.shared.mode)
            .field("ended", &self.is_ended())
            .finish()
    }
}
