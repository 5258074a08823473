//! The driver-call layer: every CUDA driver and NCCL function this crate calls, wrapped once, here and
//! nowhere else. Each wrapper makes one `cudarc::driver::sys` (or `cudarc::nccl::sys`) call and returns a [`hal::Result`] whose error
//! names that call (`cuEventQuery: CUDA_ERROR_LAUNCH_FAILED (...)`); the rest of the crate owns
//! lifetimes and ordering and writes no `unsafe` for a driver call. A HIP driver would mirror this
//! file function for function (`hipEventQuery`, `hipStreamWaitEvent`, ...) and keep the rest.
//!
//! Rules the signatures carry:
//! - A function that needs the device's context current on this thread takes a [`Bound`] token,
//!   which only [`Context::bind`](crate::sys::context::Context::bind) makes. The calls made before a
//!   context exists (initialisation, device queries, retaining the primary context) take none; they
//!   need the probe ([`crate::sys::loader`]) to have succeeded.
//! - Handles (`CUevent`, `CUstream`, `CUmodule`, ...) passed in are live: each is a private field of
//!   one owner type of this crate (`CudaEvent`, `CudaStream`, ...), which ends its life only in its
//!   `Drop`, through one of the `unsafe` destroy functions below. Each owner also says how it
//!   serialises calls the driver does not synchronise (e.g. one graph's launches).
//! - Device addresses (`CUdeviceptr`, unified addresses of device or mapped pinned memory) are plain
//!   numbers: the HAL checks ranges, and the scheduler keeps every buffer a submission uses alive
//!   until it retires. A bad address is a device fault, which CUDA reports.
//! - A function is `unsafe` when its caller must promise what the layer cannot check: that a handle
//!   or allocation is not used after it is destroyed, that host memory an asynchronous copy or host
//!   function uses outlives it, or that kernel parameter pointers match the kernel.
//!
//! Small wrappers are `#[inline]`: the event record, query, stream wait and launch run once or more
//! per submission, and none of them allocates.

use std::ffi::{CStr, c_void};

use cudarc::driver::sys::{
    self, CUDA_KERNEL_NODE_PARAMS_v2, CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS, CUcontext, CUdevice, CUdevice_attribute,
    CUdeviceptr, CUevent, CUexternalMemory, CUexternalSemaphore, CUfunction, CUfunction_attribute, CUgraph,
    CUgraphExec, CUgraphNode, CUjit_option, CUmemPool_attribute, CUmemoryPool, CUmemorytype, CUmodule, CUresult,
    CUstream,
};
use hal::Result;

use crate::error::{check, to_error};
use crate::sys::context::Bound;

// ---- Initialisation and devices (no context needed) ----

/// Whether cudarc can open the driver library (`is_culib_present`); loads nothing else.
pub(crate) fn is_driver_library_present() -> bool {
    // SAFETY: it only tries to open the library by the names cudarc knows; no symbol is called.
    unsafe { sys::is_culib_present() }
}

/// `cuInit(0)`. The probe calls it once it has checked that every symbol below is exported.
pub(crate) fn init() -> Result<()> {
    // SAFETY: cuInit takes no pointers; it may be called more than once.
    check(unsafe { sys::cuInit(0) }, "cuInit")
}

/// `cuDriverGetVersion`.
pub(crate) fn driver_get_version() -> Result<i32> {
    let mut version = 0;
    // SAFETY: the out-pointer is a live local.
    check(unsafe { sys::cuDriverGetVersion(&mut version) }, "cuDriverGetVersion")?;
    Ok(version)
}

/// `cuDeviceGetCount`.
pub(crate) fn device_get_count() -> Result<i32> {
    let mut count = 0;
    // SAFETY: the out-pointer is a live local.
    check(unsafe { sys::cuDeviceGetCount(&mut count) }, "cuDeviceGetCount")?;
    Ok(count)
}

/// `cuDeviceCanAccessPeer`: whether `device` can read and write `peer`'s memory directly.
pub(crate) fn device_can_access_peer(device: CUdevice, peer: CUdevice) -> Result<bool> {
    let mut can = 0;
    // SAFETY: both are device handles from `cuDeviceGet`; the out-pointer is a live local.
    check(unsafe { sys::cuDeviceCanAccessPeer(&mut can, device, peer) }, "cuDeviceCanAccessPeer")?;
    Ok(can != 0)
}

/// `cuCtxEnablePeerAccess` from the current context to `peer` (already enabled counts as done).
pub(crate) fn ctx_enable_peer_access(_bound: &Bound<'_>, peer: CUcontext) -> Result<()> {
    // SAFETY: `peer` is a live (primary) context of another device; the current one is bound.
    let code = unsafe { sys::cuCtxEnablePeerAccess(peer, 0) };
    if code == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        Ok(())
    } else {
        check(code, "cuCtxEnablePeerAccess")
    }
}

/// `cuDeviceGet`: the handle of device `ordinal`.
pub(crate) fn device_get(ordinal: usize) -> Result<CUdevice> {
    let mut device: CUdevice = 0;
    // SAFETY: the out-pointer is a live local.
    check(unsafe { sys::cuDeviceGet(&mut device, ordinal as i32) }, "cuDeviceGet")?;
    Ok(device)
}

/// `cuDeviceGetAttribute`.
pub(crate) fn device_get_attribute(device: CUdevice, attribute: CUdevice_attribute) -> Result<i32> {
    let mut value = 0;
    // SAFETY: the out-pointer is a live local; the device handle is a plain number the driver checks.
    check(unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, device) }, "cuDeviceGetAttribute")?;
    Ok(value)
}

/// `cuDeviceGetName`, as a string (at most 255 bytes).
pub(crate) fn device_get_name(device: CUdevice) -> Result<String> {
    let mut name = [0u8; 256];
    // SAFETY: the buffer holds 256 bytes, the length passed (`c_char` is one byte).
    check(unsafe { sys::cuDeviceGetName(name.as_mut_ptr().cast(), name.len() as i32, device) }, "cuDeviceGetName")?;
    // The buffer was zeroed and the driver writes at most `len - 1` bytes and a NUL.
    let name = CStr::from_bytes_until_nul(&name).unwrap_or_default();
    Ok(name.to_string_lossy().into_owned())
}

/// `cuDeviceGetUuid_v2`: the device's UUID, as `nvidia-smi -L` spells it
/// (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
pub(crate) fn device_get_uuid(device: CUdevice) -> Result<String> {
    let mut uuid = sys::CUuuid_st { bytes: [0; 16] };
    // SAFETY: the out-pointer is a live local of the struct the call fills.
    check(unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, device) }, "cuDeviceGetUuid_v2")?;
    let hex: Vec<String> = uuid.bytes.iter().map(|&b| format!("{:02x}", b as u8)).collect();
    let hex = hex.concat();
    Ok(format!("GPU-{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]))
}

/// `cuDeviceTotalMem`: bytes of device memory.
pub(crate) fn device_total_mem(device: CUdevice) -> Result<usize> {
    let mut total = 0usize;
    // SAFETY: the out-pointer is a live local.
    check(unsafe { sys::cuDeviceTotalMem_v2(&mut total, device) }, "cuDeviceTotalMem")?;
    Ok(total)
}

// ---- Contexts ----

/// `cuDevicePrimaryCtxRetain`.
pub(crate) fn primary_ctx_retain(device: CUdevice) -> Result<CUcontext> {
    let mut context: CUcontext = std::ptr::null_mut();
    // SAFETY: the out-pointer is a live local.
    check(unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) }, "cuDevicePrimaryCtxRetain")?;
    Ok(context)
}

/// `cuDevicePrimaryCtxRelease`.
///
/// # Safety
/// Matches one [`primary_ctx_retain`] of `device`; nothing of the context that retain kept alive is
/// used after the last release.
pub(crate) unsafe fn primary_ctx_release(device: CUdevice) -> Result<()> {
    // SAFETY: the caller matches it with a retain and uses nothing of the context after.
    check(unsafe { sys::cuDevicePrimaryCtxRelease_v2(device) }, "cuDevicePrimaryCtxRelease")
}

/// `cuCtxSetCurrent`: only [`Context::bind`](crate::sys::context::Context::bind) calls it.
pub(crate) fn ctx_set_current(context: CUcontext) -> Result<()> {
    // SAFETY: `context` is a retained primary context (its owner, `Context`, releases it on drop).
    check(unsafe { sys::cuCtxSetCurrent(context) }, "cuCtxSetCurrent")
}

