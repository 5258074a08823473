//! CUDA results as HAL errors: every `CUresult` becomes a [`hal::Error`] whose code says what a caller
//! can do about it and whose message names the call and the CUDA error (`CUDA_ERROR_ILLEGAL_ADDRESS`).
//!
//! Device faults (a trapping kernel, an illegal address) are *sticky*: the context is poisoned and
//! every later call on it returns the same error. They map to `DataLoss`, the class a semaphore failed
//! by a faulting kernel carries.

use cudarc::driver::result::DriverError;
use cudarc::driver::sys::{CUresult, cudaError_enum as E};
use hal::{Error, Result, StatusCode};

/// The CUDA name of `code` (`"CUDA_ERROR_LAUNCH_FAILED"`), from `cuGetErrorName`.
pub fn error_name(code: CUresult) -> String {
    match DriverError(code).error_name() {
        Ok(name) => name.to_string_lossy().into_owned(),
        Err(_) => format!("{code:?}"),
    }
}

/// The driver's one-line description of `code`, when it has one.
fn error_string(code: CUresult) -> Option<String> {
    DriverError(code).error_string().ok().map(|s| s.to_string_lossy().into_owned())
}

/// Whether `code` is a device fault that poisons the context (every later call fails with it):
/// exactly the codes [`status_code`] reports as `DataLoss` or `Aborted`.
pub fn is_sticky(code: CUresult) -> bool {
    matches!(status_code(code), StatusCode::DataLoss | StatusCode::Aborted)
}

/// The HAL status code for `code`.
pub fn status_code(code: CUresult) -> StatusCode {
    match code {
        E::CUDA_ERROR_ILLEGAL_ADDRESS
        | E::CUDA_ERROR_ILLEGAL_INSTRUCTION
        | E::CUDA_ERROR_LAUNCH_FAILED
        | E::CUDA_ERROR_MISALIGNED_ADDRESS
        | E::CUDA_ERROR_INVALID_ADDRESS_SPACE
        | E::CUDA_ERROR_INVALID_PC
        | E::CUDA_ERROR_HARDWARE_STACK_ERROR
        | E::CUDA_ERROR_ASSERT
        | E::CUDA_ERROR_ECC_UNCORRECTABLE => StatusCode::DataLoss,
        E::CUDA_ERROR_LAUNCH_TIMEOUT | E::CUDA_ERROR_CONTEXT_IS_DESTROYED => StatusCode::Aborted,
        E::CUDA_ERROR_OUT_OF_MEMORY | E::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES | E::CUDA_ERROR_TOO_MANY_PEERS => {
            StatusCode::ResourceExhausted
        }
        E::CUDA_ERROR_NOT_FOUND => StatusCode::NotFound,
        E::CUDA_ERROR_INVALID_VALUE
        | E::CUDA_ERROR_INVALID_HANDLE
        | E::CUDA_ERROR_INVALID_IMAGE
        | E::CUDA_ERROR_INVALID_PTX
        | E::CUDA_ERROR_INVALID_SOURCE => StatusCode::InvalidArgument,
        E::CUDA_ERROR_NO_DEVICE
        | E::CUDA_ERROR_NOT_INITIALIZED
        | E::CUDA_ERROR_DEINITIALIZED
        | E::CUDA_ERROR_INVALID_DEVICE
        | E::CUDA_ERROR_NO_BINARY_FOR_GPU
        | E::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
        | E::CUDA_ERROR_JIT_COMPILER_NOT_FOUND
        | E::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
        | E::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => StatusCode::Unavailable,
        E::CUDA_ERROR_NOT_SUPPORTED => StatusCode::Unimplemented,
        E::CUDA_ERROR_NOT_READY => StatusCode::FailedPrecondition,
        _ => StatusCode::Internal,
    }
}

/// `code` as a HAL error for the call `call` (e.g. `"cuEventSynchronize"`).
pub fn to_error(code: CUresult, call: &str) -> Error {
    let name = error_name(code);
    let message = match error_string(code) {
        Some(text) => format!("{call}: {name} ({text})"),
        None => format!("{call}: {name}"),
    };
    Error::new(status_code(code), message)
}

/// `Ok` for `CUDA_SUCCESS`, otherwise the HAL error for `call`.
#[inline]
pub fn check(code: CUresult, call: &str) -> Result<()> {
    if code == E::CUDA_SUCCESS { Ok(()) } else { Err(to_error(code, call)) }
}
