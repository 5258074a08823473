//! Several devices of one driver: a queue of one device waits on the device for a semaphore that
//! another device's queue signals (no trip through the host when the driver can wait on the other
//! device's events), producers on the other device retire first, failures and teardown cross
//! devices without a hang.
//!
//! The devices come from the fixture (`Cx::devices`): on CUDA with one GPU they are HAL devices on
//! the same GPU (two schedulers, two event pools); each case says in a note how many it ran on.
//! Whether a wait went to the device is seen in the waiting device's pools: a wait covered by an
//! event issues the work at once, while a wait left to the host holds it as a pending action.

use std::time::{Duration, Instant};

use hal::{BufferBinding, CommandBuffer, CommandBufferMode, Device, Error, StatusCode};

use crate::check::{CaseError, CaseResult, Context};
use crate::context::{Cx, LONG, sv};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

/// Pending actions (submissions held for the host) on `device` now.
fn pending(device: &Device) -> usize {
    device.resource_usage().pools.iter().find(|p| p.name == "pending actions").map_or(0, |p| p.in_use)
}

/// A one-shot command buffer of `device` that keeps it busy for about `us` microseconds.
fn busy(cx: &Cx, device: &Device, us: u32) -> Result<CommandBuffer, CaseError> {
    let sleep = cx.load_on(device, Kernel::Sleep)?;
    let cb = device.create_command_buffer(CommandBufferMode::OneShot).ctx("command buffer")?;
    cb.dispatch(&sleep, 0, [1, 1, 1], &[us], &[]).ctx("sleep dispatch")?;
    cb.end().ctx("end")?;
    Ok(cb)
}

