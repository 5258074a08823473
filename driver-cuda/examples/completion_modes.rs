//! Measures how the completion wait mode and the event flags change the per-submission cost, beside
//! raw `launch + cuEventRecord` with each event flag set, on one process and GPU.
//!
//! `cargo run --release -p driver-cuda --example completion_modes` (needs a GPU).

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUevent_flags};
use driver_cuda::{CompletionWait, CudaDriver, CudaOptions};
use hal::{
    BufferBinding, BufferParams, CommandBufferMode, Driver, EntryPointInfo, ExecutableFormat, ExecutableSource,
    SemaphoreValue as SV, Timeout,
};

/// The same `touch` kernel the bench uses, so both measure identical launches.
const PTX: &str = include_str!("../../bench/src/touch.ptx");

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn hal_costs(label: &str, options: CudaOptions) -> Result<(), hal::Error> {
    let device = CudaDriver::with_options(options).create_device(0)?;
    let exe = device.load_executable(&ExecutableSource::Bytes {
        format: ExecutableFormat::Ptx,
        data: Arc::from(PTX.as_bytes()),
        entry_points: vec![EntryPointInfo::new("touch", 1, 1, 1)],
    })?;
    let buf = device.allocate_buffer(BufferParams::device_local(), 256)?;
    let cb = device.create_command_buffer(CommandBufferMode::Reusable)?;
    cb.dispatch(&exe, 0, [1, 1, 1], &[7], &[BufferBinding::range(&buf, 0, 4)])?;
    cb.end()?;
    let q0 = device.queue(0)?;
    let q1 = device.queue(1)?;
    let n = 20_000u64;
    let mut chain = Vec::new();
    let mut hop = Vec::new();
    for _ in 0..5 {
        let s = device.create_semaphore(0)?;
        let t = Instant::now();
        for i in 0..n {
            q0.execute(&[SV::new(&s, i)], &cb, &[SV::new(&s, i + 1)])?;
        }
        s.wait(n, Timeout::Infinite)?;
        chain.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
        let s = device.create_semaphore(0)?;
        let t = Instant::now();
        for i in 0..n {
            let q = if i % 2 == 0 { &q0 } else { &q1 };
            q.execute(&[SV::new(&s, i)], &cb, &[SV::new(&s, i + 1)])?;
        }
        s.wait(n, Timeout::Infinite)?;
        hop.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    let rt = |timeout: Timeout| -> Result<f64, hal::Error> {
        let s = device.create_semaphore(0)?;
        let mut v = Vec::new();
        for trial in 0..5u64 {
            let t = Instant::now();
            for i in 0..1000u64 {
                let value = trial * 1000 + i + 1;
                q0.execute(&[], &cb, &[SV::new(&s, value)])?;
                s.wait(value, timeout)?;
            }
            v.push(t.elapsed().as_secs_f64() * 1e6 / 1000.0);
        }
        Ok(median(v))
    };
    let rt_assist = rt(Timeout::Infinite)?;
    let rt_deadline = rt(Timeout::After(Duration::from_secs(10)))?;
    println!(
        "{label:<34} chain {:>6.2}  hop {:>6.2}  round trip (no deadline) {:>6.2}  (deadline) {:>6.2}",
        median(chain),
        median(hop),
        rt_assist,
        rt_deadline
    );
    Ok(())
}

fn raw(flags: u32, label: &str) -> Result<(), String> {
    let e = |c: sys::CUresult, what: &str| {
        if c == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(format!("{what}: {c:?}")) }
    };
    // SAFETY (whole block): plain driver calls on a primary context bound to this thread; every
    // handle is created here and used only while alive; kernel parameters point at live locals.
    unsafe {
        let mut dev = 0;
        e(sys::cuDeviceGet(&mut dev, 0), "cuDeviceGet")?;
        let mut ctx = std::ptr::null_mut();
        e(sys::cuDevicePrimaryCtxRetain(&mut ctx, dev), "retain")?;
        e(sys::cuCtxSetCurrent(ctx), "set current")?;
        let ptx = std::ffi::CString::new(PTX).map_err(|x| x.to_string())?;
        let mut module = std::ptr::null_mut();
        e(sys::cuModuleLoadData(&mut module, ptx.as_ptr().cast()), "load")?;
        let mut f = std::ptr::null_mut();
        e(sys::cuModuleGetFunction(&mut f, module, c"touch".as_ptr()), "function")?;
        let mut out = 0;
        e(sys::cuMemAlloc_v2(&mut out, 256), "alloc")?;
        let mut stream = std::ptr::null_mut();
        e(sys::cuStreamCreate(&mut stream, 1), "stream")?;
        let mut events = Vec::new();
        for _ in 0..64 {
            let mut ev = std::ptr::null_mut();
            e(sys::cuEventCreate(&mut ev, flags), "event")?;
            events.push(ev);
        }
        let mut value = 7u32;
        let mut params = [(&mut out as *mut u64).cast::<std::ffi::c_void>(), (&mut value as *mut u32).cast()];
        let n = 20_000;
        let mut v = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            for i in 0..n {
                e(
                    sys::cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut()),
                    "launch",
                )?;
                e(sys::cuEventRecord(events[i % 64], stream), "record")?;
            }
            e(sys::cuStreamSynchronize(stream), "sync")?;
            v.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
        println!("raw launch + record, {label:<22} {:>6.2} us", median(v));
        for ev in events {
            sys::cuEventDestroy_v2(ev);
        }
        sys::cuStreamDestroy_v2(stream);
        sys::cuMemFree_v2(out);
        sys::cuModuleUnload(module);
        sys::cuDevicePrimaryCtxRelease_v2(dev);
    }
    Ok(())
}

fn main() {
    if let Err(e) = CudaDriver::default().probe() {
        println!("CUDA not available: {e}; nothing measured");
        return;
    }
    let timing = CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
    let blocking = timing | CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
    for _ in 0..2 {
        if let Err(e) = raw(timing, "DISABLE_TIMING") {
            println!("raw: {e}");
        }
        if let Err(e) = raw(blocking, "| BLOCKING_SYNC") {
            println!("raw: {e}");
        }
    }
    let base = CudaOptions::default();
    let modes = [
        ("Spin", CompletionWait::Spin, 2),
        ("SpinThenBlock(100us) poll 10us", CompletionWait::SpinThenBlock(Duration::from_micros(100)), 10),
        ("PollThenSleep(100us) poll 10us", CompletionWait::PollThenSleep(Duration::from_micros(100)), 10),
        ("HostCallback (callback stream)", CompletionWait::HostCallback, 10),
    ];
    for (label, mode, poll) in modes {
        let options = CudaOptions { completion_wait: mode, poll_interval: Duration::from_micros(poll), ..base.clone() };
        if let Err(e) = hal_costs(label, options) {
            println!("{label}: {e}");
        }
    }
}
