//! Working beside other CUDA code in the same process: cuBLAS, cuDNN, NCCL, PyTorch, kernels an
//! embedder launches itself.
//!
//! - **Native objects**: the device's CUDA context ([`context`]), a queue's stream
//!   ([`queue_stream`]), a buffer's device pointer ([`buffer_pointer`]).
//! - **Memory another library allocated**: [`hal::Device::import_external_memory`] with
//!   [`hal::ExternalMemory::CudaDevicePointer`] makes a HAL buffer over it; its release runs once the
//!   buffer and every queued use of it are done, and the HAL never frees the memory. The driver
//!   checks with `cuPointerGetAttribute` that the whole range is device memory of this device's GPU.
//! - **Another library's stream**: [`hal::Queue::wait_external`] and [`hal::Queue::signal_external`]
//!   with [`hal::ExternalTimepoint::CudaStream`] order a HAL queue with a `CUstream`, both ways, on
//!   the device (a stream write and a stream wait on a word of pinned memory: `external.rs`).
//! - **Vulkan on the same GPU** (or any API that exports opaque POSIX file descriptors):
//!   [`hal::Device::import_external_memory`] with [`hal::ExternalMemory::OpaqueFd`] imports an
//!   exported memory object as a HAL buffer (`cuImportExternalMemory`, mapped whole with
//!   `cuExternalMemoryGetMappedBuffer`; on drop the mapping is freed with `cuMemFree` and the
//!   import destroyed, then the release runs). [`import_semaphore_fd`] imports an exported timeline
//!   semaphore ([`ImportedSemaphore`], destroyed when it and every queue operation naming it are
//!   gone), and [`hal::ExternalTimepoint::CudaExternalSemaphore`] ([`ImportedSemaphore::at`])
//!   orders a HAL queue with its values on the device (`cuWaitExternalSemaphoresAsync`,
//!   `cuSignalExternalSemaphoresAsync` on the queue's stream). A signal whose HAL work never runs
//!   is made from the host (a timeline cannot carry a failure); dropping the device while a queue
//!   waits for a value nobody signals sets the semaphore to it from the host, so teardown is
//!   bounded, and fails that wait's signals with `Cancelled` (`semaphore.rs` says what that asks of
//!   the other API). [`device_uuid`] and [`uuid_from_stable_id`] pair the CUDA device with the
//!   Vulkan device of the same GPU (NVIDIA's `deviceUUID` is CUDA's UUID).
//!
//! ```no_run
//! use hal::{BufferParams, ExternalMemory, ExternalTimepoint, SemaphoreValue as SV, Timeout};
//!
//! let device = driver_cuda::create_device(0)?;
//! let queue = device.queue(0)?;
//! let done = device.create_semaphore(0)?;
//! // A stream and memory of another library's (say, cuBLAS's), as raw handles.
//! let (their_stream, their_pointer, bytes): (u64, u64, u64) = (0, 0, 4096);
//! // SAFETY: the pointer stays allocated until the release runs; the stream outlives the waits.
//! let theirs = unsafe {
//!     device.import_external_memory(
//!         ExternalMemory::CudaDevicePointer { address: their_pointer, length: bytes },
//!         BufferParams::device_local(),
//!         || { /* the memory is theirs again */ },
//!     )?
//! };
//! queue.fill(&[], &theirs, 0, bytes, 1.0f32, &[SV::new(&done, 1)])?;
//! // Their work enqueued on their stream from now on runs after the fill.
//! unsafe { queue.signal_external(&[SV::new(&done, 1)], ExternalTimepoint::CudaStream(their_stream), &[])? };
//! // ... they enqueue work on their stream ...
//! // The HAL's next work runs after everything on their stream so far.
//! unsafe { queue.wait_external(&[], ExternalTimepoint::CudaStream(their_stream), &[SV::new(&done, 2)])? };
//! done.wait(2, Timeout::Infinite)?;
//! # Ok::<(), hal::Error>(())
//! ```
//!
//! With the Vulkan driver on the same GPU (`driver_vulkan::interop` exports, this module imports):
//!
//! ```no_run
//! use driver_cuda::interop::{device_uuid, import_semaphore_fd, uuid_from_stable_id};
//! use driver_vulkan::interop as vk;
//! use hal::driver::Driver;
//! use hal::{BufferParams, SemaphoreValue as SV, Timeout};
//!
//! // The Vulkan device of CUDA device 0's GPU: NVIDIA's deviceUUID is CUDA's UUID.
//! let cuda = driver_cuda::create_device(0)?;
//! let uuid = device_uuid(&cuda)?;
//! let listed = driver_vulkan::VulkanDriver.enumerate()?;
//! let Some(ordinal) = listed.iter().position(|info| uuid_from_stable_id(&info.stable_id) == Some(uuid)) else {
//!     return Err(hal::Error::unavailable("no Vulkan device on CUDA device 0's GPU"));
//! };
//! let vulkan = driver_vulkan::VulkanDriver.create_device(ordinal)?;
//!
//! // Vulkan allocates and exports; CUDA imports (an import takes its descriptor over).
//! let bytes = 1 << 20;
//! let on_vulkan = vk::allocate_exportable_buffer(&vulkan, bytes)?;
//! let timeline = vk::create_exportable_timeline(&vulkan, 0)?;
//! let semaphore = import_semaphore_fd(&cuda, timeline.export_fd()?)?;
//! let memory = vk::export_memory(&on_vulkan)?.into_external();
//! // SAFETY: both APIs keep the memory while they use it; their uses are ordered by the timeline.
//! let on_cuda = unsafe { cuda.import_external_memory(memory, BufferParams::device_local(), || {})? };
//!
//! // Vulkan writes and signals 1; CUDA waits for 1, writes and signals 2; Vulkan waits for 2 and
//! // reads. All submitted up front: the queues order each other on the device.
//! let (vulkan_queue, cuda_queue) = (vulkan.queue(0)?, cuda.queue(0)?);
//! let done = vulkan.create_semaphore(0)?;
//! vulkan_queue.fill(&[], &on_vulkan, 0, bytes, 1u32, &[])?;
//! // SAFETY: the semaphores are the drivers' own, held by the operations until they retired.
//! unsafe {
//!     vulkan_queue.signal_external(&[], timeline.at(1), &[])?;
//!     cuda_queue.wait_external(&[], semaphore.at(1), &[])?;
//! }
//! cuda_queue.fill(&[], &on_cuda, 0, 4096, 2u32, &[])?;
//! // SAFETY: as above.
//! unsafe {
//!     cuda_queue.signal_external(&[], semaphore.at(2), &[])?;
//!     vulkan_queue.wait_external(&[], timeline.at(2), &[SV::new(&done, 1)])?;
//! }
//! let words = vulkan_queue.read(&[SV::new(&done, 1)], &on_vulkan, 0, 8, &[])?.wait_as::<u32>(Timeout::Infinite)?;
//! assert_eq!(words, [2, 2]);
//! # Ok::<(), hal::Error>(())
//! ```
//!
//! See `docs/interop.md` for the contract across the border: what a foreign stream that never
//! finishes does to waits and to teardown, and what a failure on the HAL's side does to the other.