// ---- Streams ----

/// `cuStreamCreate` with `flags`.
pub(crate) fn stream_create(_bound: &Bound<'_>, flags: u32) -> Result<CUstream> {
    let mut stream: CUstream = std::ptr::null_mut();
    // SAFETY: the context is current (`_bound`); the out-pointer is a live local.
    check(unsafe { sys::cuStreamCreate(&mut stream, flags) }, "cuStreamCreate")?;
    Ok(stream)
}

/// `cuStreamGetCtx`: the context `stream` belongs to (the current one for the legacy and
/// per-thread default streams).
pub(crate) fn stream_get_ctx(_bound: &Bound<'_>, stream: CUstream) -> Result<CUcontext> {
    let mut context: CUcontext = std::ptr::null_mut();
    // SAFETY: the context is current (`_bound`); the out-pointer is a live local; the caller's
    // contract (a live stream handle) is the driver's to check beyond that.
    check(unsafe { sys::cuStreamGetCtx(stream, &mut context) }, "cuStreamGetCtx")?;
    Ok(context)
}

/// `cuStreamDestroy`.
///
/// # Safety
/// `stream` is destroyed once, and nothing is enqueued on it after.
pub(crate) unsafe fn stream_destroy(_bound: &Bound<'_>, stream: CUstream) -> Result<()> {
    // SAFETY: the caller destroys it once and uses it no more.
    check(unsafe { sys::cuStreamDestroy_v2(stream) }, "cuStreamDestroy")
}

/// `cuStreamWaitValue64(stream, addr, value, GEQ)`: later work on `stream` waits until the 64-bit
/// word at device address `addr` is at least `value`.
pub(crate) fn stream_wait_value64_geq(
    _bound: &Bound<'_>,
    stream: CUstream,
    addr: CUdeviceptr,
    value: u64,
) -> Result<()> {
    let flags = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
    // SAFETY: `stream` is a live stream of the current context and `addr` a live 8-byte aligned
    // device word its owner keeps until the stream drained.
    check(unsafe { sys::cuStreamWaitValue64_v2(stream, addr, value, flags) }, "cuStreamWaitValue64")
}

/// `cuStreamWriteValue64`: once earlier work on `stream` ran, the 64-bit word at device address
/// `addr` becomes `value`.
pub(crate) fn stream_write_value64(_bound: &Bound<'_>, stream: CUstream, addr: CUdeviceptr, value: u64) -> Result<()> {
    let flags = sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32;
    // SAFETY: as for `stream_wait_value64_geq`.
    check(unsafe { sys::cuStreamWriteValue64_v2(stream, addr, value, flags) }, "cuStreamWriteValue64")
}

/// `cuStreamSynchronize`: blocks until everything enqueued on `stream` ran.
pub(crate) fn stream_synchronize(_bound: &Bound<'_>, stream: CUstream) -> Result<()> {
    // SAFETY: `stream` is a live stream of the current context.
    check(unsafe { sys::cuStreamSynchronize(stream) }, "cuStreamSynchronize")
}

/// `cuStreamSynchronize` of the current context's legacy default stream (the null stream), which
/// the synchronous memsets and copies use.
pub(crate) fn legacy_stream_synchronize(_bound: &Bound<'_>) -> Result<()> {
    // SAFETY: the null stream names the current context's legacy stream.
    check(unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) }, "cuStreamSynchronize(legacy stream)")
}

/// `cuStreamWaitEvent(stream, event, 0)`: work enqueued on `stream` after this waits for `event`'s
/// latest capture.
#[inline]
pub(crate) fn stream_wait_event(_bound: &Bound<'_>, stream: CUstream, event: CUevent) -> Result<()> {
    // SAFETY: both handles are live objects of the current context.
    check(unsafe { sys::cuStreamWaitEvent(stream, event, 0) }, "cuStreamWaitEvent")
}

/// `cuLaunchHostFunc`: `function(user_data)` runs on a driver thread once `stream` reaches it.
///
/// # Safety
/// `function` makes no CUDA call and is sound to call once with `user_data` from another thread, and
/// `user_data` stays valid until it ran (or forever, if the stream may never reach it).
pub(crate) unsafe fn launch_host_func(
    _bound: &Bound<'_>,
    stream: CUstream,
    function: unsafe extern "C" fn(*mut c_void),
    user_data: *mut c_void,
) -> Result<()> {
    // SAFETY: the stream is live; the caller vouches for the function and its data.
    check(unsafe { sys::cuLaunchHostFunc(stream, Some(function), user_data) }, "cuLaunchHostFunc")
}

// ---- Events ----

/// `cuEventCreate` with `flags`.
pub(crate) fn event_create(_bound: &Bound<'_>, flags: u32) -> Result<CUevent> {
    let mut event: CUevent = std::ptr::null_mut();
    // SAFETY: the context is current; the out-pointer is a live local.
    check(unsafe { sys::cuEventCreate(&mut event, flags) }, "cuEventCreate")?;
    Ok(event)
}

/// `cuEventDestroy`.
///
/// # Safety
/// `event` is destroyed once, and no stream waits on it or records it after.
pub(crate) unsafe fn event_destroy(_bound: &Bound<'_>, event: CUevent) -> Result<()> {
    // SAFETY: the caller destroys it once and uses it no more.
    check(unsafe { sys::cuEventDestroy_v2(event) }, "cuEventDestroy")
}

/// `cuEventRecord`: captures the work enqueued on `stream` so far.
#[inline]
pub(crate) fn event_record(_bound: &Bound<'_>, event: CUevent, stream: CUstream) -> Result<()> {
    // SAFETY: both handles are live objects of the current context.
    check(unsafe { sys::cuEventRecord(event, stream) }, "cuEventRecord")
}

/// `cuEventQuery`: whether the latest capture completed (`CUDA_ERROR_NOT_READY` is `Ok(false)`);
/// `Err` on a device fault.
#[inline]
pub(crate) fn event_query(_bound: &Bound<'_>, event: CUevent) -> Result<bool> {
    // SAFETY: `event` is a live event of the current context.
    match unsafe { sys::cuEventQuery(event) } {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        code => Err(to_error(code, "cuEventQuery")),
    }
}

/// `cuStreamQuery`: whether everything enqueued on `stream` ran; `Err` on a device fault.
pub(crate) fn stream_query(_bound: &Bound<'_>, stream: CUstream) -> Result<bool> {
    // SAFETY: `stream` is a live stream of the current context.
    match unsafe { sys::cuStreamQuery(stream) } {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        code => Err(to_error(code, "cuStreamQuery")),
    }
}

/// `cuEventSynchronize`: blocks until the latest capture completed.
pub(crate) fn event_synchronize(_bound: &Bound<'_>, event: CUevent) -> Result<()> {
    // SAFETY: `event` is a live event of the current context.
    check(unsafe { sys::cuEventSynchronize(event) }, "cuEventSynchronize")
}

/// `cuEventElapsedTime`: milliseconds between two completed timing events.
pub(crate) fn event_elapsed_time(_bound: &Bound<'_>, start: CUevent, end: CUevent) -> Result<f32> {
    let mut ms = 0f32;
    // SAFETY: both are live events of the current context (the driver checks that they were created
    // for timing and have completed); the out-pointer is a live local.
    check(unsafe { sys::cuEventElapsedTime(&mut ms, start, end) }, "cuEventElapsedTime")?;
    Ok(ms)
}

// ---- Memory ----

/// `cuMemAlloc`: `bytes` of device memory.
pub(crate) fn mem_alloc(_bound: &Bound<'_>, bytes: usize) -> Result<CUdeviceptr> {
    let mut address: CUdeviceptr = 0;
    // SAFETY: the context is current; the out-pointer is a live local.
    check(unsafe { sys::cuMemAlloc_v2(&mut address, bytes) }, "cuMemAlloc")?;
    Ok(address)
}

