//! The one error type of the HAL: a status code (IREE's codes) and a message naming the object and values.

use std::fmt;
use std::sync::Arc;

/// Why an operation failed, in the vocabulary IREE (and absl) use.
///
/// The code is what programs branch on; the message is what people read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StatusCode {
    /// The caller passed a value that can never be valid (a bad flag, a missing binding).
    InvalidArgument,
    /// A value is outside a valid range (a buffer range, a queue index, an entry point ordinal).
    OutOfRange,
    /// The object is in the wrong state for the call (recording after `end`, signalling backwards).
    FailedPrecondition,
    /// A wait's deadline passed before the condition held.
    DeadlineExceeded,
    /// The work was aborted, typically because a device fault or a failed dependency stopped it.
    Aborted,
    /// The work was cancelled by the user or by teardown.
    Cancelled,
    /// Out of memory or out of some other bounded resource.
    ResourceExhausted,
    /// The driver, device or library is not there (no GPU, no libcuda, unknown driver name).
    Unavailable,
    /// The driver does not implement this operation or format.
    Unimplemented,
    /// A bug or broken invariant inside the HAL or a driver.
    Internal,
    /// Data was lost or corrupted: a kernel faulted and what it wrote cannot be trusted.
    DataLoss,
    /// A named thing (an entry point, a symbol) was not found.
    NotFound,
    /// The operation is not allowed on this object (mapping a device-only buffer).
    PermissionDenied,
}

impl StatusCode {
    /// Every status code, in declaration order (to rebuild one from its name or number, say).
    pub const ALL: [StatusCode; 13] = [
        StatusCode::InvalidArgument,
        StatusCode::OutOfRange,
        StatusCode::FailedPrecondition,
        StatusCode::DeadlineExceeded,
        StatusCode::Aborted,
        StatusCode::Cancelled,
        StatusCode::ResourceExhausted,
        StatusCode::Unavailable,
        StatusCode::Unimplemented,
        StatusCode::Internal,
        StatusCode::DataLoss,
        StatusCode::NotFound,
        StatusCode::PermissionDenied,
    ];

    /// The canonical upper-case name, as IREE prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusCode::InvalidArgument => "INVALID_ARGUMENT",
            StatusCode::OutOfRange => "OUT_OF_RANGE",
            StatusCode::FailedPrecondition => "FAILED_PRECONDITION",
            StatusCode::DeadlineExceeded => "DEADLINE_EXCEEDED",
            StatusCode::Aborted => "ABORTED",
            StatusCode::Cancelled => "CANCELLED",
            StatusCode::ResourceExhausted => "RESOURCE_EXHAUSTED",
            StatusCode::Unavailable => "UNAVAILABLE",
            StatusCode::Unimplemented => "UNIMPLEMENTED",
            StatusCode::Internal => "INTERNAL",
            StatusCode::DataLoss => "DATA_LOSS",
            StatusCode::NotFound => "NOT_FOUND",
            StatusCode::PermissionDenied => "PERMISSION_DENIED",
        }
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error: a [`StatusCode`] and a message such as `"semaphore 7: signal to 3 but value is already 5"`.
///
/// The message is always one line: line breaks, tabs and runs of spaces in what it is made of (a
/// loader's or compiler's log, a multi-line text of a driver's) become single spaces, so it fits a
/// log line and a C caller's status string alike.
///
/// Cheap to clone (the message is shared), because one failure is delivered to every waiter of a
/// failed semaphore.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    code: StatusCode,
    message: Arc<str>,
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({self})")
    }
}

impl Error {
    /// An error with `code` and `message`.
    pub fn new(code: StatusCode, message: impl Into<String>) -> Self {
        Error { code, message: Arc::from(one_line(message.into())) }
    }

    /// The status code.
    pub fn code(&self) -> StatusCode {
        self.code
    }

    /// The message, without the code.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error with `context` in front of its message, keeping the code.
    pub fn context(&self, context: impl fmt::Display) -> Self {
        Error { code: self.code, message: Arc::from(one_line(format!("{context}: {}", self.message))) }
    }
}

/// `text` on one line: each run of whitespace that holds a control character (a line break, a tab)
/// or more than one space becomes one space, and the ends are trimmed. Text that is one line
/// already is returned as it is, without a copy.
fn one_line(text: String) -> String {
    let is_break = |c: char| c.is_control() || c.is_whitespace() && c != ' ';
    let clean = !text.contains(is_break) && !text.contains("  ") && text.trim() == text;
    if clean {
        return text;
    }
    text.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|word| !word.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

macro_rules! constructors {
    ($($fn_name:ident => $code:ident),* $(,)?) => {
        impl Error {
            $(
                #[doc = concat!("An error with status code [`StatusCode::", stringify!($code), "`].")]
                pub fn $fn_name(message: impl Into<String>) -> Self {
                    Error::new(StatusCode::$code, message)
                }
            )*
        }
    };
}

constructors! {
    invalid_argument => InvalidArgument,
    out_of_range => OutOfRange,
    failed_precondition => FailedPrecondition,
    deadline_exceeded => DeadlineExceeded,
    aborted => Aborted,
    cancelled => Cancelled,
    resource_exhausted => ResourceExhausted,
    unavailable => Unavailable,
    unimplemented => Unimplemented,
    internal => Internal,
    data_loss => DataLoss,
    not_found => NotFound,
    permission_denied => PermissionDenied,
}

/// The HAL's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The message of a caught panic (`&str` or `String` payloads; anything else is "unknown panic").
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_code_and_message() {
        let e = Error::failed_precondition("semaphore 7: signal to 3 but value is already 5");
        assert_eq!(e.code(), StatusCode::FailedPrecondition);
        assert_eq!(e.to_string(), "FAILED_PRECONDITION: semaphore 7: signal to 3 but value is already 5");
    }

    #[test]
    fn messages_are_one_line() {
        let log = "ptxas fatal   : Unresolved extern function 'f'\n  line 2\r\n\tline 3\n";
        let e = Error::invalid_argument(log).context("cuda executable:\n  loading");
        assert_eq!(e.message(), "cuda executable: loading: ptxas fatal : Unresolved extern function 'f' line 2 line 3");
        let plain = "semaphore 7: signal to 3 but value is already 5";
        assert_eq!(Error::internal(plain).message(), plain, "one line stays as it is");
    }

    #[test]
    fn context_keeps_code() {
        let e = Error::data_loss("kernel trapped").context("queue 1");
        assert_eq!(e.code(), StatusCode::DataLoss);
        assert_eq!(e.message(), "queue 1: kernel trapped");
    }
}
