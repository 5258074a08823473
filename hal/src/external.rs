//! What another API owns that a device can use: device memory it allocated
//! ([`Device::import_external_memory`](crate::Device::import_external_memory)) and points on its
//! queues that a HAL queue orders its work with on the device ([`Queue::wait_external`](crate::Queue::wait_external),
//! [`Queue::signal_external`](crate::Queue::signal_external)).
//!
//! Handles are passed as the integers their APIs define (`CUdeviceptr`, `CUstream`, `VkBuffer`,
//! `VkSemaphore` are all 64-bit values), so `hal` depends on neither API. A driver accepts the kinds
//! of its own API and answers `Unimplemented`, naming itself and the kind, for the others.

use std::fmt;

/// Device memory another library allocated, lent to a device as a buffer until the release given
/// with it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExternalMemory {
    /// `length` bytes at a CUDA device pointer (`CUdeviceptr`) of the device's GPU: from
    /// `cuMemAlloc`, `cuMemAllocAsync`, a memory pool, or another library's allocator (PyTorch's
    /// caching allocator, cuBLAS workspaces).
    CudaDevicePointer {
        /// The `CUdeviceptr`.
        address: u64,
        /// Bytes from `address`.
        length: u64,
    },
    /// `length` bytes from `offset` of a `VkBuffer` created on the device's `VkDevice`, its memory
    /// bound, created with storage, transfer-source and transfer-destination usage.
    VulkanBuffer {
        /// The `VkBuffer` handle.
        buffer: u64,
        /// Byte offset of the range in the buffer.
        offset: u64,
        /// Bytes of the range.
        length: u64,
    },
}

impl ExternalMemory {
    /// Bytes of the range.
    pub fn length(&self) -> u64 {
        match *self {
            ExternalMemory::CudaDevicePointer { length, .. } | ExternalMemory::VulkanBuffer { length, .. } => length,
        }
    }

    /// The kind, for messages (`"CUDA device pointer"`).
    pub fn kind(&self) -> &'static str {
        match self {
            ExternalMemory::CudaDevicePointer { .. } => "CUDA device pointer",
            ExternalMemory::VulkanBuffer { .. } => "Vulkan buffer",
        }
    }
}

impl fmt::Display for ExternalMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ExternalMemory::CudaDevicePointer { address, length } => {
                write!(f, "CUDA device pointer {address:#x} (+{length} bytes)")
            }
            ExternalMemory::VulkanBuffer { buffer, offset, length } => {
                write!(f, "Vulkan buffer {buffer:#x} [{offset}, +{length})")
            }
        }
    }
}

/// A point on another API's queue that a HAL queue orders its work with, on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExternalTimepoint {
    /// A CUDA stream (`CUstream`) of the device's GPU. Waited on
    /// ([`Queue::wait_external`](crate::Queue::wait_external)): everything enqueued on the stream
    /// before the call. Signalled ([`Queue::signal_external`](crate::Queue::signal_external)):
    /// everything enqueued on the stream after the call waits for it.
    CudaStream(u64),
    /// A value of a Vulkan timeline semaphore (`VkSemaphore`) of the device's `VkDevice`: waited
    /// on until the semaphore reaches `value`, or signalled to `value`.
    VulkanTimeline {
        /// The `VkSemaphore` handle (of type `VK_SEMAPHORE_TYPE_TIMELINE`).
        semaphore: u64,
        /// The value.
        value: u64,
    },
}

impl ExternalTimepoint {
    /// The kind, for messages (`"CUDA stream"`).
    pub fn kind(&self) -> &'static str {
        match self {
            ExternalTimepoint::CudaStream(_) => "CUDA stream",
            ExternalTimepoint::VulkanTimeline { .. } => "Vulkan timeline semaphore",
        }
    }
}

impl fmt::Display for ExternalTimepoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ExternalTimepoint::CudaStream(stream) => write!(f, "CUDA stream {stream:#x}"),
            ExternalTimepoint::VulkanTimeline { semaphore, value } => {
                write!(f, "Vulkan timeline semaphore {semaphore:#x} value {value}")
            }
        }
    }
}

/// Which way a HAL queue uses an [`ExternalTimepoint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExternalUse {
    /// The queue's work waits for the timepoint.
    Wait,
    /// The timepoint is reached once the queue's waits are.
    Signal,
}

/// The refusal of a driver that does not import `memory`'s kind.
pub(crate) fn unsupported_memory(driver: &str, memory: &ExternalMemory) -> crate::Error {
    crate::Error::unimplemented(format!("{driver}: cannot import a {} ({memory})", memory.kind()))
}

/// The refusal of a driver that has no external timepoints of `timepoint`'s kind.
pub(crate) fn unsupported_timepoint(driver: &str, timepoint: &ExternalTimepoint) -> crate::Error {
    crate::Error::unimplemented(format!("{driver}: no external timepoints of kind {} ({timepoint})", timepoint.kind()))
}
