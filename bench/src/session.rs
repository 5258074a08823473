//! One bench run as the front-ends (`hal bench`, the `bench` binary) start it: the options they
//! share ([`Options`], parsed by clap in both), the workloads, the allocation count, the long run,
//! the table, and the JSON and SVG files.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hal::{Device, SemaphoreValue as SV, Timeout};

use crate::alloc_count;
use crate::gpu_clock;
use crate::output_file::OutputFile;
use crate::placement;
use crate::provenance;
use crate::report;
use crate::scaling::{self, Placement, ScalingSizes, ScalingTable};
use crate::workloads::{self, Env, Sizes};

/// The bench's options, the same in every front-end (`#[command(flatten)]`).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Options {
    /// Fewer trials and operations: well under a minute on cpu-sim (and no scaling tables unless
    /// --scaling)
    #[arg(long)]
    pub quick: bool,
    /// Only the scaling tables: submission throughput with 1, 2, 4, ... threads, each on its own
    /// queue and all on one queue
    #[arg(long)]
    pub scaling: bool,
    /// The most submitting threads in the scaling tables
    #[arg(long, value_name = "N", default_value_t = scaling::DEFAULT_MAX_THREADS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub max_threads: usize,
    /// Also write the results as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also plot the latencies against their baselines as SVG to FILE
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Leave the threads on every CPU the process may use (on Vulkan they are otherwise kept off
    /// the CPUs that take the GPU's interrupts)
    #[arg(long)]
    pub all_cpus: bool,
}

impl Default for Options {
    /// The full run with the command line's defaults.
    fn default() -> Self {
        Options {
            quick: false,
            scaling: false,
            max_threads: scaling::DEFAULT_MAX_THREADS,
            json: None,
            svg: None,
            all_cpus: false,
        }
    }
}

/// Why a run stopped: the report could not be written (`out` closed: the caller may end quietly),
/// or the bench failed (the message says which step).
#[derive(Debug)]
pub enum Failure {
    /// Writing the report to `out` failed.
    Output(std::io::Error),
    /// A workload, the device or a result file failed.
    Bench(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Output(e) => write!(f, "writing the report: {e}"),
            Failure::Bench(message) => f.write_str(message),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Output(e)
    }
}

fn failed(step: &str) -> impl Fn(hal::Error) -> Failure + '_ {
    move |e| Failure::Bench(format!("{step}: {e}"))
}

