//! The progress bar of long runs (`hal run`, `hal bench`, `hal cts`), drawn by indicatif on stderr
//! only where a person watches: when stdout and stderr are both terminals. Anywhere else (a log
//! file, a pipe, a test) it is hidden and writes nothing, so no escape codes or carriage returns
//! end up in the output.
//!
//! A report written to stdout while the bar shows goes through [`Progress::lines`]: each whole line
//! is written with the bar cleared and then drawn again below it, so the two never mix on a
//! terminal. [`Progress::finish`] (or dropping the bar) clears it: the report is what stays.
//!
//! ```
//! use std::io::Write;
//! use tools::progress::Progress;
//! let progress = Progress::new("hal cts", 2, "cases");
//! let mut out = progress.lines(Vec::new());
//! for case in ["a", "b"] {
//!     progress.set_message(format!("last: {case}"));
//!     progress.inc();
//!     writeln!(out, "{case} PASS").unwrap();
//! }
//! progress.finish();
//! assert_eq!(out.get_ref(), b"a PASS\nb PASS\n");
//! ```

use std::borrow::Cow;
use std::io::{self, IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a bar that [`Progress::redraw_steadily`] redraws.
const TICK: Duration = Duration::from_millis(250);

/// A progress bar: `LABEL [#####-----] DONE/TOTAL UNIT (ELAPSED) MESSAGE`.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `total` `unit`s labelled `label`, drawn on stderr when stdout and stderr are both
    /// terminals, else hidden.
    pub fn new(label: &str, total: u64, unit: &str) -> Self {
        let terminals = io::stdout().is_terminal() && io::stderr().is_terminal();
        Progress::to(target(terminals, ProgressDrawTarget::stderr), label, total, unit)
    }

    /// A bar drawn to `target`.
    fn to(target: ProgressDrawTarget, label: &str, total: u64, unit: &str) -> Self {
        let template = format!("{{prefix}} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{elapsed}}) {{wide_msg}}");
        // The template is well formed whatever the unit (braces and all); indicatif's own is the fallback.
        let style = ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar = ProgressBar::with_draw_target(Some(total), target)
            .with_style(style.progress_chars("#-"))
            .with_prefix(label.to_string());
        Progress { bar }
    }

    /// Redraws a drawn bar four times a second from a thread of its own, so that its elapsed time
    /// moves during a long step. Not for runs that measure: that thread's drawing would count in
    /// their times and allocations. Otherwise the bar is drawn as its counts change.
    pub fn redraw_steadily(&self) {
        if !self.bar.is_hidden() {
            self.bar.enable_steady_tick(TICK);
        }
    }

    /// Whether the bar is hidden (nothing is drawn).
    pub fn is_hidden(&self) -> bool {
        self.bar.is_hidden()
    }

    /// Shows `done` units finished.
    pub fn set_position(&self, done: u64) {
        self.bar.set_position(done);
    }

    /// Shows one more unit finished.
    pub fn inc(&self) {
        self.bar.inc(1);
    }

    /// Shows `message` after the counts (what is running, or the outcomes so far).
    pub fn set_message(&self, message: impl Into<Cow<'static, str>>) {
        self.bar.set_message(message);
    }

    /// `out`, written a whole line at a time with the bar out of the way (see the module's docs).
    pub fn lines<W: Write>(&self, out: W) -> Lines<W> {
        Lines { bar: self.bar.clone(), out, pending: Vec::new() }
    }

    /// Clears the bar: what was written around it stays.
    pub fn finish(&self) {
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    /// Clears the bar of a run that ends early too (an error returned mid-run).
    fn drop(&mut self) {
        self.finish();
    }
}

/// `terminal()` when `terminals` (stdout and stderr both are), else a hidden target.
fn target(terminals: bool, terminal: impl FnOnce() -> ProgressDrawTarget) -> ProgressDrawTarget {
    if terminals { terminal() } else { ProgressDrawTarget::hidden() }
}

/// A writer that writes each whole line with its [`Progress`] bar cleared, then draws the bar again
/// ([`Progress::lines`]); a line not yet ended waits for its end or a flush. Flushed when dropped.
#[derive(Debug)]
pub struct Lines<W: Write> {
    bar: ProgressBar,
    out: W,
    pending: Vec<u8>,
}

impl<W: Write> Lines<W> {
    /// The writer underneath.
    pub fn get_ref(&self) -> &W {
        &self.out
    }
}

impl<W: Write> Write for Lines<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        if let Some(last) = self.pending.iter().rposition(|&b| b == b'\n') {
            let lines: Vec<u8> = self.pending.drain(..=last).collect();
            let out = &mut self.out;
            self.bar.suspend(|| out.write_all(&lines).and_then(|()| out.flush()))?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return self.out.flush();
        }
        let pending = std::mem::take(&mut self.pending);
        let out = &mut self.out;
        self.bar.suspend(|| out.write_all(&pending).and_then(|()| out.flush()))
    }
}

