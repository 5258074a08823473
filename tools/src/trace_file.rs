//! The file `--trace PATH` writes, opened before the run so that a path that cannot be written
//! fails at once instead of after the whole run. A [`TraceRecorder::streaming`] recorder then writes
//! the events into it as they are recorded.
//!
//! ```
//! use tools::trace::TraceRecorder;
//! use tools::trace_file::TraceFile;
//! let path = std::env::temp_dir().join(format!("hal-trace-file-doc-{}.json", std::process::id()));
//! let recorder = TraceRecorder::streaming(TraceFile::create(&path).unwrap()).unwrap();
//! recorder.finish().unwrap();
//! assert!(std::fs::read_to_string(&path).unwrap().starts_with("{\"traceEvents\":["));
//! # std::fs::remove_file(&path).unwrap();
//! assert!(TraceFile::create("/nonexistent/dir/run.json".as_ref()).is_err());
//! ```

use std::fs::File;
use std::path::Path;

use bench::output_file::OutputFile;

#[cfg(doc)]
use crate::trace::TraceRecorder;

/// An open trace file, not yet written. Dropped before it is [`start`](Self::start)ed (the run
/// failed to begin), it removes the file if it created it, and leaves a file that was there
/// untouched.
#[derive(Debug)]
pub struct TraceFile(OutputFile);

impl TraceFile {
    /// Opens `path` for writing, creating it if it does not exist; an error names the path.
    pub fn create(path: &Path) -> Result<TraceFile, String> {
        OutputFile::create(path, "the trace file").map(TraceFile)
    }

    /// The path it writes.
    pub fn path(&self) -> &Path {
        self.0.path()
    }

    /// Empties the file (a regular one: a device or a pipe has no length) and hands it over for
    /// writing (kept from now on, whatever happens).
    pub fn start(self) -> Result<File, String> {
        self.0.start()
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::trace::TraceRecorder;

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("hal-trace-file-{name}-{}.json", std::process::id()))
    }

    #[test]
    fn unstarted_file_is_removed_if_created_and_kept_if_it_was_there() {
        let path = temp_path("created");
        drop(TraceFile::create(&path).unwrap());
        assert!(!path.exists());

        let path = temp_path("existing");
        std::fs::write(&path, "earlier trace, longer than an empty one").unwrap();
        drop(TraceFile::create(&path).unwrap());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "earlier trace, longer than an empty one",
            "not truncated by a run that did not begin"
        );
        TraceRecorder::streaming(TraceFile::create(&path).unwrap()).unwrap().finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(text.starts_with("{\"traceEvents\":[") && text.ends_with("}\n"), "{text}");
    }

    #[test]
    fn unwritable_paths_name_the_path() {
        let error = TraceFile::create(Path::new("/nonexistent/dir/run.json")).unwrap_err();
        assert!(error.starts_with("cannot create the trace file /nonexistent/dir/run.json: "), "{error}");
        let dir = std::env::temp_dir();
        let error = TraceFile::create(&dir).unwrap_err();
        assert!(error.contains(&dir.display().to_string()), "{error}");
    }
}
