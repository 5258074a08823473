//! The HAL's side of the peers table (`bench/peers/peers.py` adds PyTorch and IREE), on the CUDA
//! driver beside raw CUDA, or on the Vulkan driver beside raw Vulkan: one *call* is N dependent
//! tiny dispatches (the one-thread `touch` kernel) and one host wait, for N = 1, 10 and 100.
//!
//! CUDA (the default), rows:
//! - `hal_submissions`: N executes of a one-dispatch command buffer, each waiting on the previous
//!   one's value, then a wait on the last value (no deadline);
//! - `hal_command_buffer`: one execute of an N-dispatch command buffer (barriers between the
//!   dispatches), then a wait;
//! - `raw_launches`: N `cuLaunchKernel` on one stream, then `cuStreamSynchronize`;
//! - `raw_graph`: `cuGraphLaunch` of an N-kernel graph, then `cuStreamSynchronize`.
//!
//! Vulkan (`--driver vulkan`): the same two HAL patterns on the Vulkan driver, with the SPIR-V
//! compiled from the bench's WGSL `touch` kernel, rows `hal_vulkan_submissions` and
//! `hal_vulkan_command_buffer`; beside them the same SPIR-V on `ash` ([`RawVulkan`]):
//! - `raw_vulkan_submissions`: N `vkQueueSubmit` of a one-dispatch command buffer chained on a
//!   timeline semaphore, then `vkWaitSemaphores`;
//! - `raw_vulkan_command_buffer`: one `vkQueueSubmit` of an N-dispatch command buffer, then
//!   `vkWaitSemaphores`.
//!
//! Prints `row NAME N MEDIAN_US P10_US P90_US` lines (microseconds per call over the trials), which
//! `peers.py` reads. `PEERS_QUICK=1` runs 3 trials of a tenth of the calls (a software Vulkan
//! device such as lavapipe, or a smoke run).
//!
//! On Vulkan the process's threads are kept off the CPUs that take the GPU's interrupts, as the
//! bench keeps them (`bench::placement`; `--all-cpus` leaves them where the kernel puts them), and
//! a `threads:` line says where they ran.
//!
//! `cargo run --release -p bench --example peers -- [--driver cuda|vulkan] [--all-cpus] [ORDINAL]`

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bench::cuda_baseline::RawCuda;
use bench::vulkan_baseline::RawVulkan;
use bench::workloads::{Env, VULKAN_DRIVER, touch_spirv};
use hal::{CommandBuffer, Device, Result, SemaphoreValue as SV, Timeout};

const SIZES: [usize; 3] = [1, 10, 100];

/// Trials and calls per trial: the full run, or a tenth of it over 3 trials with `PEERS_QUICK`.
struct Plan {
    trials: usize,
    scale: u64,
}

impl Plan {
    fn from_env() -> Plan {
        match std::env::var("PEERS_QUICK") {
            Ok(v) if !v.is_empty() && v != "0" => Plan { trials: 3, scale: 10 },
            _ => Plan { trials: 7, scale: 1 },
        }
    }

    /// Calls per trial for `n` dispatches a call.
    fn calls(&self, n: usize) -> u64 {
        let full = match n {
            1 => 2000,
            10 => 1000,
            _ => 200,
        };
        (full / self.scale).max(1)
    }
}

/// One measured pattern: its row name and a run of `calls` calls of `n` dispatches (`index` is
/// `n`'s place in [`SIZES`]).
type Pattern<'a> = (&'static str, Box<dyn FnMut(usize, usize, u64) -> Result<Duration> + 'a>);

/// The HAL's two patterns on `device`: N chained executes of a one-dispatch command buffer, and
/// one execute of an N-dispatch command buffer, each call ending in a host wait.
fn hal_patterns<'a>(
    device: &Device,
    one: &'a CommandBuffer,
    buffers: &'a [CommandBuffer],
    names: [&'static str; 2],
) -> Result<Vec<Pattern<'a>>> {
    let queue = device.queue(0)?;
    let timeline = device.create_semaphore(0)?;
    let mut value = 0u64;
    let submissions = {
        let queue = queue.clone();
        move |_: usize, n: usize, calls: u64| -> Result<Duration> {
            let started = Instant::now();
            for _ in 0..calls {
                for _ in 0..n {
                    queue.execute(&[SV::new(&timeline, value)], one, &[SV::new(&timeline, value + 1)])?;
                    value += 1;
                }
                timeline.wait(value, Timeout::Infinite)?;
            }
            Ok(started.elapsed())
        }
    };
    let done = device.create_semaphore(0)?;
    let mut done_value = 0u64;
    let command_buffer = move |index: usize, _: usize, calls: u64| -> Result<Duration> {
        let started = Instant::now();
        for _ in 0..calls {
            queue.execute(&[], &buffers[index], &[SV::new(&done, done_value + 1)])?;
            done_value += 1;
            done.wait(done_value, Timeout::Infinite)?;
        }
        Ok(started.elapsed())
    };
    Ok(vec![(names[0], Box::new(submissions)), (names[1], Box::new(command_buffer))])
}