impl<W: Write> Drop for Lines<W> {
    fn drop(&mut self) {
        // Errors were the writer's to report while it was written; a closed stdout stays quiet here.
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use indicatif::TermLike;

    use super::*;

    /// A terminal that keeps everything drawn on it.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<String>>);

    impl Screen {
        fn text(&self) -> String {
            self.0.lock().unwrap().clone()
        }

        fn put(&self, text: &str) -> io::Result<()> {
            self.0.lock().unwrap().push_str(text);
            Ok(())
        }
    }

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            100
        }
        fn move_cursor_up(&self, n: usize) -> io::Result<()> {
            self.put(&format!("\x1b[{n}A"))
        }
        fn move_cursor_down(&self, n: usize) -> io::Result<()> {
            self.put(&format!("\x1b[{n}B"))
        }
        fn move_cursor_right(&self, n: usize) -> io::Result<()> {
            self.put(&format!("\x1b[{n}C"))
        }
        fn move_cursor_left(&self, n: usize) -> io::Result<()> {
            self.put(&format!("\x1b[{n}D"))
        }
        fn write_line(&self, s: &str) -> io::Result<()> {
            self.put(&format!("{s}\n"))
        }
        fn write_str(&self, s: &str) -> io::Result<()> {
            self.put(s)
        }
        fn clear_line(&self) -> io::Result<()> {
            self.put("\r\x1b[2K")
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A run of three cases with its report written through the bar; what the screen showed and
    /// what the report holds.
    fn run(terminals: bool) -> (String, Vec<u8>) {
        let screen = Screen::default();
        let boxed = screen.clone();
        let progress =
            Progress::to(target(terminals, || ProgressDrawTarget::term_like(Box::new(boxed))), "hal cts", 3, "cases");
        let mut out = progress.lines(Vec::new());
        writeln!(out, "ctest: 3 case(s)").unwrap();
        for case in 1..=3 {
            progress.set_message(format!("{case} passed"));
            progress.inc();
            write!(out, "case {case} ").unwrap();
            writeln!(out, "PASS").unwrap();
        }
        write!(out, "total").unwrap();
        out.flush().unwrap();
        progress.finish();
        (screen.text(), out.get_ref().clone())
    }

    #[test]
    fn a_hidden_bar_writes_nothing_and_the_report_passes_through() {
        let (screen, report) = run(false);
        assert_eq!(screen, "", "a hidden bar drew");
        assert_eq!(
            String::from_utf8(report).unwrap(),
            "ctest: 3 case(s)\ncase 1 PASS\ncase 2 PASS\ncase 3 PASS\ntotal"
        );
    }

    #[test]
    fn a_drawn_bar_shows_the_counts_and_is_cleared_at_the_end() {
        let (screen, report) = run(true);
        assert!(
            screen.contains("hal cts [") && screen.contains("] 3/3 cases (") && screen.contains("3 passed"),
            "{screen:?}"
        );
        let after_last = &screen[screen.rfind("hal cts [").unwrap()..];
        assert!(after_last.contains("\r\x1b[2K"), "the bar stays: {screen:?}");
        assert_eq!(report, run(false).1, "the report is the same either way");
    }

    #[test]
    fn not_on_terminals_is_hidden() {
        assert!(target(false, ProgressDrawTarget::stderr).is_hidden());
        // Under `cargo test` the output is captured: no terminals, no bar.
        if !(io::stdout().is_terminal() && io::stderr().is_terminal()) {
            assert!(Progress::new("hal run", 10, "steps").is_hidden());
        }
    }
}
