//! Dispatch: constants and bindings reach the kernel, the ABI is enforced at record time, grids of
//! many workgroups in 1, 2 and 3 dimensions, and pipelines of dependent dispatches.

use hal::driver::CommandBufferExt;
use hal::{BufferBinding, BufferParams, BufferUsage, CommandBuffer, CommandBufferMode, MemoryType, StatusCode};

use crate::check::{CaseResult, Context, expect_code};
use crate::context::{Cx, from_bytes, sv};
use crate::kernels::{ELEMENTWISE_WORKGROUP, Kernel, MUL_WORKGROUP, grid_id_value};
use crate::{ensure, ensure_eq};

const E: u32 = ELEMENTWISE_WORKGROUP;

/// Records with `record`, ends, executes on queue 0 and waits.
fn run_recorded(cx: &Cx, record: impl FnOnce(&CommandBuffer) -> CaseResult) -> CaseResult {
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    record(&cb)?;
    cb.end().ctx("end")?;
    cx.run(&cb)
}

/// `fill_u32` writes its constant to every element of its binding.
pub(crate) fn fill_u32_constant(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::FillU32)?;
    let out = cx.host_buffer_u32(&[0; 256])?;
    run_recorded(cx, |cb| {
        cb.dispatch(&exe, 0, [256 / E, 1, 1], &[0xDEAD_BEEF], &[BufferBinding::whole(&out)]).ctx("dispatch")
    })?;
    ensure_eq!(cx.words(&out)?, vec![0xDEAD_BEEF; 256], "filled words");
    Ok(())
}

/// `add_f32` reads two bindings and writes the third.
pub(crate) fn add_f32_bindings(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::AddF32)?;
    let a: Vec<f32> = (0..128).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..128).map(|i| 1000.0 - 2.0 * i as f32).collect();
    let (ba, bb, out) = (cx.host_buffer_f32(&a)?, cx.host_buffer_f32(&b)?, cx.host_buffer_f32(&[0.0; 128])?);
    let bindings = [BufferBinding::whole(&ba), BufferBinding::whole(&bb), BufferBinding::whole(&out)];
    run_recorded(cx, |cb| cb.dispatch(&exe, 0, [128 / E, 1, 1], &[], &bindings).ctx("dispatch"))?;
    let expected: Vec<f32> = (0..128).map(|i| 1000.0 - i as f32).collect();
    ensure_eq!(cx.floats(&out)?, expected, "a + b");
    ensure_eq!(cx.floats(&ba)?, a, "a is unchanged");
    Ok(())
}

/// `scale_offset_f32` takes two `f32` constants as bits.
pub(crate) fn scale_offset_constants(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::ScaleOffsetF32)?;
    let data: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let buffer = cx.host_buffer_f32(&data)?;
    let constants = hal::constants![2.5f32, -1.0f32];
    run_recorded(cx, |cb| {
        cb.dispatch(&exe, 0, [1, 1, 1], &constants, &[BufferBinding::whole(&buffer)]).ctx("dispatch")
    })?;
    let expected: Vec<f32> = data.iter().map(|x| x * 2.5 - 1.0).collect();
    ensure_eq!(cx.floats(&buffer)?, expected, "x * 2.5 - 1");
    Ok(())
}

/// A binding's offset is where the kernel's element 0 is; bytes outside the range are untouched.
pub(crate) fn binding_offsets(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::FillU32)?;
    let buffer = cx.host_buffer_u32(&[7; 256])?;
    run_recorded(cx, |cb| {
        let binding = BufferBinding::range(&buffer, 256, 256);
        cb.dispatch(&exe, 0, [1, 1, 1], &[42], &[binding]).ctx("dispatch")
    })?;
    let words = cx.words(&buffer)?;
    let mut expected = vec![7; 256];
    expected[64..128].fill(42);
    ensure_eq!(words, expected, "buffer after a fill bound at bytes 256..512");
    Ok(())
}

