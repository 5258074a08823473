//! `hal collective`: one rank of a collective job per process, as a launcher starts them on one
//! node or several. Rank 0 makes the channel id and hands it to the other ranks, by one of two
//! ways ([`Meet`]): a TCP rendezvous ([`crate::rendezvous`]: rank 0 listens at an address every
//! rank knows, `MASTER_ADDR:MASTER_PORT` under torchrun), or a file every rank sees (written
//! aside, then renamed, so a reader never sees half of it; readable by its owner only, since
//! whoever holds the id may join the channel). Each rank then
//! runs an all-reduce (sum, `f32`), an all-gather (`i32`) and a barrier per iteration, chained on
//! one queue by a timeline semaphore, and checks what it received against values computed from
//! the rank numbers. Every wait is bounded by the job's timeout, so a rank whose peers never come
//! fails with a message instead of hanging.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::counts::count;
use hal::{
    BufferParams, ChannelId, CollectiveArgs, CollectiveOp, Device, ElementType, ReduceOp, SemaphoreValue as SV,
    StatusCode, Timeout,
};

/// One rank's job.
#[derive(Clone, Debug)]
pub struct Job {
    /// This process's rank.
    pub rank: usize,
    /// How many ranks (processes) the job has.
    pub ranks: usize,
    /// How the ranks get rank 0's channel id.
    pub meet: Meet,
    /// Elements per rank of each collective.
    pub elements: u64,
    /// How many times the collectives run.
    pub iterations: u32,
    /// The longest this rank waits for the id or for a collective.
    pub timeout: Duration,
}

/// How the ranks of a job get rank 0's channel id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Meet {
    /// Rank 0 writes it to this file; the others wait for the file.
    IdFile(PathBuf),
    /// Rank 0 listens at `address` (`HOST:PORT`) and hands it to each rank that connects with the
    /// same world size and `job` name (see [`crate::rendezvous`]).
    Rendezvous {
        /// Where rank 0 listens.
        address: String,
        /// The launcher's name for the job (empty without one).
        job: String,
    },
}

/// What one rank did.
#[derive(Clone, Debug)]
pub struct Report {
    /// The job.
    pub job: Job,
    /// The device, as given.
    pub device: String,
    /// From the start to the channel made (id published or found, peers met).
    pub join: Duration,
    /// Per iteration: from its first submission to its results read back.
    pub iterations: Vec<Duration>,
}

