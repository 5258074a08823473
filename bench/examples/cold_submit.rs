//! What a submission costs when something else ran between two submissions and pushed the HAL's
//! data out of the CPU caches, as a long driver call (NCCL's enqueue) does:
//! a dependent chain of empty executes on queue 0, with `evict` KiB of other memory read between
//! two executes; each execute is timed alone, less the clock's own cost.
//!
//! `cargo run --release -p bench --example cold_submit -- [cpu-sim|cuda] [N] [KiB...]`
//! (defaults: cpu-sim, 200000, then 0 64 256 1024 4096 16384). Prints per size: us per execute as
//! timed, the clock's cost, and the difference (the execute's own cost).

use std::hint::black_box;
use std::time::{Duration, Instant};

use hal::SemaphoreValue as SV;

use bench::workloads::Env;

/// Reads one byte in every 64 of `memory` (one per cache line) and returns their sum.
fn touch(memory: &[u8]) -> u64 {
    memory.iter().step_by(64).map(|&b| b as u64).sum()
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let driver = args.first().cloned().unwrap_or_else(|| "cpu-sim".to_string());
    let ops: u64 = args.get(1).map_or(Ok(200_000), |n| n.parse()).map_err(|e| format!("N: {e}"))?;
    let sizes: Vec<usize> = if args.len() > 2 {
        args[2..].iter().map(|s| s.parse().map_err(|e| format!("KiB '{s}': {e}"))).collect::<Result<_, _>>()?
    } else {
        vec![0, 64, 256, 1024, 4096, 16384]
    };
    let device = bench::registry().create_device(&driver, 0).map_err(|e| e.to_string())?;
    let env = Env::new(device).map_err(|e| e.to_string())?;
    let queue = env.device.queue(0).map_err(|e| e.to_string())?;
    let semaphore = env.device.create_semaphore(0).map_err(|e| e.to_string())?;
    let mut value = 0u64;
    // Each execute timed alone: the reads stay out of the sum.
    let mut chain = |memory: &[u8], n: u64| -> Result<Duration, String> {
        let mut spent = Duration::ZERO;
        for _ in 0..n {
            let start = Instant::now();
            queue
                .execute(&[SV::new(&semaphore, value)], &env.empty, &[SV::new(&semaphore, value + 1)])
                .map_err(|e| e.to_string())?;
            spent += start.elapsed();
            value += 1;
            black_box(touch(memory));
        }
        semaphore.wait(value, hal::Timeout::Infinite).map_err(|e| e.to_string())?;
        Ok(spent)
    };
    // The clock's own cost, timed the same way around nothing.
    let clock = |n: u64| -> Duration {
        let mut spent = Duration::ZERO;
        for _ in 0..n {
            let start = Instant::now();
            spent += black_box(start).elapsed();
        }
        spent
    };
    println!("{driver}: a chain of empty executes with memory read between two, {ops} each, medians of 5");
    println!("{:>8} {:>14} {:>12} {:>14}", "KiB", "timed us", "clock us", "execute us");
    for kib in sizes {
        let memory = vec![1u8; kib * 1024];
        let n = if kib >= 4096 { ops / 20 } else { ops }.max(1000);
        chain(&memory, n / 10)?;
        let (mut with, mut alone) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            with.push(chain(&memory, n)?.as_secs_f64() * 1e6 / n as f64);
            alone.push(clock(n).as_secs_f64() * 1e6 / n as f64);
        }
        with.sort_by(f64::total_cmp);
        alone.sort_by(f64::total_cmp);
        println!("{kib:>8} {:>14.3} {:>12.3} {:>14.3}", with[2], alone[2], with[2] - alone[2]);
    }
    Ok(())
}
