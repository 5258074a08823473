//! The contract fuzzer: random programs over 2 devices x 4 queues, drawn from a seed, run on any
//! driver a [`Fixture`] supplies and checked against a reference model of the timeline contract.
//!
//! - The generator (`program.rs`) draws submissions (barrier, fill, write, read, alloca/dealloca,
//!   execute of a command buffer holding a catalogue kernel, host calls) with random wait and signal
//!   lists, host signals and fails, timed waits, and directed scenarios, each kind of behaviour a
//!   [`Family`] that can be switched off.
//! - The model (`model.rs`) predicts, as sets of allowed outcomes, what each submission and wait may
//!   end with.
//! - The executor and oracle (`run.rs`, `scenarios.rs`) run a program on the fixture's devices and
//!   check it; a program that hangs is stopped by a watchdog that prints its seed and the devices'
//!   reports.
//!
//! Kernels come from the fixture's catalogue ([`crate::KernelCatalogue`]), so the same programs run
//! with native closures on cpu-sim, PTX on CUDA and SPIR-V on Vulkan (whose busy work, without a
//! `sleep_us`, is a `spin` over as many workgroups as the time asked takes: `latch.rs`). Knobs (all optional, read by
//! [`FuzzOptions::from_env`]; see `docs/conformance.md`, "Contract fuzzer"):
//! `HAL_FUZZ_SEED`, `HAL_FUZZ_SEEDS`, `HAL_FUZZ_SECONDS`, `HAL_FUZZ_BASE`, `HAL_FUZZ_FAMILIES`,
//! `HAL_FUZZ_SLACK_MS`, `HAL_FUZZ_THREAD_CHECK`, `HAL_FUZZ_VERBOSE`.
//!
//! ```no_run
//! use ctest::fuzz::{FuzzOptions, run_fuzz};
//!
//! let fixture = driver_cpu_sim::cts::fixture();
//! let options = FuzzOptions::new(&fixture, "cargo test --test contract_fuzz").from_env().unwrap();
//! let report = run_fuzz(&fixture, &options).unwrap_or_else(|failure| panic!("{failure}"));
//! println!("{report}");
//! ```

mod latch;
mod model;
mod program;
mod rng;
mod run;
mod scenarios;
mod wakers;
mod watchdog;

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

pub use program::{Families, Family};

use crate::Fixture;
use model::Prediction;
use program::Program;
use run::{Run, RunSettings};

/// Families switched off by default while a known bug makes them fail (none now); enable one with
/// `HAL_FUZZ_FAMILIES=default,+<name>`.
pub const DISABLED_PENDING_FIXES: &[Family] = &[];

/// Programs a run makes without `HAL_FUZZ_SEEDS`, `HAL_FUZZ_SECONDS` or `HAL_FUZZ_SEED`.
pub const CI_PROGRAMS: u64 = 200;

/// How late a wait may return after its deadline, unless the driver or `HAL_FUZZ_SLACK_MS` says
/// otherwise.
pub const DEFAULT_SLACK: Duration = Duration::from_millis(100);

/// The families `fixture`'s driver cannot run, each with the reason: left out of the default set
/// (an explicit `+name` still runs them).
pub fn unsupported_families(fixture: &Fixture) -> Vec<(Family, String)> {
    let mut unsupported = Vec::new();
    if fixture.max_ranks() < 2 {
        unsupported.push((
            Family::RanksThatLeave,
            format!("needs 2 ranks of one channel, and this fixture's devices make at most {}", fixture.max_ranks()),
        ));
    }
    unsupported
}

/// What a fuzz run does: which programs, which families, and how strict its timing is.
#[derive(Clone, Debug)]
pub struct FuzzOptions {
    /// The families programs are drawn from.
    pub families: Families,
    /// The families left out of the default set because the driver cannot run them, with why.
    pub unsupported: Vec<(Family, String)>,
    /// The first seed (each program takes the next).
    pub base: u64,
    /// How many programs at most.
    pub programs: u64,
    /// Stop starting programs after this long.
    pub seconds: Option<f64>,
    /// How late a wait may return after its deadline.
    pub slack: Duration,
    /// Whether the process's thread count must be back to what it was once a program's devices
    /// dropped (`/proc/self/task`; off for a driver whose library keeps threads of its own).
    pub check_threads: bool,
    /// A failure also lists the program and what the model predicts for each submission.
    pub verbose: bool,
    /// The command that runs this fuzzer, for the replay line a failure prints.
    pub replay_command: String,
}

