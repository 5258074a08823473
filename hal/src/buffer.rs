//! Buffers: memory of a device, with the memory type and usages it was allocated for, ranges checked
//! on every access, and host mapping where the memory type allows it.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bitflags::bitflags;

use bytemuck::Pod;

use crate::device::DeviceId;
use crate::driver::BufferBackend;
use crate::error::{Error, Result};
use crate::host_data::{as_bytes, as_bytes_mut, bytes_to_vec, element_offset};
use crate::label::{Label, Unlabelled};

bitflags! {
    /// Where memory lives and how the host may see it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct MemoryType: u32 {
        /// Fast for the device; the host cannot map it unless `HOST_VISIBLE` is also set.
        const DEVICE_LOCAL = 1 << 0;
        /// The host can map it.
        const HOST_VISIBLE = 1 << 1;
        /// Host writes are seen by the device without an explicit flush (and back).
        const HOST_COHERENT = 1 << 2;
        /// Host reads are cached (fast to read back).
        const HOST_CACHED = 1 << 3;
        /// Device memory the host sees directly (pinned host memory on CUDA).
        const HOST_LOCAL = Self::HOST_VISIBLE.bits() | Self::HOST_COHERENT.bits();
    }
}

bitflags! {
    /// What a buffer may be used for; using it otherwise is refused at record or submit time.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct BufferUsage: u32 {
        /// Source of copies, reads and queue reads.
        const TRANSFER_SOURCE = 1 << 0;
        /// Target of fills, updates, copies and queue writes.
        const TRANSFER_TARGET = 1 << 1;
        /// Bound to dispatches.
        const DISPATCH_STORAGE = 1 << 2;
        /// Mapped by the host (needs a `HOST_VISIBLE` memory type).
        const MAPPING = 1 << 3;
        /// Both transfer directions.
        const TRANSFER = Self::TRANSFER_SOURCE.bits() | Self::TRANSFER_TARGET.bits();
        /// Transfers and dispatches: what device-local buffers usually need.
        const DEFAULT = Self::TRANSFER.bits() | Self::DISPATCH_STORAGE.bits();
    }
}

/// How to allocate a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BufferParams {
    /// The memory type it must have.
    pub memory_type: MemoryType,
    /// What it will be used for.
    pub usage: BufferUsage,
}

impl BufferParams {
    /// Memory of `memory_type` for `usage`.
    pub fn new(memory_type: MemoryType, usage: BufferUsage) -> Self {
        BufferParams { memory_type, usage }
    }

    /// Device-local memory for transfers and dispatches.
    pub fn device_local() -> Self {
        BufferParams { memory_type: MemoryType::DEVICE_LOCAL, usage: BufferUsage::DEFAULT }
    }

    /// Host-visible, coherent memory the host can map, usable for everything.
    pub fn host_visible() -> Self {
        BufferParams { memory_type: MemoryType::HOST_LOCAL, usage: BufferUsage::DEFAULT | BufferUsage::MAPPING }
    }

    /// Checks the combination makes sense on its own (not yet against a device).
    pub fn validate(&self) -> Result<()> {
        if self.memory_type.is_empty() {
            return Err(Error::invalid_argument("buffer params: memory type is empty"));
        }
        if self.usage.is_empty() {
            return Err(Error::invalid_argument("buffer params: usage is empty"));
        }
        if self.usage.contains(BufferUsage::MAPPING) && !self.memory_type.contains(MemoryType::HOST_VISIBLE) {
            return Err(Error::invalid_argument(format!(
                "buffer params: usage MAPPING needs a HOST_VISIBLE memory type, got {}",
                self.memory_type
            )));
        }
        Ok(())
    }
}

