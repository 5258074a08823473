//! Tests that judge the driver against a sleeping kernel: work must still be behind the sleep, or
//! a host call must return while it runs. They run in a process of their own, one at a time: in a
//! process whose other tests load modules (`cuModuleLoadData`) or free pinned host memory
//! (`cuMemFreeHost`), those calls wait for every running kernel and hold back every thread's
//! launches meanwhile (`docs/drivers.md`), so the sleep would be over before anything was judged.
//! Without the CUDA driver library at build time every test is ignored (see `tests/common/mod.rs`).

mod common;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::*;
use hal::{
    Buffer, BufferBinding, BufferParams, CommandBuffer, CommandBufferMode, Device, Executable, SemaphoreValue as SV,
};

macro_rules! require_cuda {
    () => {
        if !require_cuda() {
            return;
        }
    };
}

/// Held by each test for its whole run: the tests of this file run one at a time.
fn alone() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A one-shot buffer of one `sleep_us` dispatch.
fn sleeper(device: &Device, exe: &Executable, us: u32) -> CommandBuffer {
    let sleep = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    sleep.dispatch(exe, exe.entry_point("sleep_us").unwrap(), [1, 1, 1], &[us], &[]).unwrap();
    sleep.end().unwrap();
    sleep
}

/// A buffer of one `add_one_u32` dispatch over `n` words of `data`, in `mode`.
fn add_one_cb(device: &Device, exe: &Executable, data: &Buffer, n: u32, mode: CommandBufferMode) -> CommandBuffer {
    let cb = device.create_command_buffer(mode).unwrap();
    cb.dispatch(exe, exe.entry_point("add_one_u32").unwrap(), [1, 1, 1], &[n], &[BufferBinding::whole(data)]).unwrap();
    cb.end().unwrap();
    cb
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn dropping_buffers_while_a_kernel_runs_waits_for_nothing() {
    require_cuda!();
    let _alone = alone();
    let device = device();
    let Some(exe) = kernels(&device) else { return };
    let n = 256u32;
    let data = device_buffer(&device, 4 * u64::from(n));
    let add_one = add_one_cb(&device, &exe, &data, n, CommandBufferMode::Reusable);
    // Device buffers are freed on a stream of their own; host-visible ones are kept for reuse
    // (cuMemFreeHost would wait as cuMemFree does).
    let doomed: Vec<Buffer> =
        (0..8).map(|_| device_buffer(&device, 1 << 20)).chain((0..8).map(|_| host_buffer(&device, 1 << 20))).collect();
    // And an executable: its module unloads on a thread of its own (cuModuleUnload waits too).
    let doomed_exe = kernels(&device).unwrap();
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
    let slept = device.create_semaphore(0).unwrap();
    let ticks = device.create_semaphore(0).unwrap();
    q0.execute(&[], &sleeper(&device, &exe, 300_000), &[SV::new(&slept, 1)]).unwrap();
    // One thread drops the buffers while this one submits to the other queue: neither waits for the
    // 300 ms kernel (cuMemFree would, and would hold back every launch meanwhile).
    let (dropped_in, slowest) = std::thread::scope(|scope| {
        let dropper = scope.spawn(move || {
            let start = Instant::now();
            drop(doomed);
            drop(doomed_exe);
            start.elapsed()
        });
        let mut slowest = Duration::ZERO;
        for i in 0..20u64 {
            let start = Instant::now();
            q1.execute(&[], &add_one, &[SV::new(&ticks, i + 1)]).unwrap();
            slowest = slowest.max(start.elapsed());
        }
        (dropper.join().unwrap(), slowest)
    });
    ticks.wait(20, T).unwrap();
    let still_sleeping = slept.query().unwrap() == 0;
    slept.wait(1, T).unwrap();
    assert!(still_sleeping, "the sleep ended before the drops and submissions did: nothing was judged");
    assert!(
        dropped_in < Duration::from_millis(50),
        "dropping 8 device and 8 host-visible buffers and an executable took {dropped_in:?}"
    );
    assert!(slowest < Duration::from_millis(50), "a submission beside the drops took {slowest:?}");
    assert!(u32s(&read_back(&device, &data)).iter().all(|&w| w == 20));
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn cross_queue_chain_waits_on_device_events() {
    require_cuda!();
    let _alone = alone();
    let device = device();
    let Some(exe) = kernels(&device) else { return };
    let n = 1024u32;
    let data = device_buffer(&device, 4 * u64::from(n));
    let add_one = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    add_one
        .dispatch(&exe, exe.entry_point("add_one_u32").unwrap(), [4, 1, 1], &[n], &[BufferBinding::whole(&data)])
        .unwrap();
    add_one.end().unwrap();
    let sleep = sleeper(&device, &exe, 200_000);
    let s = device.create_semaphore(0).unwrap();
    let queues: Vec<_> = (0..4).map(|i| device.queue(i).unwrap()).collect();
    // Queue 0 sleeps 200 ms and signals 1; then 40 hops round the four queues, each waiting on the
    // previous value. All are covered by recorded events, so all are issued at once.
    let submitted = Instant::now();
    queues[0].execute(&[], &sleep, &[SV::new(&s, 1)]).unwrap();
    let hops = 40u64;
    for i in 1..=hops {
        queues[(i % 4) as usize].execute(&[SV::new(&s, i)], &add_one, &[SV::new(&s, i + 1)]).unwrap();
    }
    let usage = device.resource_usage();
    let pending = usage.pools.iter().find(|p| p.name == "pending actions").unwrap().in_use;
    assert_eq!(pending, 0, "every hop was issued device-side, none held on the host: {usage}");
    let early = s.query().unwrap();
    let at = submitted.elapsed();
    s.wait(hops + 1, T).unwrap();
    assert!(early < 1, "the chain is still behind the sleep: s = {early} {at:?} after the sleep's execute");
    assert!(u32s(&read_back(&device, &data)).iter().all(|&w| w == hops as u32));
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn a_retirement_that_drops_an_executable_holds_back_no_later_signal() {
    require_cuda!();
    let _alone = alone();
    let device = device();
    let Some(exe) = kernels(&device) else { return };
    let Some(spare) = kernels(&device) else { return };
    let n = 256u32;
    let data = device_buffer(&device, 4 * u64::from(n));
    let last_use = add_one_cb(&device, &spare, &data, n, CommandBufferMode::OneShot);
    let add_one = add_one_cb(&device, &exe, &data, n, CommandBufferMode::Reusable);
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
    let slept = device.create_semaphore(0).unwrap();
    let s = device.create_semaphore(0).unwrap();
    q0.execute(&[], &sleeper(&device, &exe, 300_000), &[SV::new(&slept, 1)]).unwrap();
    // The first execute holds the last handles of `spare`: its retirement, on q1's completion
    // thread, drops the executable while q0's kernel still runs. The second execute's signal must
    // not wait for that kernel.
    let start = Instant::now();
    q1.execute(&[], &last_use, &[SV::new(&s, 1)]).unwrap();
    drop((last_use, spare));
    q1.execute(&[SV::new(&s, 1)], &add_one, &[SV::new(&s, 2)]).unwrap();
    s.wait(2, T).unwrap();
    let waited = start.elapsed();
    let still_sleeping = slept.query().unwrap() == 0;
    slept.wait(1, T).unwrap();
    assert!(still_sleeping, "the sleep ended before q1's work did: nothing was judged");
    assert!(waited < Duration::from_millis(100), "q1's second signal took {waited:?}");
    assert!(u32s(&read_back(&device, &data)).iter().all(|&w| w == 2));
}

/// The kept-module count the device reports.
fn kept_modules(device: &Device) -> usize {
    let usage = device.resource_usage();
    usage.pools.iter().find(|p| p.name == "kept modules").expect("a kept-module count").created
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn an_executable_dropped_between_rounds_holds_back_no_launch() {
    require_cuda!();
    let _alone = alone();
    let device = device();
    let q0 = device.queue(0).unwrap();
    let before = kept_modules(&device);
    // Each round loads an executable, launches a 50 ms sleep from it and drops it once the sleep
    // ends, and the next round starts at once: an unload of the last round's module made while
    // this round's sleep runs held this round's execute until the sleep ended.
    let rounds = 12;
    let mut slowest = Duration::ZERO;
    for round in 1..=rounds {
        let Some(exe) = kernels(&device) else { return };
        let s = device.create_semaphore(0).unwrap();
        let start = Instant::now();
        q0.execute(&[], &sleeper(&device, &exe, 50_000), &[SV::new(&s, 1)]).unwrap();
        let took = start.elapsed();
        slowest = slowest.max(took);
        assert!(took < Duration::from_millis(25), "round {round}: the execute call took {took:?}");
        drop(exe);
        s.wait(1, T).unwrap();
    }
    assert_eq!(kept_modules(&device), before + rounds, "every dropped module is kept until trim");
    device.trim().unwrap();
    assert_eq!(kept_modules(&device), 0, "trim unloads the kept modules");
    eprintln!("slowest execute call: {slowest:?}");
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn kept_modules_are_bounded() {
    require_cuda!();
    let _alone = alone();
    let device = device();
    device.trim().unwrap();
    for _ in 0..70 {
        let Some(exe) = kernels(&device) else { return };
        drop(exe);
    }
    assert_eq!(kept_modules(&device), 64, "the oldest kept modules are unloaded past the bound");
    // The device still loads and runs executables after the unloads.
    let Some(exe) = kernels(&device) else { return };
    let data = device_buffer(&device, 64);
    let s = device.create_semaphore(0).unwrap();
    let q0 = device.queue(0).unwrap();
    q0.fill(&[], &data, 0, 64, 0u8, &[SV::new(&s, 1)]).unwrap();
    q0.execute(&[SV::new(&s, 1)], &add_one_cb(&device, &exe, &data, 16, CommandBufferMode::OneShot), &[SV::new(&s, 2)])
        .unwrap();
    s.wait(2, T).unwrap();
    assert!(u32s(&read_back(&device, &data)).iter().take(16).all(|&w| w == 1));
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn an_alloca_behind_running_work_is_done_only_after_it() {
    require_cuda!();
    let _alone = alone();
    let device = device();
    let Some(exe) = kernels(&device) else { return };
    let q0 = device.queue(0).unwrap();
    let (slept, s) = (device.create_semaphore(0).unwrap(), device.create_semaphore(0).unwrap());
    q0.execute(&[], &sleeper(&device, &exe, 100_000), &[SV::new(&slept, 1)]).unwrap();
    let t = q0.alloca(&[], BufferParams::device_local(), 4096, &[SV::new(&s, 1)]).unwrap();
    let early = s.query().unwrap();
    let still_sleeping = slept.query().unwrap() == 0;
    s.wait(1, T).unwrap();
    assert!(still_sleeping, "the sleep ended before the alloca was judged");
    assert_eq!(early, 0, "an alloca behind running work signalled before that work ended");
    assert_eq!(slept.query().unwrap(), 1, "the alloca's value came before the work ahead of it ended");
    q0.dealloca(&[SV::new(&s, 1)], &t, &[SV::new(&s, 2)]).unwrap();
    s.wait(2, T).unwrap();
}