/// Runs every pattern for each N (one warm-up of a tenth of the calls, left out, then the trials,
/// the patterns interleaved so drift hits them alike) and prints its rows.
fn measure(plan: &Plan, patterns: &mut [Pattern<'_>]) -> Result<()> {
    for (index, &n) in SIZES.iter().enumerate() {
        let calls = plan.calls(n);
        for (_, run) in patterns.iter_mut() {
            run(index, n, (calls / 10).max(1))?;
        }
        let mut samples = vec![Vec::new(); patterns.len()];
        for _ in 0..plan.trials {
            for ((_, run), s) in patterns.iter_mut().zip(&mut samples) {
                s.push(run(index, n, calls)?.as_secs_f64() * 1e6 / calls as f64);
            }
        }
        for ((name, _), mut s) in patterns.iter().zip(samples) {
            s.sort_by(f64::total_cmp);
            let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
            println!("row {name} {n} {:.2} {:.2} {:.2}", at(0.5), at(0.1), at(0.9));
        }
    }
    Ok(())
}

fn header(device: &Device, ordinal: usize, plan: &Plan) {
    println!(
        "device {} ({} ordinal {ordinal}), {} trials, us per call (N dispatches + one host wait)",
        device.info().name,
        device.info().driver,
        plan.trials
    );
}

fn run_cuda(ordinal: usize, plan: &Plan) -> Result<()> {
    let device = driver_cuda::create_device(ordinal)?;
    let raw = RawCuda::new(ordinal, 2, &SIZES)?;
    // The HAL's kernels write the word the raw side's write (declared after `raw`, dropped first).
    let env = Env::new(device.clone())?.sharing_raw_data(&raw)?;
    let one = env.dispatches(1)?;
    let buffers = SIZES.iter().map(|&n| env.dispatches(n)).collect::<Result<Vec<_>>>()?;
    let mut patterns = hal_patterns(&device, &one, &buffers, ["hal_submissions", "hal_command_buffer"])?;
    patterns.push(("raw_launches", Box::new(|_, n, calls| raw.launches_sync(n, calls))));
    patterns.push(("raw_graph", Box::new(|_, n, calls| raw.graph_sync(n, calls))));
    header(&device, ordinal, plan);
    measure(plan, &mut patterns)
}

fn run_vulkan(ordinal: usize, plan: &Plan, all_cpus: bool) -> Result<()> {
    // Before the devices start their threads, which inherit the placement.
    let placement = bench::placement::place_on_vulkan(all_cpus);
    let device = bench::registry().create_device(VULKAN_DRIVER, ordinal)?;
    // `Env` loads the SPIR-V compiled from the WGSL `touch` kernel on a Vulkan device; the raw side
    // loads the same bytes.
    let env = Env::new(device.clone())?;
    let one = env.dispatches(1)?;
    let buffers = SIZES.iter().map(|&n| env.dispatches(n)).collect::<Result<Vec<_>>>()?;
    let raw = RawVulkan::new(ordinal, &touch_spirv()?, &SIZES)?;
    let mut patterns = hal_patterns(&device, &one, &buffers, ["hal_vulkan_submissions", "hal_vulkan_command_buffer"])?;
    patterns.push(("raw_vulkan_submissions", Box::new(|_, n, calls| raw.chain_calls(1, n as u64, calls))));
    patterns.push(("raw_vulkan_command_buffer", Box::new(|_, n, calls| raw.round_trip(n, calls))));
    header(&device, ordinal, plan);
    println!("raw vulkan on {}", raw.name);
    println!("{placement}");
    measure(plan, &mut patterns)
}

fn main() -> ExitCode {
    let mut driver = "cuda".to_string();
    let mut ordinal = 0usize;
    let mut all_cpus = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--driver" => match args.next() {
                Some(name) => driver = name,
                None => return usage("--driver needs a name"),
            },
            "--all-cpus" => all_cpus = true,
            _ => match arg.parse() {
                Ok(n) => ordinal = n,
                Err(_) => return usage(&format!("unknown argument '{arg}'")),
            },
        }
    }
    let plan = Plan::from_env();
    let result = match driver.as_str() {
        "cuda" => run_cuda(ordinal, &plan),
        "vulkan" => run_vulkan(ordinal, &plan, all_cpus),
        other => return usage(&format!("unknown driver '{other}'")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("peers: {driver} device {ordinal}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("peers: {problem}\nusage: peers [--driver cuda|vulkan] [--all-cpus] [ORDINAL]");
    ExitCode::from(2)
}