/// Runs the bench on `device` with `options`, writing the report to `out` and each workload's name
/// to `progress` as it starts; writes the JSON and SVG files the options ask for, opened (created)
/// before anything runs. With `peer`, a
/// second device of the same driver, the cross-device rows run too.
pub fn run(
    device: Device,
    peer: Option<Device>,
    options: &Options,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(&str),
) -> Result<(), Failure> {
    // Opened first: a path that cannot be written fails now, not after the whole bench.
    let json = options.json.as_deref().map(|path| OutputFile::create(path, "the JSON file")).transpose();
    let json = json.map_err(Failure::Bench)?;
    let svg = options.svg.as_deref().map(|path| OutputFile::create(path, "the SVG file")).transpose();
    let svg = svg.map_err(Failure::Bench)?;
    // Before anything else runs: the threads started from here on inherit the placement.
    let placement = placement::place(&device.info().driver, options);
    let description = format!("{} '{}'", device.info().driver, device.info().name);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let head = [
        ("commit", provenance::commit()),
        ("machine", provenance::machine(device.info())),
        ("command", serde_json::Value::String(command)),
    ];
    let (sizes, mode) = if options.quick { (Sizes::quick(), "quick") } else { (Sizes::full(), "full") };
    let mut env = Env::new(device).map_err(failed("preparing the benchmarks"))?;
    if let Some(peer) = peer {
        env = env.with_peer(peer).map_err(failed("preparing the second device"))?;
    }
    let properties =
        env.device.info().properties.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ");
    let unix_time = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    writeln!(out, "bench on {description} ({mode}), unix time {unix_time}")?;
    if !properties.is_empty() {
        writeln!(out, "device properties: {properties}")?;
    }
    if let Some(placement) = &placement {
        writeln!(out, "{placement}")?;
    }
    out.flush()?;
    let started = Instant::now();
    let mut extra = vec![
        ("unix_time".to_string(), unix_time.to_string()),
        ("mode".to_string(), mode.to_string()),
        ("properties".to_string(), properties),
    ];
    if let Some(placement) = placement {
        extra.push(("placement".to_string(), placement));
    }
    let mut rows = Vec::new();
    if !options.scaling {
        // The GPU's clock during each row (see `gpu_clock`), on the drivers of GPUs.
        let info = env.device.info();
        let gpu = info.driver == workloads::CUDA_DRIVER || info.driver == workloads::VULKAN_DRIVER;
        let clock = gpu.then(|| gpu_clock::ClockWatch::start(info.ordinal));
        rows = workloads::run_all(&env, sizes, &mut *progress).map_err(failed("benchmark failed"))?;
        let clock_note = match &clock {
            Some(Ok(watch)) => {
                for row in &mut rows {
                    row.sm_clock_mhz = row.timed().and_then(|(from, to)| watch.range(from, to));
                }
                Some(watch.device.clone())
            }
            Some(Err(why)) => Some(format!("not read: {why}")),
            None => None,
        };
        drop(clock);
        let allocations = if alloc_count::installed() {
            progress("allocations per submission");
            let (allocs, polling) = allocations_per_submission(&env).map_err(failed("counting allocations"))?;
            let by_workload = allocations_by_workload(&env).map_err(failed("counting allocations"))?;
            let by_workload: Vec<String> = by_workload.iter().map(|(name, n)| format!("{name} {n:.2}")).collect();
            Some((format!("{allocs:.2}"), polling, by_workload.join(", ")))
        } else {
            None
        };
        progress("long run");
        let long = long_run(&env, if options.quick { 50_000 } else { 1_000_000 }).map_err(failed("the long run"))?;
        writeln!(out, "{}", report::table(&rows))?;
        if let Some(note) = clock_note {
            writeln!(out, "{}", report::clock_lines(&rows, &note))?;
            extra.push(("sm_clock".to_string(), note));
        }
        match &allocations {
            Some((allocs, polling, by_workload)) => writeln!(
                out,
                "heap allocations per steady-state submission (reused command buffer, inline lists): {allocs} \
                 (the bench's own idle polling made {polling}, left out); in bursts waited on by the host: \
                 {by_workload}"
            )?,
            None => {
                writeln!(out, "heap allocations per submission: not counted (this binary has no counting allocator)")?
            }
        }
        writeln!(out, "{long}")?;
        out.flush()?;
        if let Some((allocs, polling, by_workload)) = allocations {
            extra.push(("allocations_per_submission".to_string(), allocs));
            extra.push(("allocations_by_idle_polling_left_out".to_string(), polling.to_string()));
            extra.push(("allocations_by_workload".to_string(), by_workload));
        }
        extra.push(("long_run".to_string(), long));
    }
    let mut tables = Vec::new();
    if let Some(sizes) = scaling_sizes(options) {
        tables = scaling_tables(&env, sizes, out, progress)?;
    }
    writeln!(out, "total bench time {:.1} s", started.elapsed().as_secs_f64())?;
    out.flush()?;
    if let Some(file) = json {
        file.write_all(report::json(&head, &description, &rows, &tables, &extra).as_bytes()).map_err(Failure::Bench)?;
    }
    if let Some(file) = svg {
        let title = format!("hal bench on {description}: median latency per operation vs baseline");
        file.write_all(report::svg(&title, &rows).as_bytes()).map_err(Failure::Bench)?;
    }
    Ok(())
}

/// How many names [`run`] tells its `progress` on `device`, with a `peer` or without, with
/// `options`: the steps of a progress display.
pub fn progress_steps(device: &Device, peer: bool, options: &Options) -> usize {
    let mut steps = 0;
    if !options.scaling {
        // The workloads, the allocation count where there is a counting allocator, the long run.
        steps += workloads::progress_steps(device.info(), peer) + usize::from(alloc_count::installed()) + 1;
    }
    if let Some(sizes) = scaling_sizes(options) {
        steps += Placement::ALL.len() * sizes.thread_counts().len();
    }
    steps
}

/// The sizes of the scaling tables `options` ask for, if they ask for them.
fn scaling_sizes(options: &Options) -> Option<ScalingSizes> {
    match (options.scaling, options.quick) {
        (false, true) => None,
        (_, true) => Some(ScalingSizes::quick(options.max_threads)),
        (_, false) => Some(ScalingSizes::full(options.max_threads)),
    }
}

