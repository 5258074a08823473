//! IREE's device allocator over HAL memory.
//!
//! IREE asks for memory by type (device-local, host-visible, both) and usage; this allocator gives
//! it the HAL memory that fits, as IREE's own GPU drivers do:
//! - **device-local** requests get HAL device-local buffers (GPU memory the host cannot map; IREE
//!   then moves data with queue copies and host-visible staging). Where the device's device-local
//!   memory is also host-visible (cpu-sim, whose memory is host memory), the buffer is mapped in place.
//! - **host-visible** requests get host-visible memory: on a GPU a block of the device's pool (pinned
//!   memory on CUDA), reported as host-local and device-visible. Device-local *and* host-visible
//!   memory (IREE's CUDA driver uses managed memory) falls back to that host memory with IREE's
//!   `LOW_PERFORMANCE` bit, as IREE's CUDA driver does without concurrent managed access: IREE's
//!   compiler asks for it only for readback staging.
//! - `queue_alloca` of memory the host need not map is the HAL's own queue-ordered allocation
//!   (`hal::Queue::alloca`), and `queue_dealloca` of it the HAL's dealloca.
//! - host allocations IREE imports become HAL host-memory imports where the memory asked for is not
//!   device-local (host memory is not, on a GPU).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

use hal::{MemoryType, SemaphoreValue};

use crate::buffer::{HalBuffer, Host, Memory, Shape, host_address};
use crate::ffi::{self, iree_status_t, sys};
use crate::pinned_pool::PinnedPool;

/// IREE's memory-type, usage and compatibility bits this module reads and writes.
pub(crate) mod bits {
    use crate::ffi::sys;

    pub const OPTIMAL: u32 = sys::iree_hal_memory_type_bits_t_IREE_HAL_MEMORY_TYPE_OPTIMAL;
    pub const HOST_VISIBLE: u32 = sys::iree_hal_memory_type_bits_t_IREE_HAL_MEMORY_TYPE_HOST_VISIBLE;
    pub const HOST_COHERENT: u32 = sys::iree_hal_memory_type_bits_t_IREE_HAL_MEMORY_TYPE_HOST_COHERENT;
    pub const HOST_CACHED: u32 = sys::iree_hal_memory_type_bits_t_IREE_HAL_MEMORY_TYPE_HOST_CACHED;
    pub const HOST_LOCAL: u32 = sys::iree_hal_memory_type_bits_t_IREE_HAL_MEMORY_TYPE_HOST_LOCAL;
    pub const DEVICE_VISIBLE: u32 = sys::iree_hal_memory_type_bits_t_IREE_HAL_MEMORY_TYPE_DEVICE_VISIBLE;
    pub const DEVICE_LOCAL: u32 = sys::iree_hal_memory_type_bits_t_IREE_HAL_MEMORY_TYPE_DEVICE_LOCAL;

    pub const USAGE_TRANSFER: u32 = sys::iree_hal_buffer_usage_bits_t_IREE_HAL_BUFFER_USAGE_TRANSFER;
    pub const USAGE_DISPATCH: u32 = sys::iree_hal_buffer_usage_bits_t_IREE_HAL_BUFFER_USAGE_DISPATCH;
    pub const USAGE_MAPPING_SCOPED: u32 = sys::iree_hal_buffer_usage_bits_t_IREE_HAL_BUFFER_USAGE_MAPPING_SCOPED;
    pub const USAGE_MAPPING_PERSISTENT: u32 =
        sys::iree_hal_buffer_usage_bits_t_IREE_HAL_BUFFER_USAGE_MAPPING_PERSISTENT;
    pub const USAGE_MAPPING_ACCESS_RANDOM: u32 =
        sys::iree_hal_buffer_usage_bits_t_IREE_HAL_BUFFER_USAGE_MAPPING_ACCESS_RANDOM;

