//! The command buffer IREE's deferred recordings are replayed into at execute time: each IREE
//! command becomes a command of a one-shot HAL command buffer.
//!
//! IREE's own deferred command buffer records (it resolves binding-table slots and validates); at
//! `queue_execute` it is replayed here with the execute's binding table, so every buffer reference
//! arrives resolved. A reusable one is replayed once instead against a table of slot markers
//! ([`record_for_table`]): a marker's references become the HAL command buffer's binding-table
//! slots, and each execute passes its own table (`table_recording`).

use std::cell::{Cell, RefCell};
use std::ffi::c_void;

use hal::{BindingRef, BufferBinding, BufferRef, CommandBuffer, FillPattern};

use crate::buffer_import;
use crate::device::Device;
use crate::executable::EXTRA_CONSTANTS;
use crate::ffi::{self, iree_status_t, sys};
use crate::profiling::{DispatchInfo, Operation, OperationKind, Origin, Recording};

/// An IREE command buffer recording into `hal`.
#[repr(C)]
pub(crate) struct Recorder {
    base: sys::iree_hal_command_buffer_t,
    device: *const Device,
    hal: CommandBuffer,
    /// IREE commands replayed so far: the next one's IREE command index.
    iree_commands: Cell<u32>,
    /// Commands recorded into `hal` so far: the next one's HAL command index.
    hal_commands: Cell<u32>,
    /// What each command became, kept while the device profiles.
    recording: RefCell<Option<Recording>>,
    /// Whether buffer references may be slot markers (`record_for_table`).
    slots: bool,
}

/// Slot markers: the buffer IREE's replay hands over for slot `n` of the table `record_for_table`
/// passes is `SLOT_MARKERS[n]`'s address (never dereferenced: IREE only copies it, and the
/// recorder's command buffer skips IREE's validation).
static SLOT_MARKERS: [u8; MAX_SLOTS] = [0; MAX_SLOTS];

/// The most slots a command buffer recorded for a table may have.
pub(crate) const MAX_SLOTS: usize = 1024;

/// The byte length of every marker slot: a reference to the whole of a slot (IREE's
/// `IREE_HAL_WHOLE_BUFFER`) arrives as `MARKER_LENGTH - offset` bytes.
const MARKER_LENGTH: u64 = 1 << 62;

/// The marker table of `count` slots (at most [`MAX_SLOTS`]).
pub(crate) fn marker_table(count: usize) -> Vec<sys::iree_hal_buffer_binding_t> {
    (0..count.min(MAX_SLOTS))
        .map(|n| sys::iree_hal_buffer_binding_t {
            buffer: (&raw const SLOT_MARKERS[n]).cast_mut().cast(),
            offset: 0,
            length: MARKER_LENGTH as sys::iree_device_size_t,
        })
        .collect()
}

/// What a buffer reference names for the HAL command.
enum Target {
    /// An IREE buffer's range, as a HAL buffer's.
    Buffer(buffer_import::Imported),
    /// `length` bytes from `offset` of binding-table slot `slot`.
    Slot { slot: u32, offset: u64, length: u64 },
}

impl Target {
    fn buffer_ref(&self) -> (BufferRef, u64) {
        match self {
            Target::Buffer(imported) => (BufferRef::from(&imported.buffer), imported.offset),
            Target::Slot { slot, offset, .. } => (BufferRef::slot(*slot), *offset),
        }
    }

    fn length(&self) -> u64 {
        match self {
            Target::Buffer(imported) => imported.length,
            Target::Slot { length, .. } => *length,
        }
    }

    fn binding(&self) -> BindingRef {
        match self {
            Target::Buffer(imported) => BufferBinding::range(&imported.buffer, imported.offset, imported.length).into(),
            Target::Slot { slot, offset, length } => BindingRef::slot(*slot, *offset, *length),
        }
    }
}

/// What one IREE command put into the HAL command buffer.
enum Recorded {
    Nothing,
    Command,
    Dispatch(DispatchInfo),
}