impl FuzzOptions {
    /// The defaults for `fixture`: every family but those disabled pending fixes and those the
    /// driver cannot run, [`CI_PROGRAMS`] programs from a base seed taken from the clock,
    /// [`DEFAULT_SLACK`]. `replay_command` runs this fuzzer (printed in a failure's replay line).
    pub fn new(fixture: &Fixture, replay_command: &str) -> Self {
        let unsupported = unsupported_families(fixture);
        let base =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        FuzzOptions {
            families: Self::default_families(&unsupported),
            unsupported,
            base,
            programs: CI_PROGRAMS,
            seconds: None,
            slack: DEFAULT_SLACK,
            check_threads: true,
            verbose: false,
            replay_command: replay_command.to_string(),
        }
    }

    fn default_families(unsupported: &[(Family, String)]) -> Families {
        let unsupported: Vec<Family> = unsupported.iter().map(|(f, _)| *f).collect();
        Families::all_but(DISABLED_PENDING_FIXES).intersect(Families::all_but(&unsupported))
    }

    /// A driver's default program count (instead of [`CI_PROGRAMS`]), before the knobs.
    pub fn with_programs(mut self, programs: u64) -> Self {
        self.programs = programs;
        self
    }

    /// A driver's default slack (real GPUs may need more than [`DEFAULT_SLACK`]), before the knobs.
    pub fn with_slack(mut self, slack: Duration) -> Self {
        self.slack = slack;
        self
    }

    /// These options changed by the knobs: `HAL_FUZZ_SEED=x` (replay seed `x` alone),
    /// `HAL_FUZZ_SEEDS=n`, `HAL_FUZZ_SECONDS=s` (run for `s` seconds), `HAL_FUZZ_BASE=x`,
    /// `HAL_FUZZ_FAMILIES=spec` (see [`Families::parse`]; `default` is this driver's default),
    /// `HAL_FUZZ_SLACK_MS=ms`, `HAL_FUZZ_THREAD_CHECK=0|1`, `HAL_FUZZ_VERBOSE` (set: on). A value
    /// that does not parse is an error naming the variable.
    pub fn from_env(mut self) -> Result<Self, String> {
        fn env<T: std::str::FromStr>(name: &str) -> Result<Option<T>, String> {
            match std::env::var(name) {
                Ok(text) => text.trim().parse().map(Some).map_err(|_| format!("{name}={text:?} does not parse")),
                Err(_) => Ok(None),
            }
        }
        if let Ok(spec) = std::env::var("HAL_FUZZ_FAMILIES") {
            self.families = Families::parse(&spec, Self::default_families(&self.unsupported))
                .map_err(|e| format!("HAL_FUZZ_FAMILIES={spec:?}: {e}"))?;
        }
        if let Some(ms) = env::<u64>("HAL_FUZZ_SLACK_MS")? {
            self.slack = Duration::from_millis(ms);
        }
        if let Some(check) = env::<u8>("HAL_FUZZ_THREAD_CHECK")? {
            self.check_threads = check != 0;
        }
        self.verbose = std::env::var("HAL_FUZZ_VERBOSE").is_ok();
        if let Some(base) = env("HAL_FUZZ_BASE")? {
            self.base = base;
        }
        self.seconds = env("HAL_FUZZ_SECONDS")?;
        match (env::<u64>("HAL_FUZZ_SEED")?, env::<u64>("HAL_FUZZ_SEEDS")?) {
            (Some(seed), _) => (self.base, self.programs, self.seconds) = (seed, 1, None),
            (None, Some(n)) => self.programs = n,
            (None, None) if self.seconds.is_some() => self.programs = u64::MAX,
            (None, None) => {}
        }
        Ok(self)
    }

    fn settings(&self) -> RunSettings {
        RunSettings { slack: self.slack, check_threads: self.check_threads }
    }

    /// The header a run prints: driver, base seed, families, and those left out and why.
    fn header(&self, fixture: &Fixture) -> String {
        let disabled: Vec<&str> = DISABLED_PENDING_FIXES.iter().map(|f| f.name()).collect();
        let mut text = format!(
            "contract_fuzz on {}: base seed {}, families {} (disabled pending fixes: {}), slack {:?}",
            fixture.driver(),
            self.base,
            self.families.names(),
            disabled.join(","),
            self.slack
        );
        for (family, reason) in &self.unsupported {
            text += &format!("\n  not run on {} by default: {}: {reason}", fixture.driver(), family.name());
        }
        text
    }
}