    pub const ALLOCATABLE: u32 = sys::iree_hal_buffer_compatibility_bits_t_IREE_HAL_BUFFER_COMPATIBILITY_ALLOCATABLE;
    pub const IMPORTABLE: u32 = sys::iree_hal_buffer_compatibility_bits_t_IREE_HAL_BUFFER_COMPATIBILITY_IMPORTABLE;
    pub const QUEUE_TRANSFER: u32 =
        sys::iree_hal_buffer_compatibility_bits_t_IREE_HAL_BUFFER_COMPATIBILITY_QUEUE_TRANSFER;
    pub const QUEUE_DISPATCH: u32 =
        sys::iree_hal_buffer_compatibility_bits_t_IREE_HAL_BUFFER_COMPATIBILITY_QUEUE_DISPATCH;
    pub const LOW_PERFORMANCE: u32 =
        sys::iree_hal_buffer_compatibility_bits_t_IREE_HAL_BUFFER_COMPATIBILITY_LOW_PERFORMANCE;

    pub const ACCESS_ALL: u16 = sys::iree_hal_memory_access_bits_t_IREE_HAL_MEMORY_ACCESS_ALL as u16;
}

/// Where a request's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// A HAL buffer of this memory type.
    Hal(MemoryType),
    /// A block of the device's host-visible pool.
    Pool,
}

/// What a request resolves to on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub source: Source,
    /// IREE's memory type of the buffer this gives.
    pub memory_type: u32,
    /// IREE's usage of the buffer this gives (what was asked for, plus mapping where host-visible).
    pub usage: u32,
    /// IREE's compatibility bits for the request.
    pub compatibility: u32,
}

/// Resolves IREE's `memory_type` and `usage` against a device's HAL memory types (`pooled`: its
/// host-visible memory comes from a pool of blocks). See the module docs for the rules.
pub(crate) fn resolve(types: &[MemoryType], pooled: bool, memory_type: u32, usage: u32) -> Resolved {
    let mut memory_type = memory_type & !bits::OPTIMAL;
    // Mappable device-local memory: the host must see it.
    if memory_type & bits::DEVICE_LOCAL == bits::DEVICE_LOCAL
        && usage & (bits::USAGE_MAPPING_SCOPED | bits::USAGE_MAPPING_PERSISTENT) != 0
    {
        memory_type |= bits::HOST_VISIBLE;
    }
    let needs_host = memory_type & bits::HOST_VISIBLE != 0;
    // A request for device-visible memory alone is served as device-local (the faster for it).
    let wants_device = memory_type & bits::DEVICE_LOCAL == bits::DEVICE_LOCAL || !needs_host;
    let both = MemoryType::DEVICE_LOCAL | MemoryType::HOST_VISIBLE;
    let find = |want: MemoryType| types.iter().copied().find(|t| t.contains(want));
    // Without a pool, memory both device-local and host-visible (cpu-sim's) serves host requests too.
    let host = || match pooled {
        true => Some(Source::Pool),
        false => find(both).or_else(|| find(MemoryType::HOST_VISIBLE)).map(Source::Hal),
    };
    let mut compatibility = bits::ALLOCATABLE;
    let source = if wants_device {
        match (find(both), find(MemoryType::DEVICE_LOCAL)) {
            (Some(shared), _) => Some(Source::Hal(shared)),
            (None, Some(local)) if !needs_host => Some(Source::Hal(local)),
            _ => {
                if memory_type & bits::DEVICE_LOCAL == bits::DEVICE_LOCAL {
                    compatibility |= bits::LOW_PERFORMANCE;
                }
                host()
            }
        }
    } else {
        host()
    };
    let Some(source) = source else {
        return Resolved { source: Source::Pool, memory_type, usage, compatibility: 0 };
    };
    let hal_type = match source {
        Source::Hal(t) => t,
        Source::Pool => MemoryType::HOST_LOCAL,
    };
    // Memory the host sees directly (HAL's `HOST_LOCAL`: visible and coherent) is IREE's host-local,
    // device-local or not (cpu-sim's device memory is host memory).
    let mut given = bits::DEVICE_VISIBLE;
    if hal_type.contains(MemoryType::DEVICE_LOCAL) {
        given |= bits::DEVICE_LOCAL;
    }
    if hal_type.contains(MemoryType::HOST_LOCAL) || !hal_type.contains(MemoryType::DEVICE_LOCAL) {
        given |= bits::HOST_LOCAL;
    }
    if hal_type.contains(MemoryType::HOST_VISIBLE) {
        given |= bits::HOST_VISIBLE;
    }
    if hal_type.contains(MemoryType::HOST_COHERENT) {
        given |= bits::HOST_COHERENT;
    }
    if hal_type.contains(MemoryType::HOST_CACHED) {
        given |= bits::HOST_CACHED;
    }
    let mut usage = usage | bits::USAGE_TRANSFER;
    if given & bits::HOST_VISIBLE != 0 {
        usage |= bits::USAGE_MAPPING_SCOPED | bits::USAGE_MAPPING_PERSISTENT | bits::USAGE_MAPPING_ACCESS_RANDOM;
        // Host memory the device reaches: an import of host memory gives the same.
        if given & bits::DEVICE_LOCAL != bits::DEVICE_LOCAL || hal_type.contains(both) {
            compatibility |= bits::IMPORTABLE;
        }
    }
    if usage & bits::USAGE_TRANSFER != 0 {
        compatibility |= bits::QUEUE_TRANSFER;
    }
    if usage & bits::USAGE_DISPATCH != 0 {
        compatibility |= bits::QUEUE_DISPATCH;
    }
    Resolved { source, memory_type: given, usage, compatibility }
}

