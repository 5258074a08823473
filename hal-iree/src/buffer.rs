//! IREE buffers whose memory is the HAL's.
//!
//! An IREE buffer of this driver is one of:
//! - a HAL buffer of the device: device-local memory on a GPU (the host cannot map it; IREE moves
//!   data with queue copies and staging), cpu-sim's memory (host memory, mapped in place), or a
//!   `queue_alloca` transient whose memory the queue commits and releases;
//! - a block of a GPU device's host-visible pool (`pinned_pool`), for staging and readback;
//! - host memory IREE imported (`import_buffer`), released through IREE's callback once the HAL is
//!   done with it.
//!
//! A queue operation hands the HAL buffer itself to the HAL queue: no import, no mapping.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::ffi::{self, code, iree_status_t, sys};
use crate::pinned_pool::{Block, PinnedPool};
use crate::queue_pool::Reserved;

/// Where an IREE buffer's bytes live.
pub(crate) enum Memory {
    /// A HAL buffer of the device.
    Hal(hal::Buffer),
    /// A block of the device's host-visible pool, given back when IREE lets go.
    Pooled { pool: Arc<PinnedPool>, block: Arc<Block> },
    /// Host memory IREE imported: the HAL import's release runs IREE's callback and frees this
    /// buffer's record, once IREE and every queued use have let go.
    Imported(hal::Buffer),
    /// A range of a queue pool's slab (`queue_pool`).
    Slab(Box<SlabView>),
    /// An imported buffer being destroyed (its record waits for the HAL's release).
    Gone,
}

/// An IREE buffer over a range of a queue pool's slab: a HAL subspan of the slab's buffer.
pub(crate) struct SlabView {
    buffer: hal::Buffer,
    /// The pool's callback for when IREE lets go of the buffer (none for a view whose reservation
    /// the queue gives back itself).
    release: SendRelease,
    /// The reservation a `queue_alloca` placed it in, until its dealloca.
    reserved: std::sync::Mutex<Option<Reserved>>,
}

impl SlabView {
    pub(crate) fn new(buffer: hal::Buffer, release: sys::iree_hal_buffer_release_callback_t) -> Self {
        SlabView { buffer, release: SendRelease(release), reserved: std::sync::Mutex::new(None) }
    }

    /// Ties `reserved` to this buffer: its dealloca (or its destruction) gives it back.
    pub(crate) fn hold(&self, reserved: Reserved) {
        *hal::driver::lock(&self.reserved) = Some(reserved);
    }

    /// The reservation this buffer holds, taken by its dealloca.
    pub(crate) fn take_reserved(&self) -> Option<Reserved> {
        hal::driver::lock(&self.reserved).take()
    }

    /// Puts back a reservation a dealloca took and then could not submit.
    pub(crate) fn put_back(&self, reserved: Reserved) {
        self.hold(reserved);
    }
}

/// An IREE buffer of this driver (see the module docs).
#[repr(C)]
pub(crate) struct HalBuffer {
    base: sys::iree_hal_buffer_t,
    memory: Memory,
    /// Where the host sees the bytes.
    host: Host,
}

/// Where the host sees an IREE buffer's bytes.
#[derive(Clone, Copy)]
pub(crate) enum Host {
    /// Nowhere: device-local memory.
    Unmapped,
    /// At this address of byte 0, for the buffer's life.
    At(NonNull<u8>),
    /// Host-visible queue-ordered memory: mapped once its alloca has run (a HAL mapping refuses
    /// memory not committed yet, or released by its dealloca).
    Committed,
}

/// What IREE sees of a new buffer.
pub(crate) struct Shape {
    pub placement: sys::iree_hal_buffer_placement_t,
    pub memory_type: sys::iree_hal_memory_type_t,
    pub access: sys::iree_hal_memory_access_t,
    pub usage: sys::iree_hal_buffer_usage_t,
    pub size: u64,
}

impl HalBuffer {
    /// An IREE buffer of `shape` over `memory`, host-mapped at `host` when that is `Some`; IREE
    /// holds the one reference.
    pub(crate) fn create(shape: &Shape, memory: Memory, host: Host) -> *mut sys::iree_hal_buffer_t {
        let buffer = Box::into_raw(Box::new(HalBuffer { base: sys::iree_hal_buffer_t::default(), memory, host }));
        // SAFETY: `buffer` is a fresh, live record whose first field is the IREE buffer.
        unsafe { initialize(buffer, shape) };
        buffer.cast()
    }