pub(crate) mod external;
pub(crate) mod semaphore;
pub(crate) mod word_slots;

use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUstream};
use hal::driver::DeviceExt;
use hal::{Buffer, Device, Error, Queue, Result};
pub use semaphore::{ImportedSemaphore, import_semaphore_fd};
pub use word_slots::outstanding_foreign_uses;

use crate::device::CudaDevice;
use crate::memory::resolve_address;

/// The CUDA device behind `device`, or `InvalidArgument` naming the driver that made it.
pub fn cuda_device(device: &Device) -> Result<&CudaDevice> {
    device.backend_as::<CudaDevice>().ok_or_else(|| {
        Error::invalid_argument(format!("{}: a device of driver '{}', not cuda", device.id(), device.info().driver))
    })
}

/// The CUDA context of `device`: the primary context of its GPU, retained while the device lives.
/// Work another library does in it (on its own streams) runs beside the HAL's.
///
/// # Safety
/// The handle is valid while `device` lives. The caller must not destroy, reset or release it
/// (`cuCtxDestroy`, `cuDevicePrimaryCtxReset`, a `cuDevicePrimaryCtxRelease` without its own
/// retain), nor change context-wide state the HAL relies on (`cuCtxSetLimit`, `cuCtxSetFlags`)
/// while the device has work queued.
pub unsafe fn context(device: &Device) -> Result<CUcontext> {
    Ok(cuda_device(device)?.context().raw())
}