/// Three bindings into one buffer at different offsets.
pub(crate) fn bindings_share_a_buffer(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::AddF32)?;
    let mut values = vec![0.0f32; 192];
    for i in 0..64 {
        values[i] = i as f32;
        values[64 + i] = 0.5;
    }
    let buffer = cx.host_buffer_f32(&values)?;
    let bindings = [
        BufferBinding::range(&buffer, 0, 256),
        BufferBinding::range(&buffer, 256, 256),
        BufferBinding::range(&buffer, 512, 256),
    ];
    run_recorded(cx, |cb| cb.dispatch(&exe, 0, [1, 1, 1], &[], &bindings).ctx("dispatch"))?;
    let floats = cx.floats(&buffer)?;
    let expected: Vec<f32> = (0..64).map(|i| i as f32 + 0.5).collect();
    ensure_eq!(floats[128..].to_vec(), expected, "third range = first + second");
    Ok(())
}

/// A dispatch with fewer or more bindings than declared is `InvalidArgument`.
pub(crate) fn wrong_binding_count_refused(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let add = cx.load(Kernel::AddF32)?;
    let b = cx.host_buffer(256)?;
    let one = BufferBinding::whole(&b);
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    let code = StatusCode::InvalidArgument;
    expect_code(cb.dispatch(&fill, 0, [1, 1, 1], &[1], &[]), code, "fill_u32 with no binding")?;
    expect_code(cb.dispatch(&fill, 0, [1, 1, 1], &[1], &[one.clone(), one.clone()]), code, "fill_u32 with 2")?;
    expect_code(cb.dispatch(&add, 0, [1, 1, 1], &[], &[one.clone(), one.clone()]), code, "add_f32 with 2")?;
    ensure_eq!(cb.commands().len(), 0, "nothing recorded");
    Ok(())
}

/// A dispatch with fewer or more constants than declared is `InvalidArgument`.
pub(crate) fn wrong_constant_count_refused(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let scale = cx.load(Kernel::ScaleOffsetF32)?;
    let b = cx.host_buffer(256)?;
    let one = [BufferBinding::whole(&b)];
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    let code = StatusCode::InvalidArgument;
    expect_code(cb.dispatch(&fill, 0, [1, 1, 1], &[], &one), code, "fill_u32 with no constant")?;
    expect_code(cb.dispatch(&fill, 0, [1, 1, 1], &[1, 2], &one), code, "fill_u32 with 2 constants")?;
    expect_code(cb.dispatch(&scale, 0, [1, 1, 1], &[1], &one), code, "scale_offset_f32 with 1 constant")?;
    Ok(())
}

/// A workgroup count beyond the device's per-axis limit
/// (`DeviceInfo::max_workgroup_count`) is `OutOfRange` at record time, naming the axis, the count and
/// the limit, and nothing is recorded; a count at the limit is recorded.
pub(crate) fn unbounded_work_grid_beyond_limit_refused(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let b = cx.host_buffer(256)?;
    let binding = [BufferBinding::whole(&b)];
    let limits = cx.device().info().max_workgroup_count;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    let e = expect_code(
        cb.dispatch(&fill, 0, [u32::MAX, u32::MAX, 1], &[1], &binding),
        StatusCode::OutOfRange,
        "grid [u32::MAX, u32::MAX, 1]",
    )?;
    let (count, limit) = (u32::MAX, limits[0]);
    ensure!(
        limit == u32::MAX || e.message().contains(&format!("x = {count} exceeds the device's limit of {limit}")),
        "message names the axis, count and limit: {e}"
    );
    for (axis, name) in ["x", "y", "z"].iter().enumerate() {
        let Some(over) = limits[axis].checked_add(1) else { continue };
        let mut grid = [1u32; 3];
        grid[axis] = over;
        let e = expect_code(cb.dispatch(&fill, 0, grid, &[1], &binding), StatusCode::OutOfRange, &format!("{grid:?}"))?;
        let named = format!("{name} = {over} exceeds the device's limit of {}", limits[axis]);
        ensure!(e.message().contains(&named), "grid {grid:?}: message should say '{named}': {e}");
    }
    cb.dispatch(&fill, 0, [1, 1, 1], &[1], &binding).ctx("grid [1, 1, 1]")?;
    cb.end().ctx("end")?;
    ensure_eq!(cb.commands().len(), 1, "only the [1, 1, 1] dispatch recorded");
    // At the limit on every axis: accepted at record time (never ended nor executed here).
    let at_limit = cx.command_buffer(CommandBufferMode::OneShot)?;
    at_limit.dispatch(&fill, 0, limits, &[1], &binding).ctx("grid at the limits")?;
    Ok(())
}

