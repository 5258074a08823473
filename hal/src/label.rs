//! Optional labels on handles, so messages, reports and traces say "semaphore 7 'weights ready'"
//! instead of "semaphore 7". A label is set once (by whoever creates the object) and never changes,
//! so reading it needs no lock.

use std::fmt;
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The longest label, in bytes: enough for a name, short enough for a one-line message.
pub const MAX_LABEL_BYTES: usize = 128;

/// A handle's label, set at most once.
#[derive(Default)]
pub(crate) struct Label(OnceLock<Box<str>>);

impl Label {
    /// Sets the label of `object` (its unlabelled name, for messages); `InvalidArgument` for an empty
    /// label, one over [`MAX_LABEL_BYTES`] or one with control characters, `FailedPrecondition`
    /// when it has one already.
    pub(crate) fn set(&self, object: &dyn fmt::Display, label: String) -> Result<()> {
        if label.is_empty() || label.len() > MAX_LABEL_BYTES || label.chars().any(char::is_control) {
            return Err(Error::invalid_argument(format!(
                "{object}: label {label:?} must be 1 to {MAX_LABEL_BYTES} bytes without control characters"
            )));
        }
        let mut offered = Some(label.into_boxed_str());
        let kept = self.0.get_or_init(|| offered.take().unwrap_or_default());
        match offered {
            None => Ok(()),
            Some(_) => Err(Error::failed_precondition(format!("{object}: already labelled '{kept}'"))),
        }
    }

    /// The label, if set.
    pub(crate) fn get(&self) -> Option<&str> {
        self.0.get().map(|label| &**label)
    }

    /// Writes `kind id`, then ` 'label'` when there is one.
    pub(crate) fn write_name(&self, f: &mut fmt::Formatter<'_>, kind: &str, id: u64) -> fmt::Result {
        write!(f, "{kind} {id}")?;
        match self.get() {
            Some(label) => write!(f, " '{label}'"),
            None => Ok(()),
        }
    }
}

/// An object's unlabelled name ("buffer 3"), for messages about setting its label.
pub(crate) struct Unlabelled<'a>(pub &'a str, pub u64);

impl fmt::Display for Unlabelled<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0, self.1)
    }
}