/// A buffer. Cheap to clone; clones are the same memory. The memory is freed when the last handle
/// and the last queue operation using it are gone.
///
/// ```
/// use hal::{BufferParams, StatusCode};
///
/// let device = driver_cpu_sim::create_device()?;
/// let buffer = device.allocate_buffer(BufferParams::host_visible(), 16)?;
/// buffer.set_label("coefficients")?;
/// buffer.write_values(0, &[0.5f32, 0.25, 0.125, 0.0625])?;
/// assert_eq!(buffer.read_as::<f32>()?, [0.5, 0.25, 0.125, 0.0625]);
/// let mut mapping = buffer.map(4, 8)?; // bytes 4..12
/// mapping.write_values(0, &[1.0f32])?;
/// drop(mapping);
/// assert_eq!(buffer.read_as::<f32>()?[1], 1.0);
/// let outside = buffer.write(12, &[0; 8]).unwrap_err();
/// assert_eq!(outside.code(), StatusCode::OutOfRange);
/// assert!(outside.message().contains("'coefficients'"), "{outside}");
/// # Ok::<(), hal::Error>(())
/// ```
#[derive(Clone)]
pub struct Buffer {
    shared: Arc<Shared>,
}

struct Shared {
    id: u64,
    device: DeviceId,
    size: u64,
    params: BufferParams,
    backend: Arc<dyn BufferBackend>,
    /// Where the buffer starts in the backend's memory: 0, or a subspan's place in its root's
    /// memory. Invariant: `memory_offset + size <= backend.size()`.
    memory_offset: u64,
    /// The buffer a subspan was taken from (kept alive with it), for messages.
    parent: Option<Buffer>,
    /// Created by `Queue::alloca`: its memory comes and goes in queue order.
    transient: bool,
    /// A `Queue::dealloca` of it was accepted: a second one could only fail later.
    dealloca_claimed: AtomicBool,
    label: Label,
}