/// An entry point ordinal the executable lacks is `OutOfRange`.
pub(crate) fn entry_point_ordinal_out_of_range(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let b = cx.host_buffer(256)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    expect_code(
        cb.dispatch(&fill, 1, [1, 1, 1], &[1], &[BufferBinding::whole(&b)]),
        StatusCode::OutOfRange,
        "ordinal 1",
    )?;
    expect_code(
        cb.dispatch(&fill, u32::MAX, [1, 1, 1], &[1], &[BufferBinding::whole(&b)]),
        StatusCode::OutOfRange,
        "ordinal u32::MAX",
    )?;
    Ok(())
}

/// A binding range outside its buffer is `OutOfRange`.
pub(crate) fn binding_out_of_range_refused(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let b = cx.host_buffer(256)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    let code = StatusCode::OutOfRange;
    expect_code(
        cb.dispatch(&fill, 0, [1, 1, 1], &[1], &[BufferBinding::range(&b, 0, 512)]),
        code,
        "binding 0+512 of 256",
    )?;
    expect_code(
        cb.dispatch(&fill, 0, [1, 1, 1], &[1], &[BufferBinding::range(&b, 200, 64)]),
        code,
        "binding 200+64 of 256",
    )?;
    Ok(())
}

/// A binding of a buffer without `DISPATCH_STORAGE` usage is `PermissionDenied`.
pub(crate) fn binding_usage_refused(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let params = BufferParams::new(MemoryType::HOST_LOCAL, BufferUsage::TRANSFER | BufferUsage::MAPPING);
    let b = cx.buffer(params, 256)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    let result = cb.dispatch(&fill, 0, [1, 1, 1], &[1], &[BufferBinding::whole(&b)]);
    expect_code(result, StatusCode::PermissionDenied, "binding without DISPATCH_STORAGE")?;
    Ok(())
}

/// Dispatches `grid_ids` over `grid` and checks every workgroup wrote its id, once, where it should.
fn check_grid(cx: &Cx, grid: [u32; 3]) -> CaseResult {
    let exe = cx.load(Kernel::GridIds)?;
    let count = (grid[0] * grid[1] * grid[2]) as usize;
    let out = cx.host_buffer_u32(&vec![0; count])?;
    run_recorded(cx, |cb| cb.dispatch(&exe, 0, grid, &[], &[BufferBinding::whole(&out)]).ctx("dispatch"))?;
    let words = cx.words(&out)?;
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                let at = (x + y * grid[0] + z * grid[0] * grid[1]) as usize;
                let expected = grid_id_value(x, y, z);
                ensure!(
                    words[at] == expected,
                    "grid {grid:?}: slot {at} for workgroup ({x},{y},{z}) holds {:#x}, expected {expected:#x}",
                    words[at]
                );
            }
        }
    }
    Ok(())
}

/// 4096 workgroups in x.
pub(crate) fn grid_1d_many(cx: &Cx) -> CaseResult {
    check_grid(cx, [4096, 1, 1])
}

/// A 2-D grid with unequal sides.
pub(crate) fn grid_2d(cx: &Cx) -> CaseResult {
    check_grid(cx, [17, 9, 1])
}

/// A small 3-D grid with unequal sides.
pub(crate) fn grid_3d(cx: &Cx) -> CaseResult {
    check_grid(cx, [7, 5, 3])
}

/// A 3-D grid of 4096 workgroups.
pub(crate) fn grid_3d_large(cx: &Cx) -> CaseResult {
    check_grid(cx, [16, 16, 16])
}

/// Long y and z sides.
pub(crate) fn grid_tall(cx: &Cx) -> CaseResult {
    check_grid(cx, [1, 300, 1])?;
    check_grid(cx, [1, 1, 300])?;
    check_grid(cx, [2, 3, 200])
}

/// One dispatch over a million elements.
pub(crate) fn large_dispatch(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::FillU32)?;
    let n = 1u32 << 20;
    let out = cx.host_buffer(u64::from(n) * 4)?;
    run_recorded(cx, |cb| {
        cb.dispatch(&exe, 0, [n / E, 1, 1], &[0x600D], &[BufferBinding::whole(&out)]).ctx("dispatch")
    })?;
    let words = from_bytes(&cx.bytes(&out)?);
    let bad = words.iter().position(|&w| w != 0x600D);
    ensure!(bad.is_none(), "element {bad:?} of 2^20 not written");
    Ok(())
}

