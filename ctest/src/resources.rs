//! Resources: the device's pools report work in use and come back to idle after it, are reused
//! rather than grown, survive dropped handles, and a device dropped with work left fails or finishes
//! that work instead of hanging. (The runner also checks idleness after every case.)

use std::time::Duration;

use hal::driver::SemaphoreExt;
use hal::{BufferBinding, CommandBufferMode, Device, Error, ResourceUsage, StatusCode, Timeout};

use crate::check::{CaseError, CaseResult, Context, expect_code};
use crate::context::{Cx, LONG, drop_in_time, sv};
use crate::kernels::Kernel;
use crate::runner::{IDLE_LIMIT, check_idle, is_checked_pool};
use crate::{ensure, ensure_eq};

fn idle(device: &Device, what: &str) -> CaseResult {
    match check_idle(std::slice::from_ref(device), IDLE_LIMIT) {
        None => Ok(()),
        Some(leak) => Err(CaseError::Fail(format!("{what}: not idle: {leak}"))),
    }
}

fn busy(usage: &ResourceUsage) -> bool {
    usage.pools.iter().any(|p| is_checked_pool(p.name) && p.in_use > 0)
}

/// A mixed workload: dispatches, transfers and host calls chained across queues, waited on.
fn workload(cx: &Cx, rounds: u64) -> CaseResult {
    let exe = cx.load(Kernel::MultiEntry)?;
    let data = cx.host_buffer_u32(&[0; 64])?;
    let cb = cx.command_buffer(CommandBufferMode::Reusable)?;
    cb.dispatch(&exe, 1, [1, 1, 1], &[1], &[BufferBinding::whole(&data)]).ctx("dispatch")?;
    cb.end().ctx("end")?;
    let s = cx.sem(0)?;
    for i in 0..rounds {
        let q = cx.queue(i as usize);
        let v = 3 * i;
        q.execute(&[sv(&s, v)], &cb, &[sv(&s, v + 1)]).ctx("execute")?;
        q.update(&[sv(&s, v + 1)], &data, 252, &[0], &[sv(&s, v + 2)]).ctx("update")?;
        cx.queue(i as usize + 1).host_call(&[sv(&s, v + 2)], || Ok(()), &[sv(&s, v + 3)]).ctx("host_call")?;
    }
    cx.wait(&s, 3 * rounds)?;
    ensure_eq!(cx.words(&data)?[0], rounds as u32, "dispatch count");
    Ok(())
}

/// The device lists its pools, each named.
pub(crate) fn pools_listed(cx: &Cx) -> CaseResult {
    let usage = cx.device().resource_usage();
    ensure!(usage.pools.iter().any(|p| is_checked_pool(p.name)), "no pools to check: {usage}");
    ensure!(usage.pools.iter().all(|p| !p.name.is_empty()), "an unnamed pool: {usage:?}");
    ensure!(usage.pools.iter().all(|p| p.in_use <= p.created || !is_checked_pool(p.name)), "in use > created: {usage}");
    Ok(())
}

/// Held work shows in the pools (so leak checks mean something); released, the pools are idle.
pub(crate) fn usage_reports_pending_work(cx: &Cx) -> CaseResult {
    let (gate, done) = (cx.sem(0)?, cx.sem(0)?);
    let buffer = cx.host_buffer(64)?;
    for i in 0..8u64 {
        cx.queue(i as usize)
            .fill(&[sv(&gate, 1), sv(&done, i)], &buffer, 0, 64, 1u8, &[sv(&done, i + 1)])
            .ctx("fill")?;
    }
    let usage = cx.device().resource_usage();
    ensure!(busy(&usage), "8 held submissions do not show in the pools: {usage}");
    gate.signal(1).ctx("open the gate")?;
    cx.wait(&done, 8)?;
    idle(cx.device(), "after the held work completed")
}

/// Idle again after a mixed workload.
pub(crate) fn idle_after_work(cx: &Cx) -> CaseResult {
    workload(cx, 50)?;
    idle(cx.device(), "after 50 rounds of work")
}