/// The scaling tables ([`scaling`]) with `sizes`, printed to `out` as they finish. Where `env`'s
/// device has fewer queues than the most threads and its driver makes queues on request (cpu-sim,
/// CUDA), both tables run on a second device of the same driver and GPU with a queue per thread;
/// elsewhere the own-queue rows the device has too few queues for say so.
pub fn scaling_tables(
    env: &Env,
    sizes: ScalingSizes,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<ScalingTable>, Failure> {
    let most = sizes.thread_counts().last().copied().unwrap_or(1);
    let info = env.device.info();
    let wider = if info.queue_count < most { crate::device_with_queues(info, most) } else { None };
    let wider = match wider {
        Some(Ok(device)) => {
            writeln!(
                out,
                "scaling tables on a second {} device of the same ordinal with {most} queues ({} has {})",
                info.driver, info.name, info.queue_count
            )?;
            Some(Env::new(device).map_err(failed("preparing the scaling device"))?)
        }
        Some(Err(e)) => {
            writeln!(out, "scaling tables on the device's {} queues (one with {most} failed: {e})", info.queue_count)?;
            None
        }
        None => None,
    };
    let tables = scaling::run(wider.as_ref().unwrap_or(env), sizes, progress).map_err(failed("the scaling tables"))?;
    for table in &tables {
        writeln!(out, "{}", report::scaling_table(table))?;
    }
    out.flush()?;
    Ok(tables)
}

/// Heap allocations (on every thread) per submission of a chained execute of a reused one-dispatch
/// command buffer with inline semaphore lists, counted from the first submit until the device is
/// idle again, after identical rounds have warmed the pools. The bench's own idle polling
/// (`resource_usage()` returns a `Vec`) is counted on its thread and left out; it is returned second.
/// The environment variable that, set to a number N, makes the allocation count print the N most
/// frequent allocation sites of its counted round to stderr (each allocation's backtrace is kept:
/// the round runs slower, and its count is unchanged).
pub const ALLOCATION_SITES_ENV: &str = "HAL_BENCH_ALLOCATION_SITES";

/// Submissions counted for each of [`allocations_by_workload`]'s figures.
const COUNTED: u64 = 2_000;

/// Heap allocations per submission in host round trips, cross-queue hops and fan-out/fan-in rounds
/// ([`workloads::Bursts`]), each counted on every thread over 2 000 submissions after as many to
/// warm up: `workload figure` pairs, a workload the device has too few queues for left out.
pub fn allocations_by_workload(env: &Env) -> hal::Result<Vec<(&'static str, f64)>> {
    let mut figures = Vec::new();
    let workloads = [
        ("round trip", Some(workloads::Bursts::round_trips(env)?)),
        ("cross-queue hop", workloads::Bursts::hops(env)?),
        ("fan-out/fan-in", workloads::Bursts::fan_out_in(env)?),
    ];
    for (name, bursts) in workloads {
        let Some(mut bursts) = bursts else { continue };
        bursts.run(COUNTED)?;
        let before = alloc_count::total();
        bursts.run(COUNTED)?;
        figures.push((name, (alloc_count::total() - before) as f64 / COUNTED as f64));
    }
    Ok(figures)
}

/// Heap allocations per submission over 1 000 chained executes of a reused one-dispatch command
/// buffer on `env`'s queue 0, after three warm-up rounds, until the device is idle again (with a
/// counting global allocator; see `alloc_count`), and the allocations the idle polling made on this
/// thread, which are left out.
pub fn allocations_per_submission(env: &Env) -> hal::Result<(f64, u64)> {
    let cb = env.dispatches(1)?;
    let q = env.device.queue(0)?;
    let s = env.device.create_semaphore(0)?;
    let round = 1_000u64;
    let mut value = 0;
    // Returns the allocations the idle polling made.
    let mut run_round = || -> hal::Result<u64> {
        for _ in 0..round {
            q.execute(&[SV::new(&s, value)], &cb, &[SV::new(&s, value + 1)])?;
            value += 1;
        }
        s.wait(value, Timeout::Infinite)?;
        let polling = alloc_count::on_this_thread();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !env.device.resource_usage().is_idle() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        Ok(alloc_count::on_this_thread() - polling)
    };
    for _ in 0..3 {
        run_round()?;
    }
    let before = alloc_count::total();
    let sites = std::env::var(ALLOCATION_SITES_ENV).ok().and_then(|n| n.parse::<usize>().ok());
    let polling = match sites {
        Some(top) => {
            let (polling, sites) = alloc_count::record_sites(top, 4, &mut run_round);
            eprintln!("allocation sites of {round} submissions (count, frames innermost first):");
            for (count, site) in sites {
                eprintln!("{count:8} {site}");
            }
            polling?
        }
        None => run_round()?,
    };
    let after = alloc_count::total();
    Ok(((after - before).saturating_sub(polling) as f64 / round as f64, polling))
}

/// Runs `count` chained submissions and reports the pools at the end (bounded, back to idle).
fn long_run(env: &Env, count: u64) -> hal::Result<String> {
    let cb = env.dispatches(1)?;
    let q = env.device.queue(0)?;
    let s = env.device.create_semaphore(0)?;
    let start = Instant::now();
    for i in 0..count {
        q.execute(&[SV::new(&s, i)], &cb, &[SV::new(&s, i + 1)])?;
        if i % 10_000 == 9_999 {
            s.wait(i + 1 - 5_000, Timeout::Infinite)?;
            // Reads the pools mid-run as well (the long run's cost includes it, as it always has).
            let _ = env.device.resource_usage();
        }
    }
    s.wait(count, Timeout::Infinite)?;
    let elapsed = start.elapsed();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !env.device.resource_usage().is_idle() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(format!(
        "{count} chained submissions in {:.2} s; pools after: {}",
        elapsed.as_secs_f64(),
        env.device.resource_usage()
    ))
}
