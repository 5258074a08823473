//! `hal`: the HAL's command line. `hal help` lists the commands.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tools::progress::Progress;
use tools::stencil::{self, Config};
use tools::trace::TraceRecorder;

const USAGE: &str = "\
usage: hal <command> [options]

commands:
  devices                      drivers, their devices and properties; unavailable drivers with the reason
  run [--driver NAME] [--size N] [--steps K] [--window W] [--trace FILE]
                               the main job: a 2-D heat stencil split over two queues with halo exchanges
                               ordered by timeline semaphores, checked against a CPU reference
                               (defaults: --driver cpu-sim --size 512 --steps 1000 --window 64);
                               --trace writes the timeline as Chrome trace JSON (open it in ui.perfetto.dev)
  cts [--driver NAME] [--filter TEXT] [--in-process] [--list]
                               the conformance suite (ctest), each case in its own process unless
                               --in-process; --list prints the cases
  bench [--driver NAME] [--quick]
                               the benchmarks, each beside a baseline measured in the same run
  help                         this text

exit status: 0 on success, 1 when a check or a conformance case fails or on an error (one line: the cause), 2 for bad arguments";

/// A parsed command line.
#[derive(Debug, PartialEq)]
enum Command {
    Devices,
    Run { driver: String, config: Config, trace: Option<PathBuf> },
    Cts { driver: String, filter: Option<String>, in_process: bool, list: bool, child: Option<String> },
    Bench { driver: String, quick: bool },
    Help,
}

/// Options as `(name, value)`; flags have no value. Accepts `--name value` and `--name=value`.
fn options(
    args: &mut dyn Iterator<Item = String>,
    with_value: &[&str],
    flags: &[&str],
) -> Result<Vec<(String, Option<String>)>, String> {
    let mut out = Vec::new();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name.to_string(), Some(value.to_string())),
            None => (arg.clone(), None),
        };
        if with_value.contains(&name.as_str()) {
            let value = match inline {
                Some(value) => value,
                None => args.next().ok_or_else(|| format!("{name} needs a value"))?,
            };
            out.push((name, Some(value)));
        } else if flags.contains(&name.as_str()) && inline.is_none() {
            out.push((name, None));
        } else {
            return Err(format!("unknown option '{arg}'"));
        }
    }
    Ok(out)
}

