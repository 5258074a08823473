//! One rank per process, as a launcher (mpirun, srun, torchrun) starts a job on one node or several:
//! this program starts N copies of itself, each runs one rank of a channel on its own device, and
//! the channel id travels from rank 0's process to the others through a file. Each rank runs an
//! all-reduce (sum, `f32`) and checks what it received.
//!
//! `cargo run --bin multi_process [-- --ranks N] [--device DRIVER]` (default: 2 ranks on cpu-sim,
//! each process with its own cpu-sim device; `--device cuda` with the `cuda` feature puts rank r on
//! GPU r). Across nodes a launcher does the same: every process gets its rank, the rank count and a
//! path every node sees; NCCL's transports do the rest.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hal::{
    BufferParams, ChannelId, CollectiveArgs, CollectiveOp, ElementType, ReduceOp, SemaphoreValue as SV, StatusCode,
    Timeout,
};

/// Set in a rank's environment: its rank (unset: this process is the launcher).
const RANK: &str = "MULTI_PROCESS_RANK";
/// The rank count.
const RANKS: &str = "MULTI_PROCESS_RANKS";
/// Where rank 0 writes the channel id.
const ID_FILE: &str = "MULTI_PROCESS_ID_FILE";
/// The driver the ranks run on.
const DRIVER: &str = "MULTI_PROCESS_DRIVER";
/// Elements of the all-reduce.
const ELEMENTS: u64 = 4096;
/// The longest a rank waits for the id or its peers; the launcher waits twice that for a rank.
const TIMEOUT: Duration = Duration::from_secs(60);

fn main() -> Result<(), String> {
    if std::env::var_os(RANK).is_some() {
        println!("{}", rank_from_env()?);
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
    for line in launch(ranks, &driver)? {
        println!("{line}");
    }
    Ok(())
}

/// The launcher: starts `ranks` copies of this program, each with its rank's environment, waits
/// for every one (killing one that outlives its deadline) and returns each rank's output; an error
/// names the ranks that failed.
fn launch(ranks: usize, driver: &str) -> Result<Vec<String>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program to start the ranks: {e}"))?;
    // A new directory only this user may enter: whoever reads the id may join the channel.
    let dir = std::env::temp_dir().join(format!("hal-multi-process-{}", std::process::id()));
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let id_file = dir.join("channel-id");
    let mut children = Vec::with_capacity(ranks);
    for rank in 0..ranks {
        let mut command = Command::new(&exe);
        command.env(RANK, rank.to_string()).env(RANKS, ranks.to_string()).env(ID_FILE, &id_file).env(DRIVER, driver);
        let child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
        children.push(child.map_err(|e| format!("cannot start rank {rank}: {e}"))?);
    }
    let deadline = Instant::now() + TIMEOUT * 2;
    let (mut outputs, mut failures) = (Vec::new(), Vec::new());
    for (rank, mut child) in children.into_iter().enumerate() {
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
    let _ = std::fs::remove_dir_all(&dir);
    if failures.is_empty() { Ok(outputs) } else { Err(failures.join("\n")) }
}

/// One rank, from the environment the launcher gave it: returns its report line.
fn rank_from_env() -> Result<String, String> {
    let var = |name: &str| std::env::var(name).map_err(|_| format!("{name} is not set"));
    let number = |name: &str| var(name)?.parse::<usize>().map_err(|_| format!("{name} is not a number"));
    let (rank, ranks, driver) = (number(RANK)?, number(RANKS)?, var(DRIVER)?);
    let id_file = PathBuf::from(var(ID_FILE)?);
    let who = format!("rank {rank} of {ranks}");
    // Each rank its own GPU on CUDA; the driver's one device elsewhere.
    let ordinal = if driver == "cuda" { rank } else { 0 };
    let device = timeline_hal_examples::registry()
        .create_device(&driver, ordinal)
        .map_err(|e| format!("{who}: cannot open {driver}:{ordinal}: {e}"))?;

    let deadline = Instant::now() + TIMEOUT;
    let channel = if rank == 0 {
        let id = device.create_channel_id().map_err(|e| format!("{who}: {e}"))?;
        publish(&id_file, &id)?;
        device.create_channel(&id, 0, ranks).map_err(|e| format!("{who}: {e}"))?
    } else {
        let id = await_id(&id_file, deadline).map_err(|e| format!("{who}: {e}"))?;
        device.create_channel(&id, rank, ranks).map_err(|e| format!("{who}: {e}"))?
    };

    // Upload this rank's values, sum them over the ranks in place, read the sums back.
    let run = || {
        let queue = device.queue(0)?;
        let step = device.create_semaphore(0)?;
        let sums = device.allocate_buffer(BufferParams::device_local(), 4 * ELEMENTS)?;
        let input: Vec<f32> = (0..ELEMENTS).map(|i| value(rank as u64, i)).collect();
        queue.write_values(&[], &sums, 0, &input, &[SV::new(&step, 1)])?;
        let all_reduce = CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::F32, ELEMENTS)
            .send(&sums)
            .recv(&sums);
        queue.collective(&[SV::new(&step, 1)], &channel, all_reduce, &[SV::new(&step, 2)])?;
        queue.read(&[SV::new(&step, 2)], &sums, 0, 4 * ELEMENTS, &[])?.wait_as::<f32>(Timeout::At(deadline))
    };
    let sums = run().map_err(|e| match e.code() {
        StatusCode::DeadlineExceeded => format!("{who}: the all-reduce did not finish: is every rank running?"),
        _ => format!("{who}: {e}"),
    })?;
    for (i, &got) in sums.iter().enumerate() {
        let expected: f32 = (0..ranks as u64).map(|r| value(r, i as u64)).sum();
        if got != expected {
            return Err(format!("{who}: element {i} is {got}, expected {expected}"));
        }
    }
    Ok(format!("{who} on {driver}: checked all-reduce (f32 x {ELEMENTS})"))
}

/// Rank `rank`'s element `i` (small integers: exact sums in `f32`).
fn value(rank: u64, i: u64) -> f32 {
    ((rank + 1) * (i % 7 + 1)) as f32
}

/// Writes `id` to `path` as hex: to a new file beside it, readable by its owner only (whoever reads
/// the id may join the channel), then renamed, so a reader never sees half of it.
fn publish(path: &Path, id: &ChannelId) -> Result<(), String> {
    use std::io::Write;
    let aside = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(&aside)
        .and_then(|mut file| file.write_all(format!("{}\n", id.to_hex()).as_bytes()))
        .and_then(|()| std::fs::rename(&aside, path))
        .map_err(|e| format!("cannot publish the channel id at {}: {e}", path.display()))
}

/// The id at `path`, waiting for rank 0 to write it until `deadline`.
fn await_id(path: &Path, deadline: Instant) -> Result<ChannelId, String> {
    loop {
        match std::fs::read_to_string(path) {
            Ok(text) => return ChannelId::from_hex(&text).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("no channel id at {}: {e}", path.display())),
        }
    }
}