    /// An IREE buffer over host memory IREE imports: `import` gets the release the HAL import must
    /// run (it runs IREE's `release` and frees the record); on an error nothing is released.
    pub(crate) fn create_imported(
        shape: &Shape,
        host: NonNull<u8>,
        release: sys::iree_hal_buffer_release_callback_t,
        import: impl FnOnce(Box<dyn FnOnce() + Send>) -> Result<hal::Buffer, hal::Error>,
    ) -> Result<*mut sys::iree_hal_buffer_t, hal::Error> {
        let buffer = Box::into_raw(Box::new(HalBuffer {
            base: sys::iree_hal_buffer_t::default(),
            memory: Memory::Gone,
            host: Host::At(host),
        }));
        let record = buffer as usize;
        let release = SendRelease(release);
        let released = Box::new(move || {
            let buffer = record as *mut HalBuffer;
            // SAFETY: the record is still allocated (freed just below).
            unsafe { release.run(buffer.cast()) };
            // SAFETY: the record `create_imported` boxed; IREE has let go of it (its destroy gave
            // up the HAL buffer whose release this is) and nothing else refers to it.
            drop(unsafe { Box::from_raw(buffer) });
        });
        match import(released) {
            Ok(hal) => {
                // SAFETY: `buffer` is live and not yet shared.
                unsafe {
                    (*buffer).memory = Memory::Imported(hal);
                    initialize(buffer, shape);
                }
                Ok(buffer.cast())
            }
            Err(error) => {
                // SAFETY: the import failed, so its release was dropped unrun; the record is ours.
                drop(unsafe { Box::from_raw(buffer) });
                Err(error)
            }
        }
    }

    /// The HAL buffer a queue operation of `device` uses for this buffer's bytes (byte 0 of the IREE
    /// buffer is byte 0 of it).
    pub(crate) fn for_queue(&self, device: &hal::Device) -> Result<hal::Buffer, hal::Error> {
        match &self.memory {
            Memory::Hal(buffer) | Memory::Imported(buffer) => Ok(buffer.clone()),
            Memory::Pooled { pool, block } => pool.lend(device, block),
            Memory::Slab(slab) => Ok(slab.buffer.clone()),
            Memory::Gone => Err(hal::Error::internal("an IREE buffer used after its destruction")),
        }
    }

    /// The pool slab range this buffer is, if it is one.
    pub(crate) fn slab_view(&self) -> Option<&SlabView> {
        match &self.memory {
            Memory::Slab(slab) => Some(slab),
            _ => None,
        }
    }

    /// The queue-ordered (`queue_alloca`) HAL buffer behind this one, if it is one.
    pub(crate) fn transient(&self) -> Option<&hal::Buffer> {
        match &self.memory {
            Memory::Hal(buffer) if buffer.is_transient() => Some(buffer),
            _ => None,
        }
    }
}

/// IREE's release callback, run on whichever thread the HAL releases the import.
struct SendRelease(sys::iree_hal_buffer_release_callback_t);
// SAFETY: IREE's import contract lets the release run on any thread; the user data is the
// importer's, passed back untouched.
unsafe impl Send for SendRelease {}

impl SendRelease {
    /// Runs IREE's callback, if any, for `buffer`.
    ///
    /// # Safety
    /// `buffer` is the record the import was made for, still allocated.
    unsafe fn run(self, buffer: *mut sys::iree_hal_buffer_t) {
        if let Some(callback) = self.0.fn_ {
            // SAFETY: IREE's callback, with its user data and the buffer it was given for.
            unsafe { callback(self.0.user_data, buffer) };
        }
    }
}

/// # Safety
/// `buffer` is a live record not yet handed to IREE.
unsafe fn initialize(buffer: *mut HalBuffer, shape: &Shape) {
    let base = buffer.cast::<sys::iree_hal_buffer_t>();
    // SAFETY: the caller's contract; the buffer is its own allocated buffer.
    unsafe {
        sys::iree_hal_buffer_initialize(
            shape.placement,
            base,
            shape.size as usize,
            0,
            shape.size as usize,
            shape.memory_type,
            shape.access,
            shape.usage,
            &raw const VTABLE,
            base,
        )
    };
}

/// This driver's buffer behind `buffer` (an allocated buffer: see `iree_hal_buffer_allocated_buffer`),
/// or `None` for another kind.
///
/// # Safety
/// `buffer` is a live IREE buffer.
pub(crate) unsafe fn cast<'a>(buffer: *mut sys::iree_hal_buffer_t) -> Option<&'a HalBuffer> {
    // SAFETY: the caller's contract; every IREE buffer starts with its resource.
    let vtable = unsafe { (*buffer).resource.vtable };
    std::ptr::eq(vtable.cast(), &raw const VTABLE).then(|| {
        // SAFETY: our vtable, so the record is a `HalBuffer`.
        unsafe { &*buffer.cast::<HalBuffer>() }
    })
}

