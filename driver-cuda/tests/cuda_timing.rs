//! Timings on a real GPU, printed (not asserted): how completion threads should wait for events
//! (spin, blocking, spin-then-block), and the HAL's costs beside raw CUDA baselines measured in the
//! same process through cudarc's `result` layer. Without a GPU it prints that it was not run.

mod common;

use std::ffi::{CString, c_void};
use std::time::{Duration, Instant};

use common::*;
use cudarc::driver::{result, sys};
use driver_cuda::{CompletionWait, CudaDriver, CudaOptions};
use hal::{BufferBinding, BufferParams, CommandBufferMode, Driver, SemaphoreValue as SV};

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

struct Raw {
    function: sys::CUfunction,
    data: sys::CUdeviceptr,
}

impl Raw {
    fn launch(&self, stream: sys::CUstream) {
        let mut data = self.data;
        let mut n = 256u32;
        let mut params = [(&mut data as *mut u64).cast::<c_void>(), (&mut n as *mut u32).cast::<c_void>()];
        // SAFETY: the function takes (u32*, u32); `params` points at live values of those types.
        unsafe { result::launch_kernel(self.function, (1, 1, 1), (256, 1, 1), 0, stream, &mut params) }.unwrap();
    }
}

fn event(flags: u32) -> sys::CUevent {
    let mut event = std::ptr::null_mut();
    // SAFETY: the primary context is current on this thread; the out-pointer is a live local.
    assert_eq!(unsafe { sys::cuEventCreate(&mut event, flags) }, sys::CUresult::CUDA_SUCCESS);
    event
}