/// Queue `queue`'s stream: the non-blocking `CUstream` its work runs on, for the device's lifetime.
/// Work enqueued on it runs after whatever the queue has handed it so far, in stream order, and
/// before what the queue issues next; submissions still waiting on semaphores are not on it yet.
/// To order with HAL work exactly, use [`hal::Queue::wait_external`] and
/// [`hal::Queue::signal_external`] on a stream of your own.
///
/// # Safety
/// The stream is valid while the queue's device lives. The caller must not destroy it, nor
/// synchronize on it from a host callback, nor enqueue work on it that never finishes (the device's
/// teardown drains it). Work enqueued on it runs outside the HAL's accounting: its faults surface
/// as faults of the HAL's next work.
pub unsafe fn queue_stream(queue: &Queue) -> Result<CUstream> {
    let index = queue.index();
    cuda_device(queue.device())?
        .stream(index)
        .ok_or_else(|| Error::invalid_argument(format!("{queue:?}: no such queue on the cuda device")))
}

/// The device pointer and length of `buffer`'s range (a subspan's, for a subspan): unified
/// addressing, so the pointer is valid in every context of the process.
///
/// # Safety
/// The pointer is valid while `buffer` (any handle to its memory) lives, and, for a transient
/// buffer, between its `queue_alloca` and its `queue_dealloca` in queue order. The caller's accesses
/// through it must be ordered with the HAL's uses of the buffer (semaphores, or
/// [`hal::Queue::wait_external`] and [`hal::Queue::signal_external`]); unordered accesses race.
pub unsafe fn buffer_pointer(buffer: &Buffer) -> Result<(CUdeviceptr, u64)> {
    crate::memory::CudaMemory::of(buffer)?;
    Ok((resolve_address(buffer, 0, buffer.size())?, buffer.size()))
}

/// The 16 bytes of a GPU's UUID as a `DeviceInfo::stable_id` spells them: CUDA's
/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (as `nvidia-smi -L` prints it) or the Vulkan
/// driver's 32 hex digits of `deviceUUID` (case and dashes do not matter). `None` for anything
/// else (cpu-sim's ids, a malformed id).
pub fn uuid_from_stable_id(stable_id: &str) -> Option<[u8; 16]> {
    let digits: Vec<u8> = stable_id.strip_prefix("GPU-").unwrap_or(stable_id).bytes().filter(|&b| b != b'-').collect();
    if digits.len() != 32 {
        return None;
    }
    let mut uuid = [0u8; 16];
    for (byte, pair) in uuid.iter_mut().zip(digits.chunks_exact(2)) {
        let text = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(text, 16).ok()?;
    }
    Some(uuid)
}

/// The UUID of `device`'s GPU (`cuDeviceGetUuid`, as its `stable_id` spells it): on NVIDIA's
/// Vulkan driver, the `deviceUUID` of the same GPU (`driver_vulkan::interop::device_uuid`).
pub fn device_uuid(device: &Device) -> Result<[u8; 16]> {
    cuda_device(device)?;
    let stable_id = &device.info().stable_id;
    uuid_from_stable_id(stable_id)
        .ok_or_else(|| Error::internal(format!("cuda: device UUID '{stable_id}' is not 16 hex bytes")))
}

/// Whether `device`'s GPU is the one whose UUID is `uuid` (say, a Vulkan device's `deviceUUID`).
pub fn is_same_gpu(device: &Device, uuid: &[u8; 16]) -> Result<bool> {
    Ok(device_uuid(device)? == *uuid)
}

#[cfg(test)]
mod tests {
    use super::uuid_from_stable_id;

    #[test]
    fn uuids_read_from_cuda_and_vulkan_stable_ids_alike() {
        let bytes = [0x5f, 0x2b, 0x3c, 0x4d, 0x10, 0x20, 0x30, 0x40, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89];
        let cuda = "GPU-5f2b3c4d-1020-3040-abcd-ef0123456789";
        let vulkan = "5f2b3c4d10203040abcdef0123456789";
        assert_eq!(uuid_from_stable_id(cuda), Some(bytes));
        assert_eq!(uuid_from_stable_id(vulkan), Some(bytes));
        assert_eq!(uuid_from_stable_id(&vulkan.to_uppercase()), Some(bytes));
        for bad in
            ["", "cpu-sim:0", "GPU-5f2b3c4d", "5f2b3c4d10203040abcdef012345678g", "GPU-é5f2b3c4d1020304abcdef012345678"]
        {
            assert_eq!(uuid_from_stable_id(bad), None, "{bad}");
        }
    }
}
