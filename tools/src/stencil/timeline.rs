//! The run's ledger of submissions, and per-queue busy time computed from it.
//!
//! Each submission is logged with the time the host submitted it, the (timeline, value) pairs it
//! waits on and the value it signals on its own queue's timeline. A [`SemaphoreProbe`] per timeline
//! stamps when each value was reached (host-side, on the completion thread that applied the signal).
//! A submission's *busy interval* is from when it could start (submitted, and every value it waits
//! on reached) to when its signal was reached; a queue's busy time is the sum over its submissions.
//! Every submission of a queue waits on the previous one, so the intervals of one queue do not
//! overlap and the sum never exceeds the wall time.
//!
//! The [`Ledger`] folds each submission into those sums (and into the trace) once its times are
//! known, and its probes forget the values no submission needs any more: its memory follows the
//! submissions in flight, not the length of the run.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hal::{Result, Semaphore, SemaphoreValue as SV};

use crate::probe::SemaphoreProbe;
use crate::trace::TraceRecorder;

/// One logged submission.
#[derive(Clone, Debug)]
pub struct Submission {
    /// The part (and timeline) it belongs to.
    pub half: usize,
    /// What it is ("stencil", "halo", "upload", "readback").
    pub label: &'static str,
    /// The step it belongs to, for stencil and halo submissions.
    pub step: Option<u32>,
    /// When the host submitted it (since the probes' epoch).
    pub submitted: Duration,
    /// (timeline, value) pairs it waits on.
    pub waits: Vec<(usize, u64)>,
    /// The value it signals on its part's timeline.
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
    /// Its interval, once its signal was reached (waits not stamped are left out).
    pub fn interval(&self, probes: &[SemaphoreProbe]) -> Option<Interval> {
        let done = probes.get(self.half)?.reached_at(self.signal)?;
        let ready = self
            .waits
            .iter()
            .filter_map(|&(timeline, value)| probes.get(timeline).and_then(|p| p.reached_at(value)))
            .fold(self.submitted, Duration::max);
        Some(Interval { ready: ready.min(done), done })
    }

    /// Its interval, once its signal and every value it waits on have been stamped (a wait's stamp
    /// may come later than the signal's: another queue's completion thread makes it). A wait below
    /// its probe's first kept value (a timeline's initial value) has no stamp to wait for.
    pub fn complete_interval(&self, probes: &[SemaphoreProbe]) -> Option<Interval> {
        let known = |&(timeline, value): &(usize, u64)| {
            probes.get(timeline).is_none_or(|p| value < p.first_kept() || p.reached_at(value).is_some())
        };
        if self.waits.iter().all(known) { self.interval(probes) } else { None }
    }
}

/// The run's bookkeeping: each timeline's probe, the submissions not folded yet, and the totals.
pub struct Ledger<'a> {
    epoch: Instant,
    timelines: Vec<Semaphore>,
    /// Each part's trace track ([`crate::trace::queue_track`]).
    tracks: Vec<u64>,
    probes: Vec<SemaphoreProbe>,
    trace: Option<&'a TraceRecorder>,
    /// Submissions not folded yet, oldest first.
    log: VecDeque<Submission>,
    /// Busy time and submissions folded, by part.
    busy: Vec<(Duration, usize)>,
    submitted: usize,
}

impl<'a> Ledger<'a> {
    /// A ledger for the parts' `timelines` (starting at 0), traced on `tracks` (one per part),
    /// timing from `epoch`, adding one slice per submission to `trace` when given.
    pub fn new(epoch: Instant, timelines: Vec<Semaphore>, tracks: Vec<u64>, trace: Option<&'a TraceRecorder>) -> Self {
        let probes = timelines
            .iter()
            .enumerate()
            .map(|(part, timeline)| SemaphoreProbe::new(timeline, &format!("part {part} timeline"), 1, epoch))
            .collect();
        let busy = vec![(Duration::ZERO, 0); timelines.len()];
        Ledger { epoch, timelines, tracks, probes, trace, log: VecDeque::new(), busy, submitted: 0 }
    }

