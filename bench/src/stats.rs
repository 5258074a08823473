//! Repeated trials and their summary: median and the 10th-90th percentile spread.

use std::time::{Duration, Instant};

/// Per-operation times (microseconds) of repeated trials of one workload.
#[derive(Clone, Debug)]
pub struct Samples {
    /// One value per trial, in microseconds per operation.
    pub us_per_op: Vec<f64>,
    /// When the first timed trial began and the last one ended (none for values given as such).
    pub timed: Option<(Instant, Instant)>,
}

impl Samples {
    /// Runs `warmup` untimed trials, then `trials` timed ones. Each call of `trial` runs `ops`
    /// operations and returns the time they took.
    pub fn collect(warmup: usize, trials: usize, ops: u64, mut trial: impl FnMut(u64) -> Duration) -> Samples {
        for _ in 0..warmup {
            trial(ops);
        }
        let began = Instant::now();
        let us_per_op = (0..trials).map(|_| trial(ops).as_secs_f64() * 1e6 / ops as f64).collect();
        Samples { us_per_op, timed: Some((began, Instant::now())) }
    }

    /// Like [`Samples::collect`] for a trial that can fail: the first error ends the run and is
    /// returned.
    pub fn try_collect<E>(
        warmup: usize,
        trials: usize,
        ops: u64,
        mut trial: impl FnMut(u64) -> Result<Duration, E>,
    ) -> Result<Samples, E> {
        for _ in 0..warmup {
            trial(ops)?;
        }
        let mut us_per_op = Vec::with_capacity(trials);
        let began = Instant::now();
        for _ in 0..trials {
            us_per_op.push(trial(ops)?.as_secs_f64() * 1e6 / ops as f64);
        }
        Ok(Samples { us_per_op, timed: Some((began, Instant::now())) })
    }

    /// Like `collect`, for a trial that times itself per operation (e.g. only the latency part).
    pub fn from_values(values: Vec<f64>) -> Samples {
        Samples { us_per_op: values, timed: None }
    }

    fn sorted(&self) -> Vec<f64> {
        let mut v = self.us_per_op.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        v
    }

    fn percentile(&self, p: f64) -> f64 {
        let v = self.sorted();
        if v.is_empty() {
            return f64::NAN;
        }
        let at = ((v.len() - 1) as f64 * p).round() as usize;
        v[at]
    }

    /// The median.
    pub fn median(&self) -> f64 {
        self.percentile(0.5)
    }

    /// The 10th percentile.
    pub fn p10(&self) -> f64 {
        self.percentile(0.1)
    }

    /// The 90th percentile.
    pub fn p90(&self) -> f64 {
        self.percentile(0.9)
    }
}

/// Times `f`.
pub fn time(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_values() {
        let s = Samples::from_values(vec![5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(s.median(), 3.0);
        assert_eq!(s.p10(), 1.0);
        assert_eq!(s.p90(), 5.0);
    }
}
