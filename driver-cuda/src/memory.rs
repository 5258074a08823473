//! Buffer memory on a CUDA device.
//!
//! - Device-local (`DEVICE_LOCAL`): `cuMemAlloc`, zeroed at allocation; the host cannot map it.
//!   Freed with `cuMemFreeAsync` on the context's free stream, which waits for no running work
//!   (`cuMemFree` would wait for the whole device, and stall other threads' launches meanwhile).
//! - Host-visible (`HOST_VISIBLE | HOST_COHERENT | HOST_CACHED`): pinned host memory from
//!   `cuMemHostAlloc(DEVICEMAP | PORTABLE)`, zeroed; the host maps it and kernels reach it through
//!   its device pointer. A dropped buffer's block is kept for reuse (`crate::pinned_cache`).
//! - Transient device-local (`queue_alloca`): no memory until the alloca is enqueued, which calls
//!   `cuMemAllocFromPoolAsync` on the queue's stream from the device's default memory pool and sets
//!   the address there and then (stream order makes it usable by work after the alloca); the dealloca
//!   enqueues `cuMemFreeAsync`. A transient buffer dropped without its dealloca is freed then. Its
//!   contents start undefined.
//! - Transient host-visible: CUDA has no stream-ordered pinned allocation, so the pinned memory is
//!   allocated when the buffer is created (a slow call, but not one that waits on the device) and
//!   only published (address, mapping) between the alloca and the dealloca in queue order; it is
//!   freed when the last handle drops.
//! - Imported from an opaque file descriptor (`ExternalMemory::OpaqueFd`, memory Vulkan exported):
//!   `cuImportExternalMemory` of a duplicate of the descriptor, mapped whole with
//!   `cuExternalMemoryGetMappedBuffer`; on drop the mapping is freed (`cuMemFree`), the imported
//!   object destroyed (`cuDestroyExternalMemory`), and then the release runs.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::sys::{self, CUdeviceptr, CUexternalMemory, CUmemoryPool};
use hal::driver::BufferBackend;
use hal::driver::BufferExt;
use hal::driver::{HostView, ImportedHostMemory, ReleaseOnce};
use hal::driver::{get_mut, lock};
use hal::{Buffer, Error, Result};

use crate::pinned_cache;
use crate::queue_stream::CudaStream;
use crate::sys::context::{Bound, Context, PinnedBlock};
use crate::sys::result;

/// Which kind of memory a buffer has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// `cuMemAlloc`.
    Device,
    /// Pinned, mapped host memory.
    Host,
    /// `queue_alloca` memory from the device's memory pool.
    TransientDevice,
    /// `queue_alloca` of a host-visible type: pinned at creation, published in queue order.
    TransientHost,
    /// The embedder's host memory (`Device::import_host_memory`), registered and device-mapped.
    Imported,
    /// The embedder's host memory that was already pinned and device-mapped when imported (memory
    /// of a host-visible buffer of this HAL, or registered by the embedder): used through its
    /// mapping, never registered or unregistered here.
    ImportedPinned,
    /// Device memory another library allocated (`Device::import_external_memory`): used at its
    /// address, never freed here; handed back through `release` on drop.
    ImportedDevice,
    /// A memory object another API exported as an opaque file descriptor, imported and mapped
    /// here: the mapping is freed and the import destroyed on drop, then `release` runs.
    ImportedFd,
}

/// Where a transient buffer is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Uncommitted,
    Committed,
    Released,
}

/// Bytes of memory a device's buffers hold now (device and pinned host memory together).
#[derive(Debug, Default)]
pub struct MemoryCounter(AtomicU64);

