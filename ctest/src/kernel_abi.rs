//! Kernels from any compiler: an entry point declares its kernel's parameter layout (pointers to
//! bindings, null pointers, 32- and 64-bit constants in any order, as Triton's kernels take them)
//! and the dynamic workgroup memory its launches get; a layout that does not fit is refused at load.

use hal::{
    BufferBinding, CommandBufferMode, EntryPointInfo, ExecutableKind, ExecutableSource, KernelParam as P, StatusCode,
};

use crate::check::{CaseError, CaseResult, Context, expect_code};
use crate::context::{Cx, sv};
use crate::kernels::{Kernel, REVERSE_SHARED_BYTES, SCRATCH_NOT_NULL, choose_kind};
use crate::{ensure, ensure_eq};

/// Elements [`Kernel::MixedParams`] is dispatched over (two workgroups of 64) and the `n` it gets.
const DISPATCHED: usize = 128;
/// The `n` [`Kernel::MixedParams`] gets: the elements from it on stay as they were.
const N: u32 = 100;

/// The catalogue's source of `kernel` with its entry points replaced by `entries`.
fn source_with(
    cx: &Cx,
    kernel: Kernel,
    entries: Vec<EntryPointInfo>,
) -> Result<(ExecutableSource, ExecutableKind), CaseError> {
    cx.needs_kernel(kernel)?;
    let catalogue = cx.fixture().catalogue();
    let kind = choose_kind(catalogue, cx.device().info()).ctx("choosing a kind")?;
    match catalogue.source(kernel, kind).ctx("catalogue source")? {
        ExecutableSource::Bytes { format, data, .. } => {
            Ok((ExecutableSource::Bytes { format, data, entry_points: entries }, kind))
        }
        ExecutableSource::Native(natives) => {
            let natives = natives
                .into_iter()
                .zip(entries)
                .map(|(native, info)| hal::NativeEntryPoint::new(info, native.kernel))
                .collect();
            Ok((ExecutableSource::Native(natives), kind))
        }
        other => Err(CaseError::Fail(format!("unexpected catalogue source {other:?}"))),
    }
}

/// What `mixed_params` writes over `DISPATCHED` elements of `input` with `add = lo | hi << 32`.
fn expected_mixed(input: &[u32], lo: u32, hi: u32, untouched: u32) -> Vec<u32> {
    (0..DISPATCHED)
        .map(|i| if i < N as usize { input[i].wrapping_add(lo).wrapping_add(2 * hi) } else { untouched })
        .collect()
}

/// A kernel whose parameters are out, n, in, a 64-bit constant and a null pointer gets each in its
/// place: through a reusable command buffer (a CUDA graph), a one-shot single dispatch (a direct
/// launch) and a binding table (graph nodes updated per execute). Elements at `n` and past it stay.
pub(crate) fn declared_layout_reaches_the_kernel(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::MixedParams)?;
    let info = exe.entry_point_info(0).ctx("entry point info")?;
    ensure!(info.params.is_some(), "the loaded entry point lost its layout");
    let input: Vec<u32> = (0..DISPATCHED as u32).map(|i| i * 3).collect();
    let input_buffer = cx.host_buffer_u32(&input)?;
    let (lo, hi) = (5u32, 7u32);
    let constants = [N, lo, hi];
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    let mut value = 0;
    for mode in [CommandBufferMode::Reusable, CommandBufferMode::OneShot] {
        let out = cx.host_buffer_u32(&vec![0xAAAA; DISPATCHED])?;
        let cb = cx.command_buffer(mode)?;
        let bindings = [BufferBinding::whole(&out), BufferBinding::whole(&input_buffer)];
        cb.dispatch(&exe, 0, [2, 1, 1], &constants, &bindings).ctx("dispatch")?;
        cb.end().ctx("end")?;
        queue.execute(&[], &cb, &[sv(&s, value + 1)]).ctx("execute")?;
        value += 1;
        cx.wait(&s, value)?;
        ensure_eq!(cx.words(&out)?, expected_mixed(&input, lo, hi, 0xAAAA), "{mode:?} buffer: out");
    }
    // Through slots: the same recording with three tables.
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    let refs = [hal::BindingRef::slot(0, 0, 4 * DISPATCHED as u64), hal::BindingRef::slot(1, 0, 4 * DISPATCHED as u64)];
    cb.dispatch_refs(&exe, 0, [2, 1, 1], &[N, 1, 0x10], &refs).ctx("dispatch_refs")?;
    cb.end().ctx("end")?;
    for call in 0..3u32 {
        let out = cx.host_buffer_u32(&vec![call; DISPATCHED])?;
        let input: Vec<u32> = (0..DISPATCHED as u32).map(|i| i + 1000 * call).collect();
        let input_buffer = cx.host_buffer_u32(&input)?;
        let table = [BufferBinding::whole(&out), BufferBinding::whole(&input_buffer)];
        queue.execute_with_bindings(&[], &cb, &table, &[sv(&s, value + 1)]).ctx("execute with table")?;
        value += 1;
        cx.wait(&s, value)?;
        ensure_eq!(cx.words(&out)?, expected_mixed(&input, 1, 0x10, call), "table {call}: out");
        ensure!(!cx.words(&out)?.contains(&SCRATCH_NOT_NULL), "the scratch pointer was not null");
    }
    Ok(())
}