/// How one device's IREE buffers get their HAL memory; shared by its allocator, which IREE may keep
/// past the device, and its queue operations.
pub(crate) struct DeviceMemory {
    /// `None` once the device is gone: buffers already made still work, new ones are refused.
    device: Mutex<Option<hal::Device>>,
    memory_types: Vec<MemoryType>,
    /// A GPU device's host-visible pool.
    pool: Option<Arc<PinnedPool>>,
    /// The IREE device, unretained (its buffers' placement).
    iree_device: AtomicPtr<sys::iree_hal_device_t>,
}

impl DeviceMemory {
    /// The memory of `device`; `pool`: a GPU device's host-visible pool.
    pub(crate) fn new(device: hal::Device, pool: Option<Arc<PinnedPool>>) -> Arc<DeviceMemory> {
        let memory_types = device.info().memory_types.clone();
        Arc::new(DeviceMemory {
            device: Mutex::new(Some(device)),
            memory_types,
            pool,
            iree_device: AtomicPtr::new(std::ptr::null_mut()),
        })
    }

    /// Names the IREE device its buffers are placed on.
    pub(crate) fn set_iree_device(&self, device: *mut sys::iree_hal_device_t) {
        self.iree_device.store(device, Ordering::Relaxed);
    }

    /// Lets go of the HAL device and the pool's idle blocks; allocations fail from now on.
    pub(crate) fn close(&self) {
        *hal::driver::lock(&self.device) = None;
        if let Some(pool) = &self.pool {
            pool.close();
        }
    }

    fn device(&self) -> Result<hal::Device, hal::Error> {
        hal::driver::lock(&self.device)
            .clone()
            .ok_or_else(|| hal::Error::failed_precondition("an allocation for an IREE device that is gone"))
    }

    /// `params` resolved on this device.
    pub(crate) fn resolve(&self, params: &sys::iree_hal_buffer_params_t) -> Resolved {
        resolve(&self.memory_types, self.pool.is_some(), params.type_, params.usage)
    }

    /// What IREE sees of a buffer for `params`; `queue`: the queue that allocates it in queue order.
    fn shape(
        &self,
        params: &sys::iree_hal_buffer_params_t,
        resolved: &Resolved,
        size: u64,
        queue: Option<usize>,
    ) -> Shape {
        let queue_affinity = match queue {
            Some(index) => 1u64 << (index % 64),
            None if params.queue_affinity == 0 => u64::MAX,
            None => params.queue_affinity,
        };
        let flags = match queue {
            Some(_) => sys::iree_hal_buffer_placement_flag_bits_t_IREE_HAL_BUFFER_PLACEMENT_FLAG_ASYNCHRONOUS,
            None => 0,
        };
        Shape {
            placement: sys::iree_hal_buffer_placement_t {
                device: self.iree_device.load(Ordering::Relaxed),
                queue_affinity,
                flags,
                reserved: 0,
            },
            memory_type: resolved.memory_type,
            access: if params.access == 0 { bits::ACCESS_ALL } else { params.access },
            usage: resolved.usage,
            size,
        }
    }

