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
//! See `docs/interop.md` for the contract across the border: what a foreign stream that never
//! finishes does to waits and to teardown, and what a failure on the HAL's side does to the other.

pub(crate) mod external;
pub(crate) mod word_slots;

use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUstream};
use hal::driver::DeviceExt;
use hal::{Buffer, Device, Error, Queue, Result};

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
