//! The run's log of submissions, and per-queue busy time computed from it.
//!
//! Each submission is logged with the time the host submitted it, the (timeline, value) pairs it
//! waits on and the value it signals on its own queue's timeline. A [`SemaphoreProbe`] per timeline
//! stamps when each value was reached (host-side, on the completion thread that applied the signal).
//! A submission's *busy interval* is from when it could start (submitted, and every value it waits
//! on reached) to when its signal was reached; a queue's busy time is the sum over its submissions.
//! Every submission of a queue waits on the previous one, so the intervals of one queue do not
//! overlap and the sum never exceeds the wall time.

use std::time::Duration;

use crate::probe::SemaphoreProbe;

/// One logged submission.
#[derive(Clone, Debug)]
pub struct Submission {
    /// The half (and timeline) it belongs to: 0 or 1.
    pub half: usize,
    /// What it is ("stencil", "halo", "upload", "readback").
    pub label: &'static str,
    /// The step it belongs to, for stencil and halo submissions.
    pub step: Option<u32>,
    /// When the host submitted it (since the probes' epoch).
    pub submitted: Duration,
    /// (timeline, value) pairs it waits on.
    pub waits: Vec<(usize, u64)>,
    /// The value it signals on its half's timeline.
    pub signal: u64,
}

/// A submission's interval: when it could start and when its signal was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    /// Submitted and every wait reached.
    pub ready: Duration,
    /// Its signal reached.
    pub done: Duration,
}

impl Submission {
    /// Its interval, once its signal was reached.
    pub fn interval(&self, probes: &[SemaphoreProbe]) -> Option<Interval> {
        let done = probes.get(self.half)?.reached_at(self.signal)?;
        let ready = self
            .waits
            .iter()
            .filter_map(|&(timeline, value)| probes.get(timeline).and_then(|p| p.reached_at(value)))
            .fold(self.submitted, Duration::max);
        Some(Interval { ready: ready.min(done), done })
    }
}

/// Busy time and submissions of each half's queue, by half.
pub fn busy_per_half(log: &[Submission], probes: &[SemaphoreProbe]) -> Vec<(Duration, usize)> {
    let mut per_half = vec![(Duration::ZERO, 0usize); probes.len()];
    for submission in log {
        if let (Some(slot), Some(interval)) = (per_half.get_mut(submission.half), submission.interval(probes)) {
            slot.0 += interval.done - interval.ready;
            slot.1 += 1;
        }
    }
    per_half
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn busy_starts_when_the_last_wait_is_reached() {
        let epoch = Instant::now();
        let (a, b) = (hal::Semaphore::new(0), hal::Semaphore::new(0));
        let probes = [SemaphoreProbe::new(&a, "a", 1, 2, epoch), SemaphoreProbe::new(&b, "b", 1, 1, epoch)];
        (1..=2).for_each(|v| probes[0].watch(v));
        probes[1].watch(1);
        let log = vec![
            Submission { half: 0, label: "first", step: None, submitted: Duration::ZERO, waits: Vec::new(), signal: 1 },
            Submission {
                half: 0,
                label: "second",
                step: None,
                submitted: Duration::ZERO,
                waits: vec![(0, 1), (1, 1)],
                signal: 2,
            },
        ];
        a.signal(1).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        b.signal(1).unwrap();
        a.signal(2).unwrap();
        let second = log[1].interval(&probes).unwrap();
        assert_eq!(second.ready, probes[1].reached_at(1).unwrap(), "ready when b reached 1, the later wait");
        let busy = busy_per_half(&log, &probes);
        assert_eq!(busy[0].1, 2);
        assert_eq!(busy[1], (Duration::ZERO, 0));
        let first = log[0].interval(&probes).unwrap();
        assert_eq!(busy[0].0, (first.done - first.ready) + (second.done - second.ready));
    }
}