/// Layouts that name a binding or constant past the entry point's counts are `InvalidArgument` at
/// load on every driver, naming the entry point and the parameter; on a driver that knows its
/// kernels' parameter sizes (CUDA PTX), so is a layout whose sizes differ from the kernel's, or one
/// with a parameter too many, and IREE's default layout for a kernel that is not IREE's.
pub(crate) fn layouts_that_do_not_fit_refused_at_load(cx: &Cx) -> CaseResult {
    let entry = |params: Vec<P>| EntryPointInfo::new("mixed_params", 64, 2, 3).with_params(params);
    let refused = [
        (entry(vec![P::Binding(0), P::Constant32(0), P::Binding(2), P::Constant64(1), P::NullPointer]), "parameter 2"),
        (entry(vec![P::Binding(0), P::Constant32(0), P::Binding(1), P::Constant64(2), P::NullPointer]), "parameter 3"),
        (entry(vec![P::Binding(0), P::Constant32(3), P::Binding(1), P::Constant64(1), P::NullPointer]), "parameter 1"),
    ];
    for (info, expected) in refused {
        let (source, _) = source_with(cx, Kernel::MixedParams, vec![info])?;
        let e = expect_code(cx.device().load_executable(&source), StatusCode::InvalidArgument, expected)?;
        ensure!(e.message().contains(expected) && e.message().contains("mixed_params"), "message: {e}");
    }
    let sized = [
        // A 32-bit constant where the kernel takes a pointer (and the pointer where it takes 32 bits).
        (entry(vec![P::Constant32(0), P::Binding(0), P::Binding(1), P::Constant64(1), P::NullPointer]), "parameter 0"),
        // A parameter too many.
        (
            entry(vec![
                P::Binding(0),
                P::Constant32(0),
                P::Binding(1),
                P::Constant64(1),
                P::NullPointer,
                P::NullPointer,
            ]),
            "6",
        ),
        // IREE's layout (two pointers, then three 32-bit constants) for Triton's shape.
        (EntryPointInfo::new("mixed_params", 64, 2, 3), "parameter 1"),
    ];
    for (info, expected) in sized {
        let (source, kind) = source_with(cx, Kernel::MixedParams, vec![info])?;
        match cx.device().load_executable(&source) {
            Err(e) if e.code() == StatusCode::InvalidArgument => {
                ensure!(e.message().contains(expected), "the message does not name {expected}: {e}");
            }
            Err(e) => return Err(CaseError::Fail(format!("a layout of the wrong sizes: {e}"))),
            Ok(_) if kind == ExecutableKind::Ptx => {
                return Err(CaseError::Fail(format!("PTX loaded with a layout of the wrong sizes ({expected})")));
            }
            Ok(_) => cx.note(format!("{kind} kernels carry no parameter sizes: a mismatched layout loads")),
        }
    }
    Ok(())
}

/// An entry point's dynamic workgroup memory (64 KiB, past CUDA's default 48) is there at every
/// launch, private to each workgroup: each of 8 workgroups reverses its 64 elements through the far
/// end of it, in a reusable and a one-shot command buffer.
pub(crate) fn dynamic_workgroup_memory_reaches_the_kernel(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::ReverseShared)?;
    ensure_eq!(
        exe.entry_point_info(0).ctx("entry point info")?.dynamic_workgroup_memory,
        REVERSE_SHARED_BYTES,
        "declared workgroup memory"
    );
    let (queue, s) = (cx.queue(0), cx.sem(0)?);
    for (value, mode) in [(1, CommandBufferMode::Reusable), (2, CommandBufferMode::OneShot)] {
        let data: Vec<u32> = (0..512).map(|i| i * 7 + value as u32).collect();
        let buffer = cx.host_buffer_u32(&data)?;
        let cb = cx.command_buffer(mode)?;
        cb.dispatch(&exe, 0, [8, 1, 1], &[], &[BufferBinding::whole(&buffer)]).ctx("dispatch")?;
        cb.end().ctx("end")?;
        queue.execute(&[], &cb, &[sv(&s, value)]).ctx("execute")?;
        cx.wait(&s, value)?;
        let expected: Vec<u32> = data.chunks(64).flat_map(|block| block.iter().rev().copied()).collect();
        ensure_eq!(cx.words(&buffer)?, expected, "{mode:?}: reversed blocks");
    }
    Ok(())
}

/// More dynamic workgroup memory than the device gives a workgroup is `ResourceExhausted` at load,
/// naming the entry point and the limit.
pub(crate) fn too_much_workgroup_memory_refused_at_load(cx: &Cx) -> CaseResult {
    let info = EntryPointInfo::new("reverse_shared", 64, 1, 0).with_dynamic_workgroup_memory(64 << 20);
    let (source, _) = source_with(cx, Kernel::ReverseShared, vec![info])?;
    let e = expect_code(cx.device().load_executable(&source), StatusCode::ResourceExhausted, "64 MiB")?;
    ensure!(e.message().contains("reverse_shared") && e.message().contains("67108864"), "message: {e}");
    Ok(())
}
