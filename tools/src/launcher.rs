//! A process's place in a multi-process job, as its launcher says it in the environment: the rank,
//! the world size (how many ranks), the local rank (its index among the ranks of its node, which
//! picks its GPU) and where the ranks meet (the rendezvous address).
//!
//! | launcher | rank | world size | local rank | job |
//! | --- | --- | --- | --- | --- |
//! | torchrun | `RANK` | `WORLD_SIZE` | `LOCAL_RANK` | `TORCHELASTIC_RUN_ID` |
//! | mpirun (Open MPI) | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` | `PMIX_NAMESPACE` |
//! | srun (Slurm) | `SLURM_PROCID` | `SLURM_NTASKS` | `SLURM_LOCALID` | `SLURM_JOB_ID`.`SLURM_STEP_ID` |
//!
//! The launchers are tried in that order: torchrun's variables are the ones its workers see when
//! torchrun itself runs under srun or mpirun (they inherit the outer launcher's too). Explicit
//! values (a command line's `--rank`, `--ranks`) win over the environment, each on its own. The
//! rendezvous address is `MASTER_ADDR:MASTER_PORT` (torchrun sets both, and its agent's own store
//! holds that port, so under torchrun it is `MASTER_PORT+1`; under mpirun or srun the user exports
//! them, e.g. `MASTER_ADDR` the first node of the allocation).
//!
//! ```
//! use tools::launcher::{Launcher, Placement};
//! let env = [("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1"), ("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500")];
//! let var = |name: &str| env.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string());
//! let place = Placement::resolve(None, None, var).unwrap();
//! assert_eq!((place.rank, place.world_size, place.local_rank, place.launcher), (1, 2, Some(1), Launcher::Torchrun));
//! assert_eq!(tools::launcher::rendezvous_address(var).unwrap().as_deref(), Some("10.0.0.1:29500"));
//! // The command line wins.
//! let place = Placement::resolve(Some(0), Some(4), var).unwrap();
//! assert_eq!((place.rank, place.world_size), (0, 4));
//! ```

use std::fmt;

/// The most ranks a job may have.
pub const MAX_WORLD_SIZE: usize = 4096;

/// Who said where this process stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// The command line (or the embedder) gave the rank and the world size.
    Explicit,
    /// torchrun (PyTorch's elastic launcher): `RANK`, `WORLD_SIZE`, `LOCAL_RANK`.
    Torchrun,
    /// Open MPI's mpirun: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`, `OMPI_COMM_WORLD_LOCAL_RANK`.
    OpenMpi,
    /// Slurm's srun: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`.
    Slurm,
}

impl Launcher {
    /// The launchers read from the environment, in the order they are tried.
    pub const FROM_ENV: [Launcher; 3] = [Launcher::Torchrun, Launcher::OpenMpi, Launcher::Slurm];

    /// The variables of this launcher: rank, world size, local rank.
    pub fn variables(self) -> Option<[&'static str; 3]> {
        match self {
            Launcher::Explicit => None,
            Launcher::Torchrun => Some(["RANK", "WORLD_SIZE", "LOCAL_RANK"]),
            Launcher::OpenMpi => Some(["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"]),
            Launcher::Slurm => Some(["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"]),
        }
    }

    /// The job this launcher's environment names, so that ranks of another job are told apart:
    /// the same text in every rank of one job; empty where the launcher gives none.
    fn job(self, var: &impl Fn(&str) -> Option<String>) -> String {
        match self {
            Launcher::Explicit => String::new(),
            Launcher::Torchrun => var("TORCHELASTIC_RUN_ID").unwrap_or_default(),
            Launcher::OpenMpi => var("PMIX_NAMESPACE").unwrap_or_default(),
            Launcher::Slurm => match (var("SLURM_JOB_ID"), var("SLURM_STEP_ID")) {
                (Some(job), Some(step)) => format!("{job}.{step}"),
                (job, _) => job.unwrap_or_default(),
            },
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Launcher::Explicit => "the command line",
            Launcher::Torchrun => "torchrun",
            Launcher::OpenMpi => "mpirun (Open MPI)",
            Launcher::Slurm => "srun (Slurm)",
        })
    }
}

