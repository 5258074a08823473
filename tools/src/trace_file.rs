//! The file `--trace PATH` writes, opened before the run so that a path that cannot be written
//! fails at once instead of after the whole run.
//!
//! ```
//! let path = std::env::temp_dir().join(format!("hal-trace-file-doc-{}.json", std::process::id()));
//! let file = tools::trace_file::TraceFile::create(&path).unwrap();
//! file.write(&tools::trace::TraceRecorder::new()).unwrap();
//! assert!(std::fs::read_to_string(&path).unwrap().starts_with("{\"traceEvents\":["));
//! # std::fs::remove_file(&path).unwrap();
//! assert!(tools::trace_file::TraceFile::create("/nonexistent/dir/run.json".as_ref()).is_err());
//! ```

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::trace::TraceRecorder;

/// An open trace file, written once at the end of the run. Dropped unwritten (the run failed), it
/// removes the file if it created it, and leaves a file that was there untouched.
#[derive(Debug)]
pub struct TraceFile {
    path: PathBuf,
    file: Option<File>,
    created: bool,
}

impl TraceFile {
    /// Opens `path` for writing, creating it if it does not exist; an error names the path.
    pub fn create(path: &Path) -> Result<TraceFile, String> {
        let error = |e: std::io::Error| format!("cannot create the trace file {}: {e}", path.display());
        let (file, created) = match OpenOptions::new().write(true).create_new(true).open(path) {
            Ok(file) => (file, true),
            // Truncated only when written, so a failed run keeps what was there.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                (OpenOptions::new().write(true).truncate(false).open(path).map_err(error)?, false)
            }
            Err(e) => return Err(error(e)),
        };
        Ok(TraceFile { path: path.to_path_buf(), file: Some(file), created })
    }

    /// The path it writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file's contents with `recorder`'s Chrome trace JSON.
    pub fn write(mut self, recorder: &TraceRecorder) -> Result<(), String> {
        let error = |e: std::io::Error| format!("cannot write the trace to {}: {e}", self.path.display());
        let mut file =
            self.file.take().ok_or_else(|| format!("the trace {} was written already", self.path.display()))?;
        file.set_len(0).map_err(error)?;
        file.write_all(recorder.chrome_json().as_bytes()).map_err(error)?;
        file.flush().map_err(error)
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        if self.file.take().is_some() && self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("hal-trace-file-{name}-{}.json", std::process::id()))
    }

    #[test]
    fn unwritten_file_is_removed_if_created_and_kept_if_it_was_there() {
        let path = temp_path("created");
        drop(TraceFile::create(&path).unwrap());
        assert!(!path.exists());

        let path = temp_path("existing");
        std::fs::write(&path, "earlier trace").unwrap();
        drop(TraceFile::create(&path).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "earlier trace", "not truncated by a failed run");
        TraceFile::create(&path).unwrap().write(&TraceRecorder::new()).unwrap();
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
