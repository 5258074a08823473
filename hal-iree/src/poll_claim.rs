//! Who polls a future that wakers poll themselves: one thread at a time, and a wake that arrives
//! while that thread polls (from another thread, or from inside the poll itself) makes it poll once
//! more instead of being lost.
//!
//! A wake must never be dropped: the future registered that waker as its only way to say it made
//! progress. A lock cannot do this (a wake from inside the poll would deadlock on it), and a
//! try-lock with a "poll again" flag loses a wake whose flag lands after the poller's last look at
//! it. So the claim is one atomic state that every wake moves forward.

use std::sync::atomic::{AtomicU8, Ordering};

/// Nobody polls.
const IDLE: u8 = 0;
/// A thread polls.
const POLLING: u8 = 1;
/// A thread polls, and a wake came since it began: it polls again.
const POLL_AGAIN: u8 = 2;
/// The future finished: wakes do nothing.
const DONE: u8 = 3;

/// The polling claim of one future (see the module docs).
#[derive(Default)]
pub(crate) struct PollClaim {
    state: AtomicU8,
}

impl PollClaim {
    /// Called on each wake (and for the first poll): `true` when this thread now polls; `false`
    /// when the thread polling now will poll again (or the future finished).
    pub(crate) fn claim(&self) -> bool {
        let mut seen = self.state.load(Ordering::Acquire);
        loop {
            let next = match seen {
                IDLE => POLLING,
                POLLING => POLL_AGAIN,
                _ => return false,
            };
            match self.state.compare_exchange(seen, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return next == POLLING,
                Err(actual) => seen = actual,
            }
        }
    }

    /// Called by the polling thread after a poll that returned pending: `true` when it may stop;
    /// `false` when a wake came during the poll and it polls again (still holding the claim).
    pub(crate) fn release(&self) -> bool {
        match self.state.compare_exchange(POLLING, IDLE, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => true,
            Err(_) => {
                // POLL_AGAIN: only wakes move the state, and only the poller moves it back.
                self.state.store(POLLING, Ordering::Release);
                false
            }
        }
    }

    /// Called by the polling thread once the future finished: later wakes do nothing.
    pub(crate) fn finish(&self) {
        self.state.store(DONE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_wake_during_a_poll_makes_the_poller_poll_again() {
        let claim = PollClaim::default();
        assert!(claim.claim(), "the first caller polls");
        assert!(!claim.claim(), "a wake during the poll leaves it to the poller");
        assert!(!claim.claim(), "as does a second");
        assert!(!claim.release(), "the poller polls again");
        assert!(claim.release(), "then stops");
        assert!(claim.claim(), "the next wake polls itself");
        claim.finish();
        assert!(!claim.claim(), "a finished future is never polled again");
    }

    #[test]
    fn a_wake_after_the_poller_looked_last_is_never_lost() {
        // The interleaving a try-lock with a flag gets wrong: the wake is counted after the
        // poller's last look. Here the poller has released, so the wake polls itself.
        let claim = PollClaim::default();
        assert!(claim.claim());
        assert!(claim.release());
        assert!(claim.claim(), "the late wake polls");
    }

    /// Threads wake a counter future many times while others poll it: every wake is followed by
    /// at least one poll that began after it, and at most one thread polls at a time.
    #[test]
    fn racing_wakes_each_see_a_later_poll_and_polls_never_overlap() {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos());
        for round in 0..200u32 {
            let claim = Arc::new(PollClaim::default());
            let wakes = Arc::new(AtomicUsize::new(0));
            let seen_by_poll = Arc::new(AtomicUsize::new(0));
            let polling = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..4)
                .map(|t| {
                    let (claim, wakes, seen_by_poll, polling) =
                        (claim.clone(), wakes.clone(), seen_by_poll.clone(), polling.clone());
                    std::thread::spawn(move || {
                        for i in 0..200u32 {
                            wakes.fetch_add(1, Ordering::SeqCst);
                            if !claim.claim() {
                                continue;
                            }
                            loop {
                                assert_eq!(polling.fetch_add(1, Ordering::SeqCst), 0, "two pollers (seed {seed})");
                                seen_by_poll.fetch_max(wakes.load(Ordering::SeqCst), Ordering::SeqCst);
                                if (u128::from(round) ^ u128::from(i) ^ t ^ seed).is_multiple_of(7) {
                                    std::thread::yield_now();
                                }
                                polling.fetch_sub(1, Ordering::SeqCst);
                                if claim.release() {
                                    break;
                                }
                            }
                        }
                    })
                })
                .collect();
            for thread in threads {
                thread.join().unwrap();
            }
            assert_eq!(
                seen_by_poll.load(Ordering::SeqCst),
                wakes.load(Ordering::SeqCst),
                "a wake was never followed by a poll (round {round}, seed {seed})"
            );
        }
    }
}
