//! `hal`: the HAL's command line (clap). `hal --help` lists the commands; `hal COMMAND --help` (or
//! `hal help COMMAND`) shows one with its options.

use std::io::{ErrorKind, Write};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bench::alloc_count::CountingAllocator;
use clap::{Args, CommandFactory, Parser, Subcommand};
use tools::device_spec::DeviceSpec;
use tools::progress::Progress;
use tools::stencil::{self, Config};
use tools::trace::TraceRecorder;
use tools::trace_file::TraceFile;

// `hal bench` reports heap allocations per submission as the `bench` binary does; elsewhere the
// count costs one relaxed atomic add per allocation.
#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// What every help text ends with.
const EXIT_STATUS: &str = "Exit status: 0 on success; 1 when a check or a conformance case fails, or on an error (one \
                           line on stderr: the cause); 2 for bad arguments.";

/// Every help text's layout: the usage line first.
const HELP: &str = "usage: {usage}\n\n{about-with-newline}\n{all-args}{after-help}";

/// The HAL's command line: devices, the multi-queue stencil job, the conformance suite, benchmarks
#[derive(Debug, Parser)]
#[command(name = "hal", version, help_template = HELP, after_help = EXIT_STATUS)]
#[command(subcommand_required = true, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Drivers, their devices and properties (with their `--device` spellings); unavailable drivers
    /// with the reason
    #[command(help_template = HELP, after_help = EXIT_STATUS)]
    Devices,
    /// The main job: a 2-D heat stencil split over two queues with halo exchanges ordered by
    /// timeline semaphores, checked against a CPU reference
    #[command(help_template = HELP, after_help = EXIT_STATUS)]
    Run(RunArgs),
    /// The conformance suite (ctest) on a driver's device, each case in its own process
    ///
    /// Runs on cpu-sim (device 0), vulkan[:N] and cuda[:N], with the driver's own fixture: the
    /// devices each case needs are made on the --device given (on CUDA with --spread, on every GPU
    /// in turn). Prints a row per case (area, case, time, PASS / FAIL / SKIP with the reason), the
    /// failures, then the counts per area. Where the driver cannot run here (no Vulkan device; no
    /// CUDA driver library, GPU or NVRTC for CUDA's kernels) it says why, once, runs no case and
    /// exits 1; so does a device the driver does not have.
    #[command(help_template = HELP, after_help = EXIT_STATUS)]
    Cts(CtsArgs),
    /// The benchmarks, each beside a baseline measured in the same run
    #[command(help_template = HELP, after_help = EXIT_STATUS)]
    Bench(BenchArgs),
    /// One rank of a collective job per process: all-reduce, all-gather and barrier, checked
    ///
    /// Start one process per rank, as a launcher would (one per GPU). The rank and the world size
    /// come from --rank and --ranks, else from the launcher's environment: torchrun (RANK,
    /// WORLD_SIZE, LOCAL_RANK), mpirun of Open MPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
    /// OMPI_COMM_WORLD_LOCAL_RANK) or srun of Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID).
    /// Rank 0 makes the channel id and hands it to the others through a TCP rendezvous: it listens
    /// at --rendezvous HOST:PORT, else at MASTER_ADDR:MASTER_PORT (torchrun sets them, and its agent
    /// holds MASTER_PORT, so there the port is MASTER_PORT+1; under mpirun or srun export them: an
    /// address of rank 0's node and a free port), and the others connect,
    /// retrying until --timeout; a rank of another job or world size is refused. Or, with --id-file,
    /// rank 0 writes the id to a file (atomically, readable by its owner only: the id lets a process
    /// join the channel) that the other ranks, run by the same user, wait for: a path every rank
    /// sees. A device given as a driver alone (--device cuda) is taken at the local rank's ordinal
    /// (cuda:LOCAL_RANK), one GPU per rank of a node. On CUDA, NCCL's own transports (NVLink, PCIe,
    /// InfiniBand/RoCE, sockets) carry the collectives across nodes, and NCCL's environment
    /// variables (NCCL_SOCKET_IFNAME, ...) apply. On cpu-sim the ranks meet through a Unix socket
    /// of rank 0's process: one host only. Each rank prints one line with its timings.
    #[command(help_template = HELP, after_help = EXIT_STATUS)]
    Collective(CollectiveJobArgs),
}