fn number(name: &str, value: &str) -> Result<u32, String> {
    value.parse().map_err(|_| format!("{name} wants a whole number, got '{value}'"))
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let Some(command) = args.next() else { return Ok(Command::Help) };
    let default_driver = hal::DEFAULT_DRIVER.to_string();
    match command.as_str() {
        "devices" => {
            options(&mut args, &[], &[])?;
            Ok(Command::Devices)
        }
        "run" => {
            let (mut driver, mut config, mut trace) = (default_driver, Config::default(), None);
            for (name, value) in options(&mut args, &["--driver", "--size", "--steps", "--window", "--trace"], &[])? {
                let value = value.unwrap_or_default();
                match name.as_str() {
                    "--driver" => driver = value,
                    "--size" => config.size = number(&name, &value)?,
                    "--steps" => config.steps = number(&name, &value)?,
                    "--window" => config.window = number(&name, &value)?,
                    _ => trace = Some(PathBuf::from(value)),
                }
            }
            config.validate().map_err(|e| e.message().to_string())?;
            Ok(Command::Run { driver, config, trace })
        }
        "cts" => {
            let (mut driver, mut filter, mut in_process, mut list, mut child) =
                (default_driver, None, false, false, None);
            for (name, value) in options(&mut args, &["--driver", "--filter", "--child"], &["--in-process", "--list"])?
            {
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
            for (name, value) in options(&mut args, &["--driver"], &["--quick"])? {
                match name.as_str() {
                    "--driver" => driver = value.unwrap_or_default(),
                    _ => quick = true,
                }
            }
            Ok(Command::Bench { driver, quick })
        }
        "help" | "-h" | "--help" => Ok(Command::Help),
        other => Err(format!("unknown command '{other}'")),
    }
}

fn run(driver: &str, config: &Config, trace: Option<PathBuf>) -> Result<ExitCode, String> {
    let started = Instant::now();
    let recorder = match &trace {
        Some(_) => {
            let recorder = TraceRecorder::new();
            recorder.install_global()?;
            Some(recorder)
        }
        None => None,
    };
    // A traced run also times each submission on the device where the driver can (CUDA events).
    let device = match &trace {
        Some(_) => tools::open_device_with_timings(driver),
        None => tools::open_device(driver),
    }
    .map_err(|e| e.to_string())?;
    let mut progress = Progress::new("hal run", u64::from(config.steps), "steps");
    let report = stencil::run(&device, config, recorder.as_ref(), &mut |done| progress.update(done));
    progress.finish();
    let report = report.map_err(|e| format!("the stencil on driver '{driver}' failed: {e}"))?;
    print!("{}", report.render());
    if let (Some(recorder), Some(path)) = (&recorder, &trace) {
        recorder.write_chrome_json(path).map_err(|e| format!("cannot write the trace to {}: {e}", path.display()))?;
        let queues: Vec<String> =
            recorder.span_counts("issue").iter().map(|(q, n)| format!("queue {q}: {n} issued")).collect();
        println!("  trace:        {} ({}; open it in https://ui.perfetto.dev)", path.display(), queues.join(", "));
    }
    println!("  total:        {:.3} s (device setup, run, readback, CPU reference)", started.elapsed().as_secs_f64());
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn cts(driver: &str, filter: Option<&str>, in_process: bool, list: bool) -> Result<ExitCode, String> {
    if list {
        tools::cts::case_ids().iter().for_each(|id| println!("{id}"));
        return Ok(ExitCode::SUCCESS);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the hal binary to run cases in: {e}"))?;
    let child = |id: &str| {
        let mut command = std::process::Command::new(&exe);
        command.args(["cts", "--driver", driver, "--child", id]);
        command
    };
    let child: Option<&dyn Fn(&str) -> std::process::Command> = if in_process { None } else { Some(&child) };
    let summary = tools::cts::run(driver, filter, child, &mut std::io::stdout().lock())?;
    Ok(if summary.failed() == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn bench(driver: &str, quick: bool) -> Result<ExitCode, String> {
    let device = tools::open_device(driver).map_err(|e| e.to_string())?;
    let description = format!("driver '{}' device '{}'", device.info().driver, device.info().name);
    let env = bench::workloads::Env::new(device).map_err(|e| format!("preparing the benchmarks: {e}"))?;
    let (sizes, kind) =
        if quick { (bench::workloads::Sizes::quick(), "quick") } else { (bench::workloads::Sizes::full(), "full") };
    println!("hal bench on {description} ({kind})");
    let started = Instant::now();
    let rows = bench::workloads::run_all(&env, sizes, |name| {
        eprintln!("hal bench: running {name} ({:.1} s so far)", started.elapsed().as_secs_f64())
    })
    .map_err(|e| format!("benchmark failed: {e}"))?;
    println!("{}", bench::report::table(&rows));
    println!("total bench time {:.1} s", started.elapsed().as_secs_f64());
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
        Command::Help => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Devices => {
            print!("{}", tools::devices::render(&tools::registry()));
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { driver, config, trace } => run(&driver, &config, trace),
        Command::Cts { driver, child: Some(id), .. } => tools::cts::run_child(&driver, &id).map(|()| ExitCode::SUCCESS),
        Command::Cts { driver, filter, in_process, list, child: None } => {
            cts(&driver, filter.as_deref(), in_process, list)
        }
        Command::Bench { driver, quick } => bench(&driver, quick),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
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
        assert_eq!(parse_str("").unwrap(), Command::Help);
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
    }
}