/// Why no placement could be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlacementError {
    /// Neither the explicit values nor a launcher's environment give the rank or the world size.
    Missing(String),
    /// A value is there but is not a rank or a world size (not a number, out of range, a rank not
    /// below the world size).
    Invalid(String),
}

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlacementError::Missing(text) | PlacementError::Invalid(text) => f.write_str(text),
        }
    }
}

impl std::error::Error for PlacementError {}

/// Where this process stands in its job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// This process's rank, below `world_size`.
    pub rank: usize,
    /// How many ranks the job has, 1 to [`MAX_WORLD_SIZE`].
    pub world_size: usize,
    /// This process's index among the ranks of its node, when the launcher says it.
    pub local_rank: Option<usize>,
    /// Where the rank (or, with explicit values for both, the world size) came from.
    pub launcher: Launcher,
    /// The launcher's name for the job (empty without one): ranks meeting at a rendezvous must
    /// agree on it, so that a rank of another job at the same address is refused.
    pub job: String,
}

impl Placement {
    /// The placement the process's environment gives (see [`resolve`](Self::resolve)).
    pub fn from_env(rank: Option<usize>, world_size: Option<usize>) -> Result<Placement, PlacementError> {
        Placement::resolve(rank, world_size, |name| std::env::var(name).ok())
    }

