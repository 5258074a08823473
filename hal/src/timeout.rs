//! How long a host wait may block.

use std::time::{Duration, Instant};

/// How long a wait may block before it returns `DeadlineExceeded`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Timeout {
    /// Do not block: a poll.
    Immediate,
    /// Block for at most this long from the start of the call.
    After(Duration),
    /// Block until this instant.
    At(Instant),
    /// Block until the condition holds or fails.
    Infinite,
}

impl Timeout {
    /// The absolute deadline this timeout means when a wait starts now; `None` for infinite.
    pub fn deadline(self) -> Option<Instant> {
        match self {
            Timeout::Immediate => Some(Instant::now()),
            Timeout::After(d) => Some(Instant::now().checked_add(d).unwrap_or_else(far_future)),
            Timeout::At(at) => Some(at),
            Timeout::Infinite => None,
        }
    }

    /// Whether this timeout never blocks.
    pub fn is_immediate(self) -> bool {
        matches!(self, Timeout::Immediate) || matches!(self, Timeout::After(d) if d.is_zero())
    }
}

/// A deadline so far away it never arrives, for durations that overflow `Instant`.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(60 * 60 * 24 * 365 * 30)
}

impl From<Duration> for Timeout {
    fn from(d: Duration) -> Self {
        Timeout::After(d)
    }
}

impl From<Instant> for Timeout {
    fn from(at: Instant) -> Self {
        Timeout::At(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_duration_does_not_overflow() {
        let d = Timeout::After(Duration::MAX).deadline().unwrap();
        assert!(d > Instant::now() + Duration::from_secs(3600));
    }

    #[test]
    fn zero_duration_is_a_poll() {
        assert!(Timeout::After(Duration::ZERO).is_immediate());
        assert!(Timeout::Immediate.is_immediate());
        assert!(!Timeout::Infinite.is_immediate());
        assert_eq!(Timeout::Infinite.deadline(), None);
    }
}
