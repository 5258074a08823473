//! Where the time of a dependent chain of submissions goes: raw `launch + cuEventRecord` alone, then
//! with a second thread doing what a completion thread does to the submitting one (querying the
//! newest event, taking a lock the submitter takes), beside the HAL's chain with completion threads
//! polling at different rates, and with a one-dispatch buffer replayed as a graph or launched
//! directly.
//!
//! `cargo run --release -p timeline-hal-cuda --example chain_costs` (needs a GPU).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUevent_flags};
use driver_cuda::{CompletionWait, CudaDriver, CudaOptions};
use hal::driver::Driver;
use hal::driver::lock;
use hal::{SemaphoreValue as SV, Timeout};

/// The same `touch` kernel the bench uses.
const PTX: &str = include_str!("../../bench/src/touch.ptx");
const N: usize = 20_000;
const EVENTS: usize = 256;

#[path = "support/raw_touch.rs"]
mod raw_touch;

use raw_touch::{RawTouch, check, median, touch_command_buffer};

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

/// Event handles as integers, so the second thread can share them.
struct Events(Vec<usize>);

impl Events {
    fn get(&self, i: usize) -> sys::CUevent {
        self.0[i % EVENTS] as sys::CUevent
    }
}

fn raw(neighbour: Neighbour, launch: bool) -> Result<f64, String> {
    let raw = RawTouch::new(PTX)?;
    let mut events = Vec::new();
    for _ in 0..EVENTS {
        let mut ev = std::ptr::null_mut();
        // SAFETY: the context is bound on this thread; the out-pointer is a live local.
        check(unsafe { sys::cuEventCreate(&mut ev, CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) }, "event")?;
        events.push(ev as usize);
    }
    let events = Arc::new(Events(events));
    let ctx = raw.ctx as usize;
    let newest = Arc::new(AtomicUsize::new(usize::MAX));
    let queue = Arc::new(Mutex::new(VecDeque::<usize>::with_capacity(4096)));
    let stop = Arc::new(AtomicBool::new(false));
    let second = {
        let (events, newest, queue, stop) = (events.clone(), newest.clone(), queue.clone(), stop.clone());
        std::thread::spawn(move || {
            // SAFETY: the context outlives this thread (joined before `raw` drops).
            unsafe { sys::cuCtxSetCurrent(ctx as sys::CUcontext) };
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
                            // SAFETY: the events live until this thread is joined.
                            unsafe { sys::cuEventQuery(events.get(at)) };
                        }
                        pause(d);
                    }
                    Neighbour::Lock(d) => {
                        lock(&queue).clear();
                        pause(d);
                    }
                }
            }
        })
    };
    let mut v = Vec::new();
    let mut outcome = Ok(());
    for _ in 0..5 {
        let t = Instant::now();
        for i in 0..N {
            if launch && let Err(e) = raw.launch() {
                outcome = Err(e);
                break;
            }
            // SAFETY: the event and the stream are live.
            if let Err(e) = check(unsafe { sys::cuEventRecord(events.get(i), raw.stream) }, "record") {
                outcome = Err(e);
                break;
            }
            if matches!(neighbour, Neighbour::Lock(_)) {
                lock(&queue).push_back(i);
            }
            newest.store(i, Ordering::Release);
        }
        // SAFETY: the stream is live.
        if let Err(e) = check(unsafe { sys::cuStreamSynchronize(raw.stream) }, "sync") {
            outcome = Err(e);
        }
        v.push(t.elapsed().as_secs_f64() * 1e6 / N as f64);
        if outcome.is_err() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = second.join();
    for i in 0..EVENTS {
        // SAFETY: created above, idle after the synchronize, no longer queried; destroyed once.
        unsafe { sys::cuEventDestroy_v2(events.get(i)) };
    }
    outcome.map(|()| median(v))
}

fn hal_chain(options: CudaOptions, dispatch: bool, hop: bool) -> Result<f64, hal::Error> {
    let device = CudaDriver::with_options(options).create_device(0)?;
    let cb = touch_command_buffer(&device, PTX, dispatch)?;
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
        ("PollThenSleep(0), sleeps 10..100us (default)", CompletionWait::PollThenSleep(us(0)), 10),
        ("PollThenSleep(100us), poll 10us", CompletionWait::PollThenSleep(us(100)), 10),
        ("PollThenSleep(100us), poll 20us", CompletionWait::PollThenSleep(us(100)), 20),
        ("PollThenSleep(100us), poll 50us", CompletionWait::PollThenSleep(us(100)), 50),
        ("Spin (cuEventSynchronize)", CompletionWait::Spin, 10),
        ("PollThenSleep(0), sleeps 10..100us (again)", CompletionWait::PollThenSleep(us(0)), 10),
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
    println!(
        "hal, one-dispatch reusable buffer replayed as   chain 1-dispatch   hop 1-dispatch   (default completion)"
    );
    for (label, reusable_graph_min_commands) in [("a one-node graph (default)", 1), ("a direct launch", 2)] {
        let options = CudaOptions { reusable_graph_min_commands, ..base.clone() };
        let row: Vec<String> = [false, true]
            .into_iter()
            .map(|hop| hal_chain(options.clone(), true, hop).map_or_else(|e| e.to_string(), |t| format!("{t:.2}")))
            .collect();
        println!("  {label:<44} {:>16}   {:>14}", row[0], row[1]);
    }
}
