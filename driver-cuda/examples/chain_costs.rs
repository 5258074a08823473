//! Where the time of a dependent chain of submissions goes: raw `launch + cuEventRecord` alone, then
//! with a second thread doing what a completion thread does to the submitting one (querying the
//! newest event, taking a lock the submitter takes), beside the HAL's chain with completion threads
//! polling at different rates.
//!
//! `cargo run --release -p driver-cuda --example chain_costs` (needs a GPU).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUevent_flags};
use driver_cuda::{CompletionWait, CudaDriver, CudaOptions};
use hal::{
    BufferBinding, BufferParams, CommandBufferMode, Driver, EntryPointInfo, ExecutableFormat, ExecutableSource,
    SemaphoreValue as SV, Timeout,
};

/// The same `touch` kernel the bench uses.
const PTX: &str = include_str!("../../bench/src/touch.ptx");
const N: usize = 20_000;
const EVENTS: usize = 256;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// What the second thread does while the first launches and records.
#[derive(Clone, Copy, Debug)]
enum Neighbour {
    /// Nothing (no second thread).
    None,
    /// `cuEventQuery` of the newest recorded event, then a pause of this long.
    Query(Duration),
    /// Pops everything the submitter pushed onto a shared `Mutex<VecDeque>`, then a pause.
    Lock(Duration),
}

#[derive(Clone, Copy)]
struct Handles {
    f: sys::CUfunction,
    stream: sys::CUstream,
    ctx: sys::CUcontext,
    out: u64,
}
// SAFETY: driver handles, used from threads that bound the context first.
unsafe impl Send for Handles {}
// SAFETY: see `Send`.
unsafe impl Sync for Handles {}

fn check(code: sys::CUresult, what: &str) -> Result<(), String> {
    if code == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(format!("{what}: {code:?}")) }
}

fn raw(neighbour: Neighbour, launch: bool) -> Result<f64, String> {
    // SAFETY (whole block): plain driver calls on the primary context, bound on each thread that
    // calls; every handle is created here and destroyed after both threads finished; kernel
    // parameters point at live locals.
    unsafe {
        let mut dev = 0;
        check(sys::cuDeviceGet(&mut dev, 0), "cuDeviceGet")?;
        let mut ctx = std::ptr::null_mut();
        check(sys::cuDevicePrimaryCtxRetain(&mut ctx, dev), "retain")?;
        check(sys::cuCtxSetCurrent(ctx), "set current")?;
        let ptx = std::ffi::CString::new(PTX).map_err(|x| x.to_string())?;
        let mut module = std::ptr::null_mut();
        check(sys::cuModuleLoadData(&mut module, ptx.as_ptr().cast()), "load")?;
        let mut f = std::ptr::null_mut();
        check(sys::cuModuleGetFunction(&mut f, module, c"touch".as_ptr()), "function")?;
        let mut out = 0;
        check(sys::cuMemAlloc_v2(&mut out, 256), "alloc")?;
        let mut stream = std::ptr::null_mut();
        check(sys::cuStreamCreate(&mut stream, 1), "stream")?;
        let mut events = Vec::new();
        for _ in 0..EVENTS {
            let mut ev = std::ptr::null_mut();
            check(sys::cuEventCreate(&mut ev, CUevent_flags::CU_EVENT_DISABLE_TIMING as u32), "event")?;
            events.push(ev as usize);
        }
        let events = Arc::new(events);
        let h = Handles { f, stream, ctx, out };
        let newest = Arc::new(AtomicUsize::new(usize::MAX));
        let queue = Arc::new(Mutex::new(VecDeque::<usize>::with_capacity(4096)));
        let stop = Arc::new(AtomicBool::new(false));
        let second = {
            let (events, newest, queue, stop) = (events.clone(), newest.clone(), queue.clone(), stop.clone());
            std::thread::spawn(move || {
                let h = h;
                sys::cuCtxSetCurrent(h.ctx);
                let pause = |d: Duration| {
                    let t = Instant::now();
                    while t.elapsed() < d {
                        std::hint::spin_loop();
                    }
                };
                while !stop.load(Ordering::Relaxed) {
                    let at = newest.load(Ordering::Acquire);
                    match neighbour {
                        Neighbour::None => return,
                        Neighbour::Query(d) => {
                            if at != usize::MAX {
                                sys::cuEventQuery(events[at % EVENTS] as sys::CUevent);
                            }
                            pause(d);
                        }
                        Neighbour::Lock(d) => {
                            queue.lock().unwrap_or_else(|p| p.into_inner()).clear();
                            pause(d);
                        }
                    }
                }
            })
        };
        let mut value = 7u32;
        let mut params = [(&mut out as *mut u64).cast::<std::ffi::c_void>(), (&mut value as *mut u32).cast()];
        let mut v = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            for i in 0..N {
                if launch {
                    check(
                        sys::cuLaunchKernel(
                            h.f,
                            1,
                            1,
                            1,
                            1,
                            1,
                            1,
                            0,
                            h.stream,
                            params.as_mut_ptr(),
                            std::ptr::null_mut(),
                        ),
                        "launch",
                    )?;
                }
                check(sys::cuEventRecord(events[i % EVENTS] as sys::CUevent, h.stream), "record")?;
                if matches!(neighbour, Neighbour::Lock(_)) {
                    queue.lock().unwrap_or_else(|p| p.into_inner()).push_back(i);
                }
                newest.store(i, Ordering::Release);
            }
            check(sys::cuStreamSynchronize(h.stream), "sync")?;
            v.push(t.elapsed().as_secs_f64() * 1e6 / N as f64);
        }
        stop.store(true, Ordering::Relaxed);
        let _ = second.join();
        for ev in events.iter() {
            sys::cuEventDestroy_v2(*ev as sys::CUevent);
        }
        sys::cuStreamDestroy_v2(h.stream);
        sys::cuMemFree_v2(h.out);
        sys::cuModuleUnload(module);
        sys::cuDevicePrimaryCtxRelease_v2(dev);
        Ok(median(v))
    }
}