/// Raw CUDA baselines on the primary context (which the HAL device shares).
fn raw_baselines(ptx: &str) -> Vec<(&'static str, f64)> {
    let mut rows = Vec::new();
    let device = result::device::get(0).unwrap();
    // SAFETY: `device` came from cuDeviceGet; released at the end of this function.
    let ctx = unsafe { result::primary_ctx::retain(device) }.unwrap();
    // SAFETY: `ctx` is a retained primary context.
    unsafe { result::ctx::set_current(ctx) }.unwrap();
    let image = CString::new(ptx).unwrap();
    // SAFETY: `image` is NUL-terminated PTX that lives across the call.
    let module = unsafe { result::module::load_data(image.as_ptr().cast()) }.unwrap();
    // SAFETY: the module was just loaded.
    let function = unsafe { result::module::get_function(module, CString::new("add_one_u32").unwrap()) }.unwrap();
    // SAFETY: the context is current.
    let data = unsafe { result::malloc_sync(1024) }.unwrap();
    let stream = result::stream::create(result::stream::StreamKind::NonBlocking).unwrap();
    let other = result::stream::create(result::stream::StreamKind::NonBlocking).unwrap();
    let raw = Raw { function, data };
    let sync = |s: sys::CUstream| {
        // SAFETY: `s` is a live stream.
        unsafe { result::stream::synchronize(s) }.unwrap()
    };
    for _ in 0..200 {
        raw.launch(stream);
    }
    sync(stream);

    let n = 2000;
    let mut samples: Vec<f64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            raw.launch(stream);
            sync(stream);
            us(t.elapsed())
        })
        .collect();
    rows.push(("raw: launch + cuStreamSynchronize (median us)", percentile(&mut samples, 0.5)));

    for (name, flags) in [
        (
            "raw: launch + record + cuEventSynchronize, spin event (median us)",
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
        ),
        (
            "raw: launch + record + cuEventSynchronize, BLOCKING_SYNC event (median us)",
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32 | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32,
        ),
    ] {
        let e = event(flags);
        let mut samples: Vec<f64> = (0..n)
            .map(|_| {
                let t = Instant::now();
                raw.launch(stream);
                // SAFETY: live event and stream of the current context.
                unsafe { result::event::record(e, stream) }.unwrap();
                // SAFETY: live event.
                unsafe { result::event::synchronize(e) }.unwrap();
                us(t.elapsed())
            })
            .collect();
        rows.push((name, percentile(&mut samples, 0.5)));
    }

    let e = event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32);
    let chain = 1000;
    let t = Instant::now();
    for _ in 0..chain {
        raw.launch(stream);
        // SAFETY: live event and stream.
        unsafe { result::event::record(e, stream) }.unwrap();
    }
    let enqueue = t.elapsed();
    sync(stream);
    rows.push(("raw: launch + record, enqueue (us each)", us(enqueue) / chain as f64));
    rows.push(("raw: launch + record, to completion (us each)", us(t.elapsed()) / chain as f64));

    let (ea, eb) = (
        event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32),
        event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32),
    );
    let t = Instant::now();
    for _ in 0..chain / 2 {
        raw.launch(stream);
        // SAFETY (this block): live events and streams of the current context.
        unsafe {
            result::event::record(ea, stream).unwrap();
            result::stream::wait_event(other, ea, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT).unwrap();
        }
        raw.launch(other);
        // SAFETY: as above.
        unsafe {
            result::event::record(eb, other).unwrap();
            result::stream::wait_event(stream, eb, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT).unwrap();
        }
    }
    sync(stream);
    sync(other);
    rows.push(("raw: cross-stream ping-pong hop, to completion (us each)", us(t.elapsed()) / chain as f64));

    // A ten-kernel graph by stream capture.
    // SAFETY: the stream is live and idle.
    unsafe { result::stream::begin_capture(stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED) }.unwrap();
    for _ in 0..10 {
        raw.launch(stream);
    }
    // SAFETY: capture was begun on this stream.
    let graph = unsafe { result::stream::end_capture(stream) }.unwrap();
    // SAFETY: `graph` is the captured graph.
    let exec = unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) }.unwrap();
    let launch_graph = || {
        // SAFETY: live executable graph and stream.
        unsafe { result::graph::launch(exec, stream) }.unwrap()
    };
    launch_graph();
    sync(stream);
    let mut samples: Vec<f64> = (0..500)
        .map(|_| {
            let t = Instant::now();
            launch_graph();
            sync(stream);
            us(t.elapsed())
        })
        .collect();
    rows.push(("raw: ten-kernel graph launch + sync (median us)", percentile(&mut samples, 0.5)));
    let blocking =
        event(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32 | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32);
    let mut samples: Vec<f64> = (0..500)
        .map(|_| {
            let t = Instant::now();
            launch_graph();
            // SAFETY: live event and stream; the event is queried until its capture completed.
            unsafe {
                result::event::record(blocking, stream).unwrap();
                while sys::cuEventQuery(blocking) == sys::CUresult::CUDA_ERROR_NOT_READY {}
            }
            us(t.elapsed())
        })
        .collect();
    rows.push(("raw: ten-kernel graph launch + record + cuEventQuery poll (median us)", percentile(&mut samples, 0.5)));
    let mut samples: Vec<f64> = (0..500)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..10 {
                raw.launch(stream);
            }
            sync(stream);
            us(t.elapsed())
        })
        .collect();
    rows.push(("raw: ten launches + sync (median us)", percentile(&mut samples, 0.5)));
    let t = Instant::now();
    for _ in 0..500 {
        launch_graph();
    }
    sync(stream);
    rows.push(("raw: ten-kernel graph launches back to back, to completion (us each)", us(t.elapsed()) / 500.0));

    let mut pool = std::ptr::null_mut();
    // SAFETY: valid device; out-pointer is a live local.
    unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, device) };
    let t = Instant::now();
    for _ in 0..1000 {
        // SAFETY: live pool and stream; the memory is freed in stream order right after.
        unsafe {
            let ptr = result::mem_pool::alloc_async(pool, 1 << 20, stream).unwrap();
            result::free_async(ptr, stream).unwrap();
        }
    }
    sync(stream);
    rows.push(("raw: cuMemAllocFromPoolAsync + cuMemFreeAsync 1 MiB (us each)", us(t.elapsed()) / 1000.0));

    // SAFETY: everything below is destroyed once, after the streams drained.
    unsafe {
        result::graph::exec_destroy(exec).unwrap();
        result::graph::destroy(graph).unwrap();
        result::stream::destroy(stream).unwrap();
        result::stream::destroy(other).unwrap();
        result::memory_free(data).unwrap();
        result::module::unload(module).unwrap();
        result::primary_ctx::release(device).unwrap();
    }
    rows
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

