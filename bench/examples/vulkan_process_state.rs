//! The HAL's and raw Vulkan's fan-out/fan-in rounds and dependent chains of one dispatch, side by
//! side in one process, interleaved trial by trial. Some processes on NVIDIA's driver run these rows
//! at about twice their usual time for their whole life; one line per process tells whether such a
//! process is slow for the HAL alone (the HAL's doing) or for raw Vulkan too (the driver's or the
//! machine's state), which many processes in a row then count.
//!
//! `cargo run --release -p bench --example vulkan_process_state -- [ORDINAL] [ROUNDS]`; prints one
//! line: us per fan-out round (1 -> 3 -> 1) and per chained submission, HAL and raw, medians of 5
//! trials; then, over the HAL's fan-out trials, per round: its `vkQueueSubmit` calls, the time in
//! them and waiting for the queue before them, its submit threads' sleeps (idle, waiting for another
//! stream's signal to be issued, and without watching) and the watches late yields cut short (see
//! `driver_vulkan::host_thread_counts`); then, from one more fan-out trial with a thread sampling
//! `/proc/self/task` every 0.5 ms: the share of the trial spent submitting, how often two running
//! threads shared a CPU, the CPU each thread was on most, and how many submit threads kept off the
//! CPUs taking the GPU's interrupts. Run it under `taskset` to make a placement likelier.

use std::time::Duration;

use bench::vulkan_baseline::RawVulkan;
use bench::workloads::{Env, VULKAN_DRIVER, chain, fan_out_in, touch_spirv};
use driver_vulkan::HostThreadCounts;

const TRIALS: usize = 5;
const CONSUMERS: usize = 3;

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn per_op(elapsed: Duration, ops: u64) -> f64 {
    elapsed.as_secs_f64() * 1e6 / ops as f64
}

/// Each thread of this process: its name, whether it is running or runnable now, and the CPU it is
/// on or last ran on (`/proc/self/task/*/stat`: the name in parentheses, then the state, the CPU
/// 36 fields later).
fn threads() -> Vec<(String, bool, u32)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut threads = Vec::new();
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let name = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let (Some(state), Some(cpu)) = (fields.first(), fields.get(36).and_then(|c| c.parse().ok())) else { continue };
        if name != "sampler" {
            threads.push((name, *state == "R", cpu));
        }
    }
    threads
}

/// Samples which threads run where until `stop`: the share of samples in which two running threads
/// shared a CPU, and the pairs seen most.
fn sample_sharing(stop: &std::sync::atomic::AtomicBool) -> String {
    use std::collections::HashMap;
    let (mut samples, mut shared) = (0u64, 0u64);
    let mut pairs: HashMap<String, u64> = HashMap::new();
    let mut placed: HashMap<String, HashMap<u32, u64>> = HashMap::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let all = threads();
        samples += 1;
        let mut by_cpu: HashMap<u32, Vec<&str>> = HashMap::new();
        for (name, running, cpu) in &all {
            if *running {
                by_cpu.entry(*cpu).or_default().push(name);
            }
            if name.starts_with("hal-") || name.starts_with("vulkan_process") {
                *placed.entry(name.clone()).or_default().entry(*cpu).or_default() += 1;
            }
        }
        let mut any = false;
        for names in by_cpu.values_mut().filter(|n| n.len() > 1) {
            any = true;
            names.sort_unstable();
            *pairs.entry(names.join("+")).or_default() += 1;
        }
        shared += u64::from(any);
        std::thread::sleep(Duration::from_micros(500));
    }
    let mut top: Vec<_> = pairs.into_iter().collect();
    top.sort_by_key(|pair| std::cmp::Reverse(pair.1));
    let top: Vec<String> = top.iter().take(3).map(|(p, n)| format!("{p} {n}")).collect();
    // Where each thread mostly was.
    let mut placed: Vec<String> = placed
        .into_iter()
        .filter_map(|(name, cpus)| cpus.into_iter().max_by_key(|(_, n)| *n).map(|(cpu, _)| format!("{name}@{cpu}")))
        .collect();
    placed.sort();
    format!("{shared}/{samples} samples shared a cpu [{}]; cpus {}", top.join(", "), placed.join(" "))
}

