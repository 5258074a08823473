//! The HAL's and raw CUDA's side of the peers table (`bench/peers/peers.py` adds PyTorch and IREE):
//! one *call* is N dependent tiny dispatches (the one-thread `touch` kernel) and one host wait,
//! for N = 1, 10 and 100:
//! - `hal_submissions`: N executes of a one-dispatch command buffer, each waiting on the previous
//!   one's value, then a wait on the last value (no deadline);
//! - `hal_command_buffer`: one execute of an N-dispatch command buffer (barriers between the
//!   dispatches), then a wait;
//! - `raw_launches`: N `cuLaunchKernel` on one stream, then `cuStreamSynchronize`;
//! - `raw_graph`: `cuGraphLaunch` of an N-kernel graph, then `cuStreamSynchronize`.
//!
//! Prints `row NAME N MEDIAN_US P10_US P90_US` lines (microseconds per call over `TRIALS` trials),
//! which `peers.py` reads. `cargo run --release -p bench --example peers [ORDINAL]`.

use std::time::{Duration, Instant};

use bench::cuda_baseline::RawCuda;
use bench::workloads::Env;
use hal::{Result, SemaphoreValue as SV, Timeout};

const SIZES: [usize; 3] = [1, 10, 100];
const TRIALS: usize = 7;

/// Calls per trial for `n` dispatches a call.
fn calls(n: usize) -> u64 {
    match n {
        1 => 2000,
        10 => 1000,
        _ => 200,
    }
}

fn main() -> Result<()> {
    let ordinal: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(0);
    let device = driver_cuda::create_device(ordinal)?;
    let env = Env::new(device.clone())?;
    let one = env.dispatches(1)?;
    let raw = RawCuda::new(ordinal, 2, &SIZES)?;
    let queue = device.queue(0)?;
    let timeline = device.create_semaphore(0)?;
    let mut value = 0u64;
    let mut hal_submissions = |n: usize, calls: u64| -> Result<Duration> {
        let started = Instant::now();
        for _ in 0..calls {
            for _ in 0..n {
                queue.execute(&[SV::new(&timeline, value)], &one, &[SV::new(&timeline, value + 1)])?;
                value += 1;
            }
            timeline.wait(value, Timeout::Infinite)?;
        }
        Ok(started.elapsed())
    };
    let buffers = SIZES.iter().map(|&n| env.dispatches(n)).collect::<Result<Vec<_>>>()?;
    let done = device.create_semaphore(0)?;
    let mut done_value = 0u64;
    let mut hal_command_buffer = |index: usize, calls: u64| -> Result<Duration> {
        let started = Instant::now();
        for _ in 0..calls {
            queue.execute(&[], &buffers[index], &[SV::new(&done, done_value + 1)])?;
            done_value += 1;
            done.wait(done_value, Timeout::Infinite)?;
        }
        Ok(started.elapsed())
    };
    println!(
        "device {} (ordinal {ordinal}), {TRIALS} trials, us per call (N dispatches + one host wait)",
        device.info().name
    );
    for (index, &n) in SIZES.iter().enumerate() {
        let calls = calls(n);
        // One warm-up trial of each, left out.
        hal_submissions(n, calls / 10)?;
        hal_command_buffer(index, calls / 10)?;
        raw.launches_sync(n, calls / 10)?;
        raw.graph_sync(n, calls / 10)?;
        let mut samples: [Vec<f64>; 4] = Default::default();
        for _ in 0..TRIALS {
            let per_call = |d: Duration| d.as_secs_f64() * 1e6 / calls as f64;
            samples[0].push(per_call(hal_submissions(n, calls)?));
            samples[1].push(per_call(hal_command_buffer(index, calls)?));
            samples[2].push(per_call(raw.launches_sync(n, calls)?));
            samples[3].push(per_call(raw.graph_sync(n, calls)?));
        }
        for (name, mut s) in
            ["hal_submissions", "hal_command_buffer", "raw_launches", "raw_graph"].into_iter().zip(samples)
        {
            s.sort_by(f64::total_cmp);
            let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
            println!("row {name} {n} {:.2} {:.2} {:.2}", at(0.5), at(0.1), at(0.9));
        }
    }
    Ok(())
}