/// The HAL's costs with the default options.
fn hal_costs() -> Vec<(&'static str, f64)> {
    let mut rows = Vec::new();
    let device = driver_cuda::create_device(0).unwrap();
    let exe = kernels(&device).unwrap();
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
    let data = device.allocate_buffer(BufferParams::device_local(), 1024).unwrap();
    let (one, ten) = add_buffers(&device, &exe, &data);
    let s = device.create_semaphore(0).unwrap();
    let mut v = 0u64;
    for _ in 0..200 {
        v += 1;
        q0.execute(&[SV::new(&s, v - 1)], &one, &[SV::new(&s, v)]).unwrap();
    }
    s.wait(v, T).unwrap();

    let chain = 1000;
    let t = Instant::now();
    for _ in 0..chain {
        v += 1;
        q0.execute(&[SV::new(&s, v - 1)], &one, &[SV::new(&s, v)]).unwrap();
    }
    let enqueue = t.elapsed();
    s.wait(v, T).unwrap();
    rows.push(("hal: dependent single-dispatch execute, submit (us each)", us(enqueue) / chain as f64));
    rows.push(("hal: dependent single-dispatch execute, to completion (us each)", us(t.elapsed()) / chain as f64));

    let t = Instant::now();
    for i in 0..chain {
        v += 1;
        let q = if i % 2 == 0 { &q1 } else { &q0 };
        q.execute(&[SV::new(&s, v - 1)], &one, &[SV::new(&s, v)]).unwrap();
    }
    s.wait(v, T).unwrap();
    rows.push(("hal: cross-queue ping-pong hop, to completion (us each)", us(t.elapsed()) / chain as f64));

    let mut samples: Vec<f64> = (0..500)
        .map(|_| {
            v += 1;
            let t = Instant::now();
            q0.execute(&[], &ten, &[SV::new(&s, v)]).unwrap();
            s.wait(v, T).unwrap();
            us(t.elapsed())
        })
        .collect();
    rows.push(("hal: ten-dispatch command buffer execute + host wait (median us)", percentile(&mut samples, 0.5)));
    let t = Instant::now();
    for _ in 0..500 {
        v += 1;
        q0.execute(&[SV::new(&s, v - 1)], &ten, &[SV::new(&s, v)]).unwrap();
    }
    s.wait(v, T).unwrap();
    rows.push((
        "hal: ten-dispatch command buffer, dependent executes, to completion (us each)",
        us(t.elapsed()) / 500.0,
    ));

    // The same ten dispatches launched directly instead of as a graph.
    let direct_options = CudaOptions { graph_min_commands: usize::MAX, ..CudaOptions::default() };
    let direct_device = CudaDriver::with_options(direct_options).create_device(0).unwrap();
    let direct_exe = kernels(&direct_device).unwrap();
    let direct_data = direct_device.allocate_buffer(BufferParams::device_local(), 1024).unwrap();
    let (_, direct_ten) = add_buffers(&direct_device, &direct_exe, &direct_data);
    let (median, _) = round_trip(&direct_device, &direct_ten, hal::Timeout::Infinite, 500);
    rows.push(("hal: ten dispatches launched directly, execute + infinite host wait (median us)", median));
    drop((direct_ten, direct_exe, direct_data, direct_device));

    let a = device.create_semaphore(0).unwrap();
    let t = Instant::now();
    for i in 0..1000u64 {
        let b =
            q0.alloca(&[SV::new(&a, 2 * i)], BufferParams::device_local(), 1 << 20, &[SV::new(&a, 2 * i + 1)]).unwrap();
        q0.dealloca(&[SV::new(&a, 2 * i + 1)], &b, &[SV::new(&a, 2 * i + 2)]).unwrap();
    }
    a.wait(2000, T).unwrap();
    rows.push(("hal: queue_alloca + queue_dealloca 1 MiB, chained, to completion (us each)", us(t.elapsed()) / 1000.0));
    rows
}

#[test]
fn completion_wait_modes_and_costs_beside_raw_cuda() {
    if !cuda_available("cuda_timing") {
        return;
    }
    let Some(ptx) = ptx() else { return };
    println!("== raw CUDA baselines (same process, cudarc result layer)");
    for (name, value) in raw_baselines(ptx) {
        println!("TIMING {name}: {value:.2}");
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
    println!("== HAL costs (default options: {:?})", CudaOptions::default().completion_wait);
    for (name, value) in hal_costs() {
        println!("TIMING {name}: {value:.2}");
    }
}
