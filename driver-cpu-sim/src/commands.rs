//! Runs recorded commands on the host: what a cpu-sim stream worker does for `queue_execute` and the
//! single transfer operations.
//!
//! Commands of one list run in order, so an execution barrier has nothing left to order. Every
//! buffer is reached through `BufferBackend::host_view` (cpu-sim memory of every type is host
//! memory), and the view is held until the command finished, so a dealloca running meanwhile on
//! another stream cannot free the memory under it. A transient buffer whose alloca has not run, or
//! whose dealloca ran, has none, which is a `FailedPrecondition`. Ranges are checked again
//! ([`host_range`]), because the pointer arithmetic below relies on them.
//!
//! A submission whose cancel was requested ([`Work::request_cancel`]) stops between commands and
//! between a dispatch's workgroups, with `Cancelled`: a grid of billions of workgroups does not keep
//! a torn-down device busy.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use smallvec::SmallVec;

use hal::driver::ExecutableExt;
use hal::driver::PreparedCommands;
use hal::driver::stream_model::Work;
use hal::driver::{CollectiveCall, Command};
use hal::{BufferBinding, BufferUsage, Error, Executable, NativeBinding, NativeInvocation, ProfileOptions, Result};

use crate::collective::CpuChannel;
use crate::executable::NativeExecutable;
use crate::memory::{HostRange, host_range, write_buffer};
use crate::workgroup_pool::{CallForHelp, JobFailure, WorkgroupPool};

/// Bindings kept inline (no allocation) per dispatch.
const INLINE_BINDINGS: usize = 8;

/// Grids of at most this many workgroups run on the stream thread instead of the pool: waking the
/// pool and moving the dispatch's data to its threads costs more than it saves for them, and queues
/// that dispatch side by side already fill the cores (`hal run`'s 128-workgroup dispatches run
/// faster on their stream threads than on the pool; `docs/decisions.md#cpu-sim-stream-threads`).
const INLINE_WORKGROUPS: u64 = 256;

/// A small grid whose first workgroup shows the rest would take longer than this on the stream
/// thread goes to the pool for the rest: a few heavy workgroups (IREE's CPU executables tile a
/// matmul into tens of workgroups of milliseconds each) would otherwise run one at a time. Grids
/// under it stay where `INLINE_WORKGROUPS` says they run best (the stencil of `hal run`, whose
/// 64-workgroup halves take a few hundred microseconds, is one).
const POOL_WORTH: std::time::Duration = std::time::Duration::from_millis(2);

/// How running commands learn that their submission was cancelled: the submission's [`Work`], or
/// nothing for commands run outside one.
#[derive(Clone, Default)]
pub struct CancelSignal(Option<Arc<Work>>);

impl CancelSignal {
    /// Never cancelled.
    #[cfg(test)]
    pub fn never() -> Self {
        CancelSignal(None)
    }

    /// Cancelled when `work`'s cancel is requested.
    pub fn of(work: &Arc<Work>) -> Self {
        CancelSignal(Some(work.clone()))
    }

    /// Whether a cancel was requested (one atomic load).
    pub fn requested(&self) -> bool {
        self.0.as_ref().is_some_and(|work| work.cancel_requested())
    }
}

/// Runs `commands` in order, stopping at the first error, which is returned, or with `Cancelled`
/// before the next command once `cancel` is requested.
#[cfg(test)]
pub fn execute_commands(commands: &[Command], pool: &WorkgroupPool, cancel: &CancelSignal) -> Result<()> {
    execute_timed(commands, &[], pool, cancel, None)
}

/// Host-clock times of the dispatches a profile asked for, gathered while a command list runs and
/// handed to the profile only if the whole list succeeded.
pub struct DispatchTimes<'a> {
    options: &'a ProfileOptions,
    /// (command index, the grid that ran, start, end).
    pub times: Vec<(usize, Option<[u32; 3]>, Instant, Instant)>,
}

impl<'a> DispatchTimes<'a> {
    /// Times the dispatches `options` select.
    pub fn new(options: &'a ProfileOptions) -> Self {
        DispatchTimes { options, times: Vec::new() }
    }

    /// Whether any dispatch is to be timed.
    pub fn selects_any(&self) -> bool {
        self.options.records_dispatches()
    }
}

/// [`execute_commands`], timing the dispatches `times` selects. `collectives` are the execute's
/// calls, one per collective command in order (each runs where its command is, on this thread).
pub fn execute_timed(
    commands: &[Command],
    collectives: &[CollectiveCall],
    pool: &WorkgroupPool,
    cancel: &CancelSignal,
    mut times: Option<&mut DispatchTimes<'_>>,
) -> Result<()> {
    let mut calls = collectives.iter();
    for (index, command) in commands.iter().enumerate() {
        if cancel.requested() {
            return Err(Error::cancelled(format!(
                "cancelled before command {index} of {} ({})",
                commands.len(),
                command_name(command)
            )));
        }
        if let Command::Collective { .. } = command {
            let call = calls.next().ok_or_else(|| {
                Error::internal(format!("cpu-sim: command {index} is a collective the execute has no call for"))
            })?;
            CpuChannel::of(call)?.run(call, &|| cancel.requested())?;
            continue;
        }
        let timed = times.as_deref_mut().filter(|t| is_dispatch(command) && t.options.records_command(index));
        match timed {
            Some(times) => {
                let start = Instant::now();
                let grid = run_command(command, pool, cancel)?;
                times.times.push((index, grid, start, Instant::now()));
            }
            None => {
                run_command(command, pool, cancel)?;
            }
        }
    }
    Ok(())
}

fn is_dispatch(command: &Command) -> bool {
    matches!(command, Command::Dispatch { .. } | Command::DispatchIndirect { .. })
}

