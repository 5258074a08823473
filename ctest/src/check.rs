//! How a case says what went wrong: [`CaseError`], the `ensure!` macros, and status-code checks.

use std::fmt;

use hal::{Error, StatusCode};

/// Why a case did not pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaseError {
    /// The driver broke the contract (or the case could not run): the message says how.
    Fail(String),
    /// The case does not apply to this device (e.g. it offers no such memory type): the reason.
    Skip(String),
}

/// What a case returns.
pub type CaseResult = Result<(), CaseError>;

impl From<String> for CaseError {
    fn from(message: String) -> Self {
        CaseError::Fail(message)
    }
}

impl From<&str> for CaseError {
    fn from(message: &str) -> Self {
        CaseError::Fail(message.to_string())
    }
}

impl From<Error> for CaseError {
    fn from(error: Error) -> Self {
        CaseError::Fail(format!("unexpected error: {error}"))
    }
}

impl fmt::Display for CaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaseError::Fail(message) => write!(f, "FAIL: {message}"),
            CaseError::Skip(reason) => write!(f, "SKIP: {reason}"),
        }
    }
}

/// Adds what was being done to an unexpected HAL error.
pub trait Context<T> {
    /// `Err(e)` becomes a failure "`what`: e".
    fn ctx(self, what: impl fmt::Display) -> Result<T, CaseError>;
}

impl<T> Context<T> for hal::Result<T> {
    fn ctx(self, what: impl fmt::Display) -> Result<T, CaseError> {
        self.map_err(|e| CaseError::Fail(format!("{what}: unexpected error: {e}")))
    }
}

/// Fails the case with a formatted message unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::CaseError::Fail(format!($($fmt)+)));
        }
    };
}

/// Fails the case unless `left == right`, showing both and a formatted description.
#[macro_export]
macro_rules! ensure_eq {
    ($left:expr, $right:expr, $($fmt:tt)+) => {
        match (&$left, &$right) {
            (left, right) => {
                if left != right {
                    return Err($crate::CaseError::Fail(format!(
                        "{}: expected {:?}, got {:?}",
                        format!($($fmt)+),
                        right,
                        left
                    )));
                }
            }
        }
    };
}

/// Checks `result` is an error with status `code` and a one-line message, and returns the error.
pub fn expect_code<T: fmt::Debug>(result: hal::Result<T>, code: StatusCode, what: &str) -> Result<Error, CaseError> {
    match result {
        Ok(value) => Err(CaseError::Fail(format!("{what}: expected {code}, but it succeeded ({value:?})"))),
        Err(e) if e.code() == code => one_line(e, what),
        Err(e) => Err(CaseError::Fail(format!("{what}: expected {code}, got {e}"))),
    }
}

/// Checks `error`'s message is one line (no line break or other control character, no run of
/// spaces, nothing to trim): every status a driver gives fits a log line.
pub fn one_line(error: Error, what: &str) -> Result<Error, CaseError> {
    let message = error.message();
    if message.contains(char::is_control) || message.contains("  ") || message.trim() != message {
        return Err(CaseError::Fail(format!("{what}: the message is not one line: {message:?}")));
    }
    Ok(error)
}

/// Checks `result` is an error with one of `codes`, and returns the error.
pub fn expect_one_of<T: fmt::Debug>(
    result: hal::Result<T>,
    codes: &[StatusCode],
    what: &str,
) -> Result<Error, CaseError> {
    match result {
        Ok(value) => Err(CaseError::Fail(format!("{what}: expected one of {codes:?}, but it succeeded ({value:?})"))),
        Err(e) if codes.contains(&e.code()) => one_line(e, what),
        Err(e) => Err(CaseError::Fail(format!("{what}: expected one of {codes:?}, got {e}"))),
    }
}

/// Checks `seen` carries the status of `cause`: the same code, and `cause`'s message within its own
/// (context may be added in front).
pub fn expect_same_status(seen: &Error, cause: &Error, what: &str) -> Result<(), CaseError> {
    if seen.code() != cause.code() || !seen.message().contains(cause.message()) {
        return Err(CaseError::Fail(format!("{what}: expected the status of '{cause}', got '{seen}'")));
    }
    Ok(())
}

/// The statuses a device fault (a kernel that traps) may be reported with.
pub const FAULT_CODES: &[StatusCode] = &[StatusCode::Aborted, StatusCode::DataLoss];

/// Skips the case with `reason`.
pub fn skip(reason: impl Into<String>) -> CaseResult {
    Err(CaseError::Skip(reason.into()))
}