/// The probes that need device work in flight when the host acts (`host_fail_issued`,
/// `partial_signal_wait`, `dropped_mid_read` behind device work), by name: how many times each had
/// its work in flight (exercised) and how many times the work had ended already, so the probe
/// checked nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InFlightProbes(BTreeMap<&'static str, (u64, u64)>);

impl InFlightProbes {
    /// Counts one run of `probe`, which had its work in flight or not.
    pub(crate) fn record(&mut self, probe: &'static str, in_flight: bool) {
        let (exercised, missed) = self.0.entry(probe).or_default();
        if in_flight {
            *exercised += 1;
        } else {
            *missed += 1;
        }
    }

    /// Adds `other`'s counts.
    fn add(&mut self, other: &InFlightProbes) {
        for (probe, (exercised, missed)) in &other.0 {
            let entry = self.0.entry(probe).or_default();
            entry.0 += exercised;
            entry.1 += missed;
        }
    }

    /// How many times `probe` ran with its work in flight.
    pub fn exercised(&self, probe: &str) -> u64 {
        self.0.get(probe).map_or(0, |c| c.0)
    }

    /// How many times `probe` found its work ended already.
    pub fn not_exercised(&self, probe: &str) -> u64 {
        self.0.get(probe).map_or(0, |c| c.1)
    }

    /// The probes that ran at least [`VACUOUS_AFTER`] times and had their work in flight in fewer
    /// than a quarter of them: their device work does not last on this driver.
    fn mostly_vacuous(&self) -> Vec<&'static str> {
        let vacuous = |&(exercised, missed): &(u64, u64)| {
            exercised + missed >= VACUOUS_AFTER && exercised * 4 < exercised + missed
        };
        self.0.iter().filter(|(_, counts)| vacuous(counts)).map(|(probe, _)| *probe).collect()
    }
}

/// Runs of a probe after which too few with work in flight fail the fuzz run.
const VACUOUS_AFTER: u64 = 8;

impl fmt::Display for InFlightProbes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none ran");
        }
        let probes: Vec<String> = self
            .0
            .iter()
            .map(|(probe, (exercised, missed))| format!("{probe} {exercised} of {}", exercised + missed))
            .collect();
        f.write_str(&probes.join(", "))
    }
}

/// What a passing run did.
#[derive(Clone, Debug)]
pub struct FuzzReport {
    /// Programs run.
    pub programs: u64,
    /// Operations (host steps) they performed.
    pub operations: usize,
    /// How long they took.
    pub elapsed: Duration,
    /// How many hostile wakers panicked on the HAL's or the driver's threads (contained, or the
    /// run would have failed).
    pub waker_panics_elsewhere: usize,
    /// The probes that need device work in flight, and how often they had it.
    pub in_flight: InFlightProbes,
}

impl fmt::Display for FuzzReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.elapsed.as_secs_f64().max(1e-9);
        write!(
            f,
            "contract_fuzz: {} programs, {} operations in {seconds:.2} s ({:.0} ops/s, {:.1} programs/s); {} waker \
             panics on the HAL's threads; probes with their device work in flight (the rest found it ended and \
             checked nothing): {}",
            self.programs,
            self.operations,
            self.operations as f64 / seconds,
            self.programs as f64 / seconds,
            self.waker_panics_elsewhere,
            self.in_flight
        )
    }
}