impl MemoryCounter {
    /// Bytes held now.
    pub fn in_use(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The memory of one buffer.
pub struct CudaMemory {
    context: Arc<Context>,
    counter: Arc<MemoryCounter>,
    /// Bytes this buffer counts in `counter` now.
    counted: AtomicU64,
    size: u64,
    kind: MemoryKind,
    /// The published device address (0: none now).
    address: AtomicU64,
    /// The published host address (null: none now, or device memory).
    host: AtomicPtr<u8>,
    /// Pinned memory behind host kinds (null for device kinds), freed on drop (imported memory:
    /// unregistered, then handed back through `release`).
    pinned: *mut u8,
    /// The embedder's release of imported memory, run after it is unregistered.
    release: Option<ReleaseOnce>,
    /// Its device pointer.
    pinned_address: CUdeviceptr,
    /// Its length (page-rounded: it may be a reused block), for the pinned cache.
    pinned_bytes: usize,
    /// The imported object behind an `ImportedFd` buffer (null for other kinds), destroyed in `Drop`.
    external: CUexternalMemory,
    state: Mutex<State>,
}

// SAFETY: the raw pointers and the imported object name memory this value owns and frees once in
// `Drop`; transitions are serialised by `state`, and the published addresses are atomics.
unsafe impl Send for CudaMemory {}
// SAFETY: see `Send`.
unsafe impl Sync for CudaMemory {}

impl CudaMemory {
    /// `size` zeroed bytes of device memory, counted in `counter`.
    pub fn device(context: &Arc<Context>, counter: &Arc<MemoryCounter>, size: u64) -> Result<Self> {
        let bound = context.bind()?;
        // CUDA refuses 0-byte allocations; a 0-byte buffer gets one byte it never exposes, so it has
        // an address like every other buffer.
        let bytes = to_usize(size)?.max(1);
        let address =
            result::mem_alloc(&bound, bytes).map_err(|e| e.context(format!("device allocation of {size} bytes")))?;
        let memory = CudaMemory::with(context, counter, size, MemoryKind::Device, address, std::ptr::null_mut(), 0);
        memory.count(size);
        // `address` holds `bytes` bytes just allocated. The memset runs on the legacy stream, which
        // does not wait for the queues' non-blocking streams.
        result::memset_d8(&bound, address, 0, bytes)?;
        // cuMemsetD8 may return before the memset ran, and queue streams do not wait for the legacy
        // stream: wait for it here, so the zeroes are in place before any queue uses the buffer.
        result::legacy_stream_synchronize(&bound)?;
        Ok(memory)
    }

    /// `size` zeroed bytes of pinned, mapped host memory, counted in `counter`.
    pub fn host(context: &Arc<Context>, counter: &Arc<MemoryCounter>, size: u64) -> Result<Self> {
        let block = pinned_cache::allocate(context, size)?;
        let (pinned, address) = (block.host.cast(), block.address);
        let mut memory = CudaMemory::with(context, counter, size, MemoryKind::Host, address, pinned, address);
        memory.pinned_bytes = block.bytes;
        memory.count(size);
        Ok(memory)
    }

    /// The embedder's host memory, registered with the device (page-locked and device-mapped) until
    /// the buffer drops, then unregistered and released. Not counted: the embedder allocated it.
    pub fn import(context: &Arc<Context>, counter: &Arc<MemoryCounter>, memory: ImportedHostMemory) -> Result<Self> {
        let bound = context.bind()?;
        let (host, size) = (memory.ptr().as_ptr(), memory.length());
        let bytes = to_usize(size)?;
        // Memory CUDA already maps (say, a range of a host-visible buffer, which an embedder that
        // sub-allocates hands back per operation) cannot be registered again: CUDA refuses a second
        // registration of a page. Its device address is used as it is.
        if let Ok(address) = result::mem_host_get_device_pointer(&bound, host.cast()) {
            let mut imported =
                CudaMemory::with(context, counter, size, MemoryKind::ImportedPinned, address, host, address);
            imported.release = Some(memory.into_release());
            return Ok(imported);
        }
        let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
        // SAFETY: the embedder lends `bytes` bytes at `host` until the release runs, which is after
        // the unregister (in `Drop`, or just below on failure).
        unsafe { result::mem_host_register(&bound, host.cast(), bytes, flags) }
            .map_err(|e| e.context(format!("import of {size} host bytes at {host:p}")))?;
        let address = match result::mem_host_get_device_pointer(&bound, host.cast()) {
            Ok(address) => address,
            Err(e) => {
                // SAFETY: registered just above, not used by the device since.
                let _ = unsafe { result::mem_host_unregister(&bound, host.cast()) };
                return Err(e.context(format!("import of {size} host bytes at {host:p}")));
            }
        };
        let mut imported = CudaMemory::with(context, counter, size, MemoryKind::Imported, address, host, address);
        imported.release = Some(memory.into_release());
        Ok(imported)
    }

    /// `length` bytes of device memory at `address` that another library allocated, after checking
    /// that the whole range lies in one device allocation on this context's GPU. Not counted: the
    /// other library allocated it. `release` runs when the buffer drops (or now, on an error).
    pub fn import_device(
        context: &Arc<Context>,
        counter: &Arc<MemoryCounter>,
        address: CUdeviceptr,
        length: u64,
        release: ReleaseOnce,
    ) -> Result<Self> {
        let what = || format!("import of CUDA device pointer {address:#x} (+{length} bytes)");
        let bound = context.bind()?;
        let range = result::pointer_range(&bound, address)
            .map_err(|e| e.context(format!("{}: not an address CUDA allocated", what())))?;
        let device_memory = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32;
        if range.memory_type != device_memory {
            return Err(Error::invalid_argument(format!(
                "{}: CUDA memory type {} is not device memory (CU_MEMORYTYPE_DEVICE = {device_memory})",
                what(),
                range.memory_type
            )));
        }
        if usize::try_from(range.ordinal).ok() != Some(context.ordinal()) {
            return Err(Error::invalid_argument(format!(
                "{}: memory of GPU {}, and this device is GPU {}",
                what(),
                range.ordinal,
                context.ordinal()
            )));
        }
        let end = address.checked_add(length);
        if end.is_none_or(|end| end > range.start + range.size as u64) {
            return Err(Error::out_of_range(format!(
                "{}: past the end of its allocation [{:#x}, +{} bytes)",
                what(),
                range.start,
                range.size
            )));
        }
        let mut imported =
            CudaMemory::with(context, counter, length, MemoryKind::ImportedDevice, address, std::ptr::null_mut(), 0);
        imported.release = Some(release);
        Ok(imported)
    }

    /// The whole memory object of `length` bytes (its allocation size) that another API exported
    /// as the opaque file descriptor `fd`, imported (`cuImportExternalMemory`, `dedicated` telling
    /// CUDA it is a dedicated allocation) and mapped (`cuExternalMemoryGetMappedBuffer`). `fd` is
    /// only borrowed: CUDA is handed a duplicate, which it owns once the import succeeded and which
    /// is closed here when it fails. Not counted: the other API allocated it. `release` runs when
    /// the buffer drops, after the import is destroyed (or now, on an error).
    pub fn import_opaque_fd(
        context: &Arc<Context>,
        counter: &Arc<MemoryCounter>,
        fd: i32,
        length: u64,
        dedicated: bool,
        release: ReleaseOnce,
    ) -> Result<Self> {
        use std::os::fd::{AsRawFd, BorrowedFd, IntoRawFd};
        let what = || format!("import of opaque file descriptor {fd} ({length} bytes)");
        let bound = context.bind()?;
        // SAFETY: the caller of `Device::import_external_memory` handed over an open descriptor,
        // which the HAL keeps open for the length of this call.
        let duplicate = unsafe { BorrowedFd::borrow_raw(fd) }
            .try_clone_to_owned()
            .map_err(|e| Error::invalid_argument(format!("cuda: {}: duplicating the descriptor: {e}", what())))?;
        // SAFETY: `duplicate` is open and ours; CUDA takes it only on success (then it is given up
        // below), and on failure it drops, closed, here.
        let external = unsafe { result::import_external_memory_fd(&bound, duplicate.as_raw_fd(), length, dedicated) }
            .map_err(|e| e.context(what()))?;
        let _ = duplicate.into_raw_fd();
        let address = match result::external_memory_get_mapped_buffer(&bound, external, length) {
            Ok(address) => address,
            Err(e) => {
                // SAFETY: imported just above, nothing mapped onto it, used by nothing.
                let _ = unsafe { result::destroy_external_memory(&bound, external) };
                return Err(e.context(what()));
            }
        };
        let mut imported =
            CudaMemory::with(context, counter, length, MemoryKind::ImportedFd, address, std::ptr::null_mut(), 0);
        imported.external = external;
        imported.release = Some(release);
        Ok(imported)
    }

    /// A transient buffer of `size` bytes; `host_visible` selects pinned host memory. Counted in
    /// `counter` while it has memory.
    pub fn transient(
        context: &Arc<Context>,
        counter: &Arc<MemoryCounter>,
        size: u64,
        host_visible: bool,
    ) -> Result<Self> {
        let mut memory = if host_visible {
            let block = pinned_cache::allocate(context, size)?;
            let (pinned, address) = (block.host.cast(), block.address);
            let mut memory = CudaMemory::with(context, counter, size, MemoryKind::TransientHost, 0, pinned, address);
            memory.pinned_bytes = block.bytes;
            memory.count(size);
            memory
        } else {
            CudaMemory::with(context, counter, size, MemoryKind::TransientDevice, 0, std::ptr::null_mut(), 0)
        };
        *get_mut(&mut memory.state) = State::Uncommitted;
        Ok(memory)
    }

    fn count(&self, bytes: u64) {
        self.counted.fetch_add(bytes, Ordering::Relaxed);
        self.counter.0.fetch_add(bytes, Ordering::Relaxed);
    }

    fn uncount(&self) {
        let bytes = self.counted.swap(0, Ordering::Relaxed);
        self.counter.0.fetch_sub(bytes, Ordering::Relaxed);
    }

    #[allow(clippy::too_many_arguments)]
    fn with(
        context: &Arc<Context>,
        counter: &Arc<MemoryCounter>,
        size: u64,
        kind: MemoryKind,
        address: CUdeviceptr,
        pinned: *mut u8,
        pinned_address: CUdeviceptr,
    ) -> Self {
        let published_host = if address != 0 { pinned } else { std::ptr::null_mut() };
        CudaMemory {
            context: context.clone(),
            counter: counter.clone(),
            counted: AtomicU64::new(0),
            size,
            kind,
            address: AtomicU64::new(address),
            host: AtomicPtr::new(published_host),
            pinned,
            pinned_address,
            pinned_bytes: 0,
            external: std::ptr::null_mut(),
            release: None,
            state: Mutex::new(State::Committed),
        }
    }

    /// The `CudaMemory` behind `buffer`, or `InvalidArgument` when another driver made it.
    pub fn of(buffer: &Buffer) -> Result<&CudaMemory> {
        buffer.backend().as_any().downcast_ref::<CudaMemory>().ok_or_else(|| {
            Error::invalid_argument(format!("{}: its memory was not allocated by the cuda driver", buffer))
        })
    }

    /// The context (and so the GPU) it belongs to.
    pub fn context(&self) -> &Arc<Context> {
        &self.context
    }

    /// Whether it is a `queue_alloca` buffer (its address is known only once the alloca is enqueued).
    pub fn is_transient(&self) -> bool {
        matches!(self.kind, MemoryKind::TransientDevice | MemoryKind::TransientHost)
    }

    /// Whether it is host memory (pinned).
    pub fn is_host(&self) -> bool {
        matches!(
            self.kind,
            MemoryKind::Host | MemoryKind::TransientHost | MemoryKind::Imported | MemoryKind::ImportedPinned
        )
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn refuse(&self, what: &str, why: &str) -> Error {
        Error::failed_precondition(format!("transient memory of {} bytes: {what} {why}", self.size))
    }

    /// The alloca, enqueued on `stream`: takes memory from `pool` in stream order and publishes it.
    pub(crate) fn commit_async(&self, bound: &Bound<'_>, stream: &CudaStream, pool: CUmemoryPool) -> Result<()> {
        let mut state = self.state();
        match (*state, self.kind) {
            (
                _,
                MemoryKind::Device
                | MemoryKind::Host
                | MemoryKind::Imported
                | MemoryKind::ImportedPinned
                | MemoryKind::ImportedDevice
                | MemoryKind::ImportedFd,
            ) => {
                return Err(self.refuse("alloca", "of a buffer that is not transient"));
            }
            (State::Committed, _) => return Err(self.refuse("alloca", "a second time (the alloca already ran)")),
            (State::Released, _) => return Err(self.refuse("alloca", "after its dealloca")),
            (State::Uncommitted, _) => {}
        }
        if self.kind == MemoryKind::TransientHost {
            self.address.store(self.pinned_address, Ordering::Release);
            self.host.store(self.pinned, Ordering::Release);
        } else {
            // One byte for a 0-byte buffer, as in `device`.
            let address = result::mem_alloc_from_pool_async(bound, to_usize(self.size)?.max(1), pool, stream.raw())
                .map_err(|e| e.context(format!("queue_alloca of {} bytes", self.size)))?;
            self.address.store(address, Ordering::Release);
            self.count(self.size);
        }
        *state = State::Committed;
        Ok(())
    }

    /// The dealloca, enqueued on `stream`: frees in stream order and unpublishes the address.
    pub fn release_async(&self, bound: &Bound<'_>, stream: &CudaStream) -> Result<()> {
        let mut state = self.state();
        match (*state, self.kind) {
            (
                _,
                MemoryKind::Device
                | MemoryKind::Host
                | MemoryKind::Imported
                | MemoryKind::ImportedPinned
                | MemoryKind::ImportedDevice
                | MemoryKind::ImportedFd,
            ) => {
                return Err(self.refuse("dealloca", "of a buffer that is not transient"));
            }
            (State::Uncommitted, _) => return Err(self.refuse("dealloca", "before its alloca")),
            (State::Released, _) => return Err(self.refuse("dealloca", "a second time")),
            (State::Committed, _) => {}
        }
        let address = self.address.swap(0, Ordering::AcqRel);
        self.host.store(std::ptr::null_mut(), Ordering::Release);
        if self.kind == MemoryKind::TransientDevice {
            // SAFETY: `address` came from cuMemAllocFromPoolAsync and is freed once (the state moves to
            // `Released`), in stream order after every use enqueued before this point; it was
            // unpublished above, so no later command can resolve it.
            unsafe { result::mem_free_async(bound, address, stream.raw()) }?;
            self.uncount();
        }
        *state = State::Released;
        Ok(())
    }
}

fn to_usize(size: u64) -> Result<usize> {
    usize::try_from(size)
        .map_err(|_| Error::resource_exhausted(format!("allocation of {size} bytes does not fit the address space")))
}

// SAFETY: `size` is fixed at creation. `host` is null or `pinned`, which holds `size` bytes (zeroed by
// `pinned_cache::allocate`, or the embedder's imported memory, lent until its release runs after `Drop`) and is
// freed only in `Drop`: a transient buffer's dealloca unpublishes it without
// freeing it. So a borrowed view, which cannot outlive `self`, always addresses live memory.
unsafe impl BufferBackend for CudaMemory {
    fn size(&self) -> u64 {
        self.size
    }

    fn host_view(&self) -> Option<HostView<'_>> {
        NonNull::new(self.host.load(Ordering::Acquire)).map(HostView::borrowed)
    }

    fn device_address(&self) -> u64 {
        self.address.load(Ordering::Acquire)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        self.uncount();
        let Ok(bound) = self.context.bind() else { return };
        let state = *get_mut(&mut self.state);
        let address = *self.address.get_mut();
        let freed = match self.kind {
            // SAFETY: allocated by cuMemAlloc in `device`, freed once here; no queue work holds the
            // buffer any more (submissions keep a handle until they retire).
            MemoryKind::Device => unsafe { result::mem_free(&bound, address) },
            MemoryKind::Host | MemoryKind::TransientHost => {
                let block =
                    PinnedBlock { host: self.pinned.cast(), address: self.pinned_address, bytes: self.pinned_bytes };
                // SAFETY: from `pinned_cache::allocate` with this context, released once here; no
                // queue work holds the buffer, and host views borrow `self`, so none is left.
                unsafe { pinned_cache::release(&bound, block) }
            }
            MemoryKind::TransientDevice if state == State::Committed => {
                // SAFETY: pool memory not freed by a dealloca; every submission using it retired, so
                // freeing on the free stream (ordered after nothing) is safe.
                unsafe { result::mem_free_async(&bound, address, self.context.free_stream()) }
            }
            MemoryKind::TransientDevice => Ok(()),
            // SAFETY: registered by `import`, unregistered once here; no queue work holds the buffer.
            MemoryKind::Imported => unsafe { result::mem_host_unregister(&bound, self.pinned.cast()) },
            // Pinned by its owner, who unpins it (after the release below hands it back).
            MemoryKind::ImportedPinned => Ok(()),
            // Another library's: the release below hands it back, and it frees it.
            MemoryKind::ImportedDevice => Ok(()),
            MemoryKind::ImportedFd => {
                // SAFETY: mapped by `import_opaque_fd`, freed once here; no queue work holds the
                // buffer any more.
                let unmapped = unsafe { result::mem_free_mapped(&bound, address) };
                // SAFETY: imported by `import_opaque_fd`, destroyed once here, after its one mapping
                // was freed (a failed free leaves nothing else to do with it).
                let destroyed = unsafe { result::destroy_external_memory(&bound, self.external) };
                unmapped.and(destroyed)
            }
        };
        if let Err(e) = freed {
            tracing::debug!(%e, size = self.size, "freeing buffer memory failed");
        }
    }
}

impl std::fmt::Debug for CudaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaMemory").field("kind", &self.kind).field("size", &self.size).finish()
    }
}

/// The device address of `[offset, offset + length)` of `buffer`, after checking the range and that
/// the buffer has memory now.
pub(crate) fn resolve_address(buffer: &Buffer, offset: u64, length: u64) -> Result<u64> {
    buffer.check_range(offset, length)?;
    let base = buffer.backend().device_address();
    if base == 0 {
        return Err(Error::failed_precondition(format!(
            "{}: has no memory (a transient buffer whose queue_alloca has not run, or whose \
             queue_dealloca already ran)",
            buffer
        )));
    }
    Ok(base + buffer.memory_offset() + offset)
}