static NEXT_BUFFER_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Buffer {
    /// Wraps a driver's allocation; its size is the backend's (the size the `unsafe impl` of
    /// [`BufferBackend`] vouches for), so a buffer never claims more bytes than its memory holds.
    /// Drivers call this; users allocate through `Device`.
    pub(crate) fn wrap(device: DeviceId, params: BufferParams, backend: Arc<dyn BufferBackend>) -> Self {
        Self::build(device, params, backend, false)
    }

    /// A transient buffer (what `Queue::alloca` returns), the only kind `Queue::dealloca` takes.
    pub(crate) fn transient_from_backend(
        device: DeviceId,
        params: BufferParams,
        backend: Arc<dyn BufferBackend>,
    ) -> Self {
        Self::build(device, params, backend, true)
    }

    fn build(device: DeviceId, params: BufferParams, backend: Arc<dyn BufferBackend>, transient: bool) -> Self {
        let id = NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed);
        let size = backend.size();
        let dealloca_claimed = AtomicBool::new(false);
        let label = Label::default();
        let (memory_offset, parent) = (0, None);
        Buffer {
            shared: Arc::new(Shared {
                id,
                device,
                size,
                params,
                backend,
                memory_offset,
                parent,
                transient,
                dealloca_claimed,
                label,
            }),
        }
    }

    /// A buffer over `length` bytes of this one from `offset`: usable wherever a buffer is
    /// (bindings, transfers, mapping, reads), its offsets relative to its own start; it keeps this
    /// buffer (and its memory) alive. `OutOfRange` when the range is not inside this buffer. A
    /// subspan of a transient buffer has memory exactly when its parent does; only the parent is
    /// given to `Queue::dealloca`.
    ///
    /// ```
    /// use hal::BufferParams;
    ///
    /// let device = driver_cpu_sim::create_device()?;
    /// let whole = device.allocate_buffer(BufferParams::host_visible(), 16)?;
    /// whole.write_values(0, &[1u32, 2, 3, 4])?;
    /// let middle = whole.subspan(4, 8)?;
    /// assert_eq!((middle.size(), middle.read_as::<u32>()?), (8, vec![2, 3]));
    /// middle.write_values(1, &[30u32])?;
    /// assert_eq!(whole.read_as::<u32>()?, [1, 2, 30, 4]);
    /// assert!(middle.subspan(4, 8).is_err(), "past the subspan's end");
    /// # Ok::<(), hal::Error>(())
    /// ```
    pub fn subspan(&self, offset: u64, length: u64) -> Result<Buffer> {
        self.check_range(offset, length)?;
        let shared = &self.shared;
        Ok(Buffer {
            shared: Arc::new(Shared {
                id: NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed),
                device: shared.device,
                size: length,
                params: shared.params,
                backend: shared.backend.clone(),
                // Inside this buffer (checked), which is inside the memory (its invariant).
                memory_offset: shared.memory_offset + offset,
                parent: Some(self.clone()),
                transient: false,
                dealloca_claimed: AtomicBool::new(false),
                label: Label::default(),
            }),
        })
    }

    /// The buffer this one is a subspan of, if it is one.
    pub fn parent(&self) -> Option<&Buffer> {
        self.shared.parent.as_ref()
    }

    /// Where the buffer starts in its backend's memory (non-zero for subspans): drivers add it to
    /// the backend's address.
    pub(crate) fn memory_offset(&self) -> u64 {
        self.shared.memory_offset
    }

    /// Whether the two buffers' bytes may overlap: the same memory, and intersecting ranges
    /// (`[a_offset, +a_length)` of `self`, `[b_offset, +b_length)` of `other`).
    pub(crate) fn ranges_overlap(
        &self,
        a_offset: u64,
        a_length: u64,
        other: &Buffer,
        b_offset: u64,
        b_length: u64,
    ) -> bool {
        if !Arc::ptr_eq(&self.shared.backend, &other.shared.backend) {
            return false;
        }
        // Both ranges were checked against their buffers, which lie inside the memory.
        let a = self.shared.memory_offset + a_offset;
        let b = other.shared.memory_offset + b_offset;
        a < b + b_length && b < a + a_length
    }

    /// The id used in messages.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The device the memory belongs to.
    pub fn device(&self) -> DeviceId {
        self.shared.device
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.shared.size
    }

    /// Memory type.
    pub fn memory_type(&self) -> MemoryType {
        self.shared.params.memory_type
    }

    /// Allowed usages.
    pub fn usage(&self) -> BufferUsage {
        self.shared.params.usage
    }

    /// The driver's object.
    pub(crate) fn backend(&self) -> &Arc<dyn BufferBackend> {
        &self.shared.backend
    }

    /// Whether it came from `Queue::alloca` (its memory is committed and released in queue order).
    pub fn is_transient(&self) -> bool {
        self.shared.transient
    }

    /// Claims the buffer's one `Queue::dealloca`: refused for a buffer that is not transient and for
    /// a second dealloca, which could only fail later, through the submission's signals.
    pub(crate) fn claim_dealloca(&self) -> Result<()> {
        if let Some(parent) = &self.shared.parent {
            return Err(Error::invalid_argument(format!(
                "{}: dealloca of a subspan (of {parent}); dealloca the buffer queue_alloca returned",
                self
            )));
        }
        if !self.shared.transient {
            return Err(Error::invalid_argument(format!(
                "{}: dealloca of a buffer that is not transient (it came from allocate_buffer, not \
                 queue_alloca, and is freed when its last handle drops)",
                self
            )));
        }
        if self.shared.dealloca_claimed.swap(true, Ordering::AcqRel) {
            return Err(Error::failed_precondition(format!(
                "{}: dealloca a second time (a dealloca of it was already submitted)",
                self
            )));
        }
        Ok(())
    }

    /// Gives back a claim whose submission was refused.
    pub(crate) fn unclaim_dealloca(&self) {
        self.shared.dealloca_claimed.store(false, Ordering::Release);
    }

    /// Whether two handles are the same buffer.
    pub fn same_as(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Checks `[offset, offset + length)` lies inside the buffer (`OutOfRange` naming both otherwise).
    pub fn check_range(&self, offset: u64, length: u64) -> Result<()> {
        match offset.checked_add(length) {
            Some(end) if end <= self.shared.size => Ok(()),
            _ => Err(Error::out_of_range(format!(
                "{}: range [{offset}, {offset}+{length}) is outside its {} bytes",
                self, self.shared.size
            ))),
        }
    }

    /// Checks the buffer was allocated for `usage` (`PermissionDenied` naming the usage otherwise).
    pub fn check_usage(&self, usage: BufferUsage) -> Result<()> {
        if self.usage().contains(usage) {
            Ok(())
        } else {
            Err(Error::permission_denied(format!(
                "{}: needs usage {usage} but was allocated with {}",
                self,
                self.usage()
            )))
        }
    }

    /// Maps `[offset, offset + length)` for the host. Needs a `HOST_VISIBLE` memory type and the
    /// `MAPPING` usage, and memory that is there: a transient buffer before its `queue_alloca` ran or
    /// after its `queue_dealloca` ran is a `FailedPrecondition`. A mapping keeps the memory it maps
    /// allocated, so one taken before a dealloca stays valid (its bytes are no longer the buffer's)
    /// and the memory is freed when it drops.
    pub fn map(&self, offset: u64, length: u64) -> Result<Mapping<'_>> {
        self.check_range(offset, length)?;
        if !self.memory_type().contains(MemoryType::HOST_VISIBLE) {
            return Err(Error::permission_denied(format!(
                "{}: memory type {} is not HOST_VISIBLE and cannot be mapped",
                self,
                self.memory_type()
            )));
        }
        self.check_usage(BufferUsage::MAPPING)?;
        let view = self.shared.backend.host_view().ok_or_else(|| {
            Error::failed_precondition(format!(
                "{}: has no host memory now (a transient buffer whose queue_alloca has not run or \
                 whose queue_dealloca already ran)",
                self
            ))
        })?;
        // SAFETY: the range was checked against the buffer's size, the buffer lies inside the
        // backend's memory (`memory_offset + size <= backend.size()`, its invariant), and the
        // backend's `unsafe impl` promises the view addresses that many bytes: the offset stays inside.
        let ptr = unsafe { view.ptr().as_ptr().add((self.shared.memory_offset + offset) as usize) };
        Ok(Mapping { buffer: self, _view: view, ptr, len: length as usize })
    }

    /// Copies `data` into the buffer at byte `offset` through a mapping.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.map(offset, data.len() as u64)?.write(0, data)
    }

    /// Copies plain-old-data `values` (`f32`, `u32`, `[f32; 4]`, ...) into the buffer from element
    /// `first` on (counted in `T`s, like `values`), as the bytes they are in host memory.
    pub fn write_values<T: Pod>(&self, first: u64, values: &[T]) -> Result<()> {
        self.write(element_offset::<T>(first, self)?, as_bytes(values))
    }

    /// Copies `out.len()` bytes at `offset` out of the buffer through a mapping.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.map(offset, out.len() as u64)?.read(0, out)
    }

    /// Fills plain-old-data `out` from the buffer's elements of `T`, starting at element `first`.
    pub fn read_values<T: Pod>(&self, first: u64, out: &mut [T]) -> Result<()> {
        self.read(element_offset::<T>(first, self)?, as_bytes_mut(out))
    }

    /// Reads the whole buffer into a new vector.
    pub fn read_to_vec(&self) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.size() as usize];
        self.read(0, &mut out)?;
        Ok(out)
    }

    /// Labels the buffer for messages, [`Device::report`](crate::Device::report) and traces
    /// ("buffer 7 'name'"). Set once: `FailedPrecondition` when it has a label already,
    /// `InvalidArgument` for an empty label, one over [`MAX_LABEL_BYTES`](crate::MAX_LABEL_BYTES) bytes or one with control characters.
    pub fn set_label(&self, label: impl Into<String>) -> Result<()> {
        self.shared.label.set(&Unlabelled("buffer", self.shared.id), label.into())
    }

    /// The label, if one was set.
    pub fn label(&self) -> Option<&str> {
        self.shared.label.get()
    }

    /// Reads the whole buffer as values of `T`; `InvalidArgument` when its size is not a whole
    /// number of them.
    pub fn read_as<T: Pod>(&self) -> Result<Vec<T>> {
        bytes_to_vec(self.read_to_vec()?, &format!("{}", self))
    }
}