/// Runs the programs `options` names on `fixture`'s driver, printing a header first; the first
/// failure stops the run, its message naming the seed, the families and the replay command.
pub fn run_fuzz(fixture: &Fixture, options: &FuzzOptions) -> Result<FuzzReport, String> {
    println!("{}", options.header(fixture));
    let busy = prepare_busy_work(fixture)?;
    println!("busy device work: {busy}");
    let started = Instant::now();
    let panics_before = wakers::panics_elsewhere();
    let (mut programs, mut operations) = (0u64, 0usize);
    let mut in_flight = InFlightProbes::default();
    for index in 0..options.programs {
        if options.seconds.is_some_and(|s| started.elapsed().as_secs_f64() >= s) {
            break;
        }
        let seed = options.base.wrapping_add(index);
        let program = program::generate(seed, options.families);
        operations += program.op_count();
        let outcome = run_program(fixture, program, options.settings());
        if let Ok(probes) = &outcome {
            in_flight.add(probes);
        }
        if let Err(mut failure) = outcome {
            if options.verbose {
                failure += &listing(&program::generate(seed, options.families));
            }
            let names = options.families.names();
            return Err(format!(
                "contract_fuzz on {}: seed {seed} failed (families {names}):\n{failure}\nreplay: HAL_FUZZ_SEED={seed} \
                 HAL_FUZZ_FAMILIES={names} {}",
                fixture.driver(),
                options.replay_command
            ));
        }
        programs += 1;
    }
    let waker_panics_elsewhere = wakers::panics_elsewhere() - panics_before;
    let vacuous = in_flight.mostly_vacuous();
    if !vacuous.is_empty() {
        return Err(format!(
            "contract_fuzz on {}: {} found the device work they hold in flight ended before the host acted in most \
             runs ({in_flight}): the busy work ({}) does not last on this device, so they checked nothing",
            fixture.driver(),
            vacuous.join(", "),
            busy
        ));
    }
    Ok(FuzzReport { programs, operations, elapsed: started.elapsed(), waker_panics_elsewhere, in_flight })
}

/// The busy work `fixture`'s driver gets, measured now (with its devices idle) where it is a spin.
fn prepare_busy_work(fixture: &Fixture) -> Result<latch::BusyWork, String> {
    latch::busy_work(fixture)
        .map_err(|e| format!("contract_fuzz on {}: measuring busy device work: {e}", fixture.driver()))
}

/// The families the first regression seeds were found with: every family there was then.
const FIRST_FAMILIES: &str = "all,-hostile_wakers,-typed_reads,-dropped_mid_read,-ranks_that_leave";

/// Seeds long runs failed on, with the families they were drawn from; every driver replays them
/// on every run. Each found a scheduler bug on cpu-sim: a host call queued behind the running call
/// that waited for it; work released while its device was being torn down, handed to a queue no
/// completion thread retired any more; a read submitted as a gate released the host call ahead of
/// it, issued before that call, which had not opened its own gate yet (about one run in ten).
pub const REGRESSION_SEEDS: [(u64, &str); 3] = [
    (1795458581450610870, FIRST_FAMILIES),
    (1795463124314815543, FIRST_FAMILIES),
    (1795675536806156023, FIRST_FAMILIES),
];

/// Runs [`REGRESSION_SEEDS`] on `fixture`'s driver; the first failure stops.
pub fn run_regression_seeds(fixture: &Fixture, options: &FuzzOptions) -> Result<(), String> {
    let mut seeds = Vec::new();
    for (seed, spec) in REGRESSION_SEEDS {
        seeds.push((seed, Families::parse(spec, Families::all())?));
    }
    run_seeds(fixture, &seeds, options)
}

/// Runs the program of each `(seed, families)` in turn (regression seeds); the first failure stops.
pub fn run_seeds(fixture: &Fixture, seeds: &[(u64, Families)], options: &FuzzOptions) -> Result<(), String> {
    prepare_busy_work(fixture)?;
    for &(seed, families) in seeds {
        if let Err(failure) = run_program(fixture, program::generate(seed, families), options.settings()) {
            return Err(format!(
                "contract_fuzz on {}: regression seed {seed} failed (families {}):\n{failure}",
                fixture.driver(),
                families.names()
            ));
        }
    }
    Ok(())
}

/// Runs `program` on a thread of its own under the watchdog.
fn run_program(fixture: &Fixture, program: Program, settings: RunSettings) -> Result<InFlightProbes, String> {
    wakers::quiet_hostile_panics();
    let fixture = fixture.clone();
    watchdog::run_with_watchdog(format!("{}{}", wakers::PROGRAM_THREAD, program.seed), move |diagnostics| {
        Run::new(&fixture, &program, settings, diagnostics)?.execute()
    })
}

/// The program and what the model predicts for each node, for `HAL_FUZZ_VERBOSE`.
fn listing(program: &Program) -> String {
    let prediction = Prediction::of(program, program.families.has(Family::DropInFlight));
    let mut text = String::from("\nprogram:\n");
    for (n, node) in program.nodes.iter().enumerate() {
        let (waits, outcome) = (prediction.waits[n], prediction.nodes[n]);
        text += &format!("  node {n}: {node:?} waits {waits} outcome {outcome}\n");
    }
    for (at, step) in program.steps.iter().enumerate() {
        text += &format!("  step {at}: {step:?}\n");
    }
    text
}
