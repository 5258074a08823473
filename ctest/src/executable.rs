//! Executables: loading the catalogue, entry points by ordinal and name, several entry points in
//! one executable, lifetimes, and sources a driver cannot load.

use std::path::PathBuf;
use std::sync::Arc;

use hal::{BufferBinding, CommandBufferMode, ExecutableFormat, ExecutableSource, StatusCode};

use crate::check::{CaseResult, Context, expect_code, expect_one_of};
use crate::context::{Cx, sv};
use crate::kernels::{ELEMENTWISE_WORKGROUP, Kernel, MUL_WORKGROUP};
use crate::{ensure, ensure_eq};

/// Every catalogue kernel loads with exactly the entry points of its ABI.
pub(crate) fn catalogue_loads_with_abi(cx: &Cx) -> CaseResult {
    for kernel in Kernel::ALL {
        if let Some(reason) = cx.fixture().catalogue().lacks(kernel) {
            cx.note(format!("the catalogue has no {kernel:?} kernel: {reason}"));
            continue;
        }
        let exe = cx.load(kernel)?;
        ensure_eq!(exe.entry_points(), kernel.entry_points().as_slice(), "{kernel:?}'s entry points");
        ensure_eq!(exe.device(), cx.device().id(), "{kernel:?}'s device");
    }
    Ok(())
}

/// Entry points are found by name at their ordinals.
pub(crate) fn entry_point_by_name(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::MultiEntry)?;
    for (ordinal, name) in ["set_index", "add_u32", "mul_u32"].iter().enumerate() {
        ensure_eq!(exe.entry_point(name).ctx(*name)?, ordinal as u32, "ordinal of '{name}'");
        ensure_eq!(exe.entry_point_info(ordinal as u32).ctx("info")?.name.as_str(), *name, "name at {ordinal}");
    }
    let info = exe.entry_point_info(2).ctx("info of mul_u32")?;
    ensure_eq!(info.workgroup_size, [MUL_WORKGROUP, 1, 1], "mul_u32's workgroup size");
    ensure_eq!((info.binding_count, info.constant_count), (1, 1), "mul_u32's bindings and constants");
    Ok(())
}

/// An unknown entry point name is `NotFound`, and the message lists the names there are.
pub(crate) fn entry_point_unknown_not_found(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::MultiEntry)?;
    let e = expect_code(exe.entry_point("no_such_kernel"), StatusCode::NotFound, "entry_point(\"no_such_kernel\")")?;
    ensure!(e.message().contains("no_such_kernel") && e.message().contains("add_u32"), "message: {e}");
    expect_code(exe.entry_point(""), StatusCode::NotFound, "entry_point(\"\")")?;
    expect_code(exe.entry_point("ADD_U32"), StatusCode::NotFound, "names are case-sensitive")?;
    Ok(())
}

/// An ordinal past the entry points is `OutOfRange`.
pub(crate) fn entry_point_ordinal_out_of_range(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::MultiEntry)?;
    expect_code(exe.entry_point_info(3), StatusCode::OutOfRange, "entry_point_info(3) of 3")?;
    Ok(())
}

/// Several entry points of one executable in one command buffer: set, add, multiply.
pub(crate) fn several_entry_points(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::MultiEntry)?;
    let data = cx.host_buffer(256 * 4)?;
    let binding = [BufferBinding::whole(&data)];
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.dispatch(&exe, 0, [256 / ELEMENTWISE_WORKGROUP, 1, 1], &[], &binding).ctx("set_index")?;
    cb.barrier().ctx("barrier")?;
    cb.dispatch(&exe, 1, [256 / ELEMENTWISE_WORKGROUP, 1, 1], &[5], &binding).ctx("add_u32")?;
    cb.barrier().ctx("barrier")?;
    cb.dispatch(&exe, 2, [256 / MUL_WORKGROUP, 1, 1], &[3], &binding).ctx("mul_u32")?;
    cb.end().ctx("end")?;
    cx.run(&cb)?;
    ensure_eq!(cx.words(&data)?, (0..256).map(|i| (i + 5) * 3).collect::<Vec<u32>>(), "(i + 5) * 3");
    Ok(())
}