/// Polls `done` for up to [`LONG`]; `what` names the condition in the failure.
fn eventually(what: &str, done: impl Fn() -> bool) -> CaseResult {
    let deadline = Instant::now() + LONG;
    while !done() {
        ensure!(Instant::now() < deadline, "{what}: not within {LONG:?}");
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

/// Device B's fill waits on a semaphore that device A's slow work signals: submitted after A's
/// work, it is issued at once (no pending action on B: the wait is a device-side wait on A's
/// event), does not run before A's work, and lands. The same with the semaphore created by B and
/// signalled by A's queue.
pub(crate) fn wait_on_another_devices_signal_goes_to_the_device(cx: &Cx) -> CaseResult {
    let [a, b] = cx.devices::<2>()?;
    let out = b.allocate_buffer(hal::BufferParams::host_visible(), 16).ctx("buffer on B")?;
    for (round, owner) in [(1u64, &a), (2, &b)] {
        let s = owner.create_semaphore(0).ctx("semaphore")?;
        let done = b.create_semaphore(0).ctx("done")?;
        a.queue(0).ctx("queue")?.execute(&[], &busy(cx, &a, 50_000)?, &[sv(&s, 1)]).ctx("A's slow execute")?;
        b.queue(0).ctx("queue")?.fill(&[sv(&s, 1)], &out, 0, 16, round as u8, &[sv(&done, 1)]).ctx("B's fill")?;
        let held = pending(&b);
        let still_running = s.query().ctx("query")? == 0;
        cx.still_pending(&done, 1, "B's fill before A's work finished")?;
        cx.wait(&done, 1)?;
        ensure_eq!(cx.bytes(&out)?, vec![round as u8; 16], "B's fill");
        let whose = if round == 1 { "A" } else { "B" };
        ensure!(
            held == 0 || !still_running,
            "a wait on {whose}'s semaphore signalled by A's queue was held for the host ({held} pending on B)"
        );
        cx.note(format!("semaphore of {whose}: B issued at once ({held} pending while A ran)"));
    }
    Ok(())
}

/// B submits first, waiting on a value A has not been asked to signal yet; once A's slow work is
/// submitted, B's held action is issued on A's event while A's work still runs (B's pending
/// actions drop to 0 before the value is reached), and B's work lands after A's.
pub(crate) fn wait_before_signal_across_devices(cx: &Cx) -> CaseResult {
    // Before anything is held: a skip part-way would leave B's fill held.
    cx.needs_kernel(Kernel::Sleep)?;
    let [a, b] = cx.devices::<2>()?;
    let (s, done) = (a.create_semaphore(0).ctx("semaphore")?, b.create_semaphore(0).ctx("done")?);
    let out = b.allocate_buffer(hal::BufferParams::host_visible(), 8).ctx("buffer on B")?;
    // Made before anything is held, so a catalogue without the sleep kernel skips with nothing held.
    let slow = busy(cx, &a, 100_000)?;
    b.queue(0).ctx("queue")?.fill(&[sv(&s, 1)], &out, 0, 8, 7u8, &[sv(&done, 1)]).ctx("B's held fill")?;
    ensure_eq!(pending(&b), 1, "B's fill is held before anyone signals");
    a.queue(0).ctx("queue")?.execute(&[], &slow, &[sv(&s, 1)]).ctx("A's slow execute")?;
    eventually("B's held fill issued", || pending(&b) == 0)?;
    let issued_early = s.query().ctx("query")? == 0;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.bytes(&out)?, vec![7; 8], "B's fill");
    ensure!(issued_early, "B's fill was issued only once A's value was reached (through the host)");
    Ok(())
}

/// A queue read on A signals A's semaphore; B's barrier waits on it device-side and signals B's.
/// Whenever the host sees B's value, A's value is there too and the read's bytes are ready: B's
/// retirement retires A's producer first. 50 rounds.
pub(crate) fn producer_on_another_device_retires_first(cx: &Cx) -> CaseResult {
    let [a, b] = cx.devices::<2>()?;
    let (s, done) = (a.create_semaphore(0).ctx("semaphore")?, b.create_semaphore(0).ctx("done")?);
    let source = a.allocate_buffer(hal::BufferParams::host_visible(), 64).ctx("buffer on A")?;
    source.write(0, &[5; 64]).ctx("write")?;
    let (qa, qb) = (a.queue(0).ctx("queue")?, b.queue(0).ctx("queue")?);
    for round in 1..=50u64 {
        let back = qa.read(&[], &source, 0, 64, &[sv(&s, round)]).ctx("A's read")?;
        qb.barrier(&[sv(&s, round)], &[sv(&done, round)]).ctx("B's barrier")?;
        cx.wait(&done, round)?;
        let produced = s.query().ctx("query")?;
        ensure!(produced >= round, "round {round}: B reached {round} while A's semaphore was {produced}");
        ensure_eq!(back.take(), Some(vec![5; 64]), "round {round}: A's read once B's value was seen");
    }
    Ok(())
}

/// A's slow work signals A's semaphore; B's fill goes past its wait on the device. The semaphore
/// fails on the host while A's work runs: B's signal fails with that status, nothing hangs.
pub(crate) fn failure_crosses_devices_after_the_device_wait(cx: &Cx) -> CaseResult {
    let [a, b] = cx.devices::<2>()?;
    let (s, done) = (a.create_semaphore(0).ctx("semaphore")?, b.create_semaphore(0).ctx("done")?);
    let out = b.allocate_buffer(hal::BufferParams::host_visible(), 8).ctx("buffer on B")?;
    a.queue(0).ctx("queue")?.execute(&[], &busy(cx, &a, 50_000)?, &[sv(&s, 1)]).ctx("A's slow execute")?;
    b.queue(0).ctx("queue")?.fill(&[sv(&s, 1)], &out, 0, 8, 3u8, &[sv(&done, 1)]).ctx("B's fill")?;
    s.fail(Error::unavailable("ctest: A's result was lost"));
    let e = cx.wait_failed(&done, 1, StatusCode::Unavailable)?;
    ensure!(e.message().contains("A's result was lost"), "B's failure is not A's: {e}");
    Ok(())
}

/// 100 hops alternating between the devices, each hop's dispatch waiting on the other device's last
/// value (a chain through both devices' semaphores): every value arrives, and both buffers hold
/// their device's mark.
pub(crate) fn ping_pong_between_devices(cx: &Cx) -> CaseResult {
    let [a, b] = cx.devices::<2>()?;
    let (sa, sb) = (a.create_semaphore(0).ctx("semaphore A")?, b.create_semaphore(0).ctx("semaphore B")?);
    let fill = [cx.load_on(&a, Kernel::FillU32)?, cx.load_on(&b, Kernel::FillU32)?];
    let outs = [
        a.allocate_buffer(hal::BufferParams::host_visible(), 256).ctx("buffer A")?,
        b.allocate_buffer(hal::BufferParams::host_visible(), 256).ctx("buffer B")?,
    ];
    let queues = [a.queue(0).ctx("queue")?, b.queue(0).ctx("queue")?];
    let steps: Vec<CommandBuffer> = (0..2)
        .map(|d| {
            let cb = [&a, &b][d].create_command_buffer(CommandBufferMode::Reusable).ctx("command buffer")?;
            let mark = d as u32 + 1;
            cb.dispatch(&fill[d], 0, [1, 1, 1], &[mark], &[BufferBinding::whole(&outs[d])]).ctx("dispatch")?;
            cb.end().ctx("end")?;
            Ok(cb)
        })
        .collect::<Result<_, CaseError>>()?;
    for hop in 1..=100u64 {
        let (d, wait, signal) = if hop % 2 == 1 { (0, &sb, &sa) } else { (1, &sa, &sb) };
        queues[d].execute(&[sv(wait, hop - 1)], &steps[d], &[sv(signal, hop)]).ctx(format!("hop {hop}"))?;
    }
    cx.wait(&sb, 100)?;
    ensure_eq!(sa.query().ctx("query")?, 99, "A's last hop");
    ensure_eq!(cx.words(&outs[0])?, vec![1; 64], "A's buffer");
    ensure_eq!(cx.words(&outs[1])?, vec![2; 64], "B's buffer");
    Ok(())
}

/// A ring of four devices carries a counter around five times: each hop copies the previous
/// device's words into this device's memory (a copy between devices, waiting on the previous
/// device's semaphore on the device) and adds one there (`add_u32`), so the ring's last buffer
/// holds the number of hops. Wait-before-signal across the ring: every hop is submitted before
/// the first one runs, released by one host signal.
pub(crate) fn ring_of_four_devices(cx: &Cx) -> CaseResult {
    const DEVICES: usize = 4;
    const ROUNDS: u64 = 5;
    const WORDS: u64 = 64;
    let devices = cx.devices::<DEVICES>()?;
    let gate = hal::Semaphore::new(0);
    let sems = devices.iter().map(|d| d.create_semaphore(0).ctx("semaphore")).collect::<Result<Vec<_>, _>>()?;
    let bufs = devices
        .iter()
        .map(|d| d.allocate_buffer(hal::BufferParams::host_visible(), WORDS * 4).ctx("buffer"))
        .collect::<Result<Vec<_>, _>>()?;
    let exes = devices.iter().map(|d| cx.load_on(d, Kernel::MultiEntry)).collect::<Result<Vec<_>, _>>()?;
    let add = exes[0].entry_point("add_u32").ctx("add_u32")?;
    // Device 0 starts from zeros, once the host opens the gate.
    devices[0]
        .queue(0)
        .ctx("queue")?
        .fill(&[sv(&gate, 1)], &bufs[0], 0, WORDS * 4, 0u32, &[sv(&sems[0], 1)])
        .ctx("device 0's first fill")?;
    // Hop h (1-based) runs on device h % 4 and signals that device's semaphore to `h + 1`'s round
    // value; it waits on the previous device's value for hop h - 1.
    let mut reached = [0u64; DEVICES];
    reached[0] = 1;
    for hop in 1..=(ROUNDS * DEVICES as u64) {
        let (d, prev) = ((hop % DEVICES as u64) as usize, ((hop - 1) % DEVICES as u64) as usize);
        let cb = devices[d].create_command_buffer(CommandBufferMode::OneShot).ctx("command buffer")?;
        cb.copy(&bufs[prev], 0, &bufs[d], 0, WORDS * 4).ctx("copy from the previous device")?;
        cb.barrier().ctx("barrier")?;
        cb.dispatch(&exes[d], add, [(WORDS / 64) as u32, 1, 1], &[1], &[BufferBinding::whole(&bufs[d])])
            .ctx("add one")?;
        cb.end().ctx("end")?;
        let wait = sv(&sems[prev], reached[prev]);
        reached[d] += 1;
        devices[d]
            .queue(0)
            .ctx("queue")?
            .execute(&[wait], &cb, &[sv(&sems[d], reached[d])])
            .ctx(format!("hop {hop} on device {d}"))?;
    }
    ensure!(sems.iter().all(|s| s.query().is_ok_and(|v| v == 0)), "hops ran before the gate opened");
    gate.signal(1).ctx("open the gate")?;
    let last = ((ROUNDS * DEVICES as u64) % DEVICES as u64) as usize;
    cx.wait(&sems[last], reached[last])?;
    let hops = (ROUNDS * DEVICES as u64) as u32;
    ensure_eq!(cx.words(&bufs[last])?, vec![hops; WORDS as usize], "the counter after {hops} hops");
    for (d, s) in sems.iter().enumerate() {
        ensure_eq!(s.query().ctx("query")?, reached[d], "device {d}'s semaphore");
    }
    Ok(())
}

/// The last handle of device A drops while B's work waits on A's slow work: B's work completes
/// (A's teardown finishes what it issued) or fails with a status; it never hangs.
pub(crate) fn dropping_the_producing_device_never_hangs_the_waiter(cx: &Cx) -> CaseResult {
    let b = cx.device().clone();
    let a = cx.fixture().create_device().ctx("a device to drop")?;
    let (s, done) = (a.create_semaphore(0).ctx("semaphore")?, b.create_semaphore(0).ctx("done")?);
    a.queue(0).ctx("queue")?.execute(&[], &busy(cx, &a, 30_000)?, &[sv(&s, 1)]).ctx("A's slow execute")?;
    b.queue(0).ctx("queue")?.barrier(&[sv(&s, 1)], &[sv(&done, 1)]).ctx("B's barrier")?;
    drop(a);
    match done.wait(1, hal::Timeout::After(LONG)) {
        Ok(()) => cx.note("B's work completed after A was dropped"),
        Err(e) if e.code() == StatusCode::DeadlineExceeded => {
            return Err(CaseError::Fail(format!("B's work hangs after A was dropped: {e}\n{}", b.report())));
        }
        Err(e) => cx.note(format!("B's work failed after A was dropped: {e}")),
    }
    Ok(())
}

/// Copies between devices, in both directions and both as queue copies and as command-buffer
/// copies (also through a binding-table slot), each ordered after the other device's writes by a
/// wait on the other device's semaphore: the bytes arrive, between device-local and host-visible
/// memory alike. Other uses of another device's buffer stay refused (`submission` and
/// `command_buffer` areas).
pub(crate) fn copies_between_devices(cx: &Cx) -> CaseResult {
    let [a, b] = cx.devices::<2>()?;
    const N: u64 = 4096;
    let (sa, sb) = (a.create_semaphore(0).ctx("semaphore A")?, b.create_semaphore(0).ctx("semaphore B")?);
    let (qa, qb) = (a.queue(0).ctx("queue A")?, b.queue(0).ctx("queue B")?);
    let on = |device: &Device, host: bool| {
        let params = if host { hal::BufferParams::host_visible() } else { hal::BufferParams::device_local() };
        device.allocate_buffer(params, N).ctx("buffer")
    };
    let (a_dev, b_dev, b_host, a_host) = (on(&a, false)?, on(&b, false)?, on(&b, true)?, on(&a, true)?);
    // A writes its device-local buffer; B's queue copies it into B's device memory, then to B's host
    // memory.
    qa.fill(&[], &a_dev, 0, N, 0x5Au8, &[sv(&sa, 1)]).ctx("A's fill")?;
    qb.copy(&[sv(&sa, 1)], &a_dev, 0, &b_dev, 0, N, &[sv(&sb, 1)]).ctx("B's queue copy from A")?;
    qb.copy(&[sv(&sb, 1)], &b_dev, 0, &b_host, 0, N, &[sv(&sb, 2)]).ctx("B's local copy")?;
    cx.wait(&sb, 2)?;
    ensure_eq!(cx.bytes(&b_host)?, vec![0x5A; N as usize], "A's bytes on B, through a queue copy");
    // B's command buffer writes its memory and copies it into A's host memory (a copy to another
    // device); A's queue then copies a half back into B's host memory (a queue copy to another device).
    let cb = b.create_command_buffer(CommandBufferMode::OneShot).ctx("command buffer on B")?;
    cb.fill(&b_dev, 0, N, 0xC3u8).ctx("fill")?;
    cb.barrier().ctx("barrier")?;
    cb.copy(&b_dev, 0, &a_host, 0, N).ctx("copy to A's memory")?;
    cb.end().ctx("end")?;
    qb.execute(&[], &cb, &[sv(&sb, 3)]).ctx("B's execute")?;
    qa.copy(&[sv(&sb, 3)], &a_host, 0, &b_host, 0, N / 2, &[sv(&sa, 2)]).ctx("A's queue copy to B")?;
    cx.wait(&sa, 2)?;
    ensure_eq!(cx.bytes(&a_host)?, vec![0xC3; N as usize], "B's bytes on A, through a command-buffer copy");
    let mut expected = vec![0xC3; N as usize / 2];
    expected.extend(vec![0x5A; N as usize / 2]);
    ensure_eq!(cx.bytes(&b_host)?, expected, "A's queue copy into B's memory");
    // A reusable command buffer of B copying from a slot that names A's buffer.
    let slotted = b.create_command_buffer(CommandBufferMode::Reusable).ctx("command buffer on B")?;
    slotted.copy(hal::BufferRef::slot(0), 0, &b_host, 0, N).ctx("copy from slot 0")?;
    slotted.end().ctx("end")?;
    qa.fill(&[], &a_dev, 0, N, 0x11u8, &[sv(&sa, 3)]).ctx("A's second fill")?;
    qb.execute_with_bindings(&[sv(&sa, 3)], &slotted, &[BufferBinding::whole(&a_dev)], &[sv(&sb, 4)])
        .ctx("B's execute with A's buffer in its table")?;
    cx.wait(&sb, 4)?;
    ensure_eq!(cx.bytes(&b_host)?, vec![0x11; N as usize], "a copy from another device's buffer in a table");
    Ok(())
}