    /// A buffer of `size` bytes for `params`, allocated now.
    pub(crate) fn allocate(
        &self,
        params: &sys::iree_hal_buffer_params_t,
        size: u64,
    ) -> Result<*mut sys::iree_hal_buffer_t, hal::Error> {
        let resolved = self.resolve(params);
        if resolved.compatibility & bits::ALLOCATABLE == 0 {
            return Err(hal::Error::invalid_argument(format!(
                "no memory of this device has IREE memory type {:#x} with usage {:#x}",
                params.type_, params.usage
            )));
        }
        // IREE may ask for an empty buffer; the HAL allocates at least a byte.
        let shape = self.shape(params, &resolved, size, None);
        let bytes = size.max(4);
        let (memory, host) = match resolved.source {
            Source::Pool => {
                let pool = self.pool.clone().ok_or_else(|| hal::Error::internal("a pooled request without a pool"))?;
                let block = pool.take(bytes)?;
                let host = block.host();
                (Memory::Pooled { pool, block }, Host::At(host))
            }
            Source::Hal(memory_type) => {
                let buffer = self.device()?.allocate_buffer(hal_params(memory_type), bytes)?;
                let host = match memory_type.contains(MemoryType::HOST_VISIBLE) {
                    true => Host::At(host_address(&buffer)?),
                    false => Host::Unmapped,
                };
                (Memory::Hal(buffer), host)
            }
        };
        Ok(HalBuffer::create(&shape, memory, host))
    }

    /// A HAL buffer of `size` bytes of `memory_type`, allocated now (a queue pool's slab).
    pub(crate) fn allocate_hal(&self, memory_type: MemoryType, size: u64) -> Result<hal::Buffer, hal::Error> {
        self.device()?.allocate_buffer(hal_params(memory_type), size)
    }

    /// What IREE sees of a pool-placed buffer of `size` bytes for `params`: the memory of the pool's
    /// slabs (device-local requests' memory), with the usage asked for.
    pub(crate) fn slab_shape(&self, params: &sys::iree_hal_buffer_params_t, size: u64) -> Shape {
        let slab = resolve(&self.memory_types, false, bits::DEVICE_LOCAL, params.usage);
        self.shape(params, &slab, size, None)
    }

    /// A host-visible buffer of `size` bytes for staging a transfer through the host (a file's bytes
    /// on their way to or from device memory): transfer and mapping usage, every access.
    pub(crate) fn allocate_staging(&self, size: u64) -> Result<*mut sys::iree_hal_buffer_t, hal::Error> {
        let params = sys::iree_hal_buffer_params_t {
            usage: bits::USAGE_TRANSFER | bits::USAGE_MAPPING_SCOPED,
            access: bits::ACCESS_ALL,
            type_: bits::HOST_LOCAL | bits::DEVICE_VISIBLE,
            ..Default::default()
        };
        self.allocate(&params, size)
    }

    /// `queue_alloca` through the HAL's queue-ordered allocation: `Ok(None)` where the memory comes
    /// from a GPU's host-visible pool or cannot be had (allocated at once instead, or refused: the
    /// caller's fallback).
    pub(crate) fn alloca(
        &self,
        queue: &hal::Queue,
        waits: &[SemaphoreValue],
        params: &sys::iree_hal_buffer_params_t,
        size: u64,
        signals: &[SemaphoreValue],
    ) -> Result<Option<*mut sys::iree_hal_buffer_t>, hal::Error> {
        let resolved = self.resolve(params);
        let Source::Hal(memory_type) = resolved.source else { return Ok(None) };
        if resolved.compatibility & bits::ALLOCATABLE == 0 {
            return Ok(None);
        }
        // Host-visible queue-ordered memory (cpu-sim's) is mapped once its alloca has run.
        let host = if memory_type.contains(MemoryType::HOST_VISIBLE) { Host::Committed } else { Host::Unmapped };
        let buffer = queue.alloca(waits, hal_params(memory_type), size.max(4), signals)?;
        let shape = self.shape(params, &resolved, size, Some(queue.index()));
        Ok(Some(HalBuffer::create(&shape, Memory::Hal(buffer), host)))
    }