impl Report {
    /// One line: the rank, the collectives checked and the timings.
    pub fn render(&self) -> String {
        let job = &self.job;
        let times = &self.iterations;
        let mean = times.iter().sum::<Duration>() / times.len().max(1) as u32;
        let best = times.iter().min().copied().unwrap_or_default();
        format!(
            "rank {} of {} on {}: checked all-reduce (f32 x {}), all-gather (i32 x {} per rank) and barrier, {}; \
             join {:.2} ms, iteration mean {:.3} ms, best {:.3} ms\n",
            job.rank,
            job.ranks,
            self.device,
            job.elements,
            job.elements,
            count(times.len() as u64, "iteration", "iterations"),
            ms(self.join),
            ms(mean),
            ms(best)
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Writes `id` to `path` as hex, atomically (a new file beside it, then a rename) and readable by
/// its owner only (the id is all a process needs to join the channel).
pub fn publish_id(path: &Path, id: &ChannelId) -> Result<(), String> {
    let mut aside = path.as_os_str().to_owned();
    aside.push(format!(".{}.tmp", std::process::id()));
    let aside = PathBuf::from(aside);
    let published =
        write_private(&aside, format!("{}\n", id.to_hex()).as_bytes()).and_then(|()| std::fs::rename(&aside, path));
    if published.is_err() {
        let _ = std::fs::remove_file(&aside);
    }
    published.map_err(|e| format!("cannot publish the channel id at {}: {e}", path.display()))
}

/// Writes `bytes` to a new file at `path` that only its owner may read. Whatever was at `path`
/// (a file left by an earlier run, a link planted there) is replaced, never written through.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut options = std::fs::OpenOptions::new();
    // `create_new` fails rather than follow a link created meanwhile.
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(bytes)
}

/// The id at `path`, waiting for the file until `deadline`.
pub fn await_id(path: &Path, deadline: Instant, waited: Duration) -> Result<ChannelId, String> {
    loop {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                return ChannelId::from_hex(&text).map_err(|e| format!("{}: {}", path.display(), e.message()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!(
                    "no channel id at {} after {:.1} s: rank 0 writes it there (is it running, with the same \
                     --id-file?)",
                    path.display(),
                    waited.as_secs_f64()
                ));
            }
            Err(e) => return Err(format!("cannot read the channel id at {}: {e}", path.display())),
        }
    }
}

/// Runs `job` on `device` (named `device_name` in the report).
pub fn run(device: &Device, device_name: &str, job: &Job) -> Result<Report, String> {
    if job.ranks == 0 || job.rank >= job.ranks {
        return Err(format!("rank {} of {} does not exist", job.rank, count(job.ranks as u64, "rank", "ranks")));
    }
    let who = format!("rank {} of {}", job.rank, job.ranks);
    let started = Instant::now();
    let deadline = started + job.timeout;
    let channel = match &job.meet {
        Meet::Rendezvous { address, job: name } => {
            let place = crate::launcher::Placement {
                rank: job.rank,
                world_size: job.ranks,
                local_rank: None,
                launcher: crate::launcher::Launcher::Explicit,
                job: name.clone(),
            };
            crate::rendezvous::join_channel(device, &place, address, job.timeout)?
        }
        Meet::IdFile(id_file) if job.rank == 0 => {
            let id = device.create_channel_id().map_err(|e| format!("{who}: cannot make a channel id: {e}"))?;
            publish_id(id_file, &id)?;
            device.create_channel(&id, 0, job.ranks).map_err(|e| format!("{who}: cannot make the channel: {e}"))?
        }
        Meet::IdFile(id_file) => loop {
            let id = await_id(id_file, deadline, job.timeout).map_err(|e| format!("{who}: {e}"))?;
            match device.create_channel(&id, job.rank, job.ranks) {
                Ok(channel) => break channel,
                // A file left by an earlier job names a process that is gone: rank 0 replaces it.
                Err(e) if e.code() == StatusCode::Unavailable && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(format!("{who}: cannot join the channel in {}: {e}", id_file.display())),
            }
        },
    };
    let join = started.elapsed();

    let n = job.elements;
    let ranks = job.ranks as u64;
    let queue = device.queue(0).map_err(|e| e.to_string())?;
    let buffer =
        |bytes: u64| device.allocate_buffer(BufferParams::device_local(), bytes).map_err(|e| format!("{who}: {e}"));
    let (sums, mine, gathered) = (buffer(4 * n)?, buffer(4 * n)?, buffer(4 * n * ranks)?);
    let step = device.create_semaphore(0).map_err(|e| e.to_string())?;
    let at = |value: u64| [SV::new(&step, value)];
    let failed = |what: &str, e: hal::Error| {
        if e.code() == StatusCode::DeadlineExceeded {
            format!(
                "{who}: {what} did not finish within {:.1} s: is every one of the {} running, with the same id?",
                job.timeout.as_secs_f64(),
                count(job.ranks as u64, "rank", "ranks")
            )
        } else {
            format!("{who}: {what} failed: {e}")
        }
    };
    let mut times = Vec::with_capacity(job.iterations as usize);
    for k in 0..u64::from(job.iterations) {
        let iteration = Instant::now();
        let base = 7 * k;
        let submitted = (|| {
            let input: Vec<f32> = (0..n).map(|i| sum_input(job.rank as u64, i, k)).collect();
            queue.write_values(&at(base), &sums, 0, &input, &at(base + 1))?;
            let input: Vec<i32> = (0..n).map(|i| gather_input(job.rank as u64, i)).collect();
            queue.write_values(&at(base + 1), &mine, 0, &input, &at(base + 2))?;
            let all_reduce = CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::F32, n)
                .send(&sums)
                .recv(&sums);
            queue.collective(&at(base + 2), &channel, all_reduce, &at(base + 3))?;
            let all_gather =
                CollectiveArgs::new(CollectiveOp::AllGather, ElementType::I32, n).send(&mine).recv(&gathered);
            queue.collective(&at(base + 3), &channel, all_gather, &at(base + 4))?;
            let barrier = CollectiveArgs::new(CollectiveOp::Barrier, ElementType::U8, 0);
            queue.collective(&at(base + 4), &channel, barrier, &at(base + 5))?;
            let summed = queue.read(&at(base + 5), &sums, 0, 4 * n, &at(base + 6))?;
            let all = queue.read(&at(base + 6), &gathered, 0, 4 * n * ranks, &at(base + 7))?;
            Ok::<_, hal::Error>((summed, all))
        })();
        let (summed, all) = submitted.map_err(|e| format!("{who}: submitting iteration {k}: {e}"))?;
        let what = format!("iteration {k}'s collectives");
        let timeout = Timeout::At(Instant::now() + job.timeout);
        let summed: Vec<f32> = summed.wait_as(timeout).map_err(|e| failed(&what, e))?;
        let all: Vec<i32> = all.wait_as(timeout).map_err(|e| failed(&what, e))?;
        times.push(iteration.elapsed());
        for (i, &got) in summed.iter().enumerate() {
            let expected = (0..ranks).map(|r| sum_input(r, i as u64, k)).sum::<f32>();
            if got != expected {
                return Err(format!("{who}: iteration {k}: all-reduce element {i} is {got}, expected {expected}"));
            }
        }
        for (j, &got) in all.iter().enumerate() {
            let (r, i) = (j as u64 / n, j as u64 % n);
            let expected = gather_input(r, i);
            if got != expected {
                return Err(format!(
                    "{who}: iteration {k}: all-gather element {i} of rank {r} is {got}, expected {expected}"
                ));
            }
        }
    }
    Ok(Report { job: job.clone(), device: device_name.to_string(), join, iterations: times })
}

