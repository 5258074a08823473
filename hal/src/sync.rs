//! The one place that names the synchronisation primitives: `std::sync` normally, `loom::sync` under
//! `--cfg loom`, so the semaphore core that runs in production is the code loom model-checks.
//!
//! `Arc` stays `std::sync::Arc` in both builds: reference counts are not the races we check, and loom's
//! `Arc` cannot hold the unsized listener trait objects the timepoints carry.

#[cfg(loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard, atomic};
#[cfg(loom)]
pub(crate) use loom::thread_local;
#[cfg(not(loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard, atomic};
#[cfg(not(loom))]
pub(crate) use std::thread_local;

/// Locks `mutex`, ignoring poisoning: our critical sections only update plain state and never panic
/// half way, so the data behind a poisoned lock is still consistent.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Locks `mutex` if nobody holds it (`None` otherwise), ignoring poisoning as [`lock`] does.
pub(crate) fn try_lock<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Moves up to `batch` values from the back of the shared list `from` into `into` (one lock for
/// the batch): how issuers refill their caches of spare records and free events.
pub(crate) fn take_batch<T>(from: &Mutex<Vec<T>>, into: &mut Vec<T>, batch: usize) {
    let mut shared = lock(from);
    let keep = shared.len().saturating_sub(batch);
    into.extend(shared.drain(keep..));
}

/// Whether this build is a loom model (`--cfg loom`): the scheduler then starts no threads of its
/// own and the models drive it. Read where the scheduler would start its completion threads, where
/// host calls would start theirs (they run in place), and where a host wait would spin on a clock.
pub(crate) const MODEL_CHECKED: bool = cfg!(loom);

/// Blocks on `condvar` until notified, ignoring poisoning as [`lock`] does.
pub(crate) fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar.wait(guard).unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Blocks on `condvar` until notified or `timeout` passes (never times out under loom, which has no
/// model of time); the guard and whether it timed out. Ignores poisoning as [`lock`] does.
pub(crate) fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: std::time::Duration,
) -> (MutexGuard<'a, T>, bool) {
    match condvar.wait_timeout(guard, timeout) {
        Ok((guard, result)) => (guard, result.timed_out()),
        Err(poisoned) => {
            let (guard, result) = poisoned.into_inner();
            (guard, result.timed_out())
        }
    }
}

/// The value behind a mutex we hold exclusively (`&mut`), ignoring poisoning as [`lock`] does.
pub(crate) fn get_mut<T>(mutex: &mut Mutex<T>) -> &mut T {
    mutex.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Lets other threads run (loom's yield under loom, so the model can make progress).
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// A hint that we are spinning (a no-op yield under loom so the model can make progress).
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Keeps `T` on cache lines of its own (128 bytes: a line and the neighbour Intel prefetches with
/// it). Fields written by a submitting thread and fields written by a completion thread must not
/// share a line: each write would take the line away from the other core (false sharing).
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}