/// Idle again after failed waits and faults.
pub(crate) fn idle_after_failures(cx: &Cx) -> CaseResult {
    let exe = cx.load(Kernel::Fault)?;
    let scratch = cx.host_buffer(64)?;
    for i in 0..10u64 {
        let (gate, s) = (cx.sem(0)?, cx.sem(0)?);
        let q = cx.queue(i as usize);
        q.barrier(&[sv(&gate, 1)], &[sv(&s, 1)]).ctx("barrier")?;
        q.fill(&[sv(&s, 1)], &scratch, 0, 64, 1u8, &[sv(&s, 2)]).ctx("fill")?;
        gate.fail(Error::aborted("ctest: broke"));
        let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
        cb.dispatch(&exe, 0, [4, 1, 1], &[], &[BufferBinding::whole(&scratch)]).ctx("dispatch")?;
        cb.end().ctx("end")?;
        let t = cx.sem(0)?;
        q.execute(&[], &cb, &[sv(&t, 1)]).ctx("execute fault")?;
        cx.wait_any_failure(&s, 2)?;
        cx.wait_any_failure(&t, 1)?;
    }
    idle(cx.device(), "after failures and faults")
}

/// Running the same workload twice does not grow the pools: what the first run created is reused.
pub(crate) fn pools_reused(cx: &Cx) -> CaseResult {
    workload(cx, 100)?;
    idle(cx.device(), "after the first run")?;
    let first = cx.device().resource_usage();
    workload(cx, 100)?;
    idle(cx.device(), "after the second run")?;
    let second = cx.device().resource_usage();
    for pool in second.pools.iter().filter(|p| is_checked_pool(p.name)) {
        let before = first.pools.iter().find(|p| p.name == pool.name).map_or(0, |p| p.created);
        let slack = 8 + before / 4;
        ensure!(
            pool.created <= before + slack,
            "pool '{}' grew from {before} to {} created over the same workload",
            pool.name,
            pool.created
        );
    }
    Ok(())
}

/// Memory a device keeps for reuse after its buffers dropped shows in its report, and `trim` gives
/// it back; a buffer still held keeps its contents, and new ones start zeroed.
pub(crate) fn trim_gives_kept_memory_back(cx: &Cx) -> CaseResult {
    let held = cx.host_buffer_u32(&[7; 16])?;
    for round in 0..4u8 {
        let host = cx.host_buffer(1 << 16)?;
        host.write(0, &[round + 1; 64]).ctx("write a host buffer")?;
        drop((host, cx.device_buffer(1 << 16)?));
    }
    let before = cx.device().resource_usage();
    cx.device().trim().ctx("trim")?;
    let after = cx.device().resource_usage();
    ensure_eq!(after.memory_kept, 0, "bytes kept after trim ({after}; before: {before})");
    ensure!(after.memory_in_use <= before.memory_in_use, "trim grew the memory in use: {before} -> {after}");
    ensure_eq!(cx.words(&held)?, vec![7u32; 16], "a held buffer's words after trim");
    let fresh = cx.host_buffer(1 << 16)?;
    ensure!(cx.bytes(&fresh)?.iter().all(|&b| b == 0), "a host buffer allocated after trim is not zeroed");
    cx.device().trim().ctx("trim twice")?;
    Ok(())
}

/// Nothing stays registered on the semaphores once the work that waited on them is done.
pub(crate) fn no_timepoints_left(cx: &Cx) -> CaseResult {
    let (a, b, c) = (cx.sem(0)?, cx.sem(0)?, cx.sem(0)?);
    for i in 0..20u64 {
        cx.queue(i as usize).barrier(&[sv(&a, i + 1), sv(&b, 1)], &[sv(&c, i + 1)]).ctx("barrier")?;
    }
    b.signal(1).ctx("signal b")?;
    for i in 1..=20 {
        a.signal(i).ctx("signal a")?;
    }
    cx.wait(&c, 20)?;
    idle(cx.device(), "after the barriers")?;
    ensure_eq!((a.pending_count(), b.pending_count(), c.pending_count()), (0, 0, 0), "timepoints left");
    Ok(())
}

/// Work keeps its buffers, command buffers and executables alive after the caller drops them.
pub(crate) fn dropped_handles_in_flight(cx: &Cx) -> CaseResult {
    let (gate, done) = (cx.sem(0)?, cx.sem(0)?);
    let keep = cx.host_buffer_u32(&[0; 64])?;
    {
        let exe = cx.load(Kernel::FillU32)?;
        let scratch = cx.host_buffer(256)?;
        let cb = cx.command_buffer(CommandBufferMode::OneShot)?;
        cb.dispatch(&exe, 0, [1, 1, 1], &[3], &[BufferBinding::whole(&scratch)]).ctx("dispatch")?;
        cb.barrier().ctx("barrier")?;
        cb.copy(&scratch, 0, &keep, 0, 256).ctx("copy")?;
        cb.end().ctx("end")?;
        cx.queue(0).execute(&[sv(&gate, 1)], &cb, &[sv(&done, 1)]).ctx("execute")?;
        let transient = cx
            .queue(1)
            .alloca(&[sv(&done, 1)], hal::BufferParams::device_local(), 64, &[sv(&done, 2)])
            .ctx("alloca")?;
        cx.queue(1).dealloca(&[sv(&done, 2)], &transient, &[sv(&done, 3)]).ctx("dealloca")?;
    }
    gate.signal(1).ctx("open the gate")?;
    cx.wait(&done, 3)?;
    ensure_eq!(cx.words(&keep)?, vec![3; 64], "bytes copied from a dropped buffer");
    idle(cx.device(), "after work on dropped handles")
}