/// Frees `cuMemAlloc` memory without waiting for the device: `cuMemFreeAsync` on the context's
/// free stream, then a synchronize of that stream, which holds only frees (the memory goes back to
/// the driver only at a synchronize; `docs/drivers.md`). Falls back to `cuMemFree` (which waits
/// until the device is idle) if the driver refuses the stream-ordered free.
///
/// # Safety
/// `address` came from [`mem_alloc`], is freed once, and no enqueued work uses it any more.
pub(crate) unsafe fn mem_free(bound: &Bound<'_>, address: CUdeviceptr) -> Result<()> {
    let stream = bound.context().free_stream();
    // SAFETY: the caller frees it once, after its last use; the free stream is live while the
    // context is.
    match check(unsafe { sys::cuMemFreeAsync(address, stream) }, "cuMemFreeAsync") {
        Ok(()) => stream_synchronize(bound, stream),
        Err(e) => {
            tracing::debug!(%e, "stream-ordered free refused; freeing with cuMemFree");
            // SAFETY: as above; the refused free left the memory allocated.
            crate::free_gate::synchronizing(|| check(unsafe { sys::cuMemFree_v2(address) }, "cuMemFree"))
        }
    }
}

/// Where a device pointer lies, from `cuPointerGetAttribute`: the allocation it falls in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PointerRange {
    /// The start of the allocation (`CU_POINTER_ATTRIBUTE_RANGE_START_ADDR`).
    pub(crate) start: CUdeviceptr,
    /// Its bytes (`CU_POINTER_ATTRIBUTE_RANGE_SIZE`).
    pub(crate) size: usize,
    /// The ordinal of the GPU it is on (`CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`).
    pub(crate) ordinal: i32,
    /// Device, host or unified memory (`CU_POINTER_ATTRIBUTE_MEMORY_TYPE`, a `CUmemorytype`
    /// value, read as its 32-bit number: an enum must not receive a value it lacks).
    pub(crate) memory_type: u32,
}

/// The allocation `address` falls in (see [`PointerRange`]); an address CUDA does not know is
/// `CUDA_ERROR_INVALID_VALUE`.
pub(crate) fn pointer_range(_bound: &Bound<'_>, address: CUdeviceptr) -> Result<PointerRange> {
    use sys::CUpointer_attribute as A;
    let mut range = PointerRange { start: 0, size: 0, ordinal: -1, memory_type: 0 };
    // SAFETY: each out-pointer is a live local of the size the attribute writes (CUdeviceptr,
    // size_t, int, and the 32-bit CUmemorytype).
    unsafe {
        check(
            sys::cuPointerGetAttribute(
                (&raw mut range.start).cast(),
                A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                address,
            ),
            "cuPointerGetAttribute(RANGE_START_ADDR)",
        )?;
        check(
            sys::cuPointerGetAttribute((&raw mut range.size).cast(), A::CU_POINTER_ATTRIBUTE_RANGE_SIZE, address),
            "cuPointerGetAttribute(RANGE_SIZE)",
        )?;
        check(
            sys::cuPointerGetAttribute(
                (&raw mut range.ordinal).cast(),
                A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                address,
            ),
            "cuPointerGetAttribute(DEVICE_ORDINAL)",
        )?;
        check(
            sys::cuPointerGetAttribute(
                (&raw mut range.memory_type).cast(),
                A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                address,
            ),
            "cuPointerGetAttribute(MEMORY_TYPE)",
        )?;
    }
    Ok(range)
}

/// `cuMemsetD8` on the legacy stream: `count` bytes at `dst` set to `value`.
pub(crate) fn memset_d8(_bound: &Bound<'_>, dst: CUdeviceptr, value: u8, count: usize) -> Result<()> {
    // SAFETY: a device address (see the module docs); no host memory is touched.
    check(unsafe { sys::cuMemsetD8_v2(dst, value, count) }, "cuMemsetD8")
}

/// `cuMemsetD8Async`: `count` bytes.
#[inline]
pub(crate) fn memset_d8_async(
    _bound: &Bound<'_>,
    dst: CUdeviceptr,
    value: u8,
    count: usize,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: a unified address (see the module docs) and a live stream of the current context.
    check(unsafe { sys::cuMemsetD8Async(dst, value, count, stream) }, "cuMemsetD8Async")
}

/// `cuMemsetD16Async`: `count` 2-byte elements.
#[inline]
pub(crate) fn memset_d16_async(
    _bound: &Bound<'_>,
    dst: CUdeviceptr,
    value: u16,
    count: usize,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: as `memset_d8_async`.
    check(unsafe { sys::cuMemsetD16Async(dst, value, count, stream) }, "cuMemsetD16Async")
}

/// `cuMemsetD32Async`: `count` 4-byte elements.
#[inline]
pub(crate) fn memset_d32_async(
    _bound: &Bound<'_>,
    dst: CUdeviceptr,
    value: u32,
    count: usize,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: as `memset_d8_async`.
    check(unsafe { sys::cuMemsetD32Async(dst, value, count, stream) }, "cuMemsetD32Async")
}

/// `cuMemcpyHtoD` on the legacy stream, from `src`. It may return before the DMA finished.
pub(crate) fn memcpy_htod(_bound: &Bound<'_>, dst: CUdeviceptr, src: &[u8]) -> Result<()> {
    // SAFETY: `src` is `src.len()` bytes of live host memory; the driver copies pageable memory to a
    // staging buffer before returning, so the borrow may end after the call.
    check(unsafe { sys::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len()) }, "cuMemcpyHtoD")
}

/// `cuMemcpyAsync` between two unified addresses of buffers (device or mapped pinned memory).
#[inline]
pub(crate) fn memcpy_async(
    _bound: &Bound<'_>,
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: unified addresses (see the module docs); the driver infers each side's memory type.
    check(unsafe { sys::cuMemcpyAsync(dst, src, bytes, stream) }, "cuMemcpyAsync")
}

/// `cuMemHostAlloc`: `bytes` of pinned host memory (contents undefined).
pub(crate) fn mem_host_alloc(_bound: &Bound<'_>, bytes: usize, flags: u32) -> Result<*mut c_void> {
    let mut host: *mut c_void = std::ptr::null_mut();
    // SAFETY: the context is current; the out-pointer is a live local.
    check(unsafe { sys::cuMemHostAlloc(&mut host, bytes, flags) }, "cuMemHostAlloc")?;
    Ok(host)
}

/// `cuMemHostGetDevicePointer`: the device address of pinned memory allocated with `DEVICEMAP`.
pub(crate) fn mem_host_get_device_pointer(_bound: &Bound<'_>, host: *mut c_void) -> Result<CUdeviceptr> {
    let mut address: CUdeviceptr = 0;
    // SAFETY: the driver only looks `host` up among its pinned allocations (an unknown pointer is an
    // error); the out-pointer is a live local.
    check(unsafe { sys::cuMemHostGetDevicePointer_v2(&mut address, host, 0) }, "cuMemHostGetDevicePointer")?;
    Ok(address)
}

/// `cuMemHostRegister` of `bytes` at `host` with `flags` (page-locks and, with `DEVICEMAP`, maps
/// memory the caller owns).
///
/// # Safety
/// `host` is valid for `bytes` bytes until the matching [`mem_host_unregister`].
pub(crate) unsafe fn mem_host_register(_bound: &Bound<'_>, host: *mut c_void, bytes: usize, flags: u32) -> Result<()> {
    // SAFETY: the context is current; the range is the caller's (see the contract).
    check(unsafe { sys::cuMemHostRegister_v2(host, bytes, flags) }, "cuMemHostRegister")
}

/// `cuMemHostUnregister`.
///
/// # Safety
/// `host` was registered with [`mem_host_register`] and is unregistered once, after its last use by
/// the device.
pub(crate) unsafe fn mem_host_unregister(_bound: &Bound<'_>, host: *mut c_void) -> Result<()> {
    // SAFETY: per the contract.
    crate::free_gate::synchronizing(|| check(unsafe { sys::cuMemHostUnregister(host) }, "cuMemHostUnregister"))
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `host` came from [`mem_host_alloc`], is freed once, and neither the host nor enqueued work uses
/// it after.
pub(crate) unsafe fn mem_free_host(_bound: &Bound<'_>, host: *mut c_void) -> Result<()> {
    // SAFETY: the caller frees it once, after its last use.
    crate::free_gate::synchronizing(|| check(unsafe { sys::cuMemFreeHost(host) }, "cuMemFreeHost"))
}

/// `cuDeviceGetDefaultMemPool` of `device`.
pub(crate) fn device_get_default_mem_pool(_bound: &Bound<'_>, device: CUdevice) -> Result<CUmemoryPool> {
    let mut pool: CUmemoryPool = std::ptr::null_mut();
    // SAFETY: the context is current; the out-pointer is a live local.
    check(unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, device) }, "cuDeviceGetDefaultMemPool")?;
    Ok(pool)
}

