//! Running a program under a watchdog, and what it reports about a program that is stuck: the
//! phase, the devices' hang reports and the semaphores' states. Also the process's thread count,
//! which must be back to what it was once a program's devices dropped.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hal::{Device, Semaphore};

/// A program that takes longer than this is stuck (in a drop, say): the watchdog stops the run.
pub(crate) const WATCHDOG: Duration = Duration::from_secs(60);
/// How long thread exits, idle pools, cancelled timepoints and wake-ups may take to show.
pub(crate) const SETTLE: Duration = Duration::from_secs(5);

/// What the watchdog prints about a stuck program.
#[derive(Default)]
pub(crate) struct Diagnostics {
    pub(crate) phase: String,
    pub(crate) devices: Vec<Device>,
    pub(crate) sems: Vec<Semaphore>,
}

/// Shared between a program's thread and the watchdog.
pub(crate) type SharedDiagnostics = Arc<Mutex<Diagnostics>>;

/// Runs `program` on a thread named `name`; a panic, or no result within [`WATCHDOG`], is a
/// failure (the stuck thread is left behind).
pub(crate) fn run_with_watchdog<T: Send + 'static>(
    name: String,
    program: impl FnOnce(&SharedDiagnostics) -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let diagnostics = SharedDiagnostics::default();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let runner = {
        let diagnostics = diagnostics.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                let _ = done_tx.send(program(&diagnostics));
            })
            .map_err(|e| format!("cannot start the program thread: {e}"))?
    };
    match done_rx.recv_timeout(WATCHDOG) {
        Ok(result) => {
            let _ = runner.join();
            result
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let panic = runner.join().err().map(|p| panic_message(&*p)).unwrap_or_default();
            Err(format!("the program panicked: {panic}"))
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            Err(format!("stuck for {WATCHDOG:?}; {}", stuck_report(&diagnostics)))
        }
    }
}

/// The phase, the devices' hang reports and the semaphores' states, without blocking for long.
pub(crate) fn stuck_report(diagnostics: &SharedDiagnostics) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    let diagnostics = diagnostics.clone();
    std::thread::spawn(move || {
        let d = diagnostics.lock().unwrap_or_else(|p| p.into_inner());
        let mut text = format!("phase: {}\n", d.phase);
        for device in &d.devices {
            text += &format!("{}:\n{}\n", device.id(), device.report());
        }
        for (index, sem) in d.sems.iter().enumerate() {
            text += &format!("sem {index}: {}\n", sem.report());
        }
        let _ = tx.send(text);
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| "(the report itself is stuck)".to_string())
}

/// The text of a panic's payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(not a string)".to_string())
}

/// The HAL's and its drivers' threads in this process now, by the names they give their threads
/// (`hal-...`, `cpu-sim-...`): a driver library's own threads are not the HAL's to stop. (One that
/// a HAL thread starts takes that thread's name, as CUDA's host-function thread does; the CUDA
/// fuzz starts it before the first count.) 0 where `/proc` is missing: the check then holds
/// trivially.
pub(crate) fn threads_now() -> usize {
    hal_thread_names().len()
}

/// The names of the HAL's threads in this process (see [`threads_now`]), sorted.
pub(crate) fn thread_names() -> String {
    hal_thread_names().join(", ")
}

fn hal_thread_names() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut names: Vec<String> = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .filter(|n| n.starts_with("hal-") || n.starts_with("cpu-sim-"))
        .collect();
    names.sort();
    names
}

/// Polls `done` until it holds or [`SETTLE`] passes.
pub(crate) fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + SETTLE;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
