//! Measures how the completion wait mode and the event flags change the per-submission cost, beside
//! raw `launch + cuEventRecord` with each event flag set, on one process and GPU.
//!
//! `cargo run --release -p timeline-hal-cuda --example completion_modes` (needs a GPU).

use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUevent_flags};
use driver_cuda::{CompletionWait, CudaDriver, CudaOptions};
use hal::driver::Driver;
use hal::{SemaphoreValue as SV, Timeout};

/// The same `touch` kernel the bench uses, so both measure identical launches.
const PTX: &str = include_str!("../../bench/src/touch.ptx");

#[path = "support/raw_touch.rs"]
mod raw_touch;

use raw_touch::{RawTouch, check, median, touch_command_buffer};

fn hal_costs(label: &str, options: CudaOptions) -> Result<(), hal::Error> {
    let device = CudaDriver::with_options(options).create_device(0)?;
    let cb = touch_command_buffer(&device, PTX, true)?;
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
    let raw = RawTouch::new(PTX)?;
    let mut events = Vec::new();
    for _ in 0..64 {
        let mut ev = std::ptr::null_mut();
        // SAFETY: the context is bound on this thread; the out-pointer is a live local.
        check(unsafe { sys::cuEventCreate(&mut ev, flags) }, "event")?;
        events.push(ev);
    }
    let n = 20_000;
    let mut v = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for i in 0..n {
            raw.launch()?;
            // SAFETY: the event and stream are live.
            check(unsafe { sys::cuEventRecord(events[i % 64], raw.stream) }, "record")?;
        }
        // SAFETY: the stream is live.
        check(unsafe { sys::cuStreamSynchronize(raw.stream) }, "sync")?;
        v.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    println!("raw launch + record, {label:<22} {:>6.2} us", median(v));
    for ev in events {
        // SAFETY: created above, idle after the synchronize, destroyed once.
        unsafe { sys::cuEventDestroy_v2(ev) };
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
        ("PollThenSleep(0) (default)", CompletionWait::PollThenSleep(Duration::ZERO), 10),
        ("HostCallback (callback stream)", CompletionWait::HostCallback, 10),
    ];
    for (label, mode, poll) in modes {
        let options = CudaOptions { completion_wait: mode, poll_interval: Duration::from_micros(poll), ..base.clone() };
        if let Err(e) = hal_costs(label, options) {
            println!("{label}: {e}");
        }
    }
}
