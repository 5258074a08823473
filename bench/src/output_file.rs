//! A file a run writes at its end (`--json`, `--svg`, `hal run --trace`), opened before the run so
//! that a path that cannot be written fails at once, naming the path, instead of after the whole run.
//!
//! ```
//! use bench::output_file::OutputFile;
//! let path = std::env::temp_dir().join(format!("bench-output-file-doc-{}.json", std::process::id()));
//! let file = OutputFile::create(&path, "the JSON file").unwrap();
//! file.write_all(b"{}\n").unwrap();
//! assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}\n");
//! # std::fs::remove_file(&path).unwrap();
//! let error = OutputFile::create("/nonexistent/x".as_ref(), "the JSON file").unwrap_err();
//! assert!(error.starts_with("cannot create the JSON file /nonexistent/x: "), "{error}");
//! ```

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

/// An open output file, not yet written. Dropped before it is [`start`](Self::start)ed (the run
/// failed), it removes the file if it created it, and leaves a file that was there untouched.
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    what: &'static str,
    file: Option<File>,
    created: bool,
}

impl OutputFile {
    /// Opens `path` for writing, creating it if it does not exist; an error names `what` it is
    /// ("the JSON file") and the path.
    pub fn create(path: &Path, what: &'static str) -> Result<OutputFile, String> {
        let error = |e: std::io::Error| format!("cannot create {what} {}: {e}", path.display());
        let (file, created) = match OpenOptions::new().write(true).create_new(true).open(path) {
            Ok(file) => (file, true),
            // Truncated only when started, so a run that fails keeps what was there.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                (OpenOptions::new().write(true).truncate(false).open(path).map_err(error)?, false)
            }
            Err(e) => return Err(error(e)),
        };
        Ok(OutputFile { path: path.to_path_buf(), what, file: Some(file), created })
    }

    /// The path it writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Empties the file and hands it over for writing (kept from now on, whatever happens). Only a
    /// regular file is emptied: a device or a pipe (`/dev/stdout`, `/dev/full`) has no length, and
    /// its first write says whether it takes the output.
    pub fn start(mut self) -> Result<File, String> {
        let path = self.path.display().to_string();
        let file = self.file.take().ok_or_else(|| format!("{} {path} was started already", self.what))?;
        let error = |e: std::io::Error| format!("cannot write {} {path}: {e}", self.what);
        if file.metadata().map_err(error)?.is_file() {
            file.set_len(0).map_err(error)?;
        }
        Ok(file)
    }

    /// Writes `bytes` as the whole file; an error names the file.
    pub fn write_all(self, bytes: &[u8]) -> Result<(), String> {
        let error = format!("cannot write {} {}", self.what, self.path.display());
        let mut file = self.start()?;
        file.write_all(bytes).and_then(|()| file.flush()).map_err(|e| format!("{error}: {e}"))
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if self.file.take().is_some() && self.created {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