fn command_name(command: &Command) -> &'static str {
    match command {
        Command::Fill { .. } => "fill",
        Command::Update { .. } => "update",
        Command::Copy { .. } => "copy",
        Command::Dispatch { .. } => "dispatch",
        Command::DispatchIndirect { .. } => "indirect dispatch",
        Command::Barrier => "barrier",
        Command::Collective { .. } => "collective",
    }
}

/// Runs one command. Dispatch workgroups run in parallel on `pool`; a kernel's `Err` or panic is an
/// `Aborted` error naming the entry point and workgroup; a dispatch whose `cancel` is requested
/// stops between workgroups with `Cancelled`.
pub fn execute_command(command: &Command, pool: &WorkgroupPool, cancel: &CancelSignal) -> Result<()> {
    run_command(command, pool, cancel).map(drop)
}

/// [`execute_command`], returning the grid a dispatch ran (`Some([0, 0, 0])` for an indirect one
/// whose count was zero; `None` for other commands).
fn run_command(command: &Command, pool: &WorkgroupPool, cancel: &CancelSignal) -> Result<Option<[u32; 3]>> {
    let none = |result: Result<()>| result.map(|()| None);
    match command {
        Command::Fill { target, offset, length, pattern, pattern_len } => {
            command.validate_transfer()?;
            let dst = host_range(target, *offset, *length)?;
            // SAFETY: `dst` addresses `length` bytes of `target` (checked by `host_range`) that it keeps
            // allocated; any racing access (a kernel, a mapping) is atomic.
            unsafe { fill(dst.ptr, *length as usize, *pattern, usize::from(*pattern_len)) };
            Ok(None)
        }
        Command::Update { target, offset, data } => {
            command.validate_transfer()?;
            none(write_buffer(target, *offset, data))
        }
        Command::Copy { source, source_offset, target, target_offset, length } => {
            command.validate_transfer()?;
            let src = host_range(source, *source_offset, *length)?;
            let dst = host_range(target, *target_offset, *length)?;
            // SAFETY: both ranges are `length` bytes inside their buffers (checked) and kept allocated;
            // every racing access (kernels, mappings, other transfers) is atomic, as this copy is.
            unsafe { hal::driver::shared_memory::copy(src.ptr, dst.ptr, *length as usize) };
            Ok(None)
        }
        Command::Dispatch { executable, entry_point, workgroups, constants, bindings } => {
            dispatch(executable, *entry_point, *workgroups, constants, bindings, pool, cancel)?;
            Ok(Some(*workgroups))
        }
        Command::DispatchIndirect { executable, entry_point, count, count_offset, constants, bindings } => {
            // Read now, in stream order: what earlier commands and queue work wrote.
            let mut bytes = [0u8; 12];
            let src = host_range(count, *count_offset, hal::driver::INDIRECT_COUNT_BYTES)?;
            // SAFETY: `src` addresses the 12 count bytes of `count` (checked) and keeps them
            // allocated; racing accesses are atomic, as this copy is.
            unsafe { hal::driver::shared_memory::load(src.ptr, &mut bytes) };
            let who = IndirectDispatch { executable, entry_point: *entry_point };
            let limits = crate::executable::MAX_WORKGROUP_COUNT;
            match hal::driver::indirect_workgroups(bytes, limits, &who)? {
                Some(workgroups) => {
                    dispatch(executable, *entry_point, workgroups, constants, bindings, pool, cancel)?;
                    Ok(Some(workgroups))
                }
                None => Ok(Some([0, 0, 0])),
            }
        }
        Command::Barrier => Ok(None),
        Command::Collective { .. } => {
            Err(Error::internal("cpu-sim: a collective command outside an execute's command list"))
        }
    }
}

/// Names an indirect dispatch in an error, formatted only then (a dispatch that runs allocates
/// nothing for it).
struct IndirectDispatch<'a, E: std::fmt::Display> {
    executable: &'a E,
    entry_point: u32,
}

impl<E: std::fmt::Display> std::fmt::Display for IndirectDispatch<'_, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "indirect dispatch of entry point {} of {}", self.entry_point, self.executable)
    }
}

/// Fills `length` bytes at `dst` with the low `pattern_len` bytes of `pattern`, little-endian,
/// through [`hal::driver::shared_memory`] (kernels or a mapping may race on the range).
///
/// # Safety
/// `dst` is valid for reads and writes of `length` bytes and every racing access to them is atomic;
/// `pattern_len` is 1, 2 or 4 and divides `length`.
unsafe fn fill(dst: *mut u8, length: usize, pattern: u32, pattern_len: usize) {
    let bytes = pattern.to_le_bytes();
    // A multiple of every pattern length, so each chunk starts at the pattern's first byte.
    let mut chunk = [0u8; 4096];
    for (at, byte) in chunk.iter_mut().enumerate() {
        *byte = bytes[at % pattern_len];
    }
    let mut filled = 0;
    while filled < length {
        let n = (length - filled).min(chunk.len());
        // SAFETY: `filled + n <= length` bytes of the range, per the caller.
        unsafe { hal::driver::shared_memory::store(dst.add(filled), &chunk[..n]) };
        filled += n;
    }
}

/// The cpu-sim executable behind `executable`, or `InvalidArgument`.
fn native_executable(executable: &Executable) -> Result<&NativeExecutable> {
    executable
        .backend()
        .as_any()
        .downcast_ref::<NativeExecutable>()
        .ok_or_else(|| Error::invalid_argument(format!("{}: was not loaded by the cpu-sim driver", executable)))
}

/// Bytes a fill, update or copy moves per nanosecond, as far as [`estimated_ns`] assumes (a
/// conservative host memory bandwidth).
const TRANSFER_BYTES_PER_NS: u64 = 4;