impl Recorder {
    /// Replays one IREE command of `kind`: `f` records it into the HAL command buffer.
    fn command(&self, kind: OperationKind, f: impl FnOnce() -> Result<Recorded, hal::Error>) -> Result<(), hal::Error> {
        let iree_index = self.iree_commands.get();
        self.iree_commands.set(iree_index + 1);
        let recorded = f()?;
        let hal_index = match recorded {
            Recorded::Nothing => None,
            Recorded::Command | Recorded::Dispatch(_) => {
                let index = self.hal_commands.get();
                self.hal_commands.set(index + 1);
                Some(index)
            }
        };
        if let Some(recording) = self.recording.borrow_mut().as_mut() {
            let dispatch = match recorded {
                Recorded::Dispatch(info) => Some(info),
                _ => None,
            };
            recording.operations.push(Operation { iree_index, hal_index, kind, dispatch });
        }
        Ok(())
    }
}

/// Records IREE commands into `hal` for `device`: `f` gets the IREE command buffer to replay into.
/// While the device profiles, also returns what each command became (`origin` says whose they are).
pub(crate) fn record_into(
    device: &Device,
    hal: CommandBuffer,
    origin: Origin,
    f: impl FnOnce(*mut sys::iree_hal_command_buffer_t) -> Result<(), hal::Error>,
) -> Result<(CommandBuffer, Option<Recording>), hal::Error> {
    let recording = device.profiling().is_active().then(|| Recording::new(origin));
    record(device, hal, recording, false, f)
}

/// Records IREE commands into the reusable `hal` for `device`, with the references to slot
/// markers ([`marker_table`]) as binding-table slots: `f` gets the IREE command buffer to replay
/// into (with the marker table). An error where a command cannot be recorded so (a reference to
/// the whole of a slot, whose length only the execute's table gives).
pub(crate) fn record_for_table(
    device: &Device,
    hal: CommandBuffer,
    f: impl FnOnce(*mut sys::iree_hal_command_buffer_t) -> Result<(), hal::Error>,
) -> Result<CommandBuffer, hal::Error> {
    record(device, hal, None, true, f).map(|(hal, _)| hal)
}

fn record(
    device: &Device,
    hal: CommandBuffer,
    recording: Option<Recording>,
    slots: bool,
    f: impl FnOnce(*mut sys::iree_hal_command_buffer_t) -> Result<(), hal::Error>,
) -> Result<(CommandBuffer, Option<Recording>), hal::Error> {
    let mut recorder = Box::new(Recorder {
        base: sys::iree_hal_command_buffer_t::default(),
        device,
        hal,
        iree_commands: Cell::new(0),
        hal_commands: Cell::new(0),
        recording: RefCell::new(recording),
        slots,
    });
    // SAFETY: `recorder.base` is writable; the vtable is static; the mode skips IREE's validation
    // (the deferred recording already ran it).
    unsafe {
        sys::iree_hal_command_buffer_initialize(
            device.device_allocator(),
            sys::iree_hal_command_buffer_mode_bits_t_IREE_HAL_COMMAND_BUFFER_MODE_ONE_SHOT
                | sys::iree_hal_command_buffer_mode_bits_t_IREE_HAL_COMMAND_BUFFER_MODE_UNVALIDATED,
            sys::iree_hal_command_category_bits_t_IREE_HAL_COMMAND_CATEGORY_ANY,
            u64::MAX,
            0,
            std::ptr::null_mut(),
            &raw const VTABLE,
            &mut recorder.base,
        );
    }
    let base = (&raw mut recorder.base).cast();
    f(base)?;
    let recorder = *recorder;
    Ok((recorder.hal, recorder.recording.into_inner()))
}

static VTABLE: sys::iree_hal_command_buffer_vtable_t = sys::iree_hal_command_buffer_vtable_t {
    destroy: Some(destroy),
    begin: Some(begin),
    end: Some(end),
    begin_debug_group: Some(begin_debug_group),
    end_debug_group: Some(end_debug_group),
    execution_barrier: Some(execution_barrier),
    signal_event: Some(signal_event),
    reset_event: Some(signal_event),
    wait_events: Some(wait_events),
    advise_buffer: Some(advise_buffer),
    flush_buffer: Some(flush_buffer),
    invalidate_buffer: Some(flush_buffer),
    fill_buffer: Some(fill_buffer),
    update_buffer: Some(update_buffer),
    copy_buffer: Some(copy_buffer),
    collective: Some(collective),
    dispatch: Some(dispatch),
};