impl fmt::Display for Buffer {
    /// "buffer N", or "buffer N 'label'" when it has a label.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.label.write_name(f, "buffer", self.shared.id)
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("id", &self.shared.id)
            .field("size", &self.shared.size)
            .field("memory_type", &self.memory_type())
            .field("usage", &self.usage())
            .finish()
    }
}

/// A host view of part of a buffer. Reads and writes copy bytes; queue work on the same range must
/// be ordered against them by the caller (wait on the semaphore the work signals), as on any GPU API.
///
/// An unordered access is a bug in the program but not undefined behaviour: [`read`](Self::read)
/// and [`write`](Self::write) copy with relaxed atomics (`hal::driver::shared_memory`, for driver authors: one `AtomicU32`
/// per aligned word, `AtomicU8` for unaligned edges), as cpu-sim's kernels and transfers do, so a
/// racing copy sees some mix of old and new words. Rust's rule against racing atomics of different
/// sizes still applies at unaligned edges (see [`NativeBinding`](crate::NativeBinding)).
/// The mapping keeps the memory it maps allocated while it lives, even past the buffer's dealloca.
pub struct Mapping<'a> {
    buffer: &'a Buffer,
    /// Keeps the memory behind `ptr` allocated.
    _view: HostView<'a>,
    ptr: *mut u8,
    len: usize,
}