/// `cuMemPoolSetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)`: the pool keeps up to `bytes` of freed
/// memory across synchronisations.
pub(crate) fn mem_pool_set_release_threshold(_bound: &Bound<'_>, pool: CUmemoryPool, bytes: u64) -> Result<()> {
    let mut threshold = bytes;
    let attribute = CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
    // SAFETY: `pool` is live; this attribute takes a u64 through the pointer, a live local.
    let code = unsafe { sys::cuMemPoolSetAttribute(pool, attribute, (&mut threshold as *mut u64).cast()) };
    check(code, "cuMemPoolSetAttribute")
}

/// `cuMemPoolSetAttribute(CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, 0)`: an allocation
/// never takes memory whose free is still pending on another stream by making its own stream wait
/// for that free, so an allocation made on an idle stream is usable by every stream once the call
/// returns.
pub(crate) fn mem_pool_forbid_internal_dependencies(_bound: &Bound<'_>, pool: CUmemoryPool) -> Result<()> {
    let mut allowed: i32 = 0;
    let attribute = CUmemPool_attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
    // SAFETY: `pool` is live; this attribute takes an int through the pointer, a live local.
    let code = unsafe { sys::cuMemPoolSetAttribute(pool, attribute, (&mut allowed as *mut i32).cast()) };
    check(code, "cuMemPoolSetAttribute")
}