/// The recorder behind `base`.
///
/// # Safety
/// `base` is the command buffer `record_into` handed out, during its call.
unsafe fn recorder<'a>(base: *mut sys::iree_hal_command_buffer_t) -> &'a Recorder {
    // SAFETY: the caller's contract: the recorder outlives the replay.
    unsafe { &*base.cast::<Recorder>() }
}

fn run(what: &str, f: impl FnOnce() -> Result<(), hal::Error>) -> iree_status_t {
    ffi::guarded(what, || ffi::from_result(f()))
}

unsafe extern "C" fn destroy(_base: *mut sys::iree_hal_command_buffer_t) {
    // The recorder is owned by `record_into`, which never hands out a reference.
}

unsafe extern "C" fn begin(_base: *mut sys::iree_hal_command_buffer_t) -> iree_status_t {
    ffi::ok()
}

unsafe extern "C" fn end(_base: *mut sys::iree_hal_command_buffer_t) -> iree_status_t {
    ffi::ok()
}

unsafe extern "C" fn begin_debug_group(
    _base: *mut sys::iree_hal_command_buffer_t,
    _label: sys::iree_string_view_t,
    _color: sys::iree_hal_label_color_t,
    _location: *const sys::iree_hal_label_location_t,
) -> iree_status_t {
    ffi::ok()
}

