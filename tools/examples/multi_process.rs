//! One rank per process, as a launcher (mpirun, srun, torchrun) starts a job on one node or several:
//! this program spawns N copies of itself, each runs one rank of a channel on its own device, and
//! the channel id travels from rank 0's process to the others through a file. Each rank runs
//! all-reduce, all-gather and barrier (`tools::collective_job`, what `hal collective` runs) and
//! checks what it received.
//!
//! `cargo run -p tools --example multi_process [-- --ranks N] [--device DRIVER]` (default: 2 ranks
//! on cpu-sim, each process with its own cpu-sim device; `--device cuda` puts rank r on `cuda:r`).
//! Across nodes the launcher's job is the same: start `hal collective --rank R --ranks N --id-file
//! PATH --device cuda:L` on every node with a PATH they all see; NCCL's transports do the rest.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tools::collective_job::{Job, run as run_job};

/// Set in a rank's environment: its rank (unset: this process is the launcher).
pub const RANK: &str = "MULTI_PROCESS_RANK";
/// The rank count.
pub const RANKS: &str = "MULTI_PROCESS_RANKS";
/// Where rank 0 writes the channel id.
pub const ID_FILE: &str = "MULTI_PROCESS_ID_FILE";
/// The driver the ranks run on.
pub const DRIVER: &str = "MULTI_PROCESS_DRIVER";

/// The longest a rank waits, and the launcher for its ranks.
const TIMEOUT: Duration = Duration::from_secs(60);

fn main() -> Result<(), String> {
    if std::env::var_os(RANK).is_some() {
        print!("{}", rank_from_env()?);
        return Ok(());
    }
    let mut ranks = 2;
    let mut driver = "cpu-sim".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--ranks", Some(n)) => ranks = n.parse().map_err(|_| format!("--ranks {n}: not a number"))?,
            ("--device", Some(name)) => driver = name,
            _ => return Err(format!("usage: multi_process [--ranks N] [--device DRIVER] (not '{arg}')")),
        }
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program to start the ranks: {e}"))?;
    for line in launch(ranks, &driver, &|_| Command::new(&exe))? {
        println!("{line}");
    }
    Ok(())
}

/// The device rank `rank` takes: its own GPU on CUDA, the driver's device elsewhere.
pub fn device_for(driver: &str, rank: usize) -> String {
    if driver == "cuda" { format!("cuda:{rank}") } else { driver.to_string() }
}

/// The launcher: starts `ranks` processes from `command` (given each rank's environment here),
/// waits for every one, and returns each rank's output; an error names the ranks that failed.
pub fn launch(ranks: usize, driver: &str, command: &dyn Fn(usize) -> Command) -> Result<Vec<String>, String> {
    let dir = std::env::temp_dir().join(format!("hal-multi-process-{}-{}", std::process::id(), nonce()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let outcome = launch_in(&dir, ranks, driver, command);
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

fn launch_in(
    dir: &Path,
    ranks: usize,
    driver: &str,
    command: &dyn Fn(usize) -> Command,
) -> Result<Vec<String>, String> {
    let id_file = dir.join("channel-id");
    let mut children = Vec::with_capacity(ranks);
    for rank in 0..ranks {
        let mut command = command(rank);
        command.env(RANK, rank.to_string()).env(RANKS, ranks.to_string()).env(ID_FILE, &id_file).env(DRIVER, driver);
        let child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
        children.push(child.map_err(|e| format!("cannot start rank {rank}: {e}"))?);
    }
    let deadline = Instant::now() + TIMEOUT * 2;
    let mut outputs = Vec::with_capacity(ranks);
    let mut failures = Vec::new();
    for (rank, mut child) in children.into_iter().enumerate() {
        // Bounded: a rank that hangs is killed and reported, not waited for forever.
        while child.try_wait().map_err(|e| e.to_string())?.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let out = child.wait_with_output().map_err(|e| format!("rank {rank}: {e}"))?;
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if out.status.success() {
            outputs.push(stdout.trim().to_string());
        } else {
            failures.push(format!("rank {rank} ({}): {}{}", out.status, stdout.trim(), stderr.trim()));
        }
    }
    if failures.is_empty() { Ok(outputs) } else { Err(failures.join("\n")) }
}

/// One rank, from the environment the launcher gave it: returns its report line.
pub fn rank_from_env() -> Result<String, String> {
    let var = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
    let number = |name: &str| var(name)?.parse::<usize>().map_err(|_| format!("{name} is not a number"));
    let (rank, ranks) = (number(RANK)?, number(RANKS)?);
    let device_name = device_for(&var(DRIVER)?, rank);
    let device = tools::registry()
        .create_device_at(&device_name)
        .map_err(|e| format!("rank {rank}: cannot open {device_name}: {e}"))?;
    let job =
        Job { rank, ranks, id_file: PathBuf::from(var(ID_FILE)?), elements: 4096, iterations: 3, timeout: TIMEOUT };
    run_job(&device, &device_name, &job).map(|report| report.render())
}

/// A number that differs between runs, for the scratch directory's name.
fn nonce() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}