/// `cuMemAllocFromPoolAsync`: `bytes` from `pool`, usable by work enqueued on `stream` after this.
#[inline]
pub(crate) fn mem_alloc_from_pool_async(
    _bound: &Bound<'_>,
    bytes: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> Result<CUdeviceptr> {
    let mut address: CUdeviceptr = 0;
    // SAFETY: `pool` and `stream` are live handles of the current context; the out-pointer is a live
    // local.
    check(unsafe { sys::cuMemAllocFromPoolAsync(&mut address, bytes, pool, stream) }, "cuMemAllocFromPoolAsync")?;
    Ok(address)
}

/// `cuMemAllocAsync`: `bytes` from the device's current memory pool, usable by work enqueued on
/// `stream` after this.
#[inline]
pub(crate) fn mem_alloc_async(_bound: &Bound<'_>, bytes: usize, stream: CUstream) -> Result<CUdeviceptr> {
    let mut address: CUdeviceptr = 0;
    // SAFETY: `stream` is a live handle of the current context; the out-pointer is a live local.
    check(unsafe { sys::cuMemAllocAsync(&mut address, bytes, stream) }, "cuMemAllocAsync")?;
    Ok(address)
}

/// `cuMemFreeAsync` in `stream` order (null: the legacy stream).
///
/// # Safety
/// `address` came from [`mem_alloc_from_pool_async`] or [`mem_alloc_async`], is freed once, and no work ordered after the
/// free on `stream` (nor unordered with it) uses it.
#[inline]
pub(crate) unsafe fn mem_free_async(_bound: &Bound<'_>, address: CUdeviceptr, stream: CUstream) -> Result<()> {
    // SAFETY: the caller frees it once, after its last use in stream order.
    check(unsafe { sys::cuMemFreeAsync(address, stream) }, "cuMemFreeAsync")
}

// ---- External memory and semaphores (shared with Vulkan through opaque file descriptors) ----

/// `cuImportExternalMemory` of the memory object `fd` refers to (`CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD`),
/// `size` bytes (its allocation size), `dedicated` for a dedicated allocation
/// (`CUDA_EXTERNAL_MEMORY_DEDICATED`).
///
/// # Safety
/// `fd` is an open descriptor the caller owns. On success CUDA owns it (and closes it when the
/// imported object is destroyed): the caller must neither use nor close it after. On failure it
/// is still the caller's.
pub(crate) unsafe fn import_external_memory_fd(
    _bound: &Bound<'_>,
    fd: i32,
    size: u64,
    dedicated: bool,
) -> Result<CUexternalMemory> {
    // SAFETY: a union of integers and pointers, for which all-zero bytes are valid (the C API's `= {}`).
    let mut handle: sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC_st__bindgen_ty_1 = unsafe { std::mem::zeroed() };
    handle.fd = fd;
    let desc = sys::CUDA_EXTERNAL_MEMORY_HANDLE_DESC {
        type_: sys::CUexternalMemoryHandleType::CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
        handle,
        size,
        flags: if dedicated { sys::CUDA_EXTERNAL_MEMORY_DEDICATED } else { 0 },
        reserved: [0; 16],
    };
    let mut memory: CUexternalMemory = std::ptr::null_mut();
    // SAFETY: the context is current; the descriptor and out-pointer are live locals; the caller
    // hands `fd` over (see the contract).
    check(unsafe { sys::cuImportExternalMemory(&mut memory, &desc) }, "cuImportExternalMemory")?;
    Ok(memory)
}

/// `cuExternalMemoryGetMappedBuffer`: the device address of `size` bytes from the start of
/// `memory` (freed with [`mem_free_mapped`] before the object is destroyed).
pub(crate) fn external_memory_get_mapped_buffer(
    _bound: &Bound<'_>,
    memory: CUexternalMemory,
    size: u64,
) -> Result<CUdeviceptr> {
    let desc = sys::CUDA_EXTERNAL_MEMORY_BUFFER_DESC { offset: 0, size, flags: 0, reserved: [0; 16] };
    let mut address: CUdeviceptr = 0;
    // SAFETY: `memory` is a live imported object (its owner's field); the descriptor and the
    // out-pointer are live locals.
    check(
        unsafe { sys::cuExternalMemoryGetMappedBuffer(&mut address, memory, &desc) },
        "cuExternalMemoryGetMappedBuffer",
    )?;
    Ok(address)
}

/// `cuMemFree` of a buffer mapped onto imported memory (which CUDA requires be freed so, and not
/// stream-ordered), waiting as `cuMemFree` may for the device.
///
/// # Safety
/// `address` came from [`external_memory_get_mapped_buffer`], is freed once, and no enqueued work
/// uses it any more.
pub(crate) unsafe fn mem_free_mapped(_bound: &Bound<'_>, address: CUdeviceptr) -> Result<()> {
    // SAFETY: per the contract.
    crate::free_gate::synchronizing(|| check(unsafe { sys::cuMemFree_v2(address) }, "cuMemFree (mapped buffer)"))
}

/// `cuDestroyExternalMemory`.
///
/// # Safety
/// `memory` is destroyed once, after every buffer mapped onto it was freed ([`mem_free_mapped`]).
pub(crate) unsafe fn destroy_external_memory(_bound: &Bound<'_>, memory: CUexternalMemory) -> Result<()> {
    // SAFETY: per the contract.
    check(unsafe { sys::cuDestroyExternalMemory(memory) }, "cuDestroyExternalMemory")
}

/// `cuImportExternalSemaphore` of the timeline semaphore `fd` refers to
/// (`CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD`: a Vulkan timeline exported as an
/// opaque fd).
///
/// # Safety
/// As for [`import_external_memory_fd`]: `fd` is open and the caller's; CUDA owns it on success.
pub(crate) unsafe fn import_external_semaphore_timeline_fd(_bound: &Bound<'_>, fd: i32) -> Result<CUexternalSemaphore> {
    // SAFETY: a union of integers and pointers, for which all-zero bytes are valid (the C API's `= {}`).
    let mut handle: sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC_st__bindgen_ty_1 = unsafe { std::mem::zeroed() };
    handle.fd = fd;
    let desc = sys::CUDA_EXTERNAL_SEMAPHORE_HANDLE_DESC {
        type_: sys::CUexternalSemaphoreHandleType::CU_EXTERNAL_SEMAPHORE_HANDLE_TYPE_TIMELINE_SEMAPHORE_FD,
        handle,
        flags: 0,
        reserved: [0; 16],
    };
    let mut semaphore: CUexternalSemaphore = std::ptr::null_mut();
    // SAFETY: the context is current; the descriptor and out-pointer are live locals; the caller
    // hands `fd` over.
    check(unsafe { sys::cuImportExternalSemaphore(&mut semaphore, &desc) }, "cuImportExternalSemaphore")?;
    Ok(semaphore)
}

/// `cuDestroyExternalSemaphore`.
///
/// # Safety
/// `semaphore` is destroyed once, after every wait and signal enqueued on it completed, and is
/// not used after.
pub(crate) unsafe fn destroy_external_semaphore(_bound: &Bound<'_>, semaphore: CUexternalSemaphore) -> Result<()> {
    // SAFETY: per the contract.
    check(unsafe { sys::cuDestroyExternalSemaphore(semaphore) }, "cuDestroyExternalSemaphore")
}

/// `cuWaitExternalSemaphoresAsync` of one timeline semaphore: later work on `stream` waits until
/// it reaches `value`.
pub(crate) fn wait_external_semaphore(
    _bound: &Bound<'_>,
    semaphore: CUexternalSemaphore,
    value: u64,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: integers, pointers and unions of them (no enum), for which all-zero bytes are valid
    // (the C API's `= {}`).
    let mut params: sys::CUDA_EXTERNAL_SEMAPHORE_WAIT_PARAMS = unsafe { std::mem::zeroed() };
    params.params.fence.value = value;
    // SAFETY: `semaphore` is a live imported semaphore its owner keeps until the wait completed,
    // `stream` a live stream of the current context; the arrays of one are live locals.
    check(
        unsafe { sys::cuWaitExternalSemaphoresAsync(&semaphore, &params, 1, stream) },
        "cuWaitExternalSemaphoresAsync",
    )
}

/// `cuSignalExternalSemaphoresAsync` of one timeline semaphore: once earlier work on `stream` ran,
/// it is set to `value`.
pub(crate) fn signal_external_semaphore(
    _bound: &Bound<'_>,
    semaphore: CUexternalSemaphore,
    value: u64,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: as for `wait_external_semaphore`'s parameters.
    let mut params: sys::CUDA_EXTERNAL_SEMAPHORE_SIGNAL_PARAMS = unsafe { std::mem::zeroed() };
    params.params.fence.value = value;
    // SAFETY: as for `wait_external_semaphore`.
    check(
        unsafe { sys::cuSignalExternalSemaphoresAsync(&semaphore, &params, 1, stream) },
        "cuSignalExternalSemaphoresAsync",
    )
}

// ---- Modules and launches ----

/// `cuModuleLoadDataEx` of `image`, with the JIT error log written into `log` (NUL-terminated when
/// the JIT writes one).
///
/// # Safety
/// `image` is a whole PTX, cubin or fatbin image, and PTX text ends with a NUL byte inside `image`
/// (the driver reads PTX as a C string; binary images carry their size in their headers).
pub(crate) unsafe fn module_load_data_ex(_bound: &Bound<'_>, image: &[u64], log: &mut [u8]) -> Result<CUmodule> {
    let mut options = [CUjit_option::CU_JIT_ERROR_LOG_BUFFER, CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
    // The size option's value is the number itself, passed in the pointer slot, as CUDA specifies.
    let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
    let mut module: CUmodule = std::ptr::null_mut();
    // SAFETY: the context is current; `image` lives across the call and is whole (caller); the option
    // arrays have 2 entries each, and the log buffer holds as many bytes as the size option says.
    let code = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            image.as_ptr().cast(),
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    check(code, "cuModuleLoadDataEx")?;
    Ok(module)
}

/// `cuModuleUnload`.
///
/// # Safety
/// `module` is unloaded once, and none of its functions is launched after.
pub(crate) unsafe fn module_unload(_bound: &Bound<'_>, module: CUmodule) -> Result<()> {
    // SAFETY: the caller unloads it once and launches none of its functions after.
    crate::free_gate::synchronizing(|| check(unsafe { sys::cuModuleUnload(module) }, "cuModuleUnload"))
}

/// `cuModuleGetFunction`: `None` when the module has no function `name` (`CUDA_ERROR_NOT_FOUND`).
pub(crate) fn module_get_function(_bound: &Bound<'_>, module: CUmodule, name: &CStr) -> Result<Option<CUfunction>> {
    let mut function: CUfunction = std::ptr::null_mut();
    // SAFETY: the module is loaded in the current context; `name` is NUL-terminated; the out-pointer
    // is a live local.
    match unsafe { sys::cuModuleGetFunction(&mut function, module, name.as_ptr()) } {
        CUresult::CUDA_SUCCESS => Ok(Some(function)),
        CUresult::CUDA_ERROR_NOT_FOUND => Ok(None),
        code => Err(to_error(code, "cuModuleGetFunction")),
    }
}

/// `cuFuncGetAttribute`.
pub(crate) fn func_get_attribute(
    _bound: &Bound<'_>,
    function: CUfunction,
    attribute: CUfunction_attribute,
) -> Result<i32> {
    let mut value = 0i32;
    // SAFETY: `function` belongs to a loaded module; the out-pointer is a live local.
    check(unsafe { sys::cuFuncGetAttribute(&mut value, attribute, function) }, "cuFuncGetAttribute")?;
    Ok(value)
}

/// `cuFuncSetAttribute`.
pub(crate) fn func_set_attribute(
    _bound: &Bound<'_>,
    function: CUfunction,
    attribute: CUfunction_attribute,
    value: i32,
) -> Result<()> {
    // SAFETY: `function` belongs to a loaded module; CUDA checks the attribute and the value.
    check(unsafe { sys::cuFuncSetAttribute(function, attribute, value) }, "cuFuncSetAttribute")
}

/// The size in bytes of each parameter of `function`, in order (`cuFuncGetParamInfo`, CUDA 12.4
/// drivers and newer: the caller checks the version first).
pub(crate) fn func_param_sizes(_bound: &Bound<'_>, function: CUfunction) -> Result<Vec<usize>> {
    let mut sizes = Vec::new();
    // A kernel has at most a few thousand parameters (32 KiB of them); the bound stops a runaway.
    for index in 0..8192usize {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `function` belongs to a loaded module; the out-pointers are live locals.
        match unsafe { sys::cuFuncGetParamInfo(function, index, &mut offset, &mut size) } {
            CUresult::CUDA_SUCCESS => sizes.push(size),
            // Past the last parameter.
            CUresult::CUDA_ERROR_INVALID_VALUE => break,
            code => return Err(to_error(code, "cuFuncGetParamInfo")),
        }
    }
    Ok(sizes)
}

/// `cuLaunchKernel` of `function` with `shared_bytes` of dynamic shared memory.
///
/// # Safety
/// `params` points at one pointer per parameter of `function`, in order, each to a live value of
/// that parameter's size; they need to live only during the call (CUDA copies the values).
#[inline]
pub(crate) unsafe fn launch_kernel(
    _bound: &Bound<'_>,
    function: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    stream: CUstream,
    params: *mut *mut c_void,
) -> Result<()> {
    // SAFETY: the context is current; `function` belongs to a module its executable keeps loaded;
    // the caller vouches for `params`.
    let code = unsafe {
        sys::cuLaunchKernel(
            function,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            shared_bytes,
            stream,
            params,
            std::ptr::null_mut(),
        )
    };
    check(code, "cuLaunchKernel")
}

// ---- Graphs ----

/// `cuGraphCreate`: an empty graph.
pub(crate) fn graph_create(_bound: &Bound<'_>) -> Result<CUgraph> {
    let mut graph: CUgraph = std::ptr::null_mut();
    // SAFETY: the out-pointer is a live local.
    check(unsafe { sys::cuGraphCreate(&mut graph, 0) }, "cuGraphCreate")?;
    Ok(graph)
}

/// `cuGraphDestroy`. Needs no current context: a graph belongs to none until instantiated.
///
/// # Safety
/// `graph` is destroyed once and not used after (an executable instantiated from it may be).
pub(crate) unsafe fn graph_destroy(graph: CUgraph) -> Result<()> {
    // SAFETY: the caller destroys it once and uses it no more.
    check(unsafe { sys::cuGraphDestroy(graph) }, "cuGraphDestroy")
}

/// `cuGraphAddEmptyNode` depending on `deps` (nodes of `graph`).
pub(crate) fn graph_add_empty_node(_bound: &Bound<'_>, graph: CUgraph, deps: &[CUgraphNode]) -> Result<CUgraphNode> {
    let mut node: CUgraphNode = std::ptr::null_mut();
    // SAFETY: the graph is live, `deps` are `deps.len()` of its nodes; the out-pointer is a live local.
    check(unsafe { sys::cuGraphAddEmptyNode(&mut node, graph, deps.as_ptr(), deps.len()) }, "cuGraphAddEmptyNode")?;
    Ok(node)
}

/// `cuGraphAddEventRecordNode` recording `event` once `deps` (nodes of `graph`) are done.
pub(crate) fn graph_add_event_record_node(
    _bound: &Bound<'_>,
    graph: CUgraph,
    deps: &[CUgraphNode],
    event: CUevent,
) -> Result<CUgraphNode> {
    let mut node: CUgraphNode = std::ptr::null_mut();
    // SAFETY: the graph and the event are live objects of the current context, `deps` are
    // `deps.len()` of the graph's nodes; the out-pointer is a live local.
    check(
        unsafe { sys::cuGraphAddEventRecordNode(&mut node, graph, deps.as_ptr(), deps.len(), event) },
        "cuGraphAddEventRecordNode",
    )?;
    Ok(node)
}

/// `cuGraphExecEventRecordNodeSetEvent`: later launches of `exec` record `event` at `node`.
pub(crate) fn graph_exec_set_event(
    _bound: &Bound<'_>,
    exec: CUgraphExec,
    node: CUgraphNode,
    event: CUevent,
) -> Result<()> {
    // SAFETY: `exec` was instantiated from the graph `node` (an event record node) belongs to, and
    // `event` is a live event of the current context.
    check(unsafe { sys::cuGraphExecEventRecordNodeSetEvent(exec, node, event) }, "cuGraphExecEventRecordNodeSetEvent")
}

/// `cuGraphAddKernelNode` launching `function` with `shared_bytes` of dynamic shared memory,
/// depending on `deps`.
///
/// # Safety
/// `params` is as for [`launch_kernel`]: CUDA copies the values into the node during this call.
#[allow(clippy::too_many_arguments)] // mirrors the driver call's arguments
pub(crate) unsafe fn graph_add_kernel_node(
    _bound: &Bound<'_>,
    graph: CUgraph,
    deps: &[CUgraphNode],
    function: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    params: *mut *mut c_void,
) -> Result<CUgraphNode> {
    let node_params = kernel_node_params(function, grid, block, shared_bytes, params);
    let mut node: CUgraphNode = std::ptr::null_mut();
    // SAFETY: the graph is live and `deps` are its nodes; `node_params` is a live local whose
    // `kernelParams` the caller vouches for; the out-pointer is a live local.
    let code = unsafe { sys::cuGraphAddKernelNode_v2(&mut node, graph, deps.as_ptr(), deps.len(), &node_params) };
    check(code, "cuGraphAddKernelNode")?;
    Ok(node)
}

fn kernel_node_params(
    function: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    params: *mut *mut c_void,
) -> CUDA_KERNEL_NODE_PARAMS_v2 {
    CUDA_KERNEL_NODE_PARAMS_v2 {
        func: function,
        gridDimX: grid[0],
        gridDimY: grid[1],
        gridDimZ: grid[2],
        blockDimX: block[0],
        blockDimY: block[1],
        blockDimZ: block[2],
        sharedMemBytes: shared_bytes,
        kernelParams: params,
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    }
}

/// `cuGraphExecKernelNodeSetParams`: the next launches of `exec` run kernel node `node` with these
/// parameters (earlier launches keep theirs).
///
/// # Safety
/// `node` is a kernel node of the graph `exec` was instantiated from, launching `function`;
/// `params` is as for [`launch_kernel`]: CUDA copies the values during this call.
#[allow(clippy::too_many_arguments)] // mirrors the driver call's arguments
pub(crate) unsafe fn graph_exec_set_kernel_params(
    _bound: &Bound<'_>,
    exec: CUgraphExec,
    node: CUgraphNode,
    function: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    params: *mut *mut c_void,
) -> Result<()> {
    let node_params = kernel_node_params(function, grid, block, shared_bytes, params);
    // SAFETY: `exec` is live and `node` one of its kernel nodes; `node_params` is a live local whose
    // `kernelParams` the caller vouches for.
    check(unsafe { sys::cuGraphExecKernelNodeSetParams_v2(exec, node, &node_params) }, "cuGraphExecKernelNodeSetParams")
}

/// `cuGraphAddMemsetNode` in the bound context: `count` elements of `element_size` bytes at `dst` set
/// to `value`, depending on `deps`.
pub(crate) fn graph_add_memset_node(
    bound: &Bound<'_>,
    graph: CUgraph,
    deps: &[CUgraphNode],
    dst: CUdeviceptr,
    value: u32,
    element_size: u32,
    count: usize,
) -> Result<CUgraphNode> {
    let params = memset_params(dst, value, element_size, count);
    let mut node: CUgraphNode = std::ptr::null_mut();
    // SAFETY: the graph is live and `deps` are its nodes; `params` is a live local and `dst` a unified
    // address (see the module docs); the context handle is the bound, retained one.
    let code = unsafe {
        sys::cuGraphAddMemsetNode(&mut node, graph, deps.as_ptr(), deps.len(), &params, bound.context().raw())
    };
    check(code, "cuGraphAddMemsetNode")?;
    Ok(node)
}

/// `cuGraphAddMemcpyNode` in the bound context: `length` bytes from `src` to `dst` (unified
/// addresses), depending on `deps`.
pub(crate) fn graph_add_memcpy_node(
    bound: &Bound<'_>,
    graph: CUgraph,
    deps: &[CUgraphNode],
    src: CUdeviceptr,
    dst: CUdeviceptr,
    length: usize,
) -> Result<CUgraphNode> {
    let params = memcpy_params(src, dst, length);
    let mut node: CUgraphNode = std::ptr::null_mut();
    // SAFETY: the graph is live and `deps` are its nodes; `params` is a live local naming two unified
    // addresses (see the module docs), no host pointers; the context handle is the bound one.
    let code = unsafe {
        sys::cuGraphAddMemcpyNode(&mut node, graph, deps.as_ptr(), deps.len(), &params, bound.context().raw())
    };
    check(code, "cuGraphAddMemcpyNode")?;
    Ok(node)
}

fn memset_params(dst: CUdeviceptr, value: u32, element_size: u32, count: usize) -> CUDA_MEMSET_NODE_PARAMS {
    CUDA_MEMSET_NODE_PARAMS { dst, pitch: 0, value, elementSize: element_size, width: count, height: 1 }
}

/// One-dimensional copy parameters between two unified addresses.
fn memcpy_params(src: CUdeviceptr, dst: CUdeviceptr, length: usize) -> CUDA_MEMCPY3D {
    CUDA_MEMCPY3D {
        srcXInBytes: 0,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: CUmemorytype::CU_MEMORYTYPE_UNIFIED,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: std::ptr::null_mut(),
        reserved0: std::ptr::null_mut(),
        srcPitch: 0,
        srcHeight: 0,
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: CUmemorytype::CU_MEMORYTYPE_UNIFIED,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst,
        dstArray: std::ptr::null_mut(),
        reserved1: std::ptr::null_mut(),
        dstPitch: 0,
        dstHeight: 0,
        WidthInBytes: length,
        Height: 1,
        Depth: 1,
    }
}

/// `cuGraphExecMemsetNodeSetParams` in the bound context: the next launches of `exec` run memset
/// node `node` with these parameters.
pub(crate) fn graph_exec_set_memset_params(
    bound: &Bound<'_>,
    exec: CUgraphExec,
    node: CUgraphNode,
    dst: CUdeviceptr,
    value: u32,
    element_size: u32,
    count: usize,
) -> Result<()> {
    let params = memset_params(dst, value, element_size, count);
    // SAFETY: `exec` is live; CUDA checks that `node` is one of its memset nodes; `params` is a live
    // local naming a unified address; the context handle is the bound one.
    let code = unsafe { sys::cuGraphExecMemsetNodeSetParams(exec, node, &params, bound.context().raw()) };
    check(code, "cuGraphExecMemsetNodeSetParams")
}

/// `cuGraphExecMemcpyNodeSetParams` in the bound context: the next launches of `exec` run memcpy
/// node `node` with these addresses.
pub(crate) fn graph_exec_set_memcpy_params(
    bound: &Bound<'_>,
    exec: CUgraphExec,
    node: CUgraphNode,
    src: CUdeviceptr,
    dst: CUdeviceptr,
    length: usize,
) -> Result<()> {
    let params = memcpy_params(src, dst, length);
    // SAFETY: `exec` is live; CUDA checks that `node` is one of its memcpy nodes; `params` is a live
    // local naming two unified addresses, no host pointers; the context handle is the bound one.
    let code = unsafe { sys::cuGraphExecMemcpyNodeSetParams(exec, node, &params, bound.context().raw()) };
    check(code, "cuGraphExecMemcpyNodeSetParams")
}

/// `cuGraphInstantiateWithFlags(graph, 0)`.
pub(crate) fn graph_instantiate(_bound: &Bound<'_>, graph: CUgraph) -> Result<CUgraphExec> {
    let mut exec: CUgraphExec = std::ptr::null_mut();
    // SAFETY: the graph is live; the out-pointer is a live local.
    check(unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) }, "cuGraphInstantiate")?;
    Ok(exec)
}