    /// Submits work of `half` with `call(waits, signals)`, signalling `signal` on the half's
    /// timeline, and logs it. The probe watches `signal` before the work exists, so its stamp is
    /// exact.
    pub fn submit<T>(
        &mut self,
        half: usize,
        (label, step): (&'static str, Option<u32>),
        waits: &[SV],
        signal: u64,
        call: impl FnOnce(&[SV], &[SV]) -> Result<T>,
    ) -> Result<T> {
        let signals = [SV::new(&self.timelines[half], signal)];
        self.probes[half].watch(signal);
        let submitted = self.epoch.elapsed();
        let out = call(waits, &signals)?;
        let waits = waits
            .iter()
            .filter_map(|w| self.timelines.iter().position(|t| t.same_as(&w.semaphore)).map(|t| (t, w.value)))
            .collect();
        self.log.push_back(Submission { half, label, step, submitted, waits, signal });
        self.submitted += 1;
        Ok(out)
    }

    /// When `half`'s timeline reached `value`, if it has and the value is still kept.
    pub fn reached_at(&self, half: usize, value: u64) -> Option<Duration> {
        self.probes.get(half)?.reached_at(value)
    }

    /// Folds the oldest submissions whose times are all known, up to the first that is not, then
    /// forgets the stamps below what the rest refer to and below `keep_from` (per timeline: the
    /// lowest value a submission made later may wait on).
    pub fn fold_completed(&mut self, keep_from: Vec<u64>) {
        while let Some(interval) = self.log.front().and_then(|s| s.complete_interval(&self.probes)) {
            if let Some(submission) = self.log.pop_front() {
                self.fold(&submission, interval);
            }
        }
        let mut floor = keep_from;
        for submission in &self.log {
            floor[submission.half] = floor[submission.half].min(submission.signal);
            for &(timeline, value) in &submission.waits {
                floor[timeline] = floor[timeline].min(value);
            }
        }
        for (probe, floor) in self.probes.iter().zip(floor) {
            probe.forget_below(floor);
        }
    }

    /// Folds every submission left (a submission whose signal was not stamped counts for nothing)
    /// and returns the busy time and submissions of each part, and the submissions made.
    pub fn finish(mut self) -> (Vec<(Duration, usize)>, usize) {
        while let Some(submission) = self.log.pop_front() {
            if let Some(interval) = submission.interval(&self.probes) {
                self.fold(&submission, interval);
            }
        }
        (self.busy, self.submitted)
    }

    /// Submissions logged and not folded yet.
    pub fn unfolded(&self) -> usize {
        self.log.len()
    }

    /// Stamps the probes keep, both timelines together.
    pub fn stamps_kept(&self) -> usize {
        self.probes.iter().map(SemaphoreProbe::kept).sum()
    }

    fn fold(&mut self, submission: &Submission, interval: Interval) {
        let slot = &mut self.busy[submission.half];
        slot.0 += interval.done - interval.ready;
        slot.1 += 1;
        if let Some(trace) = self.trace {
            let name = match submission.step {
                Some(step) => format!("{} {step}", submission.label),
                None => submission.label.to_string(),
            };
            trace.add_slice(self.tracks[submission.half], &name, interval.ready, interval.done);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn busy_starts_when_the_last_wait_is_reached() {
        let epoch = Instant::now();
        let (a, b) = (hal::Semaphore::new(0), hal::Semaphore::new(0));
        let probes = [SemaphoreProbe::new(&a, "a", 1, epoch), SemaphoreProbe::new(&b, "b", 1, epoch)];
        (1..=2).for_each(|v| probes[0].watch(v));
        probes[1].watch(1);
        let second = Submission {
            half: 0,
            label: "second",
            step: None,
            submitted: Duration::ZERO,
            waits: vec![(0, 1), (1, 1)],
            signal: 2,
        };
        a.signal(1).unwrap();
        a.signal(2).unwrap();
        assert!(second.interval(&probes).is_some(), "signal reached");
        assert_eq!(second.complete_interval(&probes), None, "b's value 1 not stamped yet");
        std::thread::sleep(Duration::from_millis(5));
        b.signal(1).unwrap();
        let interval = second.complete_interval(&probes).unwrap();
        assert_eq!(interval.ready, probes[1].reached_at(1).unwrap().min(interval.done), "the later wait");
        assert_eq!(interval.done, probes[0].reached_at(2).unwrap());
    }

    #[test]
    fn ledger_memory_follows_the_submissions_in_flight() {
        let (a, b) = (hal::Semaphore::new(0), hal::Semaphore::new(0));
        let mut ledger = Ledger::new(Instant::now(), vec![a.clone(), b.clone()], vec![0, 1], None);
        for value in 1..=10_000u64 {
            for (half, timeline) in [&a, &b].into_iter().enumerate() {
                let waits = [SV::new(timeline, value - 1)];
                ledger.submit(half, ("step", None), &waits, value, |_, s| s[0].semaphore.signal(value)).unwrap();
            }
            if value % 16 == 0 {
                ledger.fold_completed(vec![value, value]);
                assert!(ledger.unfolded() <= 2 && ledger.stamps_kept() <= 4, "value {value}");
            }
        }
        let (busy, submitted) = ledger.finish();
        assert_eq!(submitted, 20_000);
        assert_eq!([busy[0].1, busy[1].1], [10_000, 10_000], "every submission folded once");
    }
}