/// What `commands` would take on one thread, estimated from each entry point's last timed
/// workgroup and the bytes each transfer moves; `None` where that is not known: an entry point
/// never timed yet, an indirect dispatch (its count is read when it runs), a collective.
pub(crate) fn estimated_ns(commands: &[Command]) -> Option<u64> {
    commands.iter().try_fold(0u64, |sum, command| {
        let ns = match command {
            Command::Fill { length, .. } | Command::Copy { length, .. } => length / TRANSFER_BYTES_PER_NS,
            Command::Update { data, .. } => data.len() as u64 / TRANSFER_BYTES_PER_NS,
            Command::Dispatch { executable, entry_point, workgroups, .. } => {
                let (_, _, workgroup_ns) = native_executable(executable).ok()?.entry(*entry_point)?;
                let known = workgroup_ns.load(Ordering::Relaxed);
                if known == 0 {
                    return None;
                }
                workgroups.iter().fold(known, |ns, &n| ns.saturating_mul(u64::from(n)))
            }
            Command::Barrier => 0,
            _ => return None,
        };
        Some(sum.saturating_add(ns))
    })
}

/// Workgroup `index` (x fastest) of a grid of `count` workgroups.
fn workgroup_id(index: u64, count: [u32; 3]) -> [u32; 3] {
    let [cx, cy, _] = count.map(u64::from);
    // Each coordinate is below its u32 count, so the casts are exact.
    [(index % cx) as u32, ((index / cx) % cy) as u32, (index / (cx * cy)) as u32]
}

/// Why a workgroup task stopped the dispatch.
enum WorkgroupStop {
    /// The kernel returned this error.
    Kernel(String),
    /// The submission's cancel was requested before this workgroup started.
    Cancelled,
}