/// Ten thousand semaphores created and dropped leave nothing behind.
pub(crate) fn many_semaphores(cx: &Cx) -> CaseResult {
    let sems: Vec<hal::Semaphore> = (0..10_000).map(|i| cx.sem(i)).collect::<Result<_, _>>()?;
    ensure_eq!(sems[9999].query().ctx("query")?, 9999, "last semaphore");
    drop(sems);
    idle(cx.device(), "after 10000 semaphores")
}

/// A device dropped while work waits on a semaphore no one will signal does not hang: the drop
/// returns and the held work's signals fail with `Cancelled`.
pub(crate) fn drop_device_with_pending_work(cx: &Cx) -> CaseResult {
    let device = cx.fixture().create_device().ctx("create a device to drop")?;
    let gate = device.create_semaphore(0).ctx("semaphore")?;
    let done = device.create_semaphore(0).ctx("semaphore")?;
    let buffer = device.allocate_buffer(hal::BufferParams::host_visible(), 64).ctx("buffer")?;
    let queue = device.queue(0).ctx("queue")?;
    queue.fill(&[sv(&gate, 1)], &buffer, 0, 64, 1u8, &[sv(&done, 1)]).ctx("held fill")?;
    drop(queue);
    drop_in_time(device, "with held work")?;
    expect_code(done.wait(1, Timeout::After(LONG)), StatusCode::Cancelled, "held work of a dropped device")?;
    Ok(())
}

/// A device dropped with work in flight finishes or fails every submission: none is left hanging.
pub(crate) fn drop_device_with_work_in_flight(cx: &Cx) -> CaseResult {
    let device = cx.fixture().create_device().ctx("create a device to drop")?;
    let buffer = device.allocate_buffer(hal::BufferParams::host_visible(), 1 << 20).ctx("buffer")?;
    let sems: Vec<hal::Semaphore> =
        (0..64).map(|_| device.create_semaphore(0)).collect::<hal::Result<_>>().ctx("semaphores")?;
    for (i, s) in sems.iter().enumerate() {
        let queue = device.queue(i % device.queue_count()).ctx("queue")?;
        queue.fill(&[], &buffer, 0, 1 << 20, i as u32, &[sv(s, 1)]).ctx("fill")?;
    }
    let dropper = std::thread::spawn(move || drop(device));
    for (i, s) in sems.iter().enumerate() {
        match s.wait(1, Timeout::After(LONG)) {
            Ok(()) => {}
            Err(e) if e.code() == StatusCode::DeadlineExceeded => {
                return Err(CaseError::Fail(format!("submission {i} neither finished nor failed: {e}")));
            }
            Err(_) => {}
        }
    }
    let deadline = std::time::Instant::now() + LONG;
    while !dropper.is_finished() {
        ensure!(std::time::Instant::now() < deadline, "dropping a device with work in flight hangs");
        std::thread::sleep(Duration::from_millis(1));
    }
    dropper.join().map_err(|_| "dropping the device panicked")?;
    Ok(())
}

/// A semaphore outlives its device and keeps its host-side contract.
pub(crate) fn semaphore_outlives_device(cx: &Cx) -> CaseResult {
    let device = cx.fixture().create_device().ctx("create a device to drop")?;
    let s = device.create_semaphore(1).ctx("semaphore")?;
    let done = device.create_semaphore(0).ctx("semaphore")?;
    device.queue(0).ctx("queue")?.barrier(&[], &[sv(&done, 1)]).ctx("barrier")?;
    done.wait(1, Timeout::After(LONG)).ctx("barrier's signal")?;
    drop(device);
    s.signal(2).ctx("signal after the device is gone")?;
    s.wait(2, Timeout::Immediate).ctx("wait after the device is gone")?;
    expect_code(s.wait(3, Timeout::Immediate), StatusCode::DeadlineExceeded, "poll after the device is gone")?;
    cx.expect_value(&done, 1, "the last signal")
}