/// The declared workgroup size of each entry point is the one used (`mul_u32` has 32 threads, so
/// two workgroups cover 64 elements).
pub(crate) fn per_entry_workgroup_size(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::MultiEntry)?;
    let mul = exe.entry_point("mul_u32").ctx("mul_u32")?;
    let data = cx.host_buffer_u32(&(0..64).collect::<Vec<u32>>())?;
    run_recorded(cx, |cb| {
        let grid = [64 / MUL_WORKGROUP, 1, 1];
        cb.dispatch(&exe, mul, grid, &[3], &[BufferBinding::whole(&data)]).ctx("dispatch")
    })?;
    ensure_eq!(cx.words(&data)?, (0..64).map(|i| i * 3).collect::<Vec<u32>>(), "x * 3 over 64 elements");
    Ok(())
}

/// A pipeline of dependent dispatches separated by barriers: fill, scale, add, scale.
pub(crate) fn pipeline_with_barriers(cx: &Cx) -> CaseResult {
    let fill = cx.load(Kernel::FillU32)?;
    let scale = cx.load(Kernel::ScaleOffsetF32)?;
    let add = cx.load(Kernel::AddF32)?;
    let n = 4096u32;
    let (x, y, z) =
        (cx.host_buffer(u64::from(n) * 4)?, cx.host_buffer(u64::from(n) * 4)?, cx.host_buffer(u64::from(n) * 4)?);
    let grid = [n / E, 1, 1];
    let (bx, by, bz) = (BufferBinding::whole(&x), BufferBinding::whole(&y), BufferBinding::whole(&z));
    run_recorded(cx, |cb| {
        cb.dispatch(&fill, 0, grid, &hal::constants![1.5f32], std::slice::from_ref(&bx)).ctx("fill x")?;
        cb.dispatch(&fill, 0, grid, &hal::constants![2.0f32], std::slice::from_ref(&by)).ctx("fill y")?;
        cb.barrier().ctx("barrier")?;
        cb.dispatch(&scale, 0, grid, &hal::constants![4.0f32, 1.0f32], std::slice::from_ref(&bx)).ctx("x*4+1")?;
        cb.barrier().ctx("barrier")?;
        cb.dispatch(&add, 0, grid, &[], &[bx.clone(), by.clone(), bz.clone()]).ctx("z = x + y")?;
        cb.barrier().ctx("barrier")?;
        cb.dispatch(&scale, 0, grid, &hal::constants![0.5f32, 0.25f32], std::slice::from_ref(&bz)).ctx("z*0.5+0.25")?;
        Ok(())
    })?;
    ensure!(cx.floats(&x)?.iter().all(|&v| v == 7.0), "x is not 1.5 * 4 + 1 = 7 everywhere");
    let zs = cx.floats(&z)?;
    let bad = zs.iter().position(|&v| v != 4.75);
    ensure!(bad.is_none(), "z[{bad:?}] = {:?}, expected (7 + 2) * 0.5 + 0.25 = 4.75", bad.map(|i| zs[i]));
    Ok(())
}

/// 100 dependent in-place dispatches with barriers in one command buffer.
pub(crate) fn many_dispatches_one_command_buffer(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::MultiEntry)?;
    let (set, add) = (exe.entry_point("set_index").ctx("set_index")?, exe.entry_point("add_u32").ctx("add_u32")?);
    let data = cx.host_buffer(256 * 4)?;
    let binding = [BufferBinding::whole(&data)];
    run_recorded(cx, |cb| {
        cb.dispatch(&exe, set, [256 / E, 1, 1], &[], &binding).ctx("set_index")?;
        for i in 1..=100u32 {
            cb.barrier().ctx("barrier")?;
            cb.dispatch(&exe, add, [256 / E, 1, 1], &[i], &binding).ctx(format!("add {i}"))?;
        }
        Ok(())
    })?;
    ensure_eq!(cx.words(&data)?, (0..256).map(|i| i + 5050).collect::<Vec<u32>>(), "i + (1 + ... + 100)");
    Ok(())
}