unsafe extern "C" fn destroy(buffer: *mut sys::iree_hal_buffer_t) {
    let record = buffer.cast::<HalBuffer>();
    // SAFETY: IREE destroys a live buffer of ours once, with no other reference left.
    let memory = std::mem::replace(unsafe { &mut (*record).memory }, Memory::Gone);
    match memory {
        // The HAL import's release frees the record (now, or once queued uses are done).
        Memory::Imported(hal) => return drop(hal),
        Memory::Pooled { pool, block } => pool.give_back(block),
        Memory::Slab(slab) => {
            let SlabView { buffer: view, release, reserved } = *slab;
            if let Some(reserved) = reserved.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner) {
                reserved.give_back_unused();
            }
            drop(view);
            // SAFETY: the record is still allocated (freed below); the pool's callback for it.
            unsafe { release.run(buffer) };
        }
        Memory::Hal(_) | Memory::Gone => {}
    }
    // SAFETY: boxed by `create`; IREE holds no reference.
    drop(unsafe { Box::from_raw(record) });
}

unsafe extern "C" fn map_range(
    buffer: *mut sys::iree_hal_buffer_t,
    _mode: sys::iree_hal_mapping_mode_t,
    _access: sys::iree_hal_memory_access_t,
    offset: sys::iree_device_size_t,
    length: sys::iree_device_size_t,
    mapping: *mut sys::iree_hal_buffer_mapping_t,
) -> iree_status_t {
    // SAFETY: IREE maps a live buffer of ours, a range it checked, into a writable mapping.
    let record = unsafe { &*buffer.cast::<HalBuffer>() };
    let host = match (record.host, &record.memory) {
        (Host::At(host), _) => host,
        (Host::Committed, Memory::Hal(buffer)) => match host_address(buffer) {
            Ok(host) => host,
            Err(error) => return ffi::from_error(&error.context("mapping a queue-ordered buffer")),
        },
        _ => return ffi::status(code::FAILED_PRECONDITION, "the buffer's memory is not host-visible (device-local)"),
    };
    // SAFETY: `offset + length` lies inside the buffer (IREE checked), whose memory is mapped at `host`.
    unsafe {
        (*mapping).contents = sys::iree_byte_span_t { data: host.as_ptr().add(offset), data_length: length };
    }
    ffi::ok()
}

/// The host address of a host-visible buffer's first byte. The HAL's host-visible memory (pinned
/// on CUDA, persistently mapped on Vulkan, host memory on cpu-sim) stays at this address for the
/// buffer's life, or a transient's until its dealloca (after which IREE may not map or use it).
pub(crate) fn host_address(buffer: &hal::Buffer) -> Result<NonNull<u8>, hal::Error> {
    let mut mapping = buffer.map(0, buffer.size())?;
    // SAFETY: only the address is kept, and the memory stays there (above) while it is used.
    let ptr = unsafe { mapping.as_mut_slice() }.as_mut_ptr();
    NonNull::new(ptr).ok_or_else(|| hal::Error::internal("a host-visible buffer mapped at NULL"))
}

unsafe extern "C" fn unmap_range(
    _buffer: *mut sys::iree_hal_buffer_t,
    _offset: sys::iree_device_size_t,
    _length: sys::iree_device_size_t,
    _mapping: *mut sys::iree_hal_buffer_mapping_t,
) -> iree_status_t {
    // Host-visible memory stays mapped for the buffer's life.
    ffi::ok()
}

unsafe extern "C" fn invalidate_range(
    _buffer: *mut sys::iree_hal_buffer_t,
    _offset: sys::iree_device_size_t,
    _length: sys::iree_device_size_t,
) -> iree_status_t {
    // Every host-visible memory type the drivers give is coherent.
    std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
    ffi::ok()
}

unsafe extern "C" fn flush_range(
    _buffer: *mut sys::iree_hal_buffer_t,
    _offset: sys::iree_device_size_t,
    _length: sys::iree_device_size_t,
) -> iree_status_t {
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    ffi::ok()
}

static VTABLE: sys::iree_hal_buffer_vtable_t = sys::iree_hal_buffer_vtable_t {
    recycle: Some(sys::iree_hal_buffer_recycle),
    destroy: Some(destroy),
    map_range: Some(map_range),
    unmap_range: Some(unmap_range),
    invalidate_range: Some(invalidate_range),
    flush_range: Some(flush_range),
};
