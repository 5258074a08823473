//! A test binary that runs again as a second process: the parent starts it with a scenario (and a
//! channel id) in the environment, and the child's entry test (`child_process`, which acts only
//! when the scenario is set) plays it. The child talks back through lines on its stdout; every
//! wait is bounded, and the child is killed when its handle drops.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use hal::ChannelId;

/// Which scenario the child process plays (unset: this is the parent).
const CHILD_SCENARIO: &str = "CPU_SIM_CHILD_SCENARIO";
/// The channel id (hex) the child is given.
const CHILD_ID: &str = "CPU_SIM_CHILD_ID";
/// What the child prints before a line meant for the parent.
const SAYS: &str = "child says: ";
/// The longest any step may take.
pub const LIMIT: Duration = Duration::from_secs(20);

/// The scenario this process plays, if it is a child.
pub fn scenario() -> Option<String> {
    std::env::var(CHILD_SCENARIO).ok()
}

/// The channel id the child was given.
pub fn given_id() -> ChannelId {
    ChannelId::from_hex(&std::env::var(CHILD_ID).expect("an id")).expect("a channel id")
}

/// In the child: says `line` to the parent.
pub fn say(line: &str) {
    println!("{SAYS}{line}");
}

/// This test binary, which the child process runs again.
pub fn test_binary() -> PathBuf {
    std::env::current_exe().expect("the test binary")
}

/// Why user `uid` (group `gid`) cannot execute `file`: the first directory on its path that the
/// user may not search, or the file itself when the user may not execute it, by the mode bits that
/// apply to that user (owner, group or others). `None` when every one of them lets the user through.
pub fn not_executable_by(file: &Path, uid: u32, gid: u32) -> Option<String> {
    let file = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    let mut paths: Vec<&Path> = file.ancestors().skip(1).collect();
    paths.reverse();
    paths.push(&file);
    for path in paths {
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) => return Some(format!("{}: {e}", path.display())),
        };
        let mode = meta.permissions().mode();
        let bits = if meta.uid() == uid {
            mode >> 6
        } else if meta.gid() == gid {
            mode >> 3
        } else {
            mode
        };
        if bits & 0o1 == 0 {
            let what = if path == file { "executable" } else { "searchable" };
            return Some(format!("{} (mode {:o}) is not {what} by it", path.display(), mode & 0o7777));
        }
    }
    None
}

/// The child process, its stdout lines meant for the parent, and a kill on drop.
pub struct ChildProcess {
    child: Child,
    lines: Receiver<String>,
}

impl ChildProcess {
    /// Starts the child playing `scenario`, given `id`.
    pub fn spawn(scenario: &str, id: Option<&ChannelId>) -> ChildProcess {
        Self::spawn_with(scenario, id, |_| {})
    }

    /// Starts the child playing `scenario`, given `id`, after `adjust` changed its command.
    pub fn spawn_with(scenario: &str, id: Option<&ChannelId>, adjust: impl FnOnce(&mut Command)) -> ChildProcess {
        Self::try_spawn_with(scenario, id, adjust).expect("spawn the child process")
    }

    /// As [`spawn_with`](Self::spawn_with), or the error that kept the child from starting (the
    /// test binary cannot be executed by the user `adjust` chose, say).
    pub fn try_spawn_with(
        scenario: &str,
        id: Option<&ChannelId>,
        adjust: impl FnOnce(&mut Command),
    ) -> std::io::Result<ChildProcess> {
        let mut command = Command::new(test_binary());
        command.args(["--exact", "child_process", "--nocapture", "--test-threads=1"]);
        command.env(CHILD_SCENARIO, scenario).stdout(Stdio::piped());
        if let Some(id) = id {
            command.env(CHILD_ID, id.to_hex());
        }
        adjust(&mut command);
        let mut child = command.spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest may have begun the line ("test child_process ... ").
                if let Some((_, said)) = line.split_once(SAYS) {
                    let _ = send.send(said.to_string());
                }
            }
        });
        Ok(ChildProcess { child, lines })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The child's next line for the parent.
    pub fn hear(&self) -> String {
        self.lines.recv_timeout(LIMIT).expect("the child said nothing in time (or died)")
    }

    /// Whether it still runs.
    pub fn runs(&mut self) -> bool {
        self.child.try_wait().expect("child status").is_none()
    }

    /// Waits for the child to exit and asserts it succeeded.
    pub fn succeeds(mut self) {
        let deadline = Instant::now() + LIMIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("child status") {
                assert!(status.success(), "the child process failed: {status}");
                return;
            }
            assert!(Instant::now() < deadline, "the child process did not finish in {LIMIT:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills it (and reaps it).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
