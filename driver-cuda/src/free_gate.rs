//! Frees that wait for the device, kept apart from indirect dispatches launched from the host.
//!
//! `cuMemFreeHost`, `cuMemHostUnregister` and `cuModuleUnload` (and `cuMemFree`, used only where
//! the driver refuses a stream-ordered free: see `result::mem_free`) may wait until the device is
//! idle, and while they wait they hold a driver lock that every launch in the process
//! takes. An indirect dispatch read on the host (`crate::indirect_launcher`) holds its queue's stream until
//! the launcher thread launches its kernel: a free that starts while one is pending waits for a
//! stream that waits for a launch that waits for the free (`docs/decisions.md#free-gate` has the
//! backtraces that showed it).
//!
//! So the process counts the host-launched dispatches not yet released, and such a free first
//! waits, holding the gate, until none is pending; meanwhile new ones wait for the gate before
//! they hold a stream. A pending dispatch is released by the launcher thread alone, without the
//! gate, once its stream reached it, so the wait ends. The launcher thread itself never waits
//! here (it would wait for itself): a free it makes (the last reference to a finished
//! submission's buffer) goes ahead as before.

use std::sync::{Condvar, Mutex};

use hal::driver::{lock, wait};

/// Host-launched indirect dispatches holding a stream, process-wide; its lock is the gate.
static PENDING: Mutex<usize> = Mutex::new(0);
/// Signalled when `PENDING` drops to zero.
static NONE_PENDING: Condvar = Condvar::new();

std::thread_local! {
    /// Set on the launcher thread (see the module docs).
    static LAUNCHER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as the indirect-dispatch launcher.
pub(crate) fn mark_launcher_thread() {
    LAUNCHER.with(|l| l.set(true));
}

/// Counts a host-launched dispatch about to hold its stream (waits while a free holds the gate).
pub(crate) fn dispatch_held() {
    *lock(&PENDING) += 1;
}

/// Uncounts one: it was released (or never enqueued).
pub(crate) fn dispatch_released() {
    let mut pending = lock(&PENDING);
    *pending = pending.saturating_sub(1);
    if *pending == 0 {
        NONE_PENDING.notify_all();
    }
}

/// Runs `free` (a driver call that may wait for the device) once no host-launched dispatch holds
/// a stream, holding the gate meanwhile; on the launcher thread, at once.
pub(crate) fn synchronizing<R>(free: impl FnOnce() -> R) -> R {
    if LAUNCHER.with(std::cell::Cell::get) {
        return free();
    }
    let mut pending = lock(&PENDING);
    while *pending > 0 {
        pending = wait(&NONE_PENDING, pending);
    }
    let result = free();
    drop(pending);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    // One test: the counter is process-wide.
    #[test]
    fn a_free_waits_for_pending_dispatches_and_holds_new_ones_back() {
        dispatch_held();
        let freed = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| synchronizing(|| freed.store(true, Ordering::SeqCst)));
            std::thread::sleep(Duration::from_millis(20));
            assert!(!freed.load(Ordering::SeqCst), "the free went ahead of a pending dispatch");
            dispatch_released();
        });
        assert!(freed.load(Ordering::SeqCst));
        // On the launcher thread a free never waits.
        std::thread::spawn(|| {
            mark_launcher_thread();
            dispatch_held();
            synchronizing(|| ());
            dispatch_released();
        })
        .join()
        .unwrap();
    }
}