/// Rank `rank`'s element `i` of the all-reduce in iteration `k` (small integers: exact sums in `f32`).
fn sum_input(rank: u64, i: u64, k: u64) -> f32 {
    ((rank + 1) * (i % 7 + 1) + k % 100) as f32
}

/// Rank `rank`'s element `i` of the all-gather.
fn gather_input(rank: u64, i: u64) -> i32 {
    (rank * 1000 + i % 1000) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(rank: usize, ranks: usize, id_file: &Path) -> Job {
        Job {
            rank,
            ranks,
            meet: Meet::IdFile(id_file.to_path_buf()),
            elements: 33,
            iterations: 2,
            timeout: Duration::from_secs(20),
        }
    }

    /// A fresh directory for one test's id file, removed with everything in it when dropped.
    struct Scratch {
        dir: PathBuf,
        id: PathBuf,
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn scratch(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("hal-collective-job-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { id: dir.join("id"), dir }
    }

    #[test]
    fn ranks_of_one_process_meet_through_the_id_file() {
        let dir = scratch("meet");
        let path = dir.id.clone();
        let _ = std::fs::remove_file(&path);
        let reports: Vec<Report> = std::thread::scope(|s| {
            let ranks: Vec<_> = (0..3)
                .map(|rank| {
                    let job = job(rank, 3, &path);
                    s.spawn(move || run(&driver_cpu_sim::create_device().unwrap(), "cpu-sim", &job))
                })
                .collect();
            ranks.into_iter().map(|r| r.join().unwrap().unwrap()).collect()
        });
        for (rank, report) in reports.iter().enumerate() {
            let line = report.render();
            assert!(line.starts_with(&format!("rank {rank} of 3 on cpu-sim: checked")), "{line}");
            assert_eq!(report.iterations.len(), 2);
        }
    }

    #[test]
    fn ranks_of_one_process_meet_through_the_rendezvous() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let meet = Meet::Rendezvous { address: format!("127.0.0.1:{port}"), job: "test".into() };
        let reports: Vec<Report> = std::thread::scope(|s| {
            let ranks: Vec<_> = (0..3)
                .map(|rank| {
                    let job = Job { meet: meet.clone(), ..job(rank, 3, Path::new("unused")) };
                    s.spawn(move || run(&driver_cpu_sim::create_device().unwrap(), "cpu-sim", &job))
                })
                .collect();
            ranks.into_iter().map(|r| r.join().unwrap().unwrap()).collect()
        });
        assert_eq!(reports.len(), 3);
    }

    #[test]
    fn a_rank_without_an_id_or_peers_fails_within_its_timeout() {
        let dir = scratch("alone");
        let path = dir.id.clone();
        let _ = std::fs::remove_file(&path);
        let device = driver_cpu_sim::create_device().unwrap();
        let short = |rank| Job { timeout: Duration::from_millis(300), ..job(rank, 2, &path) };
        let no_id = run(&device, "cpu-sim", &short(1)).unwrap_err();
        assert!(no_id.contains("no channel id at") && no_id.contains("rank 0 writes it"), "{no_id}");
        let alone = run(&device, "cpu-sim", &short(0)).unwrap_err();
        assert!(alone.contains("did not finish within 0.3 s: is every one of the 2 ranks running"), "{alone}");
        let bad = run(&device, "cpu-sim", &job(2, 2, &path)).unwrap_err();
        assert_eq!(bad, "rank 2 of 2 ranks does not exist");
    }

    #[cfg(unix)]
    #[test]
    fn a_published_id_is_readable_by_its_owner_only_and_never_written_through_a_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("private");
        let path = dir.id.clone();
        let id = driver_cpu_sim::create_device().unwrap().create_channel_id().unwrap();
        // An id file an earlier run left readable by everyone is replaced, not reused.
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        // A link planted where the id is first written leads nowhere.
        let victim = path.with_file_name("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let aside = path.with_file_name(format!("id.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&aside);
        std::os::unix::fs::symlink(&victim, &aside).unwrap();
        publish_id(&path, &id).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the id file's mode is {mode:o}");
        assert_eq!(await_id(&path, Instant::now(), Duration::ZERO).unwrap(), id);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert!(!aside.exists(), "nothing is left beside the id file");
    }

    #[test]
    fn a_published_id_reads_back_whole() {
        let dir = scratch("publish");
        let path = dir.id.clone();
        let id = driver_cpu_sim::create_device().unwrap().create_channel_id().unwrap();
        publish_id(&path, &id).unwrap();
        assert_eq!(await_id(&path, Instant::now(), Duration::ZERO).unwrap(), id);
        std::fs::write(&path, "not hex").unwrap();
        assert!(await_id(&path, Instant::now(), Duration::ZERO).unwrap_err().contains("not a channel id"));
    }
}