    /// IREE's import of host memory: a HAL import of it (mapped in place), released through
    /// `release` once IREE and the HAL are done with it.
    pub(crate) fn import(
        &self,
        params: &sys::iree_hal_buffer_params_t,
        external: &sys::iree_hal_external_buffer_t,
        release: sys::iree_hal_buffer_release_callback_t,
    ) -> Result<*mut sys::iree_hal_buffer_t, hal::Error> {
        if external.type_ != sys::iree_hal_external_buffer_type_e_IREE_HAL_EXTERNAL_BUFFER_TYPE_HOST_ALLOCATION {
            return Err(hal::Error::unavailable(format!(
                "external buffer type {} (this driver imports host allocations)",
                external.type_
            )));
        }
        let resolved = self.resolve(params);
        if resolved.compatibility & bits::IMPORTABLE == 0 {
            return Err(hal::Error::invalid_argument(format!(
                "host memory cannot serve IREE memory type {:#x} on this device (it is not device-local)",
                params.type_
            )));
        }
        // SAFETY: IREE's host-allocation handle.
        let ptr = unsafe { external.handle.host_allocation.ptr };
        let host = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| hal::Error::invalid_argument("an import of host memory at NULL"))?;
        let device = self.device()?;
        let size = external.size as u64;
        let mut host_resolved = resolved;
        host_resolved.memory_type = bits::HOST_LOCAL | bits::DEVICE_VISIBLE | bits::HOST_VISIBLE;
        let shape = self.shape(params, &host_resolved, size, None);
        HalBuffer::create_imported(&shape, host, release, |released| {
            // SAFETY: IREE's import contract: the memory is valid until the release callback runs,
            // which the HAL's release (run once the buffer and its queued uses are gone) does.
            unsafe { device.import_host_memory(host, size, hal::BufferParams::host_visible(), released) }
        })
    }
}

fn hal_params(memory_type: MemoryType) -> hal::BufferParams {
    let mut usage = hal::BufferUsage::DEFAULT;
    if memory_type.contains(MemoryType::HOST_VISIBLE) {
        usage |= hal::BufferUsage::MAPPING;
    }
    hal::BufferParams::new(memory_type, usage)
}

/// IREE's allocator object.
#[repr(C)]
struct Allocator {
    resource: sys::iree_hal_resource_t,
    host_allocator: sys::iree_allocator_t,
    memory: Arc<DeviceMemory>,
}

/// An IREE allocator over `memory`; the caller holds the one reference.
pub(crate) fn create(
    memory: Arc<DeviceMemory>,
    host_allocator: sys::iree_allocator_t,
) -> *mut sys::iree_hal_allocator_t {
    let allocator =
        Box::into_raw(Box::new(Allocator { resource: sys::iree_hal_resource_t::default(), host_allocator, memory }));
    // SAFETY: a fresh record whose first field is the resource.
    unsafe { ffi::thal_iree_resource_initialize((&raw const VTABLE).cast(), &mut (*allocator).resource) };
    allocator.cast()
}

/// # Safety
/// `allocator` is a live allocator made by `create`.
unsafe fn cast<'a>(allocator: *const sys::iree_hal_allocator_t) -> &'a Allocator {
    // SAFETY: the caller's contract.
    unsafe { &*allocator.cast::<Allocator>() }
}

unsafe extern "C" fn destroy(allocator: *mut sys::iree_hal_allocator_t) {
    // SAFETY: IREE destroys a live allocator of ours once.
    drop(unsafe { Box::from_raw(allocator.cast::<Allocator>()) });
}

unsafe extern "C" fn host_allocator(allocator: *const sys::iree_hal_allocator_t) -> sys::iree_allocator_t {
    // SAFETY: IREE passes a live allocator of ours.
    unsafe { cast(allocator) }.host_allocator
}

unsafe extern "C" fn trim(_allocator: *mut sys::iree_hal_allocator_t) -> iree_status_t {
    ffi::ok()
}

unsafe extern "C" fn query_statistics(
    _allocator: *mut sys::iree_hal_allocator_t,
    out: *mut sys::iree_hal_allocator_statistics_t,
) {
    // SAFETY: writable, per IREE's contract (statistics are not kept: all zero).
    unsafe { *out = sys::iree_hal_allocator_statistics_t::default() };
}

