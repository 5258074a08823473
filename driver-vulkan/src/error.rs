//! Vulkan result codes as `hal::Error`s naming the call.

use ash::vk;
use hal::Error;

/// The error for `call` returning `result`: out-of-memory codes are `ResourceExhausted`, a lost
/// device `Aborted` (its work will not finish), a handle an import refused (a file descriptor
/// that names no such object) `InvalidArgument`, everything else `Internal`.
pub fn from_vk(call: &str, result: vk::Result) -> Error {
    let message = format!("vulkan: {call} failed: {result:?}");
    match result {
        vk::Result::ERROR_OUT_OF_HOST_MEMORY | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => {
            Error::resource_exhausted(message)
        }
        vk::Result::ERROR_DEVICE_LOST => Error::aborted(message),
        vk::Result::ERROR_INVALID_EXTERNAL_HANDLE => Error::invalid_argument(message),
        _ => Error::internal(message),
    }
}