/// `--device`, shared by the commands that run on one.
#[derive(Debug, Args)]
struct DeviceArg {
    /// The device, as `hal devices` spells it: DRIVER[:ORDINAL] (ordinal 0 when left out) or its
    /// stable id, e.g. cpu-sim, cuda:1 or GPU-8c3f...
    #[arg(long, visible_alias = "driver", value_name = "DRIVER[:ORDINAL]|ID", default_value = "cpu-sim:0")]
    device: DeviceSpec,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    device: DeviceArg,
    /// Grid side, 4 to 16384
    #[arg(long, value_name = "N", default_value_t = Config::default().size, value_parser = size, allow_negative_numbers = true)]
    size: u32,
    /// Steps, 0 to 10000000
    #[arg(long, value_name = "K", default_value_t = Config::default().steps, value_parser = steps, allow_negative_numbers = true)]
    steps: u32,
    /// Most steps in flight before the host waits, at least 1
    #[arg(long, value_name = "W", default_value_t = Config::default().window, value_parser = window, allow_negative_numbers = true)]
    window: u32,
    /// Write the timeline as Chrome trace JSON (open it in ui.perfetto.dev), streamed as the run
    /// goes; FILE is opened (created) before the run starts
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Split the grid over this many devices of the driver, 1 to 16, one part of rows each on its
    /// queue 0: --device's, then the next ordinals in turn (wrapping around, so a driver with fewer
    /// devices opens some again)
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = device_count, allow_negative_numbers = true)]
    devices: u32,
    /// Skip the comparison with the single-threaded CPU reference (most of a large run's time: at
    /// --size 16384, seconds); the report says the check was skipped
    #[arg(long)]
    no_check: bool,
}

#[derive(Debug, Args)]
struct CtsArgs {
    #[command(flatten)]
    device: DeviceArg,
    /// Only the cases whose id (area::case) contains TEXT
    #[arg(long, value_name = "TEXT")]
    filter: Option<String>,
    /// All cases in this process
    #[arg(long)]
    in_process: bool,
    /// Every case on one device, in this process (implies --in-process)
    #[arg(long)]
    shared_device: bool,
    /// CUDA only: each case's devices go round every GPU (from --device's ordinal, wrapping
    /// around), so the multi-device and collective cases cross GPUs (a collective channel gets one
    /// rank per GPU)
    #[arg(long)]
    spread: bool,
    /// Print the case ids and exit
    #[arg(long)]
    list: bool,
    /// Run this one case here and report it to the parent (how each case gets its process)
    #[arg(long, value_name = "ID", hide = true)]
    child: Option<String>,
}

#[derive(Debug, Args)]
struct CollectiveJobArgs {
    #[command(flatten)]
    device: DeviceArg,
    /// This process's rank, 0 to N-1 (default: from the launcher's environment)
    #[arg(long, value_name = "R", value_parser = rank, allow_negative_numbers = true)]
    rank: Option<u32>,
    /// How many ranks (processes) the job has, 1 to 4096 (default: from the launcher's environment)
    #[arg(long, value_name = "N", value_parser = ranks, allow_negative_numbers = true)]
    ranks: Option<u32>,
    /// Where rank 0 listens and the other ranks connect for the channel id (default:
    /// MASTER_ADDR:MASTER_PORT)
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "id_file")]
    rendezvous: Option<String>,
    /// Rank 0 writes the channel id here (hex); the other ranks wait for it (instead of the
    /// rendezvous)
    #[arg(long, value_name = "PATH")]
    id_file: Option<PathBuf>,
    /// Elements per rank of each collective, 1 to 16777216
    #[arg(long, value_name = "E", default_value_t = 1024, value_parser = elements, allow_negative_numbers = true)]
    elements: u32,
    /// Iterations, 1 to 1000000
    #[arg(long, value_name = "K", default_value_t = 3, value_parser = iterations, allow_negative_numbers = true)]
    iterations: u32,
    /// The longest wait, in seconds, for the channel id (at the rendezvous, or in the id file) and
    /// for each iteration's collectives, 1 to 86400
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = seconds, allow_negative_numbers = true)]
    timeout: u32,
}