fn counts(device: &hal::Device) -> HostThreadCounts {
    driver_vulkan::host_thread_counts(device).unwrap_or_default()
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ordinal: usize = args.first().map_or(Ok(0), |a| a.parse()).map_err(|e| format!("ORDINAL: {e}"))?;
    let rounds: u64 = args.get(1).map_or(Ok(2000), |a| a.parse()).map_err(|e| format!("ROUNDS: {e}"))?;
    let run = || -> hal::Result<String> {
        let device = bench::registry().create_device(VULKAN_DRIVER, ordinal)?;
        let env = Env::new(device.clone())?;
        let one = env.dispatches(1)?;
        let raw = RawVulkan::new(ordinal, &touch_spirv()?, &[1])?;
        // Warm both up (pipelines, pools, the submit threads' first calls).
        fan_out_in(&env, &one, CONSUMERS, rounds / 10 + 1)?;
        raw.fan_out_in(CONSUMERS, rounds / 10 + 1)?;
        let chained = rounds * 5;
        let (mut hal_fan, mut raw_fan, mut hal_chain, mut raw_chain) = (vec![], vec![], vec![], vec![]);
        let mut fan = HostThreadCounts::default();
        for _ in 0..TRIALS {
            let before = counts(&device);
            hal_fan.push(per_op(fan_out_in(&env, &one, CONSUMERS, rounds)?.total, rounds));
            fan = fan.plus(&counts(&device).since(&before));
            raw_fan.push(per_op(raw.fan_out_in(CONSUMERS, rounds)?, rounds));
            hal_chain.push(per_op(chain(&env, &one, chained)?.total, chained));
            raw_chain.push(per_op(raw.chain(1, chained)?, chained));
        }
        // One more fan-out trial, with a thread sampling where the threads run.
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (sharing, submit_share) = std::thread::scope(|scope| -> hal::Result<(String, f64)> {
            let sampler = std::thread::Builder::new()
                .name("sampler".into())
                .spawn_scoped(scope, || sample_sharing(&stop))
                .map_err(|e| hal::Error::internal(format!("sampler thread: {e}")))?;
            let timing = fan_out_in(&env, &one, CONSUMERS, rounds);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let sharing = sampler.join().unwrap_or_else(|_| "sampler panicked".into());
            let timing = timing?;
            Ok((sharing, timing.submit.as_secs_f64() / timing.total.as_secs_f64()))
        })?;
        let all_rounds = (rounds * TRIALS as u64) as f64;
        let kept_off = counts(&device).threads_kept_off_interrupts;
        let calls = fan.submit_calls.max(1) as f64;
        Ok(format!(
            "fanout hal {:.2} raw {:.2} | chain hal {:.2} raw {:.2} | hal fanout per round: {:.2} submits of {:.2} us after {:.2} us for the queue, \
             sleeps: {:.2} idle, {:.2} for a signal, {:.2} unwatched; {:.2} watches cut short | \
             submitting {:.0}% of a trial; {sharing}; {kept_off} submit threads kept off the interrupt cpus",
            median(hal_fan),
            median(raw_fan),
            median(hal_chain),
            median(raw_chain),
            fan.submit_calls as f64 / all_rounds,
            fan.submit_time.as_secs_f64() * 1e6 / calls,
            fan.queue_wait.as_secs_f64() * 1e6 / calls,
            fan.submit_thread_sleeps as f64 / all_rounds,
            fan.signal_wait_sleeps as f64 / all_rounds,
            fan.paused_watches as f64 / all_rounds,
            fan.cut_short_watches as f64 / all_rounds,
            submit_share * 100.0,
        ))
    };
    let line = run().map_err(|e| e.to_string())?;
    println!("{line}");
    Ok(())
}
