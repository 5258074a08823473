//! Hostile SPIR-V: mutants and truncations of real modules (IREE's, glslang's, and naga's from the
//! WGSL catalogue) are each refused or loaded and run; none may crash or hang the process.
//!
//! The mutants run in a child process (this test binary again) so that a crash is seen and counted
//! instead of ending the test: the child prints a line before and after each mutant, and the
//! parent restarts it after the last mutant it began. Knobs: `HAL_SPIRV_MUTANT_SEED` (the seed,
//! printed on every run), `HAL_SPIRV_MUTANTS` (mutants per module, 40 by default).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Rng;
use ctest::Kernel;
use ctest::kernels::wgsl::wgsl_source;
use hal::{
    BufferBinding, BufferParams, CommandBufferMode, Device, ExecutableFormat, ExecutableSource, SemaphoreValue,
    StatusCode, Timeout,
};

mod common;

const CHILD_ENV: &str = "HAL_SPIRV_MUTANT_CHILD";
const SEED_ENV: &str = "HAL_SPIRV_MUTANT_SEED";
const COUNT_ENV: &str = "HAL_SPIRV_MUTANTS";
/// How long a loaded mutant's dispatch runs before the child is ended: a valid kernel may loop for
/// as long as it likes (a GPU without a watchdog runs it on), and ending the process is how its
/// work is taken off the device.
const RUN_DEADLINE: Duration = Duration::from_secs(2);

/// The real modules, by name: IREE's compiled programs and glslang's (their `.comp` sources are
/// beside them), then naga's from the WGSL catalogue.
fn modules() -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spirv");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "spv"))
        .collect();
    files.sort();
    let mut modules: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|path| {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            (name, std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        })
        .collect();
    for kernel in [Kernel::FillU32, Kernel::ScaleOffsetF32, Kernel::ReverseShared, Kernel::MultiEntry] {
        let source = wgsl_source(kernel).expect("a WGSL kernel");
        let name = format!("naga {kernel:?}");
        modules.push((name.clone(), driver_vulkan::wgsl::compile(source, &name).expect("the catalogue compiles")));
    }
    modules
}

/// One hostile module: which real module, and how it was changed.
struct Mutant {
    what: String,
    bytes: Vec<u8>,
}

/// The mutants of `modules` from `seed`: `per_module` with one to three words changed each, and
/// every truncation at an instruction boundary.
fn mutants(modules: &[(String, Vec<u8>)], seed: u64, per_module: usize) -> Vec<Mutant> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for (name, bytes) in modules {
        let words: Vec<u32> = bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
        for _ in 0..per_module {
            let mut changed = words.clone();
            let mut said = Vec::new();
            for _ in 0..=rng.below(3) {
                let at = rng.below(changed.len() as u64) as usize;
                let old = changed[at];
                changed[at] = match rng.below(4) {
                    0 => rng.next_u64() as u32,
                    1 => old ^ (1 << rng.below(32)),
                    2 => old.wrapping_add(1 + rng.below(4) as u32),
                    _ => [0, 1, u32::MAX, 0xffff, 0x0001_0000][rng.below(5) as usize],
                };
                said.push(format!("word {at} {old:#x}->{:#x}", changed[at]));
            }
            out.push(Mutant { what: format!("{name}: {}", said.join(", ")), bytes: to_bytes(&changed) });
        }
        let mut at = 5;
        while at < words.len() {
            out.push(Mutant { what: format!("{name}: cut after word {at}"), bytes: to_bytes(&words[..at]) });
            at += ((words[at] >> 16) as usize).max(1);
        }
    }
    out
}

fn to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn seed() -> u64 {
    common::seed_from(SEED_ENV)
}

fn per_module() -> usize {
    std::env::var(COUNT_ENV).ok().and_then(|s| s.parse().ok()).unwrap_or(40)
}

/// What became of one mutant in the child.
enum Outcome {
    Refused(StatusCode),
    /// Loaded, and each entry point dispatched once; the dispatches' outcome.
    Ran(Result<(), StatusCode>),
    /// Loaded and dispatched, and still running at the deadline.
    StillRunning,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Refused(code) => write!(f, "refused {code:?}"),
            Outcome::Ran(Ok(())) => write!(f, "ran"),
            Outcome::Ran(Err(code)) => write!(f, "failed {code:?}"),
            Outcome::StillRunning => write!(f, "running"),
        }
    }
}