#[derive(Debug, Args)]
struct BenchArgs {
    #[command(flatten)]
    device: DeviceArg,
    #[command(flatten)]
    options: bench::session::Options,
}

/// `text` as a whole number in `range`; an error names the value and the range (clap adds the flag).
/// Every number option of every command says it the same way, negative and huge values included.
fn number(text: &str, range: RangeInclusive<u32>) -> Result<u32, String> {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("not a whole number".to_string());
    }
    match text.parse::<u32>() {
        Ok(number) if range.contains(&number) => Ok(number),
        _ => Err(out_of_range(text, &range)),
    }
}

/// "TEXT is out of range: it must be between LOW and HIGH" (or "at least LOW" without a bound).
fn out_of_range(text: &str, range: &RangeInclusive<u32>) -> String {
    let bound = match (*range.start(), *range.end()) {
        (low, u32::MAX) => format!("at least {low}"),
        (low, high) => format!("between {low} and {high}"),
    };
    format!("{text} is out of range: it must be {bound}")
}

fn size(text: &str) -> Result<u32, String> {
    number(text, stencil::SIZES)
}

fn steps(text: &str) -> Result<u32, String> {
    number(text, 0..=stencil::MAX_STEPS)
}

fn device_count(text: &str) -> Result<u32, String> {
    number(text, 1..=stencil::MAX_DEVICES as u32)
}

fn window(text: &str) -> Result<u32, String> {
    number(text, 1..=u32::MAX)
}

fn rank(text: &str) -> Result<u32, String> {
    number(text, 0..=4095)
}

fn ranks(text: &str) -> Result<u32, String> {
    number(text, 1..=4096)
}

fn elements(text: &str) -> Result<u32, String> {
    number(text, 1..=1 << 24)
}

fn iterations(text: &str) -> Result<u32, String> {
    number(text, 1..=1_000_000)
}

fn seconds(text: &str) -> Result<u32, String> {
    number(text, 1..=86_400)
}

/// A command line clap refused, or asked for help or the version: help and version go to stdout
/// (status 0); an error goes to stderr as one line (status 2), with the command's `--help` to see.
fn answer_clap(e: &clap::Error, args: &[String]) -> ExitCode {
    use clap::error::ErrorKind as Kind;
    let text = e.render().to_string();
    match e.kind() {
        Kind::DisplayHelp | Kind::DisplayVersion => match emit(&text) {
            Ok(()) | Err(Failure::StdoutClosed) => ExitCode::SUCCESS,
            Err(Failure::Error(e) | Failure::Usage(e)) => {
                eprintln!("hal: error: {e}");
                ExitCode::FAILURE
            }
        },
        // `hal` alone: the whole help, as the usage error it is.
        Kind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprint!("{text}");
            ExitCode::from(2)
        }
        _ => {
            let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
            let mut line = lines.next().unwrap_or("error: bad arguments").to_string();
            for tip in lines.filter(|l| l.starts_with("tip:")) {
                line += &format!("; {tip}");
            }
            let command = Cli::command();
            let help = match args.iter().skip(1).find(|a| command.find_subcommand(a.as_str()).is_some()) {
                Some(name) => format!("hal {name} --help"),
                None => "hal --help".to_string(),
            };
            eprintln!("hal: {line} (see `{help}`)");
            ExitCode::from(2)
        }
    }
}

