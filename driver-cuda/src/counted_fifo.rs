//! A queue's FIFO of per-submission records (timings, indirect launches) that every retirement
//! looks into and almost none finds anything in: its length is kept beside the lock, so a
//! retirement with nothing to take takes no lock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use hal::driver::lock;

/// A `Mutex<VecDeque<T>>` whose length can be read without the lock.
pub(crate) struct CountedFifo<T> {
    fifo: Mutex<VecDeque<T>>,
    /// The FIFO's length as of the last unlock.
    len: AtomicUsize,
}

/// The locked FIFO; the length is published when it drops.
pub(crate) struct Locked<'a, T> {
    fifo: MutexGuard<'a, VecDeque<T>>,
    len: &'a AtomicUsize,
}

impl<T> CountedFifo<T> {
    /// An empty FIFO.
    pub(crate) fn new() -> Self {
        CountedFifo { fifo: Mutex::new(VecDeque::new()), len: AtomicUsize::new(0) }
    }

    /// Whether the FIFO held nothing at its last unlock. A record pushed before its submission went
    /// in flight is seen by the retirement of that submission: the in-flight list's lock orders the
    /// push before the retirement.
    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// The FIFO, locked.
    pub(crate) fn lock(&self) -> Locked<'_, T> {
        Locked { fifo: lock(&self.fifo), len: &self.len }
    }
}

impl<T> std::ops::Deref for Locked<'_, T> {
    type Target = VecDeque<T>;

    fn deref(&self) -> &VecDeque<T> {
        &self.fifo
    }
}

impl<T> std::ops::DerefMut for Locked<'_, T> {
    fn deref_mut(&mut self) -> &mut VecDeque<T> {
        &mut self.fifo
    }
}

impl<T> Drop for Locked<'_, T> {
    fn drop(&mut self) {
        // Still under the lock: lengths are published in the order the FIFO changed.
        self.len.store(self.fifo.len(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_length_follows_every_change_made_under_the_lock() {
        let fifo = CountedFifo::new();
        assert!(fifo.is_empty());
        fifo.lock().push_back(1);
        assert!(!fifo.is_empty());
        {
            let mut locked = fifo.lock();
            locked.push_back(2);
            assert_eq!(locked.pop_front(), Some(1));
        }
        assert!(!fifo.is_empty());
        assert_eq!(fifo.lock().pop_front(), Some(2));
        assert!(fifo.is_empty());
    }
}