thread_local! {
    /// This thread's workgroup memory, reused by the workgroups it runs one after another.
    static WORKGROUP_MEMORY: std::cell::Cell<Vec<AtomicU32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Runs `f` with `words` zeroed words of workgroup memory private to this workgroup (taken out of
/// the thread's cell while `f` runs, so a kernel that somehow runs another on this thread gets its own).
fn with_workgroup_memory<R>(words: usize, f: impl FnOnce(&[AtomicU32]) -> R) -> R {
    let mut memory = WORKGROUP_MEMORY.with(|cell| cell.take());
    memory.iter().take(words).for_each(|word| word.store(0, Ordering::Relaxed));
    if memory.len() < words {
        memory.resize_with(words, || AtomicU32::new(0));
    }
    let result = f(&memory[..words]);
    WORKGROUP_MEMORY.with(|cell| cell.set(memory));
    result
}

/// `Err` naming the binding when one of `bindings` recorded a load or store past its end: a
/// kernel that ignored the `false` or `None` it got still fails its dispatch.
fn no_out_of_range_access(bindings: &[NativeBinding]) -> std::result::Result<(), String> {
    match bindings.iter().enumerate().find_map(|(at, b)| Some((at, b.first_out_of_range()?))) {
        Some((at, access)) => Err(format!("binding {at}: {access}")),
        None => Ok(()),
    }
}

fn dispatch(
    executable: &Executable,
    entry_point: u32,
    workgroups: [u32; 3],
    constants: &[u32],
    bindings: &[BufferBinding],
    pool: &WorkgroupPool,
    cancel: &CancelSignal,
) -> Result<()> {
    let native = native_executable(executable)?;
    let (info, kernel, workgroup_ns) = native.entry(entry_point).ok_or_else(|| {
        Error::out_of_range(format!(
            "{}: entry point {entry_point} does not exist (it has {})",
            executable,
            executable.entry_points().len()
        ))
    })?;
    let who = || format!("dispatch of '{}'", info.name);
    if bindings.len() != info.binding_count || constants.len() != info.constant_count {
        return Err(Error::invalid_argument(format!(
            "{}: {} bindings and {} constants given, entry point declares {} and {}",
            who(),
            bindings.len(),
            constants.len(),
            info.binding_count,
            info.constant_count
        )));
    }
    let total = workgroups.iter().try_fold(1u64, |acc, &n| acc.checked_mul(u64::from(n)));
    let total = match total {
        Some(total) if total > 0 => total,
        _ => {
            return Err(Error::invalid_argument(format!(
                "{}: workgroup count {workgroups:?} is empty or too large",
                who()
            )));
        }
    };
    // Held until the workgroups finished, so that a dealloca on another stream cannot free a binding.
    let mut ranges: SmallVec<[HostRange<'_>; INLINE_BINDINGS]> = SmallVec::new();
    let mut native_bindings: SmallVec<[NativeBinding; INLINE_BINDINGS]> = SmallVec::new();
    for (index, binding) in bindings.iter().enumerate() {
        let range = binding
            .buffer
            .check_usage(BufferUsage::DISPATCH_STORAGE)
            .and_then(|()| host_range(&binding.buffer, binding.offset, binding.length))
            .map_err(|e| e.context(format!("{} binding {index}", who())))?;
        // SAFETY: `range` addresses `length` bytes of the buffer (checked) and stays in `ranges`
        // until both `run` calls below returned, which is after every workgroup finished; kernels
        // only get `&NativeBinding`s, which they cannot keep past their call.
        native_bindings.push(unsafe { NativeBinding::new(range.ptr, binding.length as usize) });
        ranges.push(range);
    }
    let workgroup_size = info.workgroup_size;
    let memory_words = (info.dynamic_workgroup_memory as usize).div_ceil(4);
    let run_one = move |index: u64,
                        constants: &[u32],
                        bindings: &[NativeBinding],
                        kernel: &hal::NativeKernel,
                        cancel: &CancelSignal| {
        // One relaxed load per workgroup: a cancelled grid stops within one workgroup per runner.
        if cancel.requested() {
            return Err(WorkgroupStop::Cancelled);
        }
        let invocation =
            NativeInvocation::new(workgroup_id(index, workgroups), workgroups, workgroup_size, constants, bindings);
        let outcome = if memory_words == 0 {
            kernel(&invocation)
        } else {
            with_workgroup_memory(memory_words, |memory| kernel(&invocation.with_workgroup_memory(memory)))
        };
        outcome.and_then(|()| no_out_of_range_access(bindings)).map_err(WorkgroupStop::Kernel)
    };
    // What one workgroup of this entry point took when one was last timed: a grid it shows heavy
    // goes to the pool at once (timing its first workgroup alone would leave every other runner
    // idle meanwhile: IREE's executables dispatch the same entry points every call), in chunks
    // sized by it.
    let known_ns = workgroup_ns.load(Ordering::Relaxed);
    let heavy_as_known = known_ns > 0 && known_ns.saturating_mul(total) > POOL_WORTH.as_nanos() as u64;
    let small = total <= INLINE_WORKGROUPS;
    let result = if (small && !heavy_as_known) || known_ns == 0 {
        // The first workgroup runs timed on the stream's own thread (no hand-off, no allocation).
        // Small grids stay there unless it shows the rest worth the pool (`POOL_WORTH`); an entry
        // point not timed before learns its cost here, so that a heavy grid of any size calls
        // every runner at once instead of working through its first chunk alone.
        let started = Instant::now();
        let first = WorkgroupPool::run_inline(1, |index| run_one(index, constants, &native_bindings, kernel, cancel));
        let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1);
        workgroup_ns.store(took, Ordering::Relaxed);
        let rest = total - 1;
        let heavy = took.saturating_mul(rest) > POOL_WORTH.as_nanos() as u64;
        match first {
            Err(failure) => Err(failure),
            Ok(()) if rest == 0 => Ok(()),
            Ok(()) if small && !heavy => {
                WorkgroupPool::run_inline(rest, |index| run_one(index + 1, constants, &native_bindings, kernel, cancel))
                    .map_err(|f| f.offset(1))
            }
            Ok(()) => {
                let kernel = kernel.clone();
                let constants: SmallVec<[u32; 16]> = constants.iter().copied().collect();
                let cancel = cancel.clone();
                let call = if heavy { CallForHelp::AtOnce } else { CallForHelp::AfterFirstChunk };
                let task = move |index| run_one(index + 1, &constants, &native_bindings, &kernel, &cancel);
                pool.run_shared_with(rest, task, call, took).map_err(|f| f.offset(1))
            }
        }
    } else {
        let kernel = kernel.clone();
        let constants: SmallVec<[u32; 16]> = constants.iter().copied().collect();
        let cancel = cancel.clone();
        let started = Instant::now();
        let call = if heavy_as_known { CallForHelp::AtOnce } else { CallForHelp::AfterFirstChunk };
        let task = move |index| run_one(index, &constants, &native_bindings, &kernel, &cancel);
        let ran = pool.run_shared_with(total, task, call, known_ns);
        // Kept current: the grid's time spread over the runners that shared it.
        let runners = (pool.thread_count() as u64 + 1).min(total);
        let per_workgroup = started.elapsed().as_nanos().saturating_mul(u128::from(runners)) / u128::from(total);
        workgroup_ns.store(u64::try_from(per_workgroup).unwrap_or(u64::MAX).max(1), Ordering::Relaxed);
        ran
    };
    // Every workgroup has finished: the memory may go now.
    drop(ranges);
    result.map_err(|failure| {
        let [x, y, z] = workgroup_id(failure.index(), workgroups);
        match failure {
            JobFailure::Failed { error: WorkgroupStop::Kernel(error), .. } => {
                Error::aborted(format!("{} workgroup [{x},{y},{z}]: {error}", who()))
            }
            JobFailure::Failed { error: WorkgroupStop::Cancelled, .. } => Error::cancelled(format!(
                "{} over {workgroups:?} workgroups: cancelled, stopped before workgroup [{x},{y},{z}]",
                who()
            )),
            JobFailure::Panicked { message, .. } => {
                Error::aborted(format!("{} workgroup [{x},{y},{z}]: kernel panicked: {message}", who()))
            }
        }
    })
}

/// A recorded command buffer's check at `end()`: every dispatch uses a cpu-sim executable and an
/// existing entry point, so executions fail only for run-time reasons. cpu-sim replays the command
/// buffer's own command list; nothing else needs preparing.
#[derive(Debug)]
pub struct CpuPreparedCommands;

impl CpuPreparedCommands {
    /// Checks `commands` (what `DeviceBackend::prepare_commands` receives).
    pub fn prepare(commands: &[Command]) -> Result<Self> {
        for command in commands {
            if let Command::Dispatch { executable, entry_point, .. } = command {
                native_executable(executable)?;
                executable.entry_point_info(*entry_point)?;
            }
        }
        Ok(CpuPreparedCommands)
    }
}

impl PreparedCommands for CpuPreparedCommands {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executable::tests::example_library_path;
    use crate::memory::{HostMemory, MemoryBudget, read_buffer};
    use hal::driver::{BufferBackend, BufferExt, ExecutableBackend};
    use hal::{
        Buffer, BufferParams, DeviceId, EntryPointInfo, ExecutableSource, NativeEntryPoint, NativeKernel, StatusCode,
    };
    use std::sync::atomic::{AtomicU64, Ordering};

    struct Fixture {
        device: DeviceId,
        budget: Arc<MemoryBudget>,
        pool: WorkgroupPool,
    }

    impl Fixture {
        fn new() -> Self {
            Fixture {
                device: DeviceId::next(),
                budget: Arc::new(MemoryBudget::unlimited()),
                pool: WorkgroupPool::with_threads(3).unwrap(),
            }
        }

        fn buffer_with(&self, size: u64, params: BufferParams) -> Buffer {
            let memory = HostMemory::new(size, &self.budget).unwrap();
            // SAFETY: cpu-sim host memory, and only this test's cpu-sim code touches it.
            unsafe { Buffer::from_backend(self.device, params, Arc::new(memory)) }
        }

        fn buffer(&self, size: u64) -> Buffer {
            self.buffer_with(size, BufferParams::host_visible())
        }

        fn transient(&self, size: u64) -> Buffer {
            let memory = HostMemory::transient(size, &self.budget);
            // SAFETY: cpu-sim host memory, and only this test's cpu-sim code touches it.
            unsafe { Buffer::from_backend(self.device, BufferParams::host_visible(), Arc::new(memory)) }
        }

        fn executable(&self, source: ExecutableSource) -> Executable {
            // SAFETY: a cpu-sim native executable, run only by this test's cpu-sim code.
            unsafe { Executable::from_backend(self.device, Arc::new(NativeExecutable::load(&source).unwrap())) }
        }

        fn native(&self, name: &str, workgroup_x: u32, bindings: usize, kernel: NativeKernel) -> Executable {
            let info = EntryPointInfo::new(name, workgroup_x, bindings, 0);
            self.executable(ExecutableSource::Native(vec![NativeEntryPoint::new(info, kernel)]))
        }

        fn run(&self, command: Command) -> Result<()> {
            execute_command(&command, &self.pool, &CancelSignal::never())
        }
    }

    fn dispatch(
        executable: &Executable,
        workgroups: [u32; 3],
        constants: &[u32],
        bindings: &[BufferBinding],
    ) -> Command {
        dispatch_of(executable, 0, workgroups, constants, bindings)
    }

    fn dispatch_of(
        executable: &Executable,
        entry_point: u32,
        workgroups: [u32; 3],
        constants: &[u32],
        bindings: &[BufferBinding],
    ) -> Command {
        Command::Dispatch {
            executable: executable.clone(),
            entry_point,
            workgroups,
            constants: constants.iter().copied().collect(),
            bindings: bindings.iter().cloned().collect(),
        }
    }

    fn fill(target: &Buffer, offset: u64, length: u64, pattern: u32, pattern_len: u8) -> Command {
        Command::Fill { target: target.clone(), offset, length, pattern, pattern_len }
    }

    fn u32s(bytes: &[u8]) -> Vec<u32> {
        bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }

    fn f32s(bytes: &[u8]) -> Vec<f32> {
        u32s(bytes).into_iter().map(f32::from_bits).collect()
    }

    fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
        values.into_iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn fill_patterns_at_unaligned_legal_offsets() {
        let f = Fixture::new();
        let b = f.buffer(512);
        f.run(fill(&b, 3, 5, 0xAB, 1)).unwrap();
        f.run(fill(&b, 10, 6, 0xBEEF, 2)).unwrap();
        // 4-byte pattern at an offset that is 4- but not 8-aligned, longer than the 64-byte seed.
        f.run(fill(&b, 20, 300, 0x0403_0201, 4)).unwrap();
        let bytes = b.read_to_vec().unwrap();
        assert_eq!(&bytes[..3], &[0, 0, 0]);
        assert_eq!(&bytes[3..8], &[0xAB; 5]);
        assert_eq!(&bytes[8..10], &[0, 0]);
        assert_eq!(&bytes[10..16], &[0xEF, 0xBE, 0xEF, 0xBE, 0xEF, 0xBE]);
        assert_eq!(&bytes[16..20], &[0; 4]);
        assert!(bytes[20..320].chunks(4).all(|c| c == [1, 2, 3, 4]));
        assert!(bytes[320..].iter().all(|&b| b == 0));
        // Misaligned fills are refused, not run.
        assert_eq!(f.run(fill(&b, 1, 4, 7, 2)).unwrap_err().code(), StatusCode::InvalidArgument);
        assert_eq!(f.run(fill(&b, 510, 4, 7, 1)).unwrap_err().code(), StatusCode::OutOfRange);
    }

    #[test]
    fn update_copy_and_device_local_memory() {
        let f = Fixture::new();
        let device_local = f.buffer_with(64, BufferParams::device_local());
        let host = f.buffer(64);
        f.run(Command::Update { target: device_local.clone(), offset: 5, data: Arc::from(&[9u8, 8, 7][..]) }).unwrap();
        f.run(Command::Copy {
            source: device_local.clone(),
            source_offset: 4,
            target: host.clone(),
            target_offset: 33,
            length: 5,
        })
        .unwrap();
        assert_eq!(&host.read_to_vec().unwrap()[32..40], &[0, 0, 9, 8, 7, 0, 0, 0]);
        // Same buffer, disjoint ranges.
        f.run(Command::Copy {
            source: host.clone(),
            source_offset: 32,
            target: host.clone(),
            target_offset: 0,
            length: 8,
        })
        .unwrap();
        assert_eq!(&host.read_to_vec().unwrap()[..8], &[0, 0, 9, 8, 7, 0, 0, 0]);
        // Device-local memory cannot be mapped but the queue helpers reach it.
        assert_eq!(device_local.read_to_vec().unwrap_err().code(), StatusCode::PermissionDenied);
        write_buffer(&device_local, 0, &[1, 2]).unwrap();
        assert_eq!(read_buffer(&device_local, 0, 8).unwrap(), [1, 2, 0, 0, 0, 9, 8, 7]);
        assert_eq!(read_buffer(&device_local, 60, 8).unwrap_err().code(), StatusCode::OutOfRange);
        f.run(Command::Barrier).unwrap();
    }

    #[test]
    fn uncommitted_transient_is_failed_precondition() {
        let f = Fixture::new();
        let transient = f.transient(64);
        let err = f.run(fill(&transient, 0, 64, 1, 4)).unwrap_err();
        assert_eq!(err.code(), StatusCode::FailedPrecondition);
        assert!(err.message().contains(&format!("{}", transient)), "{err}");

        let kernel: NativeKernel = Arc::new(|_: &NativeInvocation<'_>| Ok(()));
        let exe = f.native("noop", 1, 1, kernel);
        let err = f.run(dispatch(&exe, [1, 1, 1], &[], &[BufferBinding::whole(&transient)])).unwrap_err();
        assert_eq!(err.code(), StatusCode::FailedPrecondition);
        assert!(err.message().starts_with("dispatch of 'noop' binding 0: buffer"), "{err}");

        crate::memory::commit_buffer(&transient).unwrap();
        f.run(fill(&transient, 0, 64, 1, 4)).unwrap();
        f.run(dispatch(&exe, [1, 1, 1], &[], &[BufferBinding::whole(&transient)])).unwrap();
    }

    /// A kernel that stores `x | y << 10 | z << 20` at its linear workgroup index.
    fn id_writer() -> NativeKernel {
        Arc::new(|inv: &NativeInvocation<'_>| {
            let [x, y, z] = inv.workgroup_id;
            let [cx, cy, _] = inv.workgroup_count;
            let linear = (x + cx * (y + cy * z)) as usize;
            if inv.bindings[0].store_u32(linear, x | y << 10 | z << 20) { Ok(()) } else { Err("out of range".into()) }
        })
    }

    /// Workgroups of one dispatch run on several threads, and two of them may
    /// store to the same element. Every access is a relaxed atomic now, so the element ends as one of
    /// the values written (aligned `u32`: never a torn mix), and a misaligned binding works too.
    #[test]
    fn racing_workgroups_on_one_element_leave_one_written_value() {
        let f = Fixture::new();
        let value = |w: u32| (w % 250 + 1) * 0x0101_0101;
        let kernel: NativeKernel = Arc::new(move |inv: &NativeInvocation<'_>| {
            let v = value(inv.workgroup_id[0]);
            let b = &inv.bindings[0];
            for _ in 0..64 {
                let seen = b.load_u32(0).ok_or("load out of range")?;
                if seen != 0 && (seen % 0x0101_0101 != 0) {
                    return Err(format!("torn value {seen:#x}"));
                }
                if !(b.store_u32(0, v) && b.store_u32s(1, &[v; 3])) {
                    return Err("store out of range".into());
                }
            }
            Ok(())
        });
        let exe = f.native("race", 1, 1, kernel);
        let out = f.buffer(4 * 4 + 1);
        f.run(dispatch(&exe, [4096, 1, 1], &[], &[BufferBinding::range(&out, 0, 16)])).unwrap();
        let words = u32s(&out.read_to_vec().unwrap());
        for word in &words {
            assert!(*word != 0 && word % 0x0101_0101 == 0, "{word:#x} is none of the values written");
        }
        // Misaligned: byte-wise, so only checked for being a completed run (no torn-value promise).
        let exe = f.native(
            "race",
            1,
            1,
            Arc::new(|inv: &NativeInvocation<'_>| {
                let v = inv.workgroup_id[0];
                if inv.bindings[0].store_u32s(0, &[v; 4]) { Ok(()) } else { Err("out of range".into()) }
            }),
        );
        f.run(dispatch(&exe, [1024, 1, 1], &[], &[BufferBinding::range(&out, 1, 16)])).unwrap();
    }

    /// A host mapping read racing a dispatch that writes the same bytes (a bug
    /// in the program, but not undefined behaviour now: both sides copy with relaxed atomics). Every
    /// aligned word read is one a kernel wrote or the fill's.
    #[test]
    fn mapping_read_racing_a_dispatch_sees_whole_words() {
        let f = Fixture::new();
        let out = f.buffer(4096);
        let kernel: NativeKernel = Arc::new(|inv: &NativeInvocation<'_>| {
            let v = (inv.workgroup_id[0] % 200 + 1) * 0x0101_0101;
            if inv.bindings[0].store_u32s(0, &[v; 1024]) { Ok(()) } else { Err("out of range".into()) }
        });
        let exe = f.native("writer", 1, 1, kernel);
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let mut bytes = vec![0u8; 4096];
                for _ in 0..200 {
                    out.read(0, &mut bytes).unwrap();
                    for word in u32s(&bytes) {
                        assert!(word % 0x0101_0101 == 0, "torn word {word:#x}");
                    }
                }
            });
            f.run(dispatch(&exe, [512, 1, 1], &[], &[BufferBinding::range(&out, 0, 4096)])).unwrap();
            reader.join().unwrap();
        });
    }

    #[test]
    fn dispatch_runs_every_workgroup_of_a_3d_grid() {
        let f = Fixture::new();
        let grid = [7u32, 5, 3];
        let total = 7 * 5 * 3;
        let out = f.buffer(4 * total + 8);
        let exe = f.native("ids", 1, 1, id_writer());
        // Bind from byte 4 (not 8-aligned) to check the binding offset reaches the kernel.
        f.run(dispatch(&exe, grid, &[], &[BufferBinding::range(&out, 4, 4 * total)])).unwrap();
        let words = u32s(&out.read_to_vec().unwrap());
        assert_eq!(words[0], 0);
        let mut expected = Vec::new();
        for z in 0..3 {
            for y in 0..5 {
                for x in 0..7 {
                    expected.push(x | y << 10 | z << 20);
                }
            }
        }
        assert_eq!(&words[1..=total as usize], &expected[..]);
        assert_eq!(words[total as usize + 1], 0);
    }

    #[test]
    fn kernel_error_becomes_aborted_and_stops_the_list() {
        let f = Fixture::new();
        let kernel: NativeKernel =
            Arc::new(
                |inv: &NativeInvocation<'_>| {
                    if inv.workgroup_id == [1, 2, 0] { Err("value out of bounds".into()) } else { Ok(()) }
                },
            );
        let exe = f.native("checker", 1, 0, kernel);
        let marker = f.buffer(4);
        let commands = [fill(&marker, 0, 4, 1, 4), dispatch(&exe, [3, 3, 1], &[], &[]), fill(&marker, 0, 4, 2, 4)];
        let err = execute_commands(&commands, &f.pool, &CancelSignal::never()).unwrap_err();
        assert_eq!(err.code(), StatusCode::Aborted);
        assert_eq!(err.message(), "dispatch of 'checker' workgroup [1,2,0]: value out of bounds");
        assert_eq!(u32s(&marker.read_to_vec().unwrap()), [1], "commands after the failure did not run");
    }

    #[test]
    fn kernel_panic_becomes_aborted_and_the_pool_goes_on() {
        let f = Fixture::new();
        let kernel: NativeKernel = Arc::new(|inv: &NativeInvocation<'_>| {
            if inv.workgroup_id[0] == 40 {
                panic!("index {} past the end", inv.workgroup_id[0]);
            }
            Ok(())
        });
        let exe = f.native("panicky", 1, 0, kernel);
        let err = f.run(dispatch(&exe, [64, 1, 1], &[], &[])).unwrap_err();
        assert_eq!(err.code(), StatusCode::Aborted);
        let message = err.message();
        let expected = "dispatch of 'panicky' workgroup [40,0,0]: kernel panicked: index 40 past the end (at ";
        assert!(message.starts_with(expected), "{message}");
        assert!(message.contains("commands.rs:"), "says where the kernel panicked: {message}");
        let out = f.buffer(4 * 8);
        let ids = f.native("ids", 1, 1, id_writer());
        f.run(dispatch(&ids, [8, 1, 1], &[], &[BufferBinding::whole(&out)])).unwrap();
        assert_eq!(u32s(&out.read_to_vec().unwrap()), (0..8).collect::<Vec<u32>>());
    }

    #[test]
    fn kernel_storing_past_a_too_small_buffer_fails_its_dispatch() {
        let f = Fixture::new();
        // Writes 16 elements into binding 1 and ignores the `false` stores past its end return.
        let kernel: NativeKernel = Arc::new(|inv: &NativeInvocation<'_>| {
            for i in 0..16 {
                let _ = inv.bindings[1].store_u32(i, 7);
            }
            Ok(())
        });
        let exe = f.native("overrun", 1, 2, kernel);
        let (roomy, small) = (f.buffer(64), f.buffer(16));
        let bindings = [BufferBinding::whole(&roomy), BufferBinding::whole(&small)];
        let err = f.run(dispatch(&exe, [1, 1, 1], &[], &bindings)).unwrap_err();
        assert_eq!(err.code(), StatusCode::Aborted);
        assert_eq!(
            err.message(),
            "dispatch of 'overrun' workgroup [0,0,0]: binding 1: out-of-range store of element 4 in a binding of \
             16 bytes (4 u32 elements)"
        );
        // A load past the end fails the dispatch too.
        let loader: NativeKernel = Arc::new(|inv: &NativeInvocation<'_>| {
            let mut row = [0f32; 8];
            let _ = inv.bindings[0].load_f32s(2, &mut row);
            Ok(())
        });
        let exe = f.native("short_read", 1, 1, loader);
        let err = f.run(dispatch(&exe, [1, 1, 1], &[], &[BufferBinding::whole(&small)])).unwrap_err();
        assert!(
            err.message().ends_with(
                "binding 0: out-of-range load of 8 elements from element 2 in a binding of 16 bytes (4 u32 elements)"
            ),
            "{err}"
        );
    }

    #[test]
    fn pool_is_reused_across_many_dispatches() {
        let f = Fixture::new();
        let calls = Arc::new(AtomicU64::new(0));
        let counter = calls.clone();
        let kernel: NativeKernel = Arc::new(move |_: &NativeInvocation<'_>| {
            counter.fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
        let exe = f.native("count", 1, 0, kernel);
        let command = dispatch(&exe, [4, 3, 2], &[], &[]);
        for _ in 0..500 {
            f.run(command.clone()).unwrap();
        }
        assert_eq!(calls.load(Ordering::Relaxed), 500 * 24);
        assert_eq!(f.pool.thread_count(), 3);
    }

    #[test]
    fn dispatch_of_a_foreign_executable_is_refused() {
        struct Foreign(Vec<EntryPointInfo>);
        impl ExecutableBackend for Foreign {
            fn entry_points(&self) -> &[EntryPointInfo] {
                &self.0
            }
            fn as_any(&self) -> &dyn Any {
                self
            }
        }
        let f = Fixture::new();
        // SAFETY: the foreign executable is only handed to cpu-sim code that must refuse it.
        let exe =
            unsafe { Executable::from_backend(f.device, Arc::new(Foreign(vec![EntryPointInfo::new("k", 1, 0, 0)]))) };
        let command = dispatch(&exe, [1, 1, 1], &[], &[]);
        assert_eq!(f.run(command.clone()).unwrap_err().code(), StatusCode::InvalidArgument);
        let err = CpuPreparedCommands::prepare(&Arc::from([command])).unwrap_err();
        assert!(err.message().contains("not loaded by the cpu-sim driver"), "{err}");
    }

    #[test]
    fn example_library_kernels_run_on_a_grid() {
        let f = Fixture::new();
        let exe = f.executable(ExecutableSource::SharedLibrary(example_library_path()));
        let ordinal = |name: &str| exe.entry_point(name).unwrap();

        // fill_u32 over a 2x2x2 grid of 64-thread workgroups (512 slots) on 500 elements bound at
        // byte offset 8: the grid's tail is guarded, and bytes outside the binding stay zero.
        let n = 500u64;
        let out = f.buffer(4 * n + 16);
        let binding = BufferBinding::range(&out, 8, 4 * n);
        f.run(dispatch_of(&exe, ordinal("fill_u32"), [2, 2, 2], &[0xC0FFEE], &[binding])).unwrap();
        let words = u32s(&out.read_to_vec().unwrap());
        assert_eq!(&words[..2], &[0, 0]);
        assert!(words[2..2 + n as usize].iter().all(|&w| w == 0xC0FFEE));
        assert_eq!(&words[2 + n as usize..], &[0, 0]);

        // add_f32 then scale_offset_f32 on 1000 elements: 16 workgroups in x.
        let n = 1000usize;
        let (a, b, c, d) =
            (f.buffer(4 * n as u64), f.buffer(4 * n as u64), f.buffer(4 * n as u64), f.buffer(4 * n as u64));
        a.write(0, &f32_bytes((0..n).map(|i| i as f32))).unwrap();
        b.write(0, &f32_bytes((0..n).map(|i| 0.5 * i as f32))).unwrap();
        let bind = |buffers: &[&Buffer]| buffers.iter().map(|b| BufferBinding::whole(b)).collect::<Vec<_>>();
        let add = dispatch_of(&exe, ordinal("add_f32"), [16, 1, 1], &[], &bind(&[&a, &b, &c]));
        let constants = hal::constants![2.0f32, -1.0f32];
        let scale = dispatch_of(&exe, ordinal("scale_offset_f32"), [4, 2, 2], &constants, &bind(&[&c, &d]));
        execute_commands(&[add, Command::Barrier, scale], &f.pool, &CancelSignal::never()).unwrap();
        assert_eq!(f32s(&c.read_to_vec().unwrap()), (0..n).map(|i| 1.5 * i as f32).collect::<Vec<_>>());
        assert_eq!(f32s(&d.read_to_vec().unwrap()), (0..n).map(|i| 3.0 * i as f32 - 1.0).collect::<Vec<_>>());

        // fail_on_purpose fails the dispatch with the kernel's status.
        let err = f.run(dispatch_of(&exe, ordinal("fail_on_purpose"), [2, 1, 1], &[], &[])).unwrap_err();
        assert_eq!(err.code(), StatusCode::Aborted);
        assert!(err.message().starts_with("dispatch of 'fail_on_purpose' workgroup ["), "{err}");
        assert!(err.message().ends_with("kernel 'fail_on_purpose' returned status 42"), "{err}");
    }

    /// A kernel that sleeps 1 ms per workgroup and counts the workgroups it ran.
    fn slow_counter(ran: &Arc<AtomicU64>) -> NativeKernel {
        let ran = ran.clone();
        Arc::new(move |_: &NativeInvocation<'_>| {
            ran.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(1));
            Ok(())
        })
    }

    fn barrier_work() -> Arc<Work> {
        Arc::new(Work::new(1, 0, hal::driver::QueueOp::Barrier, SmallVec::new()))
    }

    /// A dispatch of 100 000 workgroups of 1 ms (25 s on 4 runners)
    /// stops within a few workgroups per runner once its submission's cancel is requested.
    #[test]
    fn unbounded_work_dispatch_stops_soon_after_cancel() {
        let f = Fixture::new();
        let ran = Arc::new(AtomicU64::new(0));
        let exe = f.native("slow", 1, 0, slow_counter(&ran));
        let work = barrier_work();
        let canceller = {
            let work = work.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                work.request_cancel();
                std::time::Instant::now()
            })
        };
        let command = dispatch(&exe, [100_000, 1, 1], &[], &[]);
        let err = execute_command(&command, &f.pool, &CancelSignal::of(&work)).unwrap_err();
        let stopped = std::time::Instant::now();
        let cancelled_at = canceller.join().unwrap();
        assert_eq!(err.code(), StatusCode::Cancelled, "{err}");
        assert!(err.message().starts_with("dispatch of 'slow' over [100000, 1, 1] workgroups: cancelled"), "{err}");
        let late = stopped.saturating_duration_since(cancelled_at);
        assert!(late < std::time::Duration::from_millis(500), "stopped {late:?} after the cancel request");
        let ran = ran.load(Ordering::Relaxed);
        assert!(ran < 10_000, "{ran} workgroups ran of 100000");

        // The one-workgroup path (on the calling thread) checks too.
        let ran_inline = Arc::new(AtomicU64::new(0));
        let one = f.native("one", 1, 0, slow_counter(&ran_inline));
        let err = execute_command(&dispatch(&one, [1, 1, 1], &[], &[]), &f.pool, &CancelSignal::of(&work)).unwrap_err();
        assert_eq!(err.code(), StatusCode::Cancelled, "{err}");
        assert_eq!(ran_inline.load(Ordering::Relaxed), 0);
    }

    /// A cancelled command list stops before its next command.
    #[test]
    fn unbounded_work_cancelled_list_stops_before_the_next_command() {
        let f = Fixture::new();
        let marker = f.buffer(4);
        let work = barrier_work();
        work.request_cancel();
        let commands = [fill(&marker, 0, 4, 1, 4), Command::Barrier];
        let err = execute_commands(&commands, &f.pool, &CancelSignal::of(&work)).unwrap_err();
        assert_eq!(err.code(), StatusCode::Cancelled);
        assert_eq!(err.message(), "cancelled before command 0 of 2 (fill)");
        assert_eq!(u32s(&marker.read_to_vec().unwrap()), [0], "the fill did not run");
        // Without a cancel request the same list runs.
        execute_commands(&commands, &f.pool, &CancelSignal::of(&barrier_work())).unwrap();
        assert_eq!(u32s(&marker.read_to_vec().unwrap()), [1]);
    }

    #[test]
    fn buffer_size_is_its_memorys() {
        let f = Fixture::new();
        let memory: Arc<dyn BufferBackend> = Arc::new(HostMemory::new(8, &f.budget).unwrap());
        // SAFETY: cpu-sim host memory, and only this test's cpu-sim code touches it.
        let buffer = unsafe { Buffer::from_backend(f.device, BufferParams::host_visible(), memory) };
        assert_eq!(buffer.size(), 8);
        assert_eq!(read_buffer(&buffer, 0, 64).unwrap_err().code(), StatusCode::OutOfRange);
    }
}