unsafe extern "C" fn query_memory_heaps(
    allocator: *mut sys::iree_hal_allocator_t,
    capacity: usize,
    heaps: *mut sys::iree_hal_allocator_memory_heap_t,
    out_count: *mut usize,
) -> iree_status_t {
    // SAFETY: IREE passes a live allocator of ours.
    let memory = &unsafe { cast(allocator) }.memory;
    // One heap per HAL memory type, as IREE's memory types.
    let found: Vec<sys::iree_hal_allocator_memory_heap_t> = memory
        .memory_types
        .iter()
        .map(|&t| {
            let host_visible = t.contains(MemoryType::HOST_VISIBLE);
            let request = if t.contains(MemoryType::DEVICE_LOCAL) { bits::DEVICE_LOCAL } else { bits::HOST_LOCAL }
                | if host_visible { bits::HOST_VISIBLE } else { 0 };
            let resolved =
                resolve(std::slice::from_ref(&t), false, request, bits::USAGE_TRANSFER | bits::USAGE_DISPATCH);
            sys::iree_hal_allocator_memory_heap_t {
                type_: resolved.memory_type,
                allowed_usage: resolved.usage,
                max_allocation_size: usize::MAX,
                min_alignment: 64,
            }
        })
        .collect();
    if !out_count.is_null() {
        // SAFETY: writable, per IREE's contract.
        unsafe { *out_count = found.len() };
    }
    if capacity < found.len() {
        return ffi::status(ffi::code::OUT_OF_RANGE, &format!("{} memory heaps, room for {capacity}", found.len()));
    }
    // SAFETY: room for `capacity` heaps, per IREE's contract.
    unsafe { std::ptr::copy_nonoverlapping(found.as_ptr(), heaps, found.len()) };
    ffi::ok()
}

unsafe extern "C" fn query_buffer_compatibility(
    allocator: *mut sys::iree_hal_allocator_t,
    params: *mut sys::iree_hal_buffer_params_t,
    allocation_size: *mut sys::iree_device_size_t,
) -> sys::iree_hal_buffer_compatibility_t {
    // SAFETY: IREE passes a live allocator of ours and writable parameters and size.
    unsafe {
        let resolved = cast(allocator).memory.resolve(&*params);
        (*params).type_ = resolved.memory_type;
        (*params).usage = resolved.usage;
        if *allocation_size == 0 {
            *allocation_size = 4;
        }
        resolved.compatibility
    }
}

unsafe extern "C" fn allocate_buffer(
    allocator: *mut sys::iree_hal_allocator_t,
    params: *const sys::iree_hal_buffer_params_t,
    size: sys::iree_device_size_t,
    out: *mut *mut sys::iree_hal_buffer_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live allocator of ours, valid parameters and a writable output.
    ffi::guarded("allocate_buffer", || unsafe {
        ffi::write_out(out, cast(allocator).memory.allocate(&*params, size as u64))
    })
}

unsafe extern "C" fn deallocate_buffer(
    _allocator: *mut sys::iree_hal_allocator_t,
    buffer: *mut sys::iree_hal_buffer_t,
) {
    // SAFETY: IREE hands back a buffer whose last reference is gone.
    unsafe { sys::iree_hal_buffer_destroy(buffer) };
}

unsafe extern "C" fn import_buffer(
    allocator: *mut sys::iree_hal_allocator_t,
    params: *const sys::iree_hal_buffer_params_t,
    external: *mut sys::iree_hal_external_buffer_t,
    release: sys::iree_hal_buffer_release_callback_t,
    out: *mut *mut sys::iree_hal_buffer_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live allocator of ours, valid parameters and handle, and a writable output.
    ffi::guarded("import_buffer", || unsafe {
        ffi::write_out(out, cast(allocator).memory.import(&*params, &*external, release))
    })
}

unsafe extern "C" fn export_buffer(
    _allocator: *mut sys::iree_hal_allocator_t,
    _buffer: *mut sys::iree_hal_buffer_t,
    _type: sys::iree_hal_external_buffer_type_t,
    _flags: sys::iree_hal_external_buffer_flags_t,
    _out: *mut sys::iree_hal_external_buffer_t,
) -> iree_status_t {
    ffi::status(ffi::code::UNAVAILABLE, "buffer export is not bridged (the HAL's interop exports memory)")
}

unsafe extern "C" fn supports_virtual_memory(_allocator: *mut sys::iree_hal_allocator_t) -> bool {
    false
}

fn no_virtual_memory() -> iree_status_t {
    ffi::status(ffi::code::UNAVAILABLE, "virtual memory is not bridged (the HAL has no virtual memory API)")
}

