//! `hal`: the HAL's command line. `hal help` lists the commands; `hal COMMAND --help` shows one.

use std::io::{ErrorKind, Write};
use std::num::IntErrorKind;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tools::progress::Progress;
use tools::stencil::{self, Config};
use tools::trace::TraceRecorder;
use tools::trace_file::TraceFile;

/// Each command: its name, its synopsis, what it does, and its options explained.
const COMMANDS: [(&str, &str, &str, &str); 4] = [
    ("devices", "devices", "drivers, their devices and properties; unavailable drivers with the reason", ""),
    (
        "run",
        "run [--driver NAME] [--size N] [--steps K] [--window W] [--trace FILE]",
        "the main job: a 2-D heat stencil split over two queues with halo exchanges
ordered by timeline semaphores, checked against a CPU reference",
        "  --driver NAME   the driver (default cpu-sim)
  --size N        grid side, 4 to 16384 (default 512)
  --steps K       steps, 0 to 10000000 (default 1000)
  --window W      most steps in flight before the host waits, at least 1 (default 64)
  --trace FILE    write the timeline as Chrome trace JSON (open it in ui.perfetto.dev);
                  FILE is opened (created) before the run starts",
    ),
    (
        "cts",
        "cts [--driver NAME] [--filter TEXT] [--in-process] [--list]",
        "the conformance suite (ctest), each case in its own process",
        "  --driver NAME   the driver (default cpu-sim)
  --filter TEXT   only the cases whose id (area::case) contains TEXT
  --in-process    all cases in this process
  --list          print the case ids and exit",
    ),
    (
        "bench",
        "bench [--driver NAME] [--quick]",
        "the benchmarks, each beside a baseline measured in the same run",
        "  --driver NAME   the driver (default cpu-sim)
  --quick         fewer trials and operations: well under a minute",
    ),
];

const EXIT_STATUS: &str = "exit status: 0 on success, 1 when a check or a conformance case fails or on an error (one line: \
                           the cause), 2 for bad arguments";

/// Width of the synopsis column of `hal help`.
const SYNOPSIS_WIDTH: usize = 29;

/// What `hal help` prints: every command.
fn usage() -> String {
    let mut out = String::from("usage: hal <command> [options]\n\ncommands:\n");
    let mut row = |synopsis: &str, about: &str| {
        let mut lines = about.lines();
        if synopsis.len() < SYNOPSIS_WIDTH {
            out.push_str(&format!("  {synopsis:SYNOPSIS_WIDTH$}{}\n", lines.next().unwrap_or("")));
        } else {
            out.push_str(&format!("  {synopsis}\n"));
        }
        lines.for_each(|line| out.push_str(&format!("  {:SYNOPSIS_WIDTH$}{line}\n", "")));
    };
    for (_, synopsis, about, _) in COMMANDS {
        row(synopsis, about);
    }
    row("help [COMMAND]", "this text, or one command's with its options (also `hal COMMAND --help`)");
    row("--version", "the version");
    out.push('\n');
    out.push_str(EXIT_STATUS);
    out.push('\n');
    out
}

/// What `hal COMMAND --help` prints.
fn command_usage(name: &str) -> Option<String> {
    let (_, synopsis, about, options) = COMMANDS.iter().find(|(n, ..)| *n == name)?;
    let options = if options.is_empty() { String::new() } else { format!("\noptions:\n{options}\n") };
    Some(format!("usage: hal {synopsis}\n\n{about}\n{options}\n{EXIT_STATUS}\n"))
}

