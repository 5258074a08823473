//! Host round trips of one dispatch on each queue of a Vulkan device, in one process: the HAL's
//! (execute, then a semaphore wait with no deadline) beside raw Vulkan's, both with a host wait
//! that blocks in `vkWaitSemaphores` and with one that polls the timeline's counter, and polled
//! with each submission also waiting on the previous one's (reached) value, as the HAL's do, and
//! that again with the submission made by a second thread, as the HAL's submit thread does; then
//! host-released work, the HAL's (held on the host until the signal) beside raw Vulkan's, polled,
//! and submitted ahead waiting on a host-signalled timeline (`RawVulkan::deferred_release_gated`),
//! which the HAL does not do (`docs/decisions.md#host-signalled-work-held-on-the-host`). It tells
//! whether a slow round trip is the HAL's or the driver's: a poll of the counter sees the work
//! done as soon as the driver shows it to the host.
//!
//! `cargo run --release -p bench --example vulkan_round_trips -- [ORDINAL] [OPS]`; prints one line
//! a queue, us per round trip (median of 5 trials).

use std::time::{Duration, Instant};

use bench::vulkan_baseline::RawVulkan;
use bench::workloads::{Env, VULKAN_DRIVER, deferred_release, touch_spirv};
use hal::{SemaphoreValue as SV, Timeout};

const TRIALS: usize = 5;

fn median(mut trial: impl FnMut() -> hal::Result<Duration>, ops: u64) -> hal::Result<f64> {
    let mut samples = Vec::with_capacity(TRIALS);
    for _ in 0..TRIALS {
        samples.push(trial()?.as_secs_f64() * 1e6 / ops as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[TRIALS / 2])
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ordinal: usize = args.first().map_or(Ok(0), |a| a.parse()).map_err(|e| format!("ORDINAL: {e}"))?;
    let ops: u64 = args.get(1).map_or(Ok(2000), |a| a.parse()).map_err(|e| format!("OPS: {e}"))?;
    let run = || -> hal::Result<()> {
        let device = bench::registry().create_device(VULKAN_DRIVER, ordinal)?;
        let env = Env::new(device.clone())?;
        let one = env.dispatches(1)?;
        let raw = RawVulkan::new(ordinal, &touch_spirv()?, &[1])?;
        println!("us per round trip of one dispatch (median of {TRIALS} trials of {ops}); raw on {}", raw.name);
        println!("queue  hal   raw-polled  raw-blocking  raw-polled-ordered  raw-handed-off");
        let queues = device.info().queue_count.min(raw.queue_count());
        for index in 0..queues {
            let queue = device.queue(index)?;
            let semaphore = device.create_semaphore(0)?;
            let mut value = 0;
            let mut hal_trial = || -> hal::Result<Duration> {
                let start = Instant::now();
                for _ in 0..ops {
                    value += 1;
                    queue.execute(&[], &one, &[SV::new(&semaphore, value)])?;
                    semaphore.wait(value, Timeout::Infinite)?;
                }
                Ok(start.elapsed())
            };
            hal_trial()?;
            let hal = median(hal_trial, ops)?;
            let polled = median(|| raw.round_trip_on(index, 1, true, ops), ops)?;
            let blocking = median(|| raw.round_trip_on(index, 1, false, ops), ops)?;
            let ordered = median(|| raw.round_trip_ordered_on(index, 1, true, ops), ops)?;
            let handed_off = median(|| raw.round_trip_handed_off_on(index, 1, ops), ops)?;
            println!("{index:5} {hal:6.2} {polled:10.2} {blocking:12.2} {ordered:18.2} {handed_off:15.2}");
        }
        println!(
            "us per host signal -> released one-dispatch work seen done, queue 0 (median of {TRIALS} trials of {ops})"
        );
        println!("hal-host-semaphore  raw-polled  raw-gated-polled  raw-gated-blocked-waiter");
        let hal_host = median(|| deferred_release(&env, &one, ops), ops)?;
        let raw_polled = median(|| raw.deferred_release_polled(ops), ops)?;
        let raw_gated = median(|| raw.deferred_release_gated(false, ops), ops)?;
        let raw_blocked = median(|| raw.deferred_release_gated(true, ops), ops)?;
        println!("{hal_host:18.2} {raw_polled:11.2} {raw_gated:17.2} {raw_blocked:25.2}");
        Ok(())
    };
    run().map_err(|e| e.to_string())
}
