//! A one-line progress display on stderr for long runs (`hal run`, `hal bench`).
//!
//! It redraws in place only when stderr is a terminal and at most every 100 ms; when stderr is a
//! file or a pipe it stays silent, so logs and tests do not fill with carriage returns.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

const REDRAW_EVERY: Duration = Duration::from_millis(100);
const BAR_WIDTH: usize = 30;

/// A progress line: `label [#######-------] done/total unit`.
pub struct Progress {
    label: String,
    unit: &'static str,
    total: u64,
    enabled: bool,
    last_draw: Option<Instant>,
    drawn: bool,
}

impl Progress {
    /// A progress line for `total` `unit`s, drawn only when stderr is a terminal.
    pub fn new(label: impl Into<String>, total: u64, unit: &'static str) -> Self {
        Self::with_output(label, total, unit, std::io::stderr().is_terminal())
    }

    /// As [`Progress::new`], drawing only when `enabled`.
    pub fn with_output(label: impl Into<String>, total: u64, unit: &'static str, enabled: bool) -> Self {
        Progress { label: label.into(), unit, total, enabled, last_draw: None, drawn: false }
    }

    /// Shows `done` units finished (redrawn at most every 100 ms).
    pub fn update(&mut self, done: u64) {
        if !self.enabled || self.last_draw.is_some_and(|t| t.elapsed() < REDRAW_EVERY) {
            return;
        }
        self.last_draw = Some(Instant::now());
        self.drawn = true;
        let line = self.line(done);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{line}\x1b[K");
        let _ = err.flush();
    }

    /// The text of the line for `done` units.
    pub fn line(&self, done: u64) -> String {
        let done = done.min(self.total);
        // In u128: `done * BAR_WIDTH` overflows u64 for totals near u64::MAX.
        let filled = if self.total == 0 {
            BAR_WIDTH
        } else {
            (u128::from(done) * BAR_WIDTH as u128 / u128::from(self.total)) as usize
        };
        format!(
            "{} [{}{}] {done}/{} {}",
            self.label,
            "#".repeat(filled),
            "-".repeat(BAR_WIDTH - filled),
            self.total,
            self.unit
        )
    }

    /// Clears the line (call before printing results).
    pub fn finish(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_fills_in_proportion() {
        let progress = Progress::with_output("run", 200, "steps", false);
        assert_eq!(progress.line(0), format!("run [{}] 0/200 steps", "-".repeat(30)));
        assert_eq!(progress.line(100), format!("run [{}{}] 100/200 steps", "#".repeat(15), "-".repeat(15)));
        assert_eq!(progress.line(500), format!("run [{}] 200/200 steps", "#".repeat(30)));
        let huge = Progress::with_output("run", u64::MAX, "steps", false);
        assert!(huge.line(u64::MAX / 2).contains(&format!("[{}{}]", "#".repeat(14), "-".repeat(16))));
    }
}