unsafe extern "C" fn virtual_memory_query_granularity(
    _allocator: *mut sys::iree_hal_allocator_t,
    _params: sys::iree_hal_buffer_params_t,
    minimum: *mut sys::iree_device_size_t,
    recommended: *mut sys::iree_device_size_t,
) -> iree_status_t {
    // SAFETY: writable, per IREE's contract.
    unsafe {
        *minimum = 0;
        *recommended = 0;
    }
    no_virtual_memory()
}

unsafe extern "C" fn virtual_memory_reserve(
    _allocator: *mut sys::iree_hal_allocator_t,
    _affinity: sys::iree_hal_queue_affinity_t,
    _size: sys::iree_device_size_t,
    out: *mut *mut sys::iree_hal_buffer_t,
) -> iree_status_t {
    // SAFETY: writable, per IREE's contract.
    unsafe { *out = std::ptr::null_mut() };
    no_virtual_memory()
}

unsafe extern "C" fn virtual_memory_release(
    _allocator: *mut sys::iree_hal_allocator_t,
    _buffer: *mut sys::iree_hal_buffer_t,
) -> iree_status_t {
    no_virtual_memory()
}

unsafe extern "C" fn physical_memory_allocate(
    _allocator: *mut sys::iree_hal_allocator_t,
    _params: sys::iree_hal_buffer_params_t,
    _size: sys::iree_device_size_t,
    _host_allocator: sys::iree_allocator_t,
    out: *mut *mut sys::iree_hal_physical_memory_t,
) -> iree_status_t {
    // SAFETY: writable, per IREE's contract.
    unsafe { *out = std::ptr::null_mut() };
    no_virtual_memory()
}

unsafe extern "C" fn physical_memory_free(
    _allocator: *mut sys::iree_hal_allocator_t,
    _memory: *mut sys::iree_hal_physical_memory_t,
) -> iree_status_t {
    no_virtual_memory()
}

unsafe extern "C" fn virtual_memory_map(
    _allocator: *mut sys::iree_hal_allocator_t,
    _buffer: *mut sys::iree_hal_buffer_t,
    _virtual_offset: sys::iree_device_size_t,
    _memory: *mut sys::iree_hal_physical_memory_t,
    _physical_offset: sys::iree_device_size_t,
    _size: sys::iree_device_size_t,
) -> iree_status_t {
    no_virtual_memory()
}

unsafe extern "C" fn virtual_memory_unmap(
    _allocator: *mut sys::iree_hal_allocator_t,
    _buffer: *mut sys::iree_hal_buffer_t,
    _offset: sys::iree_device_size_t,
    _size: sys::iree_device_size_t,
) -> iree_status_t {
    no_virtual_memory()
}

unsafe extern "C" fn virtual_memory_protect(
    _allocator: *mut sys::iree_hal_allocator_t,
    _buffer: *mut sys::iree_hal_buffer_t,
    _offset: sys::iree_device_size_t,
    _size: sys::iree_device_size_t,
    _affinity: sys::iree_hal_queue_affinity_t,
    _protection: sys::iree_hal_memory_protection_t,
) -> iree_status_t {
    no_virtual_memory()
}

unsafe extern "C" fn virtual_memory_advise(
    _allocator: *mut sys::iree_hal_allocator_t,
    _buffer: *mut sys::iree_hal_buffer_t,
    _offset: sys::iree_device_size_t,
    _size: sys::iree_device_size_t,
    _affinity: sys::iree_hal_queue_affinity_t,
    _advice: sys::iree_hal_memory_advice_t,
) -> iree_status_t {
    no_virtual_memory()
}

