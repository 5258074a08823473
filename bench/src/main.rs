//! `bench`: `cargo run --release -p bench -- --driver cpu-sim|cuda [--quick] [--json FILE] [--svg FILE]`.
//!
//! Without a GPU, `--driver cuda` prints the driver's `Unavailable` reason on one line and exits
//! with status 1.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bench::report;
use bench::workloads::{self, Env, Sizes};
use hal::{Registry, SemaphoreValue as SV, Timeout};

/// Counts heap allocations so the run can report allocations per steady-state submission.
struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Allocations made by this thread (so the bench can leave out its own bookkeeping).
    static THREAD_ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Counts one allocation, process-wide and for the calling thread.
fn count_allocation() {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    // A const-initialised `Cell` has no destructor, so this works during thread teardown too; should
    // the slot be unavailable anyway, only the per-thread count misses it.
    let _ = THREAD_ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn thread_allocations() -> u64 {
    THREAD_ALLOCATIONS.try_with(Cell::get).unwrap_or(0)
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we pass on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (we forward every allocation).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: as for `dealloc`; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

struct Args {
    driver: String,
    quick: bool,
    json: Option<String>,
    svg: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args { driver: hal::DEFAULT_DRIVER.to_string(), quick: false, json: None, svg: None };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--driver" => args.driver = it.next().ok_or("--driver needs a name")?,
            "--quick" => args.quick = true,
            "--json" => args.json = Some(it.next().ok_or("--json needs a file")?),
            "--svg" => args.svg = Some(it.next().ok_or("--svg needs a file")?),
            "-h" | "--help" => {
                println!("usage: bench [--driver NAME] [--quick] [--json FILE] [--svg FILE]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument '{other}' (try --help)")),
        }
    }
    Ok(args)
}

/// Heap allocations (on every thread) per submission of a chained execute of a reused one-dispatch
/// command buffer with inline semaphore lists, counted from the first submit until the device is
/// idle again, after identical rounds have warmed the pools. The bench's own idle polling
/// (`resource_usage()` returns a `Vec`) is counted on its thread and left out; it is returned second.
fn allocations_per_submission(env: &Env) -> hal::Result<(f64, u64)> {
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
        let polling = thread_allocations();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !env.device.resource_usage().is_idle() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        Ok(thread_allocations() - polling)
    };
    for _ in 0..3 {
        run_round()?;
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let polling = run_round()?;
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    Ok(((after - before).saturating_sub(polling) as f64 / round as f64, polling))
}

/// Runs `count` chained submissions and reports the pools at the end (bounded, back to idle).
fn long_run(env: &Env, count: u64) -> hal::Result<String> {
    let cb = env.dispatches(1)?;
    let q = env.device.queue(0)?;
    let s = env.device.create_semaphore(0)?;
    let start = Instant::now();
    let mut peak_events = 0;
    for i in 0..count {
        q.execute(&[SV::new(&s, i)], &cb, &[SV::new(&s, i + 1)])?;
        if i % 10_000 == 9_999 {
            s.wait(i + 1 - 5_000, Timeout::Infinite)?;
            let usage = env.device.resource_usage();
            if let Some(events) = usage.pools.iter().find(|p| p.name == "events") {
                peak_events = peak_events.max(events.created);
            }
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

fn run() -> Result<(), String> {
    let args = parse_args()?;
    let mut registry = Registry::new();
    driver_cpu_sim::register(&mut registry);
    driver_cuda::register(&mut registry);
    let device = registry.create_device(&args.driver, 0).map_err(|e| format!("cannot open '{}': {e}", args.driver))?;
    let description = format!("{} '{}'", device.info().driver, device.info().name);
    let sizes = if args.quick { Sizes::quick() } else { Sizes::full() };
    let env = Env::new(device).map_err(|e| e.to_string())?;
    let properties =
        env.device.info().properties.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ");
    let unix_time = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    println!("bench on {description} ({}), unix time {unix_time}", if args.quick { "quick" } else { "full" });
    if !properties.is_empty() {
        println!("device properties: {properties}");
    }
    let started = Instant::now();
    let rows = workloads::run_all(&env, sizes, |name| {
        eprintln!("  running {name}... ({:.1} s so far)", started.elapsed().as_secs_f64())
    })
    .map_err(|e| e.to_string())?;
    let (allocs, polling) = allocations_per_submission(&env).map_err(|e| e.to_string())?;
    let long = long_run(&env, if args.quick { 50_000 } else { 1_000_000 }).map_err(|e| e.to_string())?;
    println!("{}", report::table(&rows));
    println!(
        "heap allocations per steady-state submission (reused command buffer, inline lists): {allocs:.2} \
         (the bench's own idle polling made {polling}, left out)"
    );
    println!("{long}");
    println!("total bench time {:.1} s", started.elapsed().as_secs_f64());
    let extra = vec![
        ("unix_time".to_string(), unix_time.to_string()),
        ("mode".to_string(), if args.quick { "quick" } else { "full" }.to_string()),
        ("properties".to_string(), properties),
        ("allocations_per_submission".to_string(), format!("{allocs:.2}")),
        ("allocations_by_idle_polling_left_out".to_string(), polling.to_string()),
        ("long_run".to_string(), long),
    ];
    if let Some(path) = &args.json {
        std::fs::write(path, report::json(&description, &rows, &extra)).map_err(|e| format!("{path}: {e}"))?;
    }
    if let Some(path) = &args.svg {
        let title = format!("hal bench on {description}: median latency per operation vs baseline");
        std::fs::write(path, report::svg(&title, &rows)).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