unsafe extern "C" fn end_debug_group(_base: *mut sys::iree_hal_command_buffer_t) -> iree_status_t {
    ffi::ok()
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn execution_barrier(
    base: *mut sys::iree_hal_command_buffer_t,
    _source: sys::iree_hal_execution_stage_t,
    _target: sys::iree_hal_execution_stage_t,
    _flags: sys::iree_hal_execution_barrier_flags_t,
    _memory_barrier_count: usize,
    _memory_barriers: *const sys::iree_hal_memory_barrier_t,
    _buffer_barrier_count: usize,
    _buffer_barriers: *const sys::iree_hal_buffer_barrier_t,
) -> iree_status_t {
    // SAFETY: IREE replays into the recorder `record_into` made.
    let recorder = unsafe { recorder(base) };
    run("barrier", || recorder.command(OperationKind::Barrier, || recorder.hal.barrier().map(|()| Recorded::Command)))
}

unsafe extern "C" fn signal_event(
    base: *mut sys::iree_hal_command_buffer_t,
    _event: *mut sys::iree_hal_event_t,
    _stage: sys::iree_hal_execution_stage_t,
) -> iree_status_t {
    // Also `reset_event`: the HAL queue keeps the order a later `wait_events` needs (see
    // `event.rs`), so neither records anything.
    // SAFETY: IREE replays into the recorder `record_into` made.
    let recorder = unsafe { recorder(base) };
    run("signal_event", || recorder.command(OperationKind::Other, || Ok(Recorded::Nothing)))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn wait_events(
    base: *mut sys::iree_hal_command_buffer_t,
    _event_count: usize,
    _events: *mut *const sys::iree_hal_event_t,
    _source: sys::iree_hal_execution_stage_t,
    _target: sys::iree_hal_execution_stage_t,
    _memory_barrier_count: usize,
    _memory_barriers: *const sys::iree_hal_memory_barrier_t,
    _buffer_barrier_count: usize,
    _buffer_barriers: *const sys::iree_hal_buffer_barrier_t,
) -> iree_status_t {
    // SAFETY: IREE replays into the recorder `record_into` made.
    let recorder = unsafe { recorder(base) };
    run("wait_events", || {
        recorder.command(OperationKind::Barrier, || recorder.hal.barrier().map(|()| Recorded::Command))
    })
}

unsafe extern "C" fn advise_buffer(
    base: *mut sys::iree_hal_command_buffer_t,
    _buffer_ref: sys::iree_hal_buffer_ref_t,
    _flags: sys::iree_hal_memory_advise_flags_t,
    _arg0: u64,
    _arg1: u64,
) -> iree_status_t {
    // Advice only: host memory has no caches to manage.
    // SAFETY: IREE replays into the recorder `record_into` made.
    let recorder = unsafe { recorder(base) };
    run("advise_buffer", || recorder.command(OperationKind::Other, || Ok(Recorded::Nothing)))
}

unsafe extern "C" fn flush_buffer(
    base: *mut sys::iree_hal_command_buffer_t,
    _target: sys::iree_hal_buffer_ref_t,
) -> iree_status_t {
    // Also `invalidate_buffer`: the HAL's host-visible memory is coherent with the host.
    // SAFETY: IREE replays into the recorder `record_into` made.
    let recorder = unsafe { recorder(base) };
    run("flush_buffer", || recorder.command(OperationKind::Other, || Ok(Recorded::Nothing)))
}

/// What `reference` names: a slot, where it is a slot marker of a recording for a table, or else
/// the IREE buffer's range imported into the recorder's device. `None` for an empty range.
///
/// # Safety
/// `reference.buffer` is NULL, a slot marker, or a live IREE buffer.
unsafe fn import(recorder: &Recorder, reference: sys::iree_hal_buffer_ref_t) -> Result<Option<Target>, hal::Error> {
    let (offset, length) = (reference.offset as u64, reference.length as u64);
    let markers = SLOT_MARKERS.as_ptr_range();
    let address = reference.buffer.cast::<u8>().cast_const();
    if recorder.slots && markers.contains(&address) {
        let slot = address as usize - markers.start as usize;
        if offset.checked_add(length) == Some(MARKER_LENGTH) {
            return Err(hal::Error::unimplemented(format!(
                "slot {slot}: a reference to the rest of a slot (its length comes with the execute's table)"
            )));
        }
        if length == 0 {
            return Ok(None);
        }
        return Ok(Some(Target::Slot { slot: slot as u32, offset, length }));
    }
    // SAFETY: the recorder's device outlives the replay; the caller's contract for the buffer.
    let imported = unsafe { buffer_import::import(&*recorder.device, reference.buffer, offset, length) }?;
    Ok(imported.map(Target::Buffer))
}

unsafe extern "C" fn fill_buffer(
    base: *mut sys::iree_hal_command_buffer_t,
    target: sys::iree_hal_buffer_ref_t,
    pattern: *const c_void,
    pattern_length: usize,
    _flags: sys::iree_hal_fill_flags_t,
) -> iree_status_t {
    // SAFETY: IREE replays into the recorder `record_into` made.
    let recorder = unsafe { recorder(base) };
    run("fill", || {
        recorder.command(OperationKind::Fill, || {
            // SAFETY: IREE passes `pattern_length` readable bytes.
            let pattern = unsafe { fill_pattern(pattern, pattern_length) }?;
            // SAFETY: IREE passes a resolved, live buffer.
            let Some(target) = (unsafe { import(recorder, target) })? else { return Ok(Recorded::Nothing) };
            let ((buffer, offset), length) = (target.buffer_ref(), target.length());
            recorder.hal.fill(buffer, offset, length, pattern).map(|()| Recorded::Command)
        })
    })
}

/// The HAL fill pattern of IREE's `pattern` bytes.
///
/// # Safety
/// `pattern` points at `length` readable bytes.
pub(crate) unsafe fn fill_pattern(pattern: *const c_void, length: usize) -> Result<FillPattern, hal::Error> {
    // SAFETY: the caller's contract, for each width read.
    unsafe {
        match length {
            1 => Ok(FillPattern::U8(pattern.cast::<u8>().read_unaligned())),
            2 => Ok(FillPattern::U16(pattern.cast::<u16>().read_unaligned())),
            4 => Ok(FillPattern::U32(pattern.cast::<u32>().read_unaligned())),
            other => Err(hal::Error::invalid_argument(format!("a fill pattern of {other} bytes (1, 2 or 4)"))),
        }
    }
}

unsafe extern "C" fn update_buffer(
    base: *mut sys::iree_hal_command_buffer_t,
    source: *const c_void,
    source_offset: usize,
    target: sys::iree_hal_buffer_ref_t,
    _flags: sys::iree_hal_update_flags_t,
) -> iree_status_t {
    // SAFETY: IREE replays into the recorder `record_into` made.
    let recorder = unsafe { recorder(base) };
    run("update", || {
        recorder.command(OperationKind::Update, || {
            // SAFETY: IREE passes a resolved, live buffer.
            let Some(target) = (unsafe { import(recorder, target) })? else { return Ok(Recorded::Nothing) };
            // SAFETY: IREE passes `source + source_offset .. + length` readable (its recording's copy).
            let data =
                unsafe { std::slice::from_raw_parts(source.cast::<u8>().add(source_offset), target.length() as usize) };
            let (buffer, offset) = target.buffer_ref();
            recorder.hal.update(buffer, offset, data).map(|()| Recorded::Command)
        })
    })
}

unsafe extern "C" fn copy_buffer(
    base: *mut sys::iree_hal_command_buffer_t,
    source: sys::iree_hal_buffer_ref_t,
    target: sys::iree_hal_buffer_ref_t,
    _flags: sys::iree_hal_copy_flags_t,
) -> iree_status_t {
    // SAFETY: IREE replays into the recorder `record_into` made.
    let recorder = unsafe { recorder(base) };
    run("copy", || {
        recorder.command(OperationKind::Copy, || {
            // SAFETY: IREE passes resolved, live buffers.
            let (Some(source), Some(target)) =
                (unsafe { import(recorder, source) }?, unsafe { import(recorder, target) }?)
            else {
                return Ok(Recorded::Nothing);
            };
            let length = target.length().min(source.length());
            let ((source, source_offset), (target, target_offset)) = (source.buffer_ref(), target.buffer_ref());
            recorder.hal.copy(source, source_offset, target, target_offset, length)?;
            Ok(Recorded::Command)
        })
    })
}

unsafe extern "C" fn collective(
    _base: *mut sys::iree_hal_command_buffer_t,
    _channel: *mut sys::iree_hal_channel_t,
    _op: sys::iree_hal_collective_op_t,
    _param: u32,
    _send: sys::iree_hal_buffer_ref_t,
    _recv: sys::iree_hal_buffer_ref_t,
    _count: sys::iree_device_size_t,
) -> iree_status_t {
    ffi::unimplemented("collectives through IREE are not bridged yet (the HAL has its own channels)")
}

unsafe extern "C" fn dispatch(
    base: *mut sys::iree_hal_command_buffer_t,
    executable: *mut sys::iree_hal_executable_t,
    function: sys::iree_hal_executable_function_t,
    config: sys::iree_hal_dispatch_config_t,
    constants: sys::iree_const_byte_span_t,
    bindings: sys::iree_hal_buffer_ref_list_t,
    flags: sys::iree_hal_dispatch_flags_t,
) -> iree_status_t {
    // SAFETY: IREE replays into the recorder `record_into` made.
    let recorder = unsafe { recorder(base) };
    let indirect = u64::from(sys::iree_hal_dispatch_flag_bits_t_IREE_HAL_DISPATCH_FLAG_DYNAMIC_INDIRECT_PARAMETERS)
        | u64::from(sys::iree_hal_dispatch_flag_bits_t_IREE_HAL_DISPATCH_FLAG_STATIC_INDIRECT_PARAMETERS);
    let understood = indirect
        | u64::from(sys::iree_hal_dispatch_flag_bits_t_IREE_HAL_DISPATCH_FLAG_ALLOW_INLINE_EXECUTION)
        | u64::from(sys::iree_hal_dispatch_flag_bits_t_IREE_HAL_DISPATCH_FLAG_BORROW_RESOURCE_LIFETIMES);
    if flags & !understood != 0 {
        return ffi::unimplemented(&format!(
            "dispatch flags {flags:#x} (custom dispatch arguments are not bridged yet)"
        ));
    }
    run("dispatch", || {
        recorder.command(OperationKind::Dispatch, || {
        // SAFETY: the recorder's device outlives the replay.
        let device = unsafe { &*recorder.device };
        // SAFETY: IREE passes a live executable its cache made (this driver's).
        let exports = unsafe { device.loaded().get(device.hal(), executable) }?;
        let ordinal = function.value as u32;
        let export = exports.get(ordinal as usize).ok_or_else(|| {
            hal::Error::out_of_range(format!("export {ordinal} of an executable with {} exports", exports.len()))
        })?;
        let words = constants.data_length / 4;
        if !constants.data_length.is_multiple_of(4) || words != export.constant_count as usize {
            return Err(hal::Error::invalid_argument(format!(
                "export {ordinal} takes {} constants; the dispatch passed {} bytes",
                export.constant_count, constants.data_length
            )));
        }
        let mut all = Vec::with_capacity(words + EXTRA_CONSTANTS as usize);
        for i in 0..words {
            // SAFETY: `constants` holds `words` 32-bit words.
            all.push(unsafe { constants.data.cast::<u32>().add(i).read_unaligned() });
        }
        if export.workgroup_constants {
            all.extend_from_slice(&config.workgroup_size);
            all.push(config.dynamic_workgroup_local_memory);
        } else {
            // The kernel's block size and shared memory are fixed at load (CUDA).
            let size = config.workgroup_size;
            if size != [0; 3] && size != export.workgroup_size {
                return Err(hal::Error::unimplemented(format!(
                    "export {ordinal}: a per-dispatch workgroup size {size:?} (its kernel's block is {:?}, fixed at load)",
                    export.workgroup_size
                )));
            }
            if config.dynamic_workgroup_local_memory != 0 {
                return Err(hal::Error::unimplemented(format!(
                    "export {ordinal}: {} bytes of per-dispatch dynamic shared memory (fixed at load)",
                    config.dynamic_workgroup_local_memory
                )));
            }
        }
        let (loaded, ordinal) = (&export.executable, export.entry);
        let mut hal_bindings = Vec::with_capacity(bindings.count);
        let mut scratch = Vec::new();
        for i in 0..bindings.count {
            // SAFETY: IREE passes `count` references.
            let reference = unsafe { *bindings.values.add(i) };
            // SAFETY: resolved, live buffers.
            match unsafe { import(recorder, reference) }? {
                Some(target) => hal_bindings.push(target.binding()),
                None => {
                    // An empty binding still takes its place; a one-word buffer stands in.
                    let empty = device.hal().allocate_buffer(hal::BufferParams::host_visible(), 4)?;
                    hal_bindings.push(BufferBinding::range(&empty, 0, 0).into());
                    scratch.push(empty);
                }
            }
        }
        // Only while profiling: noting takes the session's lock.
        let profile_id = if recorder.recording.borrow().is_some() {
            // SAFETY: IREE passes a live executable.
            unsafe { device.profiling().note_executable(executable) }
        } else {
            executable as u64
        };
        let info = DispatchInfo {
            executable: profile_id,
            function_ordinal: function.value as u32,
            workgroup_count: config.workgroup_count,
            // What the kernel runs with: its fixed block, or the dispatch's size (at least 1 each).
            workgroup_size: if export.workgroup_constants || export.workgroup_size == [0; 3] {
                config.workgroup_size.map(|n| n.max(1))
            } else {
                export.workgroup_size
            },
            binding_count: bindings.count as u32,
            indirect: flags & indirect != 0,
        };
        if flags & indirect == 0 {
            recorder.hal.dispatch_refs(loaded, ordinal, config.workgroup_count, &all, &hal_bindings)?;
            return Ok(Recorded::Dispatch(info));
        }
        // The workgroup count is read from the buffer when the dispatch runs (replay happens at
        // execute, so a static count, fixed by then, reads the same).
        // SAFETY: a resolved, live buffer.
        let count = unsafe { import(recorder, config.workgroup_count_ref) }?
            .ok_or_else(|| hal::Error::invalid_argument("an empty indirect workgroup-count reference"))?;
        let (count, count_offset) = count.buffer_ref();
        recorder.hal.dispatch_indirect_refs(loaded, ordinal, count, count_offset, &all, &hal_bindings)?;
        Ok(Recorded::Dispatch(info))
    })
    })
}
