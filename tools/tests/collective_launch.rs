//! `hal collective` started as launchers start it: rank and world size from the environment
//! (torchrun's, mpirun's, srun's variables), the channel id through the TCP rendezvous at
//! `MASTER_ADDR:MASTER_PORT`, no shared file.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Every variable a launcher sets, so that the test's own environment never leaks in.
const LAUNCHER_VARS: &[&str] = &[
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMIX_NAMESPACE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
];

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A port nobody listens at now (the kernel's choice, given back).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `hal ARGS` with exactly `env` of the launcher variables.
fn hal_with_env(args: &[&str], env: &[(&str, String)]) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hal"));
    for var in LAUNCHER_VARS {
        command.env_remove(var);
    }
    command.args(args).envs(env.iter().map(|(k, v)| (k, v))).stdout(Stdio::piped()).stderr(Stdio::piped());
    command.spawn().expect("run the hal binary")
}

/// `child`'s output, or a failure if it has not exited within `limit` (it is killed).
fn finish_within(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("child status").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("hal did not finish within {limit:?}: {}", text(&child.wait_with_output().unwrap().stderr));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("child output")
}

fn torchrun_env(rank: usize, world: usize, port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", world.to_string()),
        ("LOCAL_RANK", rank.to_string()),
        ("MASTER_ADDR", "127.0.0.1".to_string()),
        ("MASTER_PORT", port.to_string()),
    ]
}

#[test]
fn two_ranks_meet_the_torchrun_way() {
    let port = free_port();
    // Rank 1 first: it retries until rank 0 listens.
    let ranks: Vec<_> = [1, 0]
        .into_iter()
        .map(|rank| (rank, hal_with_env(&["collective", "--elements", "64"], &torchrun_env(rank, 2, port))))
        .collect();
    for (rank, child) in ranks {
        let out = finish_within(child, Duration::from_secs(60));
        assert!(out.status.success(), "rank {rank}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let expected = format!("rank {rank} of 2 on cpu-sim:0: checked all-reduce (f32 x 64)");
        assert!(stdout.starts_with(&expected), "{stdout}");
    }
}

#[test]
fn mpirun_and_srun_variables_with_the_rendezvous_flag() {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mpi = |rank: usize| {
        vec![
            ("OMPI_COMM_WORLD_RANK", rank.to_string()),
            ("OMPI_COMM_WORLD_SIZE", "2".to_string()),
            ("OMPI_COMM_WORLD_LOCAL_RANK", rank.to_string()),
        ]
    };
    let slurm = vec![("SLURM_PROCID", "1".to_string()), ("SLURM_NTASKS", "2".to_string())];
    let args = ["collective", "--elements", "8", "--iterations", "1", "--rendezvous", &address];
    // Rank 0 by mpirun's variables, rank 1 by srun's: no job name from either, so they agree.
    let zero = hal_with_env(&args, &mpi(0));
    let one = hal_with_env(&args, &slurm);
    for (rank, child) in [(0, zero), (1, one)] {
        let out = finish_within(child, Duration::from_secs(60));
        assert!(out.status.success(), "rank {rank}: {}", text(&out.stderr));
        assert!(text(&out.stdout).starts_with(&format!("rank {rank} of 2 on cpu-sim:0")), "{}", text(&out.stdout));
    }
}

#[test]
fn a_rank_of_another_world_size_is_refused() {
    let port = free_port();
    let zero = hal_with_env(&["collective", "--timeout", "3"], &torchrun_env(0, 2, port));
    // Rank 1 of a job of 3 ranks at the same address.
    let stranger = hal_with_env(&["collective", "--timeout", "20"], &torchrun_env(1, 3, port));
    let out = finish_within(stranger, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("refused: rank 1 expects a world of 3 ranks, but rank 0's job"), "{stderr}");
    // Rank 0's own peer never came: it gives up at its timeout, naming the rank missing.
    let out = finish_within(zero, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("1 of 2 ranks did not get the channel id") && stderr.contains("(missing: 1)"), "{stderr}");
}

#[test]
fn without_a_rank_or_a_rendezvous_it_is_a_usage_error() {
    let limit = Duration::from_secs(30);
    for (env, args, expected) in [
        (vec![], &["collective"][..], "the rank is not given: pass --rank, or start this under a launcher"),
        (vec![("RANK", "0".to_string())], &["collective"], "torchrun set RANK but not WORLD_SIZE"),
        (vec![("RANK", "x".to_string()), ("WORLD_SIZE", "2".to_string())], &["collective"], "RANK=\"x\""),
        (
            vec![("RANK", "0".to_string()), ("WORLD_SIZE", "2".to_string())],
            &["collective"],
            "no rendezvous: give --rendezvous HOST:PORT, set MASTER_ADDR and MASTER_PORT",
        ),
        (
            vec![
                ("SLURM_PROCID", "0".to_string()),
                ("SLURM_NTASKS", "2".to_string()),
                ("MASTER_ADDR", "h".to_string()),
            ],
            &["collective"],
            "MASTER_ADDR is set but MASTER_PORT is not",
        ),
        (vec![], &["collective", "--rank", "0"], "the world size is not given: pass --ranks"),
    ] {
        let out = finish_within(hal_with_env(args, &env), limit);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {}", text(&out.stderr));
        let stderr = text(&out.stderr);
        assert!(stderr.starts_with("hal: error: ") && stderr.contains(expected), "{env:?}: {stderr}");
        assert!(stderr.contains("(see `hal collective --help`)"), "{stderr}");
    }
}

#[test]
fn the_help_names_the_launchers_and_the_local_rank() {
    let out = finish_within(hal_with_env(&["collective", "--help"], &[]), Duration::from_secs(30));
    assert!(out.status.success());
    let help = text(&out.stdout);
    for needle in ["torchrun", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "MASTER_ADDR:MASTER_PORT", "cuda:LOCAL_RANK"] {
        assert!(help.contains(needle), "missing {needle} in:\n{help}");
    }
}