impl Mapping<'_> {
    /// Length of the mapped range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapped range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::out_of_range(format!(
                "mapping of {}: range [{offset}, {offset}+{len}) is outside the {} mapped bytes",
                self.buffer, self.len
            ))),
        }
    }

    /// Copies `data` into the mapping at byte `offset`.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        // SAFETY: the range is inside the mapping (checked), the mapping inside the memory its view
        // keeps allocated; device work racing on it (cpu-sim kernels and transfers) is atomic too.
        unsafe { crate::driver::shared_memory::store(self.ptr.add(offset), data) };
        Ok(())
    }

    /// Copies bytes at `offset` out of the mapping into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len())?;
        // SAFETY: as in `write`.
        unsafe { crate::driver::shared_memory::load(self.ptr.add(offset), out) };
        Ok(())
    }

    /// Copies plain-old-data `values` into the mapping from element `first` on (counted in `T`s).
    pub fn write_values<T: Pod>(&mut self, first: usize, values: &[T]) -> Result<()> {
        self.write(self.element_offset::<T>(first)?, as_bytes(values))
    }

    /// Fills plain-old-data `out` from the mapping's elements of `T`, starting at element `first`.
    pub fn read_values<T: Pod>(&self, first: usize, out: &mut [T]) -> Result<()> {
        self.read(self.element_offset::<T>(first)?, as_bytes_mut(out))
    }

    fn element_offset<T: Pod>(&self, first: usize) -> Result<usize> {
        first.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::out_of_range(format!(
                "mapping of {}: element {first} of {}-byte values is past any byte offset",
                self.buffer,
                std::mem::size_of::<T>()
            ))
        })
    }

    /// The mapped bytes as a slice.
    ///
    /// # Safety
    /// No queue work may write the range while the slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the pointer and length describe mapped memory the view keeps allocated; the caller
        // excludes writers.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The mapped bytes as a mutable slice.
    ///
    /// # Safety
    /// No queue work may read or write the range while the slice lives.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; the caller excludes every other access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// A host pointer a driver hands out for host-visible memory.
pub type HostPtr = NonNull<u8>;

/// What a [`BufferBackend`] hands out for host access: the address of byte 0 and whatever keeps the
/// memory allocated while the view lives. The promise that the address is valid is the one of the
/// `unsafe impl BufferBackend` that returned the view; building a view promises nothing.
pub struct HostView<'a> {
    ptr: HostPtr,
    /// Holds the memory allocated after the backend released it (a transient buffer's dealloca).
    _keep_alive: Option<Arc<dyn Any + Send + Sync>>,
    /// The view may not outlive the backend it came from.
    _backend: PhantomData<&'a ()>,
}

impl<'a> HostView<'a> {
    /// A view of memory that lives as long as the backend does.
    pub fn borrowed(ptr: HostPtr) -> Self {
        HostView { ptr, _keep_alive: None, _backend: PhantomData }
    }

    /// A view of memory that `keep_alive` keeps allocated (for example, an `Arc` of the allocation).
    pub fn kept_alive(ptr: HostPtr, keep_alive: Arc<dyn Any + Send + Sync>) -> Self {
        HostView { ptr, _keep_alive: Some(keep_alive), _backend: PhantomData }
    }

    /// The address of byte 0.
    pub fn ptr(&self) -> HostPtr {
        self.ptr
    }
}

impl fmt::Debug for HostView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostView").field("ptr", &self.ptr).field("kept_alive", &self._keep_alive.is_some()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_mapping_needs_host_visible() {
        let bad = BufferParams { memory_type: MemoryType::DEVICE_LOCAL, usage: BufferUsage::MAPPING };
        assert_eq!(bad.validate().unwrap_err().code(), crate::StatusCode::InvalidArgument);
        BufferParams::host_visible().validate().unwrap();
        BufferParams::device_local().validate().unwrap();
    }
}