/// Executables have distinct ids; clones are the same executable.
pub(crate) fn executable_identity(cx: &Cx) -> CaseResult {
    let a = cx.load(Kernel::FillU32)?;
    let b = cx.load(Kernel::FillU32)?;
    ensure!(a.id() != b.id(), "two loads share id {}", a.id());
    ensure_eq!(a.clone().id(), a.id(), "a clone's id");
    Ok(())
}

/// A recorded command buffer keeps its executable alive after the last handle is dropped.
pub(crate) fn command_buffer_keeps_executable(cx: &Cx) -> CaseResult {
    let out = cx.host_buffer_u32(&[0; 64])?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    {
        let exe = cx.load(Kernel::FillU32)?;
        cb.dispatch(&exe, 0, [1, 1, 1], &[77], &[BufferBinding::whole(&out)]).ctx("dispatch")?;
    }
    cb.end().ctx("end")?;
    cx.run(&cb)?;
    ensure_eq!(cx.words(&out)?, vec![77; 64], "words written by the dropped executable");
    Ok(())
}

/// The same kernel loaded twice gives two executables that both work.
pub(crate) fn load_twice(cx: &Cx) -> CaseResult {
    let (a, b) = (cx.load(Kernel::FillU32)?, cx.load(Kernel::FillU32)?);
    let (oa, ob) = (cx.host_buffer_u32(&[0; 64])?, cx.host_buffer_u32(&[0; 64])?);
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    cb.dispatch(&a, 0, [1, 1, 1], &[1], &[BufferBinding::whole(&oa)]).ctx("dispatch a")?;
    cb.dispatch(&b, 0, [1, 1, 1], &[2], &[BufferBinding::whole(&ob)]).ctx("dispatch b")?;
    cb.end().ctx("end")?;
    cx.run(&cb)?;
    ensure_eq!((cx.words(&oa)?[0], cx.words(&ob)?[0]), (1, 2), "first words");
    Ok(())
}

/// One executable used by many command buffers running on every queue at once.
pub(crate) fn shared_by_many_command_buffers(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::FillU32)?;
    let mut work = Vec::new();
    for i in 0..16u32 {
        let out = cx.host_buffer(256)?;
        let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
        cb.dispatch(&exe, 0, [1, 1, 1], &[i], &[BufferBinding::whole(&out)]).ctx("dispatch")?;
        cb.end().ctx("end")?;
        let done = cx.sem(0)?;
        cx.queue(i as usize).execute(&[], &cb, &[sv(&done, 1)]).ctx("execute")?;
        work.push((out, done));
    }
    drop(exe);
    for (i, (out, done)) in work.iter().enumerate() {
        cx.wait(done, 1)?;
        ensure_eq!(cx.words(out)?, vec![i as u32; 64], "buffer {i}");
    }
    Ok(())
}

/// Sources the driver cannot load give a clear error, never a crash: garbage in each byte format,
/// an empty native table, a missing library.
pub(crate) fn unloadable_sources_refused(cx: &Cx) -> CaseResult {
    let codes = [StatusCode::InvalidArgument, StatusCode::Unimplemented, StatusCode::NotFound, StatusCode::Unavailable];
    for format in [ExecutableFormat::Ptx, ExecutableFormat::Cubin, ExecutableFormat::Fatbin, ExecutableFormat::Spirv] {
        let source = ExecutableSource::Bytes {
            format,
            data: Arc::from(&b"this is not an executable"[..]),
            entry_points: Kernel::FillU32.entry_points(),
        };
        expect_one_of(cx.device().load_executable(&source), &codes, &format!("garbage {format:?}"))?;
    }
    expect_one_of(cx.device().load_executable(&ExecutableSource::Native(vec![])), &codes, "an empty native table")?;
    let missing = ExecutableSource::SharedLibrary(PathBuf::from("/nonexistent/ctest/libnothing.so"));
    expect_one_of(cx.device().load_executable(&missing), &codes, "a missing shared library")?;
    cx.load(Kernel::FillU32).map(drop)
}