fn hal_chain(options: CudaOptions, dispatch: bool, hop: bool) -> Result<f64, hal::Error> {
    let device = CudaDriver::with_options(options).create_device(0)?;
    let cb = device.create_command_buffer(CommandBufferMode::Reusable)?;
    if dispatch {
        let exe = device.load_executable(&ExecutableSource::Bytes {
            format: ExecutableFormat::Ptx,
            data: Arc::from(PTX.as_bytes()),
            entry_points: vec![EntryPointInfo::new("touch", 1, 1, 1)],
        })?;
        let buf = device.allocate_buffer(BufferParams::device_local(), 256)?;
        cb.dispatch(&exe, 0, [1, 1, 1], &[7], &[BufferBinding::range(&buf, 0, 4)])?;
    }
    cb.end()?;
    let queues = [device.queue(0)?, device.queue(1)?];
    let mut v = Vec::new();
    for _ in 0..5 {
        let s = device.create_semaphore(0)?;
        let t = Instant::now();
        for i in 0..N as u64 {
            let q = if hop { &queues[(i % 2) as usize] } else { &queues[0] };
            q.execute(&[SV::new(&s, i)], &cb, &[SV::new(&s, i + 1)])?;
        }
        s.wait(N as u64, Timeout::Infinite)?;
        v.push(t.elapsed().as_secs_f64() * 1e6 / N as f64);
    }
    Ok(median(v))
}

fn main() {
    if let Err(e) = CudaDriver::default().probe() {
        println!("CUDA not available: {e}; nothing measured");
        return;
    }
    let us = Duration::from_micros;
    println!("raw, us per op (median of 5 x {N})          record only   launch + record");
    for neighbour in
        [Neighbour::None, Neighbour::Query(us(10)), Neighbour::Query(us(0)), Neighbour::Lock(us(0)), Neighbour::None]
    {
        let record = raw(neighbour, false).map_or_else(|e| e, |t| format!("{t:.2}"));
        let launch = raw(neighbour, true).map_or_else(|e| e, |t| format!("{t:.2}"));
        println!("  neighbour {:<34} {record:>10}   {launch:>10}", format!("{neighbour:?}"));
    }
    let base = CudaOptions::default();
    println!("hal, us per submission                        chain empty   chain 1-dispatch   hop 1-dispatch");
    let modes = [
        ("PollThenSleep(100us), poll 10us (default)", CompletionWait::PollThenSleep(us(100)), 10),
        ("PollThenSleep(100us), poll 20us", CompletionWait::PollThenSleep(us(100)), 20),
        ("PollThenSleep(100us), poll 50us", CompletionWait::PollThenSleep(us(100)), 50),
        ("PollThenSleep(0), sleeps 10..100us", CompletionWait::PollThenSleep(us(0)), 10),
        ("Spin (cuEventSynchronize)", CompletionWait::Spin, 10),
        ("PollThenSleep(100us), poll 10us (again)", CompletionWait::PollThenSleep(us(100)), 10),
    ];
    for (label, mode, poll) in modes {
        let options = CudaOptions { completion_wait: mode, poll_interval: us(poll), ..base.clone() };
        let row: Vec<String> = [(false, false), (true, false), (true, true)]
            .into_iter()
            .map(|(dispatch, hop)| {
                hal_chain(options.clone(), dispatch, hop).map_or_else(|e| e.to_string(), |t| format!("{t:.2}"))
            })
            .collect();
        println!("  {label:<44} {:>10}   {:>16}   {:>14}", row[0], row[1], row[2]);
    }
}