    /// The placement from explicit values where given (`rank`, `world_size`: a command line's
    /// flags), else from the first launcher whose variables `var` has. A launcher counts as
    /// present when its rank or world size variable is set; then both must be, as numbers (an
    /// empty value counts as unset). The local rank comes from the same launcher; it must be a
    /// number when set.
    pub fn resolve(
        rank: Option<usize>,
        world_size: Option<usize>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Placement, PlacementError> {
        let var = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        let launcher = Launcher::FROM_ENV.into_iter().find(|launcher| {
            let [rank, size, _] = launcher.variables().expect("a launcher of the environment");
            var(rank).is_some() || var(size).is_some()
        });
        let number = |name: &str| -> Result<Option<usize>, PlacementError> {
            match var(name) {
                None => Ok(None),
                Some(text) => text.trim().parse::<usize>().map(Some).map_err(|_| {
                    PlacementError::Invalid(format!("{name}={text:?} is not a whole number (from the launcher)"))
                }),
            }
        };
        let (env_rank, env_size, local_rank, job) = match launcher {
            Some(launcher) => {
                let [rank_var, size_var, local_var] = launcher.variables().expect("a launcher of the environment");
                let env_rank = match rank {
                    Some(_) => None,
                    None => Some(number(rank_var)?.ok_or_else(|| {
                        PlacementError::Missing(format!(
                            "{launcher} set {size_var} but not {rank_var}: give --rank or set {rank_var}"
                        ))
                    })?),
                };
                let env_size = match world_size {
                    Some(_) => None,
                    None => Some(number(size_var)?.ok_or_else(|| {
                        PlacementError::Missing(format!(
                            "{launcher} set {rank_var} but not {size_var}: give --ranks or set {size_var}"
                        ))
                    })?),
                };
                (
                    env_rank.map(|r| (r, rank_var)),
                    env_size.map(|s| (s, size_var)),
                    number(local_var)?,
                    launcher.job(&var),
                )
            }
            None => (None, None, None, String::new()),
        };
        let (rank, rank_from) = match (rank, env_rank) {
            (Some(rank), _) => (rank, "--rank"),
            (None, Some(found)) => found,
            (None, None) => return Err(PlacementError::Missing(missing("the rank", "--rank"))),
        };
        let (world_size, size_from) = match (world_size, env_size) {
            (Some(size), _) => (size, "--ranks"),
            (None, Some(found)) => found,
            (None, None) => return Err(PlacementError::Missing(missing("the world size", "--ranks"))),
        };
        if !(1..=MAX_WORLD_SIZE).contains(&world_size) {
            return Err(PlacementError::Invalid(format!(
                "{size_from} {world_size}: a world size is between 1 and {MAX_WORLD_SIZE}"
            )));
        }
        if rank >= world_size {
            return Err(PlacementError::Invalid(format!(
                "{rank_from} {rank} is not a rank of a world of {world_size} ({size_from}): ranks are 0 to {}",
                world_size - 1
            )));
        }
        let launcher = match (env_rank, env_size, launcher) {
            (None, None, _) | (_, _, None) => Launcher::Explicit,
            (_, _, Some(launcher)) => launcher,
        };
        Ok(Placement { rank, world_size, local_rank, launcher, job })
    }
}

fn missing(what: &str, flag: &str) -> String {
    format!(
        "{what} is not given: pass {flag}, or start this under a launcher that sets it (torchrun: RANK and \
         WORLD_SIZE; mpirun: OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE; srun: SLURM_PROCID and SLURM_NTASKS)"
    )
}

/// `MASTER_ADDR:MASTER_PORT` from `var`, checked: `Ok(None)` when neither is set, an error when
/// only one is or the port is not a port. An IPv6 address is bracketed (`[::1]:29500`).
///
/// Under torchrun with `TORCHELASTIC_USE_AGENT_STORE=True` (its default rendezvous), torchrun's
/// own agent on the first node already listens at `MASTER_PORT` (its key-value store), so the
/// address is the next port, `MASTER_ADDR:MASTER_PORT+1`.
pub fn rendezvous_address(var: impl Fn(&str) -> Option<String>) -> Result<Option<String>, PlacementError> {
    let var = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|value| !value.is_empty());
    match (var("MASTER_ADDR"), var("MASTER_PORT")) {
        (None, None) => Ok(None),
        (Some(host), Some(port)) => {
            let mut port = match port.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(PlacementError::Invalid(format!("MASTER_PORT={port:?} is not a port (1 to 65535)"))),
            };
            if var("TORCHELASTIC_USE_AGENT_STORE").as_deref() == Some("True") {
                port = port.checked_add(1).ok_or_else(|| {
                    PlacementError::Invalid(
                        "MASTER_PORT=65535 is torchrun's store, and there is no next port for the rendezvous"
                            .to_string(),
                    )
                })?;
            }
            let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
            Ok(Some(format!("{host}:{port}")))
        }
        (Some(_), None) => Err(PlacementError::Missing("MASTER_ADDR is set but MASTER_PORT is not".to_string())),
        (None, Some(_)) => Err(PlacementError::Missing("MASTER_PORT is set but MASTER_ADDR is not".to_string())),
    }
}