/// A parsed command line.
#[derive(Debug, PartialEq)]
enum Command {
    Devices,
    Run {
        driver: String,
        config: Config,
        trace: Option<PathBuf>,
    },
    Cts {
        driver: String,
        filter: Option<String>,
        in_process: bool,
        list: bool,
        child: Option<String>,
    },
    Bench {
        driver: String,
        quick: bool,
    },
    /// Every command's usage, or one command's.
    Help(Option<&'static str>),
    Version,
}

/// A command's options as `(name, value)`; flags have no value.
type Options = Vec<(String, Option<String>)>;

/// A command's [`Options`]. Accepts `--name value` and `--name=value`, each option at most once.
/// `None` when `--help` or `-h` comes first.
fn options(
    args: &mut dyn Iterator<Item = String>,
    with_value: &[&str],
    flags: &[&str],
) -> Result<Option<Options>, String> {
    let mut out = Options::new();
    while let Some(arg) = args.next() {
        if arg == "--help" || arg == "-h" {
            return Ok(None);
        }
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name.to_string(), Some(value.to_string())),
            None => (arg.clone(), None),
        };
        let value = if with_value.contains(&name.as_str()) {
            Some(match inline {
                Some(value) => value,
                None => args.next().ok_or_else(|| format!("{name} needs a value"))?,
            })
        } else if flags.contains(&name.as_str()) && inline.is_none() {
            None
        } else {
            return Err(format!("unknown option '{arg}'"));
        };
        if out.iter().any(|(seen, _)| *seen == name) {
            return Err(format!("{name} is given more than once"));
        }
        out.push((name, value));
    }
    Ok(Some(out))
}

/// `value` of option `flag` as a whole number in `range`; an error names the flag, the value and
/// the range.
fn number(flag: &str, value: &str, range: RangeInclusive<u32>) -> Result<u32, String> {
    let out_of_range = || {
        let (low, high) = (*range.start(), *range.end());
        let bound = match (low, high) {
            (0, high) => format!("at most {high}"),
            (low, u32::MAX) => format!("at least {low}"),
            (low, high) => format!("between {low} and {high}"),
        };
        format!("{flag} {value} is out of range: it must be {bound}")
    };
    match value.parse::<u32>() {
        Ok(number) if range.contains(&number) => Ok(number),
        Ok(_) => Err(out_of_range()),
        Err(e) if *e.kind() == IntErrorKind::PosOverflow => Err(out_of_range()),
        Err(_) => Err(format!("{flag} wants a whole number, got '{value}'")),
    }
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let Some(command) = args.next() else { return Ok(Command::Help(None)) };
    let default_driver = hal::DEFAULT_DRIVER.to_string();
    match command.as_str() {
        "devices" => {
            let Some(_) = options(&mut args, &[], &[])? else { return Ok(Command::Help(Some("devices"))) };
            Ok(Command::Devices)
        }
        "run" => {
            let (mut driver, mut config, mut trace) = (default_driver, Config::default(), None);
            let with_value = ["--driver", "--size", "--steps", "--window", "--trace"];
            let Some(options) = options(&mut args, &with_value, &[])? else { return Ok(Command::Help(Some("run"))) };
            for (name, value) in options {
                let value = value.unwrap_or_default();
                match name.as_str() {
                    "--driver" => driver = value,
                    "--size" => config.size = number(&name, &value, stencil::SIZES)?,
                    "--steps" => config.steps = number(&name, &value, 0..=stencil::MAX_STEPS)?,
                    "--window" => config.window = number(&name, &value, 1..=u32::MAX)?,
                    _ => trace = Some(PathBuf::from(value)),
                }
            }
            config.validate().map_err(|e| e.message().to_string())?;
            Ok(Command::Run { driver, config, trace })
        }
        "cts" => {
            let (mut driver, mut filter, mut in_process, mut list, mut child) =
                (default_driver, None, false, false, None);
            let Some(options) = options(&mut args, &["--driver", "--filter", "--child"], &["--in-process", "--list"])?
            else {
                return Ok(Command::Help(Some("cts")));
            };
            for (name, value) in options {
                match name.as_str() {
                    "--driver" => driver = value.unwrap_or_default(),
                    "--filter" => filter = value,
                    "--child" => child = value,
                    "--in-process" => in_process = true,
                    _ => list = true,
                }
            }
            Ok(Command::Cts { driver, filter, in_process, list, child })
        }
        "bench" => {
            let (mut driver, mut quick) = (default_driver, false);
            let Some(options) = options(&mut args, &["--driver"], &["--quick"])? else {
                return Ok(Command::Help(Some("bench")));
            };
            for (name, value) in options {
                match name.as_str() {
                    "--driver" => driver = value.unwrap_or_default(),
                    _ => quick = true,
                }
            }
            Ok(Command::Bench { driver, quick })
        }
        "help" | "-h" | "--help" => match args.next() {
            None => Ok(Command::Help(None)),
            Some(name) => match COMMANDS.iter().find(|(n, ..)| *n == name) {
                Some((name, ..)) => Ok(Command::Help(Some(name))),
                None => Err(format!("no help for '{name}': unknown command")),
            },
        },
        "--version" | "-V" => Ok(Command::Version),
        other => Err(format!("unknown command '{other}'")),
    }
}