/// Loads `bytes` with the entry points taken from the module, then dispatches each entry point
/// once over zeroed buffers and waits for it.
fn try_mutant(device: &Device, bytes: &[u8]) -> Result<Outcome, String> {
    let source =
        ExecutableSource::Bytes { format: ExecutableFormat::Spirv, data: bytes.into(), entry_points: Vec::new() };
    let executable = match device.load_executable(&source) {
        Ok(executable) => executable,
        Err(e) if e.code() == StatusCode::InvalidArgument || e.code() == StatusCode::NotFound => {
            return Ok(Outcome::Refused(e.code()));
        }
        Err(e) if e.code() == StatusCode::ResourceExhausted => return Ok(Outcome::Refused(e.code())),
        Err(e) => return Err(format!("refused with an unexpected status: {e}")),
    };
    let semaphore = device.create_semaphore(0).map_err(|e| e.to_string())?;
    let mut buffers = Vec::new();
    let cb = device.create_command_buffer(CommandBufferMode::OneShot).map_err(|e| e.to_string())?;
    for (index, entry) in executable.entry_points().iter().enumerate() {
        let mut bindings = Vec::new();
        for _ in 0..entry.binding_count {
            let buffer = device.allocate_buffer(BufferParams::device_local(), 1 << 16).map_err(|e| e.to_string())?;
            bindings.push(BufferBinding::whole(&buffer));
            buffers.push(buffer);
        }
        let constants = vec![0u32; entry.constant_count];
        if let Err(e) = cb.dispatch(&executable, index as u32, [1, 1, 1], &constants, &bindings) {
            return Ok(Outcome::Ran(Err(e.code())));
        }
    }
    cb.end().map_err(|e| e.to_string())?;
    let queue = device.queue(0).map_err(|e| e.to_string())?;
    queue.execute(&[], &cb, &[SemaphoreValue::new(&semaphore, 1)]).map_err(|e| e.to_string())?;
    match semaphore.wait(1, Timeout::After(RUN_DEADLINE)) {
        Ok(()) => Ok(Outcome::Ran(Ok(()))),
        Err(e) if e.code() == StatusCode::DeadlineExceeded => Ok(Outcome::StillRunning),
        Err(e) => Ok(Outcome::Ran(Err(e.code()))),
    }
}

/// The child: tries the mutants from `first` on, a line before and after each.
fn child(first: usize) {
    let all = mutants(&modules(), seed(), per_module());
    let mut registry = hal::Registry::new();
    driver_vulkan::register(&mut registry);
    let device = registry.create_device(driver_vulkan::DRIVER_NAME, 0).expect("a Vulkan device");
    let mut out = std::io::stdout().lock();
    for (i, mutant) in all.iter().enumerate().skip(first) {
        let _ = writeln!(out, "begin {i}");
        let _ = out.flush();
        let outcome = try_mutant(&device, &mutant.bytes);
        let line = match &outcome {
            Ok(outcome) => format!("done {i} {outcome}"),
            Err(problem) => format!("problem {i} {problem}"),
        };
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
        if matches!(outcome, Ok(Outcome::StillRunning)) {
            // The device would run it on; ending the process takes it off (the parent goes on
            // from the next mutant).
            std::process::abort();
        }
    }
    let _ = writeln!(out, "end");
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn hostile_spirv_is_refused_or_runs_and_never_crashes() {
    if let Ok(first) = std::env::var(CHILD_ENV) {
        child(first.parse().expect("the first mutant"));
        return;
    }
    let seed = seed();
    let all = mutants(&modules(), seed, per_module());
    println!("{} mutants of {} modules, seed {seed} ({SEED_ENV}={seed} replays)", all.len(), modules().len());
    let started = Instant::now();
    let (mut refused, mut ran_ok, mut ran_failed, mut still_running) = (0, 0, 0, 0);
    let mut findings = Vec::new();
    let mut next = 0;
    while next < all.len() {
        let exe = std::env::current_exe().expect("the test binary");
        let mut process = Command::new(exe)
            .args(["--exact", "hostile_spirv_is_refused_or_runs_and_never_crashes", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, next.to_string())
            .env(SEED_ENV, seed.to_string())
            .env(COUNT_ENV, per_module().to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the child process");
        let mut began = None;
        let (mut ended, mut ended_on_purpose) = (false, false);
        for line in BufReader::new(process.stdout.take().expect("piped")).lines().map_while(Result::ok) {
            let mut words = line.splitn(3, ' ');
            let (kind, index, rest) = (words.next(), words.next(), words.next().unwrap_or(""));
            let index: Option<usize> = index.and_then(|i| i.parse().ok());
            match (kind, index) {
                (Some("begin"), Some(i)) => began = Some(i),
                (Some("done"), Some(i)) => {
                    began = None;
                    next = i + 1;
                    match rest {
                        r if r.starts_with("refused") => refused += 1,
                        "ran" => ran_ok += 1,
                        "running" => {
                            still_running += 1;
                            ended_on_purpose = true;
                        }
                        _ => ran_failed += 1,
                    }
                }
                (Some("problem"), Some(i)) => {
                    began = None;
                    next = i + 1;
                    findings.push(format!("{}: {rest}", all[i].what));
                }
                (Some("end"), _) => ended = true,
                _ => {}
            }
        }
        let status = process.wait().expect("the child's status");
        if let Some(i) = began {
            findings.push(format!("{}: the process died ({status})", all[i].what));
            next = i + 1;
        } else if !ended && !ended_on_purpose {
            panic!("the child stopped at mutant {next} without a crash inside one: {status}");
        }
    }
    println!(
        "{} mutants in {:.1} s: {refused} refused, {ran_ok} loaded and ran, {ran_failed} loaded and failed as values, \
         {still_running} loaded and still running after {RUN_DEADLINE:?} (their process ended), {} crashed or hung \
         (seed {seed})",
        all.len(),
        started.elapsed().as_secs_f64(),
        findings.len()
    );
    assert!(findings.is_empty(), "seed {seed}:\n{}", findings.join("\n"));
    assert!(refused > 0 && ran_ok > 0, "the mutants are neither all refused nor all accepted");
}
