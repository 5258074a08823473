//! One workload alone, for a profiler: a dependent chain of executes on queue 0 (`chain`),
//! alternating between queues 0 and 1 (`hop`), each execute followed by a host wait without a
//! deadline (`roundtrip`), fan-out/fan-in rounds over every queue (`fanout`, N counts
//! submissions), work held on a host semaphore and released by the host's signal, timed from the
//! signal to the work's completion seen by a waiter (`release`), of an empty command buffer, one
//! dispatch or one indirect dispatch; or chained `queue_alloca` +
//! `queue_dealloca` pairs of 4 KiB (`alloca`, N counts submissions, the buffer kind unused); or a
//! dependent chain of 8-byte all-reduces on a channel of one rank (`collective`, the buffer kind
//! unused): the HAL's cost of a collective submission, beside the driver's collective call; or
//! THREADS threads (default 16), each a dependent chain on a queue of its own, as the bench's
//! own-queue scaling table runs them (`threads`, N counts all threads' submissions; on a second
//! device of the driver with a queue per thread where the first has too few).
//!
//! `cargo run --release -p bench --example submit_profile -- [cpu-sim|cuda] [chain|hop|roundtrip|release|fanout|alloca|collective|threads] [empty|dispatch|indirect] [N] [THREADS]`
//! then, e.g., `perf record -g target/release/examples/submit_profile cpu-sim chain empty 2000000`.

use std::time::Instant;

use hal::{BufferParams, CollectiveArgs, CollectiveOp, ElementType, ReduceOp, SemaphoreValue as SV, Timeout};

use bench::scaling::{Placement, hal_chains};
use bench::workloads::{Env, Timing, alloca_dealloca, chain, deferred_release, fan_out_in, ping_pong, round_trip};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.to_string());
    let (driver, workload, kind) = (arg(0, "cpu-sim"), arg(1, "chain"), arg(2, "empty"));
    let ops: u64 = arg(3, "200000").parse().map_err(|e| format!("N: {e}"))?;
    let threads: usize = arg(4, "16").parse().map_err(|e| format!("THREADS: {e}"))?;
    let mut device = bench::registry().create_device(&driver, 0).map_err(|e| e.to_string())?;
    if workload == "threads" && device.info().queue_count < threads {
        // As the scaling tables do: a second device of the driver, with a queue per thread.
        match bench::device_with_queues(device.info(), threads) {
            Some(wider) => device = wider.map_err(|e| e.to_string())?,
            None => return Err(format!("{driver}: {threads} threads need {threads} queues")),
        }
    }
    let env = Env::new(device).map_err(|e| e.to_string())?;
    let thread_cbs = match workload.as_str() {
        "threads" => {
            (0..threads).map(|_| env.dispatches(1)).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?
        }
        _ => Vec::new(),
    };
    let cb = match kind.as_str() {
        "empty" => env.empty.clone(),
        "dispatch" => env.dispatches(1).map_err(|e| e.to_string())?,
        "indirect" => env.indirect_dispatch().map_err(|e| e.to_string())?,
        other => return Err(format!("unknown command buffer '{other}' (empty|dispatch|indirect)")),
    };
    let run = |ops| match workload.as_str() {
        "chain" => chain(&env, &cb, ops),
        "hop" => ping_pong(&env, &cb, ops),
        "fanout" => {
            let consumers = env.device.info().queue_count.saturating_sub(1).max(1);
            fan_out_in(&env, &cb, consumers, ops / (consumers as u64 + 2))
        }
        "alloca" => alloca_dealloca(&env, 4096, ops / 2),
        "collective" => collective_chain(&env, ops),
        "threads" => hal_chains(&env, &thread_cbs, Placement::OwnQueue, ops / threads.max(1) as u64)
            .map(|total| Timing { total, submit: std::time::Duration::ZERO }),
        "roundtrip" => round_trip(&env, &cb, hal::Timeout::Infinite, ops)
            .map(|(total, _)| Timing { total, submit: std::time::Duration::ZERO }),
        "release" => deferred_release(&env, &cb, ops).map(|total| Timing { total, submit: std::time::Duration::ZERO }),
        other => Err(hal::Error::invalid_argument(format!(
            "unknown workload '{other}' (chain|hop|roundtrip|release|fanout|alloca|collective|threads)"
        ))),
    };
    run(ops / 10).map_err(|e| e.to_string())?; // warm-up: pools filled
    let start = Instant::now();
    let timing = run(ops).map_err(|e| e.to_string())?;
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / ops as f64;
    println!(
        "{driver} {workload} {kind}: {:.2} us/submission ({:.2} us submitting), {ops} in {:.2} s",
        per(timing.total),
        per(timing.submit),
        start.elapsed().as_secs_f64()
    );
    #[cfg(feature = "vulkan")]
    if let Some(issued) = driver_vulkan::submissions_issued_by_callers(&env.device) {
        println!("  issued on the submitting thread (warm-up included): {issued}");
    }
    Ok(())
}

/// `ops` all-reduces of two `f32` on a one-rank channel of `env`'s device, on queue 0, each waiting
/// on the one before through a semaphore.
fn collective_chain(env: &Env, ops: u64) -> hal::Result<Timing> {
    let id = env.device.create_channel_id()?;
    let channel = env.device.create_channel(&id, 0, 1)?;
    let send = env.device.allocate_buffer(BufferParams::device_local(), 8)?;
    let recv = env.device.allocate_buffer(BufferParams::device_local(), 8)?;
    let args = CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::F32, 2).send(&send).recv(&recv);
    let queue = env.device.queue(0)?;
    let s = env.device.create_semaphore(0)?;
    let start = Instant::now();
    for i in 0..ops {
        queue.collective(&[SV::new(&s, i)], &channel, args.clone(), &[SV::new(&s, i + 1)])?;
    }
    let submit = start.elapsed();
    s.wait(ops, Timeout::After(std::time::Duration::from_secs(120)))?;
    Ok(Timing { total: start.elapsed(), submit })
}
