//! A test binary that runs again as a second process: the parent starts it with a scenario (and a
//! channel id) in the environment, and the child's entry test (`child_process`, which acts only
//! when the scenario is set) plays it. The child talks back through lines on its stdout; every
//! wait is bounded, and the child is killed when its handle drops.

use std::io::{BufRead, BufReader};
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
        let exe = std::env::current_exe().expect("the test binary");
        let mut command = Command::new(exe);
        command.args(["--exact", "child_process", "--nocapture", "--test-threads=1"]);
        command.env(CHILD_SCENARIO, scenario).stdout(Stdio::piped());
        if let Some(id) = id {
            command.env(CHILD_ID, id.to_hex());
        }
        adjust(&mut command);
        let mut child = command.spawn().expect("spawn the child process");
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
        ChildProcess { child, lines }
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