/// Why a command did not finish: an error to report, or stdout closed under it (`hal cts --list |
/// head -1`), which ends the command quietly.
#[derive(Debug)]
enum Failure {
    Error(String),
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

fn run(driver: &str, config: &Config, trace: Option<PathBuf>) -> Result<ExitCode, Failure> {
    let started = Instant::now();
    // Opened first: a path that cannot be written fails now, not after the run.
    let trace_file = trace.as_deref().map(TraceFile::create).transpose()?;
    let recorder = match &trace_file {
        Some(_) => {
            let recorder = TraceRecorder::new();
            recorder.install_global()?;
            Some(recorder)
        }
        None => None,
    };
    // A traced run also times each submission on the device where the driver can (CUDA events).
    let device = match &trace_file {
        Some(_) => tools::open_device_with_timings(driver),
        None => tools::open_device(driver),
    }
    .map_err(|e| e.to_string())?;
    let mut progress = Progress::new("hal run", u64::from(config.steps), "steps");
    let report = stencil::run(&device, config, recorder.as_ref(), &mut |done| progress.update(done));
    progress.finish();
    let report = report.map_err(|e| format!("the stencil on driver '{driver}' failed: {e}"))?;
    let mut text = report.render();
    if let (Some(recorder), Some(file)) = (&recorder, trace_file) {
        let path = file.path().display().to_string();
        file.write(recorder)?;
        let queues: Vec<String> =
            recorder.span_counts("issue").iter().map(|(q, n)| format!("queue {q}: {n} issued")).collect();
        text += &format!("  trace:        {path} ({}; open it in https://ui.perfetto.dev)\n", queues.join(", "));
    }
    text += &format!(
        "  total:        {:.3} s (device setup, run, readback, CPU reference)\n",
        started.elapsed().as_secs_f64()
    );
    // The check decides the exit status, whether or not anyone still reads the report.
    match emit(&text) {
        Ok(()) | Err(Failure::StdoutClosed) => {}
        Err(e) => return Err(e),
    }
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn cts(driver: &str, filter: Option<&str>, in_process: bool, list: bool) -> Result<ExitCode, Failure> {
    if list {
        emit(&tools::cts::case_ids().iter().map(|id| format!("{id}\n")).collect::<String>())?;
        return Ok(ExitCode::SUCCESS);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the hal binary to run cases in: {e}"))?;
    let child = |id: &str| {
        let mut command = std::process::Command::new(&exe);
        command.args(["cts", "--driver", driver, "--child", id]);
        command
    };
    let child: Option<&dyn Fn(&str) -> std::process::Command> = if in_process { None } else { Some(&child) };
    let mut out = WatchedStdout { closed: false };
    let summary = match tools::cts::run(driver, filter, child, &mut out) {
        Err(_) if out.closed => return Err(Failure::StdoutClosed),
        summary => summary?,
    };
    Ok(if summary.failed() == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn bench(driver: &str, quick: bool) -> Result<ExitCode, Failure> {
    let device = tools::open_device(driver).map_err(|e| e.to_string())?;
    let description = format!("driver '{}' device '{}'", device.info().driver, device.info().name);
    let env = bench::workloads::Env::new(device).map_err(|e| format!("preparing the benchmarks: {e}"))?;
    let (sizes, kind) =
        if quick { (bench::workloads::Sizes::quick(), "quick") } else { (bench::workloads::Sizes::full(), "full") };
    emit(&format!("hal bench on {description} ({kind})\n"))?;
    let started = Instant::now();
    let rows = bench::workloads::run_all(&env, sizes, |name| {
        eprintln!("hal bench: running {name} ({:.1} s so far)", started.elapsed().as_secs_f64())
    })
    .map_err(|e| format!("benchmark failed: {e}"))?;
    emit(&format!("{}\ntotal bench time {:.1} s\n", bench::report::table(&rows), started.elapsed().as_secs_f64()))?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let command = match parse(std::env::args().skip(1)) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("hal: {e} (see `hal help`)");
            return ExitCode::from(2);
        }
    };
    let outcome = match command {
        Command::Help(None) => emit(&usage()).map(|()| ExitCode::SUCCESS),
        Command::Help(Some(name)) => emit(&command_usage(name).unwrap_or_else(usage)).map(|()| ExitCode::SUCCESS),
        Command::Version => emit(&format!("hal {}\n", env!("CARGO_PKG_VERSION"))).map(|()| ExitCode::SUCCESS),
        Command::Devices => emit(&tools::devices::render(&tools::registry())).map(|()| ExitCode::SUCCESS),
        Command::Run { driver, config, trace } => run(&driver, &config, trace),
        Command::Cts { driver, child: Some(id), .. } => {
            tools::cts::run_child(&driver, &id).map(|()| ExitCode::SUCCESS).map_err(Failure::from)
        }
        Command::Cts { driver, filter, in_process, list, child: None } => {
            cts(&driver, filter.as_deref(), in_process, list)
        }
        Command::Bench { driver, quick } => bench(&driver, quick),
    };
    match outcome {
        Ok(code) => code,
        // The reader went away (`hal cts --list | head -1`): nothing left to say, as `head` meant.
        Err(Failure::StdoutClosed) => ExitCode::SUCCESS,
        Err(Failure::Error(e)) => {
            eprintln!("hal: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(line: &str) -> Result<Command, String> {
        parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn parses_commands_and_options() {
        assert_eq!(parse_str("").unwrap(), Command::Help(None));
        assert_eq!(parse_str("run --help").unwrap(), Command::Help(Some("run")));
        assert_eq!(parse_str("help bench").unwrap(), Command::Help(Some("bench")));
        assert_eq!(parse_str("--version").unwrap(), Command::Version);
        assert_eq!(parse_str("devices").unwrap(), Command::Devices);
        assert_eq!(
            parse_str("run --size=64 --steps 10 --trace t.json --driver cuda").unwrap(),
            Command::Run {
                driver: "cuda".into(),
                config: Config { size: 64, steps: 10, ..Config::default() },
                trace: Some(PathBuf::from("t.json"))
            }
        );
        assert_eq!(parse_str("bench --quick").unwrap(), Command::Bench { driver: "cpu-sim".into(), quick: true });
        assert_eq!(
            parse_str("cts --filter sem --in-process").unwrap(),
            Command::Cts {
                driver: "cpu-sim".into(),
                filter: Some("sem".into()),
                in_process: true,
                list: false,
                child: None
            }
        );
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        assert_eq!(parse_str("run --size big").unwrap_err(), "--size wants a whole number, got 'big'");
        assert_eq!(parse_str("run --steps").unwrap_err(), "--steps needs a value");
        assert_eq!(parse_str("run --fast").unwrap_err(), "unknown option '--fast'");
        assert_eq!(parse_str("bench --quick=yes").unwrap_err(), "unknown option '--quick=yes'");
        assert_eq!(parse_str("launch").unwrap_err(), "unknown command 'launch'");
        assert!(parse_str("run --size 2").unwrap_err().contains("between 4 and 16384"));
        assert_eq!(
            parse_str("run --steps 10000001").unwrap_err(),
            "--steps 10000001 is out of range: it must be at most 10000000"
        );
        assert_eq!(parse_str("run --window 0").unwrap_err(), "--window 0 is out of range: it must be at least 1");
        assert_eq!(parse_str("run --driver a --driver=b").unwrap_err(), "--driver is given more than once");
        assert_eq!(parse_str("help launch").unwrap_err(), "no help for 'launch': unknown command");
    }

    #[test]
    fn every_command_has_its_usage() {
        for (name, synopsis, ..) in COMMANDS {
            let text = command_usage(name).unwrap();
            assert!(text.starts_with(&format!("usage: hal {synopsis}\n")), "{text}");
            assert!(usage().contains(synopsis));
        }
        assert_eq!(command_usage("launch"), None);
        let run = command_usage("run").unwrap();
        let limits =
            [format!("{} to {}", stencil::SIZES.start(), stencil::SIZES.end()), format!("0 to {}", stencil::MAX_STEPS)];
        assert!(limits.iter().all(|limit| run.contains(limit.as_str())), "{run}");
    }
}