/// Why a command did not finish: an error to report, or stdout closed under it (`hal cts --list |
/// head -1`), which ends the command quietly.
#[derive(Debug)]
enum Failure {
    Error(String),
    /// Options clap accepted one by one that do not go together: status 2, as clap's errors.
    Usage(String),
    StdoutClosed,
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Error(message)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == ErrorKind::BrokenPipe {
            Failure::StdoutClosed
        } else {
            Failure::Error(format!("writing to stdout: {e}"))
        }
    }
}

/// Writes `text` to stdout now.
fn emit(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    Ok(out.flush()?)
}

/// Stdout for reports written by library code, remembering whether its reader went away.
struct WatchedStdout {
    closed: bool,
}

impl Write for WatchedStdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = std::io::stdout().write(buf);
        self.closed |= written.as_ref().is_err_and(|e| e.kind() == ErrorKind::BrokenPipe);
        written
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}

fn run(args: RunArgs) -> Result<ExitCode, Failure> {
    let started = Instant::now();
    let config = Config { size: args.size, steps: args.steps, window: args.window, check: !args.no_check };
    config.validate().map_err(|e| e.message().to_string())?;
    let spec = args.device.device;
    // Opened first: a path that cannot be written fails now, not after the run.
    let trace_file = args.trace.as_deref().map(TraceFile::create).transpose()?;
    // A traced run also times each submission on the device where the driver can (CUDA events).
    let registry = if trace_file.is_some() { tools::registry_with_device_timings() } else { tools::registry() };
    // A device that does not open drops the trace file unstarted: removed if this run created it.
    let device = tools::open(&registry, &spec)?;
    let mut devices = vec![device.clone()];
    if args.devices > 1 {
        let (driver, ordinal) = registry.locate(spec.path()).map_err(|e| format!("device '{spec}': {e}"))?;
        let count = registry
            .list()
            .into_iter()
            .find(|listing| listing.name == driver)
            .and_then(|listing| listing.devices.ok())
            .map_or(1, |devices| devices.len().max(1));
        for i in 1..args.devices as usize {
            let next = registry
                .create_device(&driver, (ordinal + i) % count)
                .map_err(|e| format!("cannot open device {} of driver '{driver}' for the run: {e}", i + 1))?;
            devices.push(next);
        }
    }
    let recorder = match trace_file {
        Some(file) => {
            let recorder = TraceRecorder::streaming(file)?;
            recorder.install_global()?;
            Some(recorder)
        }
        None => None,
    };
    let progress = Progress::new("hal run", u64::from(config.steps), "steps");
    let report = stencil::run(&devices, &config, recorder.as_ref(), &mut |done| progress.set_position(done));
    progress.finish();
    // The trace is closed whatever the outcome: a failed run's timeline up to the failure is kept.
    let traced = recorder.as_ref().map(|recorder| (recorder.finish(), recorder.span_counts("issue")));
    let report = report.map_err(|e| format!("the stencil on device '{spec}' failed: {e}"))?;
    let mut text = report.render();
    if let (Some((finished, issued)), Some(path)) = (traced, &args.trace) {
        finished?;
        let queues: Vec<String> = issued.iter().map(|(q, n)| format!("queue {q}: {n} issued")).collect();
        text += &format!(
            "  trace:        {} ({}; open it in https://ui.perfetto.dev)\n",
            path.display(),
            queues.join(", ")
        );
    }
    text += &format!(
        "  total:        {:.3} s (device setup, run, readback{})\n",
        started.elapsed().as_secs_f64(),
        if config.check { ", CPU reference" } else { "" }
    );
    // The check decides the exit status, whether or not anyone still reads the report.
    match emit(&text) {
        Ok(()) | Err(Failure::StdoutClosed) => {}
        Err(e) => return Err(e),
    }
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn cts(args: CtsArgs) -> Result<ExitCode, Failure> {
    use tools::cts::Target;
    let spec = args.device.device;
    if args.list {
        emit(&tools::cts::case_ids().iter().map(|id| format!("{id}\n")).collect::<String>())?;
        return Ok(ExitCode::SUCCESS);
    }
    // A filter that names no case is a mistake in the command, whatever the device: status 2.
    if let Some(filter) = &args.filter
        && !tools::cts::case_ids().iter().any(|id| id.contains(filter.as_str()))
    {
        return Err(Failure::Usage(format!("no case matches the filter '{filter}'; `hal cts --list` lists the cases")));
    }
    let target = Target::locate(&spec, args.spread)?;
    if target.spread && target.driver != tools::CUDA_DRIVER {
        return Err(Failure::Usage(format!(
            "--spread is for the {} driver only (it puts a case's devices on every GPU), not for '{spec}'",
            tools::CUDA_DRIVER
        )));
    }
    if let Some(id) = &args.child {
        tools::cts::run_child(&target, id)?;
        return Ok(ExitCode::SUCCESS);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the hal binary to run cases in: {e}"))?;
    let child = |id: &str| {
        let mut command = std::process::Command::new(&exe);
        command.arg("cts").args(target.args()).args(["--child", id]);
        command
    };
    let child: Option<&dyn Fn(&str) -> std::process::Command> =
        if args.in_process || args.shared_device { None } else { Some(&child) };
    let summary = run_suite(&target, args.filter.as_deref(), child, args.shared_device)?;
    Ok(if summary.failed() == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// [`tools::cts::run`] with its table on stdout and a progress bar of the cases done and their
/// outcomes so far (cleared when the suite ends).
fn run_suite(
    target: &tools::cts::Target,
    filter: Option<&str>,
    child: Option<&dyn Fn(&str) -> std::process::Command>,
    shared_device: bool,
) -> Result<ctest::Summary, Failure> {
    let selected = tools::cts::case_ids().iter().filter(|id| filter.is_none_or(|f| id.contains(f))).count();
    let progress = Progress::new("hal cts", selected as u64, "cases");
    // A case may take up to its time limit: the elapsed time shows it is still going.
    progress.redraw_steadily();
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let mut on_case = |report: &ctest::CaseReport| {
        match report.outcome {
            ctest::Outcome::Pass => passed += 1,
            ctest::Outcome::Fail(_) => failed += 1,
            ctest::Outcome::Skip(_) => skipped += 1,
        }
        progress.set_message(format!("{passed} passed, {failed} failed, {skipped} skipped"));
        progress.inc();
    };
    // The rows go to stdout with the bar out of their way.
    let mut out = progress.lines(WatchedStdout { closed: false });
    match tools::cts::run(target, filter, child, shared_device, &mut out, &mut on_case) {
        Err(_) if out.get_ref().closed => Err(Failure::StdoutClosed),
        summary => Ok(summary?),
    }
}

fn bench(args: BenchArgs) -> Result<ExitCode, Failure> {
    let registry = tools::registry();
    let device = tools::open(&registry, &args.device.device)?;
    // A second device at the same path (on CUDA, of the same GPU) for the cross-device rows.
    let peer = tools::open(&registry, &args.device.device).ok();
    let steps = bench::session::progress_steps(&device, peer.is_some(), &args.options);
    let progress = Progress::new("hal bench", steps as u64, "workloads");
    let started = Instant::now();
    let mut begun = 0;
    let mut step = |name: &str| {
        progress.set_position(begun);
        progress.set_message(name.to_string());
        begun += 1;
        // Without the bar (a log, CI) each step is a line on stderr.
        if progress.is_hidden() {
            eprintln!("hal bench: running {name} ({:.1} s so far)", started.elapsed().as_secs_f64());
        }
    };
    // The report goes to stdout as the run goes (the header first, each table as it ends).
    let mut out = progress.lines(std::io::stdout());
    let run = bench::session::run(device, peer, &args.options, &mut out, &mut step);
    drop(out);
    progress.finish();
    match run {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(bench::session::Failure::Output(e)) => Err(Failure::from(e)),
        Err(e) => Err(Failure::Error(e.to_string())),
    }
}

fn collective(args: CollectiveJobArgs) -> Result<ExitCode, Failure> {
    use tools::collective_job::Meet;
    use tools::launcher::{self, Placement};
    if let (Some(rank), Some(ranks)) = (args.rank, args.ranks)
        && rank >= ranks
    {
        let range = 0..=ranks - 1;
        return Err(Failure::Usage(format!(
            "invalid value '{rank}' for '--rank <R>': {} (a rank of --ranks {ranks})",
            out_of_range(&rank.to_string(), &range),
        )));
    }
    let place = Placement::from_env(args.rank.map(|r| r as usize), args.ranks.map(|n| n as usize))
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let meet = match (args.id_file, args.rendezvous) {
        (Some(path), _) => Meet::IdFile(path),
        (None, Some(address)) => Meet::Rendezvous { address, job: place.job.clone() },
        (None, None) => match launcher::rendezvous_address(|name| std::env::var(name).ok()) {
            Ok(Some(address)) => Meet::Rendezvous { address, job: place.job.clone() },
            Ok(None) => {
                return Err(Failure::Usage(
                    "no rendezvous: give --rendezvous HOST:PORT, set MASTER_ADDR and MASTER_PORT (torchrun sets \
                     them), or give --id-file PATH"
                        .to_string(),
                ));
            }
            Err(e) => return Err(Failure::Usage(e.to_string())),
        },
    };
    let registry = tools::registry();
    let spec = args.device.device;
    let spec: DeviceSpec = launcher::device_for_local_rank(spec.path(), place.local_rank, &registry.names())
        .parse()
        .map_err(Failure::Usage)?;
    let device = tools::open(&registry, &spec)?;
    let job = tools::collective_job::Job {
        rank: place.rank,
        ranks: place.world_size,
        meet,
        elements: u64::from(args.elements),
        iterations: args.iterations,
        timeout: Duration::from_secs(u64::from(args.timeout)),
    };
    let report = tools::collective_job::run(&device, &spec.to_string(), &job)?;
    match emit(&report.render()) {
        Ok(()) | Err(Failure::StdoutClosed) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return answer_clap(&e, &args),
    };
    let outcome = match cli.command {
        Command::Devices => emit(&tools::devices::render(&tools::registry())).map(|()| ExitCode::SUCCESS),
        Command::Run(args) => run(args),
        Command::Cts(args) => cts(args),
        Command::Bench(args) => bench(args),
        Command::Collective(args) => collective(args),
    };
    match outcome {
        Ok(code) => code,
        // The reader went away (`hal cts --list | head -1`): nothing left to say, as `head` meant.
        Err(Failure::StdoutClosed) => ExitCode::SUCCESS,
        Err(Failure::Error(e)) => {
            eprintln!("hal: error: {e}");
            ExitCode::FAILURE
        }
        Err(Failure::Usage(e)) => {
            let help = args.get(1).map_or("hal --help".to_string(), |command| format!("hal {command} --help"));
            eprintln!("hal: error: {e} (see `{help}`)");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("hal").chain(line.split_whitespace())).map(|cli| cli.command)
    }

    fn error(line: &str) -> String {
        parse(line).unwrap_err().render().to_string()
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_commands_and_options() {
        assert!(matches!(parse("devices").unwrap(), Command::Devices));
        let Command::Run(run) = parse("run --size=64 --steps 10 --trace t.json --device cuda:1").unwrap() else {
            panic!("not run")
        };
        assert_eq!((run.size, run.steps, run.window), (64, 10, Config::default().window));
        assert_eq!(run.trace, Some(PathBuf::from("t.json")));
        assert_eq!(run.device.device, "cuda:1".parse().unwrap());
        // `--driver` stays as an alias (scripts use it).
        let Command::Bench(bench) = parse("bench --quick --driver cuda --json b.json").unwrap() else { panic!() };
        assert!(bench.options.quick && bench.options.json == Some(PathBuf::from("b.json")));
        assert_eq!(bench.device.device, DeviceSpec::first_of("cuda"));
        let Command::Collective(job) = parse("collective --rank 1 --ranks 2 --id-file id --device cuda:1").unwrap()
        else {
            panic!("not collective")
        };
        assert_eq!((job.rank, job.ranks, job.elements, job.iterations, job.timeout), (Some(1), Some(2), 1024, 3, 60));
        assert_eq!((job.id_file, job.device.device), (Some(PathBuf::from("id")), "cuda:1".parse().unwrap()));
        let Command::Collective(job) = parse("collective --rendezvous node1:29500 --device cuda").unwrap() else {
            panic!("not collective")
        };
        assert_eq!((job.rank, job.ranks, job.rendezvous.as_deref()), (None, None, Some("node1:29500")));
        let Command::Cts(cts) = parse("cts --filter sem --in-process").unwrap() else { panic!("not cts") };
        assert_eq!((cts.filter.as_deref(), cts.in_process, cts.list), (Some("sem"), true, false));
        assert_eq!(cts.device.device, DeviceSpec::default());
        let Command::Cts(cts) = parse("cts --device cuda:1 --spread").unwrap() else { panic!("not cts") };
        assert_eq!((cts.device.device, cts.spread), ("cuda:1".parse().unwrap(), true));
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        use clap::error::ErrorKind as Kind;
        assert!(error("run --size big").contains("invalid value 'big' for '--size <N>': not a whole number"));
        assert_eq!(parse("run --steps").unwrap_err().kind(), Kind::InvalidValue);
        assert_eq!(parse("run --fast").unwrap_err().kind(), Kind::UnknownArgument);
        assert_eq!(parse("launch").unwrap_err().kind(), Kind::InvalidSubcommand);
        assert!(error("run --size 2").contains("2 is out of range: it must be between 4 and 16384"));
        assert!(error("run --steps 10000001").contains("10000001 is out of range: it must be between 0 and 10000000"));
        assert!(error("run --steps -1").contains("'-1' for '--steps <K>': -1 is out of range: it must be between 0"));
        assert!(error("run --devices 0").contains("'0' for '--devices <N>': 0 is out of range: it must be between 1"));
        assert!(error("run --window 0").contains("0 is out of range: it must be at least 1"));
        assert!(error("collective --rank 0 --ranks 0 --id-file x").contains("it must be between 1 and 4096"));
        assert_eq!(parse("collective --rendezvous h:1 --id-file x").unwrap_err().kind(), Kind::ArgumentConflict);
        assert!(error("run --device :1").contains("':1' names no driver or device"));
        for repeated in ["run --driver a --driver=b", "run --device a --driver b", "bench --quick --quick"] {
            assert_eq!(parse(repeated).unwrap_err().kind(), Kind::ArgumentConflict, "{repeated}");
        }
    }

    #[test]
    fn every_command_has_its_usage_and_the_exit_status() {
        let mut cli = Cli::command();
        cli.build();
        let names: Vec<String> = cli.get_subcommands().map(|c| c.get_name().to_string()).collect();
        assert_eq!(names, ["devices", "run", "cts", "bench", "collective", "help"]);
        for name in &names[..5] {
            let help = cli.find_subcommand_mut(name).unwrap().render_help().to_string();
            assert!(help.starts_with(&format!("usage: hal {name}")), "{help}");
            assert!(help.contains(EXIT_STATUS), "{help}");
        }
        let run = cli.find_subcommand_mut("run").unwrap().render_help().to_string();
        let limits =
            [format!("{} to {}", stencil::SIZES.start(), stencil::SIZES.end()), format!("0 to {}", stencil::MAX_STEPS)];
        assert!(limits.iter().all(|limit| run.contains(limit.as_str())), "{run}");
    }
}
