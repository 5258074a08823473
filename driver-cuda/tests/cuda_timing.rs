//! Timings on a real GPU, printed (not asserted): how completion threads should wait for events
//! (spin, blocking, spin-then-block), and a ten-dispatch command buffer replayed as a CUDA graph
//! against the same dispatches launched directly. Ignored without the CUDA driver
//! library at build time (see `tests/common/mod.rs`).
//!
//! The HAL's costs beside raw-CUDA baselines measured in the same process (launch + record, stream
//! waits, stream synchronize, graph launch, stream-ordered allocation) are in the `bench` crate:
//! `cargo run --release -p bench -- --driver cuda` (see `docs/benchmarks.md#running-it`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use driver_cuda::{CompletionWait, CudaDriver, CudaOptions};
use hal::driver::Driver;
use hal::{BufferBinding, BufferParams, CommandBufferMode, SemaphoreValue as SV};

/// CPU time of every thread of this process, in nanoseconds (from /proc, 0 if unreadable).
fn process_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()))
        .sum()
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn percentile(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}

/// Median and p90 of `n` host round trips of `command_buffer` on queue 0: execute, then wait on the
/// host with `timeout` (a finite timeout waits for the completion thread; `Infinite` lets the waiting
/// thread wait on the device event itself).
fn round_trip(
    device: &hal::Device,
    command_buffer: &hal::CommandBuffer,
    timeout: hal::Timeout,
    n: usize,
) -> (f64, f64) {
    let q = device.queue(0).unwrap();
    let s = device.create_semaphore(0).unwrap();
    let mut value = 0;
    for _ in 0..100 {
        value += 1;
        q.execute(&[], command_buffer, &[SV::new(&s, value)]).unwrap();
        s.wait(value, timeout).unwrap();
    }
    let mut samples: Vec<f64> = (0..n)
        .map(|_| {
            value += 1;
            let t = Instant::now();
            q.execute(&[], command_buffer, &[SV::new(&s, value)]).unwrap();
            s.wait(value, timeout).unwrap();
            us(t.elapsed())
        })
        .collect();
    (percentile(&mut samples, 0.5), percentile(&mut samples, 0.9))
}

/// One and ten dependent dispatches of `add_one_u32` (ten with barriers).
fn add_buffers(
    device: &hal::Device,
    exe: &hal::Executable,
    data: &hal::Buffer,
) -> (hal::CommandBuffer, hal::CommandBuffer) {
    let add = exe.entry_point("add_one_u32").unwrap();
    let one = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    one.dispatch(exe, add, [1, 1, 1], &[256], &[BufferBinding::whole(data)]).unwrap();
    one.end().unwrap();
    let ten = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    for _ in 0..10 {
        ten.dispatch(exe, add, [1, 1, 1], &[256], &[BufferBinding::whole(data)]).unwrap();
        ten.barrier().unwrap();
    }
    ten.end().unwrap();
    (one, ten)
}

/// Host round trips, a dependent chain, and CPU use with completion threads waiting as `options` say.
fn completion_mode(options: CudaOptions) {
    let (mode, interval) = (options.completion_wait, options.poll_interval);
    let device = CudaDriver::with_options(options).create_device(0).unwrap();
    let exe = kernels(&device).unwrap();
    let data = device.allocate_buffer(BufferParams::device_local(), 1024).unwrap();
    let (one, ten) = add_buffers(&device, &exe, &data);
    let finite = hal::Timeout::After(Duration::from_secs(20));
    let (one_f, one_f90) = round_trip(&device, &one, finite, 2000);
    let (one_i, one_i90) = round_trip(&device, &one, hal::Timeout::Infinite, 2000);
    let (ten_f, ten_f90) = round_trip(&device, &ten, finite, 1000);
    let (ten_i, ten_i90) = round_trip(&device, &ten, hal::Timeout::Infinite, 1000);
    let q = device.queue(0).unwrap();
    let chain = device.create_semaphore(0).unwrap();
    let t = Instant::now();
    for v in 1..=2000u64 {
        q.execute(&[SV::new(&chain, v - 1)], &one, &[SV::new(&chain, v)]).unwrap();
    }
    let submit = us(t.elapsed()) / 2000.0;
    chain.wait(2000, finite).unwrap();
    let complete = us(t.elapsed()) / 2000.0;
    let s = device.create_semaphore(0).unwrap();
    let sleep = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    sleep.dispatch(&exe, exe.entry_point("sleep_us").unwrap(), [1, 1, 1], &[100_000], &[]).unwrap();
    sleep.end().unwrap();
    let (cpu, wall) = (process_cpu_ns(), Instant::now());
    for value in 1..=3 {
        q.execute(&[], &sleep, &[SV::new(&s, value)]).unwrap();
        s.wait(value, finite).unwrap();
    }
    let cpu_share = 100.0 * (process_cpu_ns() - cpu) as f64 / wall.elapsed().as_nanos() as f64;
    println!(
        "MODE {mode:?} poll {interval:?}: chain of single dispatches {submit:.2} us/submit, {complete:.2} us each to \
         completion; one dispatch {one_f:.1} us (p90 {one_f90:.1}) finite wait, {one_i:.1} us (p90 {one_i90:.1}) \
         infinite wait; ten dispatches {ten_f:.1} us (p90 {ten_f90:.1}) finite, {ten_i:.1} us (p90 {ten_i90:.1}) \
         infinite; CPU while a 100 ms kernel runs: {cpu_share:.0}% of a core"
    );
}

/// A ten-dispatch command buffer replayed as a CUDA graph (the default) against the same ten
/// dispatches launched directly (`graph_min_commands: usize::MAX`): execute + host wait with no
/// deadline, median and p90.
fn graph_against_direct() {
    let default = CudaOptions::default();
    let thresholds = [
        ("graph", default.graph_min_commands, default.reusable_graph_min_commands),
        ("direct", usize::MAX, usize::MAX),
    ];
    for (label, graph_min_commands, reusable_graph_min_commands) in thresholds {
        let options = CudaOptions { graph_min_commands, reusable_graph_min_commands, ..CudaOptions::default() };
        let device = CudaDriver::with_options(options).create_device(0).unwrap();
        let exe = kernels(&device).unwrap();
        let data = device.allocate_buffer(BufferParams::device_local(), 1024).unwrap();
        let (_, ten) = add_buffers(&device, &exe, &data);
        let (median, p90) = round_trip(&device, &ten, hal::Timeout::Infinite, 500);
        println!(
            "TIMING hal: ten dispatches ({label}), execute + infinite host wait: median {median:.2} us, p90 {p90:.2} us"
        );
    }
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn completion_wait_modes_and_graph_against_direct() {
    if !require_cuda() {
        return;
    }
    if ptx().is_none() {
        return;
    }
    println!(
        "== completion wait modes: host round trip of one dispatch (execute + semaphore wait), CPU during 100 ms kernels"
    );
    let with = |completion_wait, poll_us| CudaOptions {
        completion_wait,
        poll_interval: Duration::from_micros(poll_us),
        ..CudaOptions::default()
    };
    let stb = |budget_us| CompletionWait::SpinThenBlock(Duration::from_micros(budget_us));
    for options in [
        with(CompletionWait::Spin, 0),
        with(CompletionWait::Blocking, 0),
        with(stb(100), 0),
        with(stb(100), 2),
        with(stb(100), 5),
        with(stb(300), 2),
        with(stb(1000), 2),
    ] {
        completion_mode(options);
    }
    println!("== ten dispatches: CUDA graph against direct launches");
    graph_against_direct();
}
