//! What another API owns that a device can use: device memory it allocated
//! ([`Device::import_external_memory`](crate::Device::import_external_memory)) and points on its
//! queues that a HAL queue orders its work with on the device ([`Queue::wait_external`](crate::Queue::wait_external),
//! [`Queue::signal_external`](crate::Queue::signal_external)).
//!
//! Handles are passed as the integers their APIs define (`CUdeviceptr`, `CUstream`, `VkBuffer`,
//! `VkSemaphore`, `CUexternalSemaphore` are all 64-bit values, a POSIX file descriptor an `i32`), so
//! `hal` depends on neither API. A driver accepts the kinds of its own API and answers
//! `Unimplemented`, naming itself and the kind, for the others.

use std::fmt;

/// Device memory another library allocated, lent to a device as a buffer until the release given
/// with it runs.
///
/// # File descriptors
///
/// [`ExternalMemory::OpaqueFd`] carries a file descriptor that another API exported (Vulkan's
/// `vkGetMemoryFdKHR`, CUDA's `cuMemExportToShareableHandle`). **The HAL takes it over at the call**:
/// [`Device::import_external_memory`](crate::Device::import_external_memory) closes it before it
/// returns, whether the import succeeded or was refused (by the HAL, or by a driver that does not
/// import the kind). A driver that keeps the memory imports a duplicate of the descriptor (`dup`),
/// which its API owns from then on (CUDA's `cuImportExternalMemory` and Vulkan's
/// `vkAllocateMemory` with `VkImportMemoryFdInfoKHR` take ownership of the descriptor they import
/// on success) and which it closes itself when its own call fails. So the caller never closes or
/// reuses the descriptor after the call, and never leaks it: one rule, whatever the outcome.
/// [`ExternalMemory::opaque_fd`] makes the value from an [`OwnedFd`](std::os::fd::OwnedFd), so
/// the handover is spelled out where the descriptor changes hands.
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
    /// A whole memory object of the device's GPU that another API exported as an opaque POSIX file
    /// descriptor (Vulkan's `VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT`, CUDA's
    /// `CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD`). The buffer covers the object from its first
    /// byte. **The HAL takes over `fd` at the call** and closes it before the call returns,
    /// whatever the outcome (see [file descriptors](ExternalMemory#file-descriptors)); the memory itself
    /// lives on until both APIs have let go of it.
    OpaqueFd {
        /// The file descriptor (open, owned by the caller until the call).
        fd: i32,
        /// Bytes of the memory object: exactly its size as allocated (Vulkan's
        /// `VkMemoryAllocateInfo::allocationSize`, which may exceed the size of the buffer it was
        /// made for), as both CUDA and Vulkan require of an import.
        length: u64,
        /// Whether the object is a dedicated allocation (Vulkan's `VkMemoryDedicatedAllocateInfo`):
        /// CUDA must be told (`CUDA_EXTERNAL_MEMORY_DEDICATED`), and a Vulkan import must be
        /// dedicated too.
        dedicated: bool,
    },
}

impl ExternalMemory {
    /// An [`OpaqueFd`](ExternalMemory::OpaqueFd) of `length` bytes whose descriptor is `fd`,
    /// taken out of its owner here: pass the value to
    /// [`Device::import_external_memory`](crate::Device::import_external_memory), which closes it
    /// whatever happens (a value never imported leaks the descriptor).
    #[cfg(unix)]
    pub fn opaque_fd(fd: std::os::fd::OwnedFd, length: u64, dedicated: bool) -> ExternalMemory {
        use std::os::fd::IntoRawFd;
        ExternalMemory::OpaqueFd { fd: fd.into_raw_fd(), length, dedicated }
    }

    /// Bytes of the range.
    pub fn length(&self) -> u64 {
        match *self {
            ExternalMemory::CudaDevicePointer { length, .. }
            | ExternalMemory::VulkanBuffer { length, .. }
            | ExternalMemory::OpaqueFd { length, .. } => length,
        }
    }

    /// The kind, for messages (`"CUDA device pointer"`).
    pub fn kind(&self) -> &'static str {
        match self {
            ExternalMemory::CudaDevicePointer { .. } => "CUDA device pointer",
            ExternalMemory::VulkanBuffer { .. } => "Vulkan buffer",
            ExternalMemory::OpaqueFd { .. } => "opaque file descriptor",
        }
    }

    /// Takes over the descriptor of an [`OpaqueFd`](ExternalMemory::OpaqueFd) (`None` for other
    /// kinds): the guard closes it when dropped. `InvalidArgument` for a negative descriptor, which
    /// names nothing to close.
    pub(crate) fn take_descriptor(&self) -> crate::Result<Option<FdGuard>> {
        match *self {
            ExternalMemory::OpaqueFd { fd, .. } if fd < 0 => {
                Err(crate::Error::invalid_argument(format!("import of {self}: a negative file descriptor")))
            }
            ExternalMemory::OpaqueFd { fd, .. } => Ok(Some(FdGuard(fd))),
            _ => Ok(None),
        }
    }
}

/// A file descriptor the HAL took over at an import, closed when the guard drops.
pub(crate) struct FdGuard(i32);

impl Drop for FdGuard {
    fn drop(&mut self) {
        #[cfg(unix)]
        {
            use std::os::fd::{FromRawFd, OwnedFd};
            // SAFETY: the caller of `Device::import_external_memory` handed the descriptor over
            // (its `# Safety`): it is open, owned by nobody else, and closed only here, once.
            drop(unsafe { OwnedFd::from_raw_fd(self.0) });
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
            ExternalMemory::OpaqueFd { fd, length, dedicated } => {
                let dedicated = if dedicated { ", dedicated" } else { "" };
                write!(f, "opaque file descriptor {fd} ({length} bytes{dedicated})")
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
    /// A value of a timeline semaphore imported into CUDA (`CUexternalSemaphore`, from
    /// `cuImportExternalSemaphore` with `CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD`)
    /// on the device's GPU: typically a Vulkan timeline another API exported, so that a CUDA queue
    /// and a Vulkan queue order their work on the device. Waited on: the queue's stream waits until
    /// the semaphore reaches `value` (`cuWaitExternalSemaphoresAsync`). Signalled: the queue's stream
    /// sets it to `value` once the queue's waits are reached (`cuSignalExternalSemaphoresAsync`).
    CudaExternalSemaphore {
        /// The `CUexternalSemaphore` handle.
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
            ExternalTimepoint::CudaExternalSemaphore { .. } => "CUDA external semaphore",
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
            ExternalTimepoint::CudaExternalSemaphore { semaphore, value } => {
                write!(f, "CUDA external semaphore {semaphore:#x} value {value}")
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