/// `cuGraphLaunch`. The caller serialises launches of one `exec` (its owner, `GraphExec`, does).
#[inline]
pub(crate) fn graph_launch(_bound: &Bound<'_>, exec: CUgraphExec, stream: CUstream) -> Result<()> {
    // SAFETY: `exec` is a live executable graph and `stream` a live stream of the current context.
    check(unsafe { sys::cuGraphLaunch(exec, stream) }, "cuGraphLaunch")
}

/// `cuGraphExecDestroy`.
///
/// # Safety
/// `exec` is destroyed once, and is neither being launched nor launched after.
pub(crate) unsafe fn graph_exec_destroy(_bound: &Bound<'_>, exec: CUgraphExec) -> Result<()> {
    // SAFETY: the caller destroys it once, with no launch in progress or to come.
    check(unsafe { sys::cuGraphExecDestroy(exec) }, "cuGraphExecDestroy")
}

// ---- Device-updated graph nodes (indirect dispatches; see `crate::commands::indirect_node`) ----

/// Links `ptx` (NUL-terminated PTX text) with the static library at `library` (CUDA's device
/// runtime) and returns the linked cubin, 8-byte aligned. The linker's error log goes into `log`.
pub(crate) fn link_with_library(_bound: &Bound<'_>, ptx: &CStr, library: &CStr, log: &mut [u8]) -> Result<Vec<u64>> {
    let mut options = [CUjit_option::CU_JIT_ERROR_LOG_BUFFER, CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
    // The size option's value is the number itself, passed in the pointer slot, as CUDA specifies.
    let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
    let mut state: sys::CUlinkState = std::ptr::null_mut();
    // SAFETY: the context is current; the option arrays have 2 entries each and the log buffer
    // (which outlives the link state, destroyed below) holds as many bytes as the size option says.
    let code = unsafe { sys::cuLinkCreate_v2(2, options.as_mut_ptr(), values.as_mut_ptr(), &mut state) };
    check(code, "cuLinkCreate")?;
    let linked = (|| {
        let bytes = ptx.to_bytes_with_nul();
        // SAFETY: `state` is live; the PTX is `bytes.len()` bytes ending in NUL, read during the call
        // (the driver does not write through the pointer despite its type); no per-input options.
        let code = unsafe {
            sys::cuLinkAddData_v2(
                state,
                sys::CUjitInputType::CU_JIT_INPUT_PTX,
                bytes.as_ptr().cast_mut().cast(),
                bytes.len(),
                c"hal_indirect_update.ptx".as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        check(code, "cuLinkAddData")?;
        // SAFETY: `state` is live; `library` is a NUL-terminated path; no per-input options.
        let code = unsafe {
            sys::cuLinkAddFile_v2(
                state,
                sys::CUjitInputType::CU_JIT_INPUT_LIBRARY,
                library.as_ptr(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        check(code, "cuLinkAddFile")?;
        let mut cubin: *mut c_void = std::ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: `state` is live; both out-pointers are live locals.
        check(unsafe { sys::cuLinkComplete(state, &mut cubin, &mut size) }, "cuLinkComplete")?;
        let mut image = vec![0u64; size.div_ceil(8)];
        // SAFETY: CUDA returned `size` bytes at `cubin`, owned by `state` (destroyed only below);
        // `image` holds at least `size` bytes.
        unsafe { std::ptr::copy_nonoverlapping(cubin.cast::<u8>(), image.as_mut_ptr().cast::<u8>(), size) };
        Ok(image)
    })();
    // SAFETY: created above, destroyed once; the cubin it owned was copied out.
    let destroyed = check(unsafe { sys::cuLinkDestroy(state) }, "cuLinkDestroy");
    let image = linked?;
    destroyed?;
    Ok(image)
}

/// Makes kernel node `node` updatable from the device (before its graph is instantiated) and
/// returns the handle device code updates it through.
pub(crate) fn graph_kernel_node_device_updatable(_bound: &Bound<'_>, node: CUgraphNode) -> Result<u64> {
    // SAFETY: an all-zero attribute value is a valid bit pattern (a union of plain data).
    let mut value: sys::CUkernelNodeAttrValue = unsafe { std::mem::zeroed() };
    value.deviceUpdatableKernelNode.deviceUpdatable = 1;
    let attribute = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
    // SAFETY: `node` is a live kernel node; `value` is a live local read during the call.
    check(unsafe { sys::cuGraphKernelNodeSetAttribute(node, attribute, &value) }, "cuGraphKernelNodeSetAttribute")?;
    // SAFETY: as above.
    let mut read: sys::CUkernelNodeAttrValue = unsafe { std::mem::zeroed() };
    // SAFETY: `node` is a live kernel node; `read` is a live local written during the call.
    check(unsafe { sys::cuGraphKernelNodeGetAttribute(node, attribute, &mut read) }, "cuGraphKernelNodeGetAttribute")?;
    // SAFETY: the driver filled the device-updatable member of the union it was asked for.
    Ok(unsafe { read.deviceUpdatableKernelNode.devNode } as u64)
}

/// `cuGraphAddDependencies`: node `to` of `graph` runs after node `from`.
pub(crate) fn graph_add_dependency(
    _bound: &Bound<'_>,
    graph: CUgraph,
    from: CUgraphNode,
    to: CUgraphNode,
) -> Result<()> {
    // SAFETY: the graph is live and both are its nodes; the arrays are one live local each.
    check(unsafe { sys::cuGraphAddDependencies(graph, &from, &to, 1) }, "cuGraphAddDependencies")
}

// ---- NCCL (loaded at run time; `crate::collective::probe` checks that every symbol below is exported) ----

/// NCCL's types, for the callers of the wrappers below.
pub(crate) use cudarc::nccl::sys::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId};

use cudarc::nccl::sys as nccl;

/// `Err` naming `call` and NCCL's message unless `code` is success.
fn check_nccl(code: nccl::ncclResult_t, call: &str) -> Result<()> {
    use nccl::ncclResult_t as R;
    if code == R::ncclSuccess {
        return Ok(());
    }
    // SAFETY: NCCL returns a static NUL-terminated string for every result code.
    let text = unsafe { CStr::from_ptr(nccl::ncclGetErrorString(code)) }.to_string_lossy().into_owned();
    let message = format!("{call}: {code:?} ({text})");
    Err(match code {
        R::ncclInvalidArgument | R::ncclInvalidUsage => hal::Error::invalid_argument(message),
        R::ncclRemoteError | R::ncclSystemError => hal::Error::unavailable(message),
        _ => hal::Error::internal(message),
    })
}

/// The stream type NCCL's bindings name for a driver-API stream (the same handle).
fn nccl_stream(stream: CUstream) -> nccl::cudaStream_t {
    stream as nccl::cudaStream_t
}

/// Whether cudarc can open the NCCL library (`is_culib_present`); loads nothing else.
pub(crate) fn is_nccl_library_present() -> bool {
    // SAFETY: it only tries to open the library by the names cudarc knows; no symbol is called.
    unsafe { nccl::is_culib_present() }
}

/// Whether cudarc can open the NVRTC library (`is_culib_present`), which compiles the conformance
/// suite's CUDA C (feature `cts`); loads nothing else.
#[cfg(feature = "cts")]
pub(crate) fn is_nvrtc_library_present() -> bool {
    // SAFETY: it only tries to open the library by the names cudarc knows; no symbol is called
    // (cudarc panics on first use of NVRTC when it is missing, so callers check this first).
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// `ncclGetVersion` (e.g. 22805 for 2.28.5).
pub(crate) fn nccl_get_version() -> Result<i32> {
    let mut version = 0;
    // SAFETY: the out-pointer is a live local.
    check_nccl(unsafe { nccl::ncclGetVersion(&mut version) }, "ncclGetVersion")?;
    Ok(version)
}

/// `ncclGetUniqueId`: a new communicator id (rank 0 makes it, every rank joins with it).
pub(crate) fn nccl_get_unique_id() -> Result<ncclUniqueId> {
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: the out-pointer is a live local of the struct the call fills.
    check_nccl(unsafe { nccl::ncclGetUniqueId(&mut id) }, "ncclGetUniqueId")?;
    Ok(id)
}

/// `ncclCommInitRank`: joins communicator `id` as `rank` of `ranks` on the bound context's GPU;
/// blocks until every rank joined.
pub(crate) fn nccl_comm_init_rank(_bound: &Bound<'_>, ranks: i32, id: ncclUniqueId, rank: i32) -> Result<ncclComm_t> {
    let mut comm: ncclComm_t = std::ptr::null_mut();
    // SAFETY: the out-pointer is a live local; NCCL takes the GPU from the bound context.
    check_nccl(unsafe { nccl::ncclCommInitRank(&mut comm, ranks, id, rank) }, "ncclCommInitRank")?;
    Ok(comm)
}

/// `ncclCommAbort`: kernels of `comm` in flight return; it can only be destroyed after.
///
/// # Safety
/// `comm` is live, aborted once, not destroyed after, and no other thread uses it meanwhile.
pub(crate) unsafe fn nccl_comm_abort(_bound: &Bound<'_>, comm: ncclComm_t) -> Result<()> {
    // SAFETY: the caller aborts a live communicator once, with no concurrent use.
    check_nccl(unsafe { nccl::ncclCommAbort(comm) }, "ncclCommAbort")
}

/// `ncclCommDestroy`.
///
/// # Safety
/// `comm` is live (not aborted), destroyed once, with nothing enqueued on it in flight, and not
/// used after.
pub(crate) unsafe fn nccl_comm_destroy(_bound: &Bound<'_>, comm: ncclComm_t) -> Result<()> {
    // SAFETY: the caller destroys a live, idle communicator once.
    check_nccl(unsafe { nccl::ncclCommDestroy(comm) }, "ncclCommDestroy")
}

// Every collective below is enqueued on `stream`. The shared `# Safety` of each: `comm` is live and
// used by one thread at a time; `send` and `recv` address device memory of the element counts NCCL
// reads and writes for this operation on this rank, kept alive until the work on `stream` retires;
// `stream` is a live stream of the bound context.

/// `ncclAllReduce`.
///
/// # Safety
/// See the comment above this group of collectives.
#[allow(clippy::too_many_arguments)] // mirrors the NCCL call's arguments
pub(crate) unsafe fn nccl_all_reduce(
    _bound: &Bound<'_>,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: the caller vouches for the communicator, both buffers and the stream.
    check_nccl(unsafe { nccl::ncclAllReduce(send, recv, count, dtype, op, comm, nccl_stream(stream)) }, "ncclAllReduce")
}

/// `ncclBroadcast` from rank `root`.
///
/// # Safety
/// See the comment above this group of collectives.
#[allow(clippy::too_many_arguments)] // mirrors the NCCL call's arguments
pub(crate) unsafe fn nccl_broadcast(
    _bound: &Bound<'_>,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: ncclDataType_t,
    root: i32,
    comm: ncclComm_t,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: the caller vouches for the communicator, both buffers and the stream.
    check_nccl(
        unsafe { nccl::ncclBroadcast(send, recv, count, dtype, root, comm, nccl_stream(stream)) },
        "ncclBroadcast",
    )
}

/// `ncclReduce` to rank `root`.
///
/// # Safety
/// See the comment above this group of collectives.
#[allow(clippy::too_many_arguments)] // mirrors the NCCL call's arguments
pub(crate) unsafe fn nccl_reduce(
    _bound: &Bound<'_>,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: ncclDataType_t,
    op: ncclRedOp_t,
    root: i32,
    comm: ncclComm_t,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: the caller vouches for the communicator, both buffers and the stream.
    check_nccl(unsafe { nccl::ncclReduce(send, recv, count, dtype, op, root, comm, nccl_stream(stream)) }, "ncclReduce")
}

/// `ncclAllGather`: `count` elements from each rank.
///
/// # Safety
/// See the comment above this group of collectives.
#[allow(clippy::too_many_arguments)] // mirrors the NCCL call's arguments
pub(crate) unsafe fn nccl_all_gather(
    _bound: &Bound<'_>,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: ncclDataType_t,
    comm: ncclComm_t,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: the caller vouches for the communicator, both buffers and the stream.
    check_nccl(unsafe { nccl::ncclAllGather(send, recv, count, dtype, comm, nccl_stream(stream)) }, "ncclAllGather")
}

/// `ncclReduceScatter`: `count` elements to each rank.
///
/// # Safety
/// See the comment above this group of collectives.
#[allow(clippy::too_many_arguments)] // mirrors the NCCL call's arguments
pub(crate) unsafe fn nccl_reduce_scatter(
    _bound: &Bound<'_>,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: the caller vouches for the communicator, both buffers and the stream.
    let code = unsafe { nccl::ncclReduceScatter(send, recv, count, dtype, op, comm, nccl_stream(stream)) };
    check_nccl(code, "ncclReduceScatter")
}

/// `ncclSend` of `count` elements to rank `peer`.
///
/// # Safety
/// See the comment above this group of collectives (`send` only).
pub(crate) unsafe fn nccl_send(
    _bound: &Bound<'_>,
    send: *const c_void,
    count: usize,
    dtype: ncclDataType_t,
    peer: i32,
    comm: ncclComm_t,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: the caller vouches for the communicator, the buffer and the stream.
    check_nccl(unsafe { nccl::ncclSend(send, count, dtype, peer, comm, nccl_stream(stream)) }, "ncclSend")
}

/// `ncclRecv` of `count` elements from rank `peer`.
///
/// # Safety
/// See the comment above this group of collectives (`recv` only).
pub(crate) unsafe fn nccl_recv(
    _bound: &Bound<'_>,
    recv: *mut c_void,
    count: usize,
    dtype: ncclDataType_t,
    peer: i32,
    comm: ncclComm_t,
    stream: CUstream,
) -> Result<()> {
    // SAFETY: the caller vouches for the communicator, the buffer and the stream.
    check_nccl(unsafe { nccl::ncclRecv(recv, count, dtype, peer, comm, nccl_stream(stream)) }, "ncclRecv")
}

/// `ncclGroupStart`: the calls up to [`nccl_group_end`] are issued as one operation.
pub(crate) fn nccl_group_start(_bound: &Bound<'_>) -> Result<()> {
    // SAFETY: takes no arguments; it only opens this thread's group.
    check_nccl(unsafe { nccl::ncclGroupStart() }, "ncclGroupStart")
}

/// `ncclGroupEnd`: issues the calls since [`nccl_group_start`].
pub(crate) fn nccl_group_end(_bound: &Bound<'_>) -> Result<()> {
    // SAFETY: takes no arguments; the calls of the group were each vouched for by their caller.
    check_nccl(unsafe { nccl::ncclGroupEnd() }, "ncclGroupEnd")
}

#[cfg(test)]
mod tests {
    /// The layer is the crate's only caller of CUDA and NCCL: no other source file names a
    /// `sys::cu...` driver function or NCCL's bindings (`cudarc::nccl::sys`, whose types this file
    /// re-exports).
    #[test]
    fn driver_and_nccl_calls_only_in_the_result_layer() {
        let mut outside = Vec::new();
        for path in crate::sys::source_files() {
            if path.file_name().is_some_and(|name| name == "result.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a readable source");
            for (number, line) in text.lines().enumerate() {
                if line.contains("sys::cu") || line.contains("sys::is_culib_present") || line.contains("nccl::sys") {
                    outside.push(format!("{}:{}: {}", path.display(), number + 1, line.trim()));
                }
            }
        }
        assert!(outside.is_empty(), "driver or NCCL calls outside result.rs:\n{}", outside.join("\n"));
    }
}