/// Independent dispatches without barriers all complete with their own constants.
pub(crate) fn independent_dispatches(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::FillU32)?;
    let buffers: Vec<hal::Buffer> = (0..8).map(|_| cx.host_buffer(1024)).collect::<Result<_, _>>()?;
    run_recorded(cx, |cb| {
        for (i, b) in buffers.iter().enumerate() {
            cb.dispatch(&exe, 0, [256 / E, 1, 1], &[i as u32 + 100], &[BufferBinding::whole(b)]).ctx("dispatch")?;
        }
        Ok(())
    })?;
    for (i, b) in buffers.iter().enumerate() {
        ensure_eq!(cx.words(b)?, vec![i as u32 + 100; 256], "buffer {i}");
    }
    Ok(())
}

/// Dependent dispatches in separate submissions on different queues, ordered by a semaphore.
pub(crate) fn pipeline_across_submissions(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::MultiEntry)?;
    let ep = |name| exe.entry_point(name).ctx(name);
    let (set, add, mul) = (ep("set_index")?, ep("add_u32")?, ep("mul_u32")?);
    let data = cx.host_buffer(64 * 4)?;
    let binding = [BufferBinding::whole(&data)];
    let steps =
        [(set, 64 / E, vec![]), (add, 64 / E, vec![10]), (mul, 64 / MUL_WORKGROUP, vec![3]), (add, 64 / E, vec![1])];
    let s = cx.sem(0)?;
    // Submitted last step first: each waits on the previous one's signal.
    for (i, (entry, groups, constants)) in steps.iter().enumerate().rev() {
        let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
        cb.dispatch(&exe, *entry, [*groups, 1, 1], constants, &binding).ctx("dispatch")?;
        cb.end().ctx("end")?;
        let i = i as u64;
        cx.queue(i as usize).execute(&[sv(&s, i)], &cb, &[sv(&s, i + 1)]).ctx(format!("execute step {i}"))?;
    }
    cx.wait(&s, steps.len() as u64)?;
    ensure_eq!(cx.words(&data)?, (0..64).map(|i| (i + 10) * 3 + 1).collect::<Vec<u32>>(), "((i + 10) * 3) + 1");
    Ok(())
}

/// Dispatch to device-local memory, read back with a queue read.
pub(crate) fn dispatch_device_local(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::FillU32)?;
    let out = cx.device_buffer(256)?;
    run_recorded(cx, |cb| cb.dispatch(&exe, 0, [1, 1, 1], &[0xABCD], &[BufferBinding::whole(&out)]).ctx("dispatch"))?;
    ensure_eq!(from_bytes(&cx.queue_read(&out, 0, 256)?), vec![0xABCD; 64], "device-local words");
    Ok(())
}

/// Every queue runs dispatches.
pub(crate) fn dispatch_on_every_queue(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::FillU32)?;
    let count = cx.device().queue_count();
    let mut work = Vec::new();
    for q in 0..count {
        let out = cx.host_buffer(256)?;
        let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
        cb.dispatch(&exe, 0, [1, 1, 1], &[q as u32 + 1], &[BufferBinding::whole(&out)]).ctx("dispatch")?;
        cb.end().ctx("end")?;
        let done = cx.sem(0)?;
        cx.queue(q).execute(&[], &cb, &[sv(&done, 1)]).ctx(format!("execute on queue {q}"))?;
        work.push((out, done));
    }
    for (q, (out, done)) in work.iter().enumerate() {
        cx.wait(done, 1)?;
        ensure_eq!(cx.words(out)?, vec![q as u32 + 1; 64], "queue {q}'s buffer");
    }
    Ok(())
}

/// An executable loaded on another device is `InvalidArgument` in a dispatch.
pub(crate) fn other_device_executable_refused(cx: &Cx) -> CaseResult {
    let other = cx.other_device()?;
    let foreign = cx.load_on(&other, Kernel::FillU32)?;
    let b = cx.host_buffer(256)?;
    let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
    let result = cb.dispatch(&foreign, 0, [1, 1, 1], &[1], &[BufferBinding::whole(&b)]);
    expect_code(result, StatusCode::InvalidArgument, "dispatch of another device's executable")?;
    Ok(())
}