/// The device path to open: `device` with the local rank as its ordinal when `device` names a
/// driver alone (`cuda` becomes `cuda:LOCAL_RANK`, one GPU per rank of a node). A path with an
/// ordinal or a stable id, a process without a local rank, and `cpu-sim` (one simulated device per
/// process) are kept as given. `drivers` are the registered driver names.
pub fn device_for_local_rank(device: &str, local_rank: Option<usize>, drivers: &[impl AsRef<str>]) -> String {
    let is_driver = drivers.iter().any(|driver| driver.as_ref() == device);
    match local_rank {
        Some(local) if !device.contains(':') && device != "cpu-sim" && is_driver => {
            format!("{device}:{local}")
        }
        _ => device.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    }

    fn placed(rank: Option<usize>, size: Option<usize>, vars: &[(&str, &str)]) -> Placement {
        Placement::resolve(rank, size, env(vars)).unwrap()
    }

    fn refused(rank: Option<usize>, size: Option<usize>, vars: &[(&str, &str)]) -> PlacementError {
        Placement::resolve(rank, size, env(vars)).unwrap_err()
    }

    #[test]
    fn each_launcher_is_read() {
        let torchrun = [("RANK", "3"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "1"), ("TORCHELASTIC_RUN_ID", "r7")];
        let place = placed(None, None, &torchrun);
        assert_eq!(
            place,
            Placement { rank: 3, world_size: 8, local_rank: Some(1), launcher: Launcher::Torchrun, job: "r7".into() }
        );
        let mpi = [
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "6"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
            ("PMIX_NAMESPACE", "prterun-n1-123@1"),
        ];
        let place = placed(None, None, &mpi);
        assert_eq!((place.rank, place.world_size, place.local_rank), (5, 6, Some(2)));
        assert_eq!((place.launcher, place.job.as_str()), (Launcher::OpenMpi, "prterun-n1-123@1"));
        let slurm = [
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_JOB_ID", "991"),
            ("SLURM_STEP_ID", "2"),
        ];
        let place = placed(None, None, &slurm);
        assert_eq!((place.rank, place.world_size, place.local_rank), (0, 4, Some(0)));
        assert_eq!((place.launcher, place.job.as_str()), (Launcher::Slurm, "991.2"));
        // Without a local rank, and without a job name.
        let place = placed(None, None, &[("RANK", "0"), ("WORLD_SIZE", "1")]);
        assert_eq!((place.local_rank, place.job.as_str()), (None, ""));
    }

    #[test]
    fn flags_win_and_launchers_go_in_order() {
        let both = [("RANK", "1"), ("WORLD_SIZE", "2"), ("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")];
        // torchrun under srun: torchrun's variables are this worker's.
        assert_eq!(placed(None, None, &both).launcher, Launcher::Torchrun);
        let nested = [
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
        ];
        assert_eq!(placed(None, None, &nested).rank, 3, "mpirun inside a Slurm allocation");
        // Explicit values win, each on its own.
        let place = placed(Some(0), Some(3), &both);
        assert_eq!((place.rank, place.world_size, place.launcher), (0, 3, Launcher::Explicit));
        let place = placed(Some(0), None, &both);
        assert_eq!((place.rank, place.world_size, place.launcher), (0, 2, Launcher::Torchrun));
        let place = placed(None, Some(5), &both);
        assert_eq!((place.rank, place.world_size), (1, 5));
        // Flags alone.
        let place = placed(Some(1), Some(2), &[]);
        assert_eq!((place.launcher, place.local_rank), (Launcher::Explicit, None));
        // An empty variable counts as unset.
        assert_eq!(
            placed(None, None, &[("RANK", ""), ("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2")]).launcher,
            Launcher::Slurm
        );
    }

    #[test]
    fn missing_and_invalid_values_say_what_is_wrong() {
        let none = refused(None, None, &[]);
        assert!(
            matches!(&none, PlacementError::Missing(m) if m.contains("the rank is not given: pass --rank")),
            "{none}"
        );
        let none = refused(Some(0), None, &[]);
        assert!(matches!(&none, PlacementError::Missing(m) if m.contains("the world size is not given: pass --ranks")));
        let half = refused(None, None, &[("RANK", "0")]);
        assert!(
            matches!(&half, PlacementError::Missing(m) if m.contains("torchrun set RANK but not WORLD_SIZE")),
            "{half}"
        );
        // With --ranks given, the rank alone is enough.
        assert_eq!(placed(None, Some(2), &[("RANK", "1")]).rank, 1);
        let half = refused(None, None, &[("SLURM_NTASKS", "2")]);
        assert!(half.to_string().contains("srun (Slurm) set SLURM_NTASKS but not SLURM_PROCID"), "{half}");
        for (vars, expected) in [
            (&[("RANK", "one"), ("WORLD_SIZE", "2")][..], "RANK=\"one\" is not a whole number"),
            (&[("RANK", "-1"), ("WORLD_SIZE", "2")], "RANK=\"-1\" is not a whole number"),
            (&[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "x")], "LOCAL_RANK=\"x\" is not a whole number"),
            (
                &[("RANK", "2"), ("WORLD_SIZE", "2")],
                "RANK 2 is not a rank of a world of 2 (WORLD_SIZE): ranks are 0 to 1",
            ),
            (&[("RANK", "0"), ("WORLD_SIZE", "0")], "WORLD_SIZE 0: a world size is between 1 and 4096"),
            (&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "99999")], "OMPI_COMM_WORLD_SIZE 99999"),
        ] {
            let error = refused(None, None, vars);
            assert!(matches!(error, PlacementError::Invalid(_)), "{error:?}");
            assert!(error.to_string().contains(expected), "{error} lacks {expected}");
        }
        let error = refused(Some(4), None, &[("RANK", "0"), ("WORLD_SIZE", "2")]);
        assert_eq!(error.to_string(), "--rank 4 is not a rank of a world of 2 (WORLD_SIZE): ranks are 0 to 1");
    }

    #[test]
    fn the_rendezvous_address_comes_from_master_addr_and_port() {
        assert_eq!(rendezvous_address(env(&[])), Ok(None));
        let address = rendezvous_address(env(&[("MASTER_ADDR", "node1"), ("MASTER_PORT", "29500")]));
        assert_eq!(address, Ok(Some("node1:29500".to_string())));
        let v6 = rendezvous_address(env(&[("MASTER_ADDR", "::1"), ("MASTER_PORT", "1")]));
        assert_eq!(v6, Ok(Some("[::1]:1".to_string())));
        // torchrun's agent holds MASTER_PORT itself: the next port.
        let agent = [("MASTER_ADDR", "node1"), ("MASTER_PORT", "29500"), ("TORCHELASTIC_USE_AGENT_STORE", "True")];
        assert_eq!(rendezvous_address(env(&agent)), Ok(Some("node1:29501".to_string())));
        let last = [("MASTER_ADDR", "node1"), ("MASTER_PORT", "65535"), ("TORCHELASTIC_USE_AGENT_STORE", "True")];
        assert!(rendezvous_address(env(&last)).unwrap_err().to_string().contains("no next port"));
        let off = [("MASTER_ADDR", "node1"), ("MASTER_PORT", "29500"), ("TORCHELASTIC_USE_AGENT_STORE", "False")];
        assert_eq!(rendezvous_address(env(&off)), Ok(Some("node1:29500".to_string())));
        let only = rendezvous_address(env(&[("MASTER_ADDR", "node1")])).unwrap_err();
        assert_eq!(only.to_string(), "MASTER_ADDR is set but MASTER_PORT is not");
        for port in ["0", "65536", "http"] {
            let bad = rendezvous_address(env(&[("MASTER_ADDR", "h"), ("MASTER_PORT", port)])).unwrap_err();
            assert!(bad.to_string().contains("is not a port"), "{bad}");
        }
    }

    #[test]
    fn a_driver_alone_takes_the_local_rank_as_its_ordinal() {
        let drivers = ["cpu-sim", "cuda", "vulkan"];
        assert_eq!(device_for_local_rank("cuda", Some(3), &drivers), "cuda:3");
        assert_eq!(device_for_local_rank("vulkan", Some(1), &drivers), "vulkan:1");
        assert_eq!(device_for_local_rank("cuda:0", Some(3), &drivers), "cuda:0", "an ordinal given is kept");
        assert_eq!(device_for_local_rank("cuda", None, &drivers), "cuda");
        assert_eq!(device_for_local_rank("GPU-8c3f", Some(1), &drivers), "GPU-8c3f", "a stable id");
        assert_eq!(device_for_local_rank("cpu-sim", Some(1), &drivers), "cpu-sim", "one device per process");
    }
}
