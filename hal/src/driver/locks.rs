//! Locking for drivers, with one policy for poisoned locks (see [`lock`]). These work on
//! `std::sync` types in every build (hal's own loom-checked core has its own).

use std::sync::{Condvar, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

/// Locks `mutex`, ignoring poisoning: the policy every helper here follows.
///
/// A lock whose holder panicked is taken as if it had not been poisoned. A driver's critical
/// sections update plain bookkeeping (lists, counters, flags) and keep it whole at every point a
/// panic could leave them from, so the data behind a poisoned lock is still consistent; and a panic
/// on one thread (a user's host call, a test assertion) must not turn every later call of the
/// device, on every other thread, into a second panic. The panic itself still reaches the thread it
/// happened on. A critical section that *can* leave its data torn must not use these helpers for
/// that lock; it handles the poison itself and says why.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Locks `mutex` if nobody holds it (`None` otherwise), ignoring poisoning as [`lock`] does.
pub fn try_lock<T: ?Sized>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// The value behind a mutex held exclusively (`&mut`), ignoring poisoning as [`lock`] does.
pub fn get_mut<T: ?Sized>(mutex: &mut Mutex<T>) -> &mut T {
    mutex.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Blocks on `condvar` until notified, ignoring poisoning as [`lock`] does.
pub fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar.wait(guard).unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Blocks on `condvar` until notified or `timeout` passes, ignoring poisoning as [`lock`] does:
/// the guard, and whether the wait timed out.
pub fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> (MutexGuard<'a, T>, bool) {
    let (guard, result) = condvar.wait_timeout(guard, timeout).unwrap_or_else(|poisoned| poisoned.into_inner());
    (guard, result.timed_out())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Duration;

    /// A mutex whose holder panicked, with `value` inside.
    fn poisoned(value: u32) -> Arc<Mutex<u32>> {
        let mutex = Arc::new(Mutex::new(value));
        let holder = mutex.clone();
        let _ = std::thread::spawn(move || {
            let _guard = holder.lock().unwrap();
            panic!("the holder panics");
        })
        .join();
        assert!(mutex.is_poisoned());
        mutex
    }

    #[test]
    fn a_poisoned_lock_still_gives_its_data() {
        let mutex = poisoned(7);
        assert_eq!(*super::lock(&mutex), 7);
        assert_eq!(super::try_lock(&mutex).map(|guard| *guard), Some(7));
        let mut owned = Arc::try_unwrap(mutex).expect("the only handle");
        assert_eq!(*super::get_mut(&mut owned), 7);
    }

    #[test]
    fn try_lock_is_none_while_another_holds_the_lock() {
        let mutex = Mutex::new(1);
        let _held = super::lock(&mutex);
        assert!(super::try_lock(&mutex).is_none());
    }

    #[test]
    fn waits_on_a_poisoned_lock_return_the_guard() {
        let mutex = poisoned(3);
        let condvar = Condvar::new();
        let (guard, timed_out) = super::wait_timeout(&condvar, super::lock(&mutex), Duration::from_millis(1));
        assert!(timed_out);
        assert_eq!(*guard, 3);
    }
}