static VTABLE: sys::iree_hal_allocator_vtable_t = sys::iree_hal_allocator_vtable_t {
    destroy: Some(destroy),
    host_allocator: Some(host_allocator),
    trim: Some(trim),
    query_statistics: Some(query_statistics),
    query_memory_heaps: Some(query_memory_heaps),
    query_buffer_compatibility: Some(query_buffer_compatibility),
    allocate_buffer: Some(allocate_buffer),
    deallocate_buffer: Some(deallocate_buffer),
    import_buffer: Some(import_buffer),
    export_buffer: Some(export_buffer),
    supports_virtual_memory: Some(supports_virtual_memory),
    virtual_memory_query_granularity: Some(virtual_memory_query_granularity),
    virtual_memory_reserve: Some(virtual_memory_reserve),
    virtual_memory_release: Some(virtual_memory_release),
    physical_memory_allocate: Some(physical_memory_allocate),
    physical_memory_free: Some(physical_memory_free),
    virtual_memory_map: Some(virtual_memory_map),
    virtual_memory_unmap: Some(virtual_memory_unmap),
    virtual_memory_protect: Some(virtual_memory_protect),
    virtual_memory_advise: Some(virtual_memory_advise),
};

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: [MemoryType; 2] = [MemoryType::DEVICE_LOCAL, MemoryType::HOST_LOCAL.union(MemoryType::HOST_CACHED)];
    const CPU_SIM: [MemoryType; 3] = [
        MemoryType::DEVICE_LOCAL,
        MemoryType::HOST_LOCAL.union(MemoryType::HOST_CACHED),
        MemoryType::DEVICE_LOCAL.union(MemoryType::HOST_LOCAL),
    ];
    const STORAGE: u32 = bits::USAGE_TRANSFER | bits::USAGE_DISPATCH;

    #[test]
    fn device_local_on_a_gpu_is_device_memory_the_host_cannot_map() {
        let r = resolve(&GPU, true, bits::DEVICE_LOCAL, STORAGE);
        assert_eq!(r.source, Source::Hal(MemoryType::DEVICE_LOCAL));
        assert_eq!(r.memory_type & bits::HOST_VISIBLE, 0);
        assert_eq!(r.memory_type & bits::DEVICE_LOCAL, bits::DEVICE_LOCAL);
        assert_eq!(r.usage & bits::USAGE_MAPPING_SCOPED, 0);
        assert_ne!(r.compatibility & bits::QUEUE_DISPATCH, 0);
        assert_eq!(r.compatibility & (bits::IMPORTABLE | bits::LOW_PERFORMANCE), 0);
    }

    #[test]
    fn host_visible_on_a_gpu_comes_from_the_pool_as_host_local() {
        let r = resolve(&GPU, true, bits::HOST_LOCAL | bits::DEVICE_VISIBLE, bits::USAGE_TRANSFER);
        assert_eq!(r.source, Source::Pool);
        assert_eq!(r.memory_type & bits::HOST_LOCAL, bits::HOST_LOCAL);
        assert_eq!(r.memory_type & bits::DEVICE_LOCAL, bits::DEVICE_VISIBLE);
        assert_ne!(r.usage & bits::USAGE_MAPPING_SCOPED, 0);
        assert_ne!(r.compatibility & bits::IMPORTABLE, 0);
    }

    #[test]
    fn mappable_device_local_on_a_gpu_falls_back_to_host_memory_marked_slow() {
        for (memory_type, usage) in [
            (bits::DEVICE_LOCAL | bits::HOST_VISIBLE, STORAGE),
            (bits::DEVICE_LOCAL | bits::OPTIMAL, STORAGE | bits::USAGE_MAPPING_SCOPED),
        ] {
            let r = resolve(&GPU, true, memory_type, usage);
            assert_eq!(r.source, Source::Pool, "{memory_type:#x}");
            assert_ne!(r.compatibility & bits::LOW_PERFORMANCE, 0);
            assert_eq!(r.memory_type & bits::OPTIMAL, 0);
            assert_ne!(r.memory_type & bits::HOST_VISIBLE, 0);
        }
    }

    #[test]
    fn cpu_sim_memory_is_device_local_and_mapped_in_place() {
        let r = resolve(&CPU_SIM, false, bits::DEVICE_LOCAL, STORAGE);
        assert_eq!(r.source, Source::Hal(MemoryType::DEVICE_LOCAL | MemoryType::HOST_LOCAL));
        assert_eq!(r.memory_type & (bits::DEVICE_LOCAL | bits::HOST_VISIBLE), bits::DEVICE_LOCAL | bits::HOST_VISIBLE);
        assert_ne!(r.compatibility & bits::IMPORTABLE, 0);
        assert_eq!(r.compatibility & bits::LOW_PERFORMANCE, 0);
    }

    #[test]
    fn a_device_without_host_visible_memory_cannot_serve_mapping() {
        let r = resolve(&[MemoryType::DEVICE_LOCAL], false, bits::HOST_LOCAL, bits::USAGE_TRANSFER);
        assert_eq!(r.compatibility & bits::ALLOCATABLE, 0);
    }
}
