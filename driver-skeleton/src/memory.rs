//! Buffer memory: zeroed host memory, allocated with the buffer and freed with its last user, or
//! host memory an embedder lends (released with the last user). A transient buffer
//! (`queue_alloca`) is allocated up front as well and is reachable only between its alloca and its
//! dealloca, which is all the HAL asks; a driver with scarce memory would allocate at the alloca and
//! free at the dealloca instead.

use std::alloc::Layout;
use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use hal::driver::{BufferBackend, BufferExt, HostView, ImportedHostMemory, ReleaseOnce};
use hal::{Buffer, Error, Result};

/// Alignment of every allocation: wider than any element a buffer holds.
const ALIGNMENT: usize = 64;

/// Where a buffer's memory is in its life.
const RESIDENT: u8 = 0;
const NOT_COMMITTED: u8 = 1;
const COMMITTED: u8 = 2;
const RELEASED: u8 = 3;

/// Bytes of buffer memory a device holds (its resource report's `memory_in_use`).
#[derive(Default)]
pub(crate) struct MemoryCounter(AtomicU64);

impl MemoryCounter {
    /// Bytes held now.
    pub(crate) fn in_use(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Who frees the memory when its last user drops it.
enum Owner {
    /// This driver, allocated with this layout.
    Driver(Layout),
    /// The embedder who lent it: the release runs when this drops.
    Embedder { _release: ReleaseOnce },
}

/// The memory of one buffer.
pub(crate) struct HostMemory {
    ptr: NonNull<u8>,
    owner: Owner,
    size: u64,
    state: AtomicU8,
    counter: Arc<MemoryCounter>,
}

// SAFETY: the memory is plain bytes owned by this value; every access to it goes through
// `hal::driver::shared_memory` (atomics), so any thread may hold and use it.
unsafe impl Send for HostMemory {}
// SAFETY: see `Send`.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// `size` zeroed bytes; reachable at once, or (`transient`) once its alloca ran.
    pub(crate) fn new(size: u64, transient: bool, counter: &Arc<MemoryCounter>) -> Result<Self> {
        let too_big =
            || Error::resource_exhausted(format!("{}: {size} bytes do not fit in memory", crate::DRIVER_NAME));
        let bytes = usize::try_from(size).map_err(|_| too_big())?;
        let layout = Layout::from_size_align(bytes.max(1), ALIGNMENT).map_err(|_| too_big())?;
        // SAFETY: the layout's size is not zero.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).ok_or_else(too_big)?;
        counter.0.fetch_add(size, Ordering::Relaxed);
        let state = AtomicU8::new(if transient { NOT_COMMITTED } else { RESIDENT });
        Ok(HostMemory { ptr, owner: Owner::Driver(layout), size, state, counter: counter.clone() })
    }

    /// The memory `memory` lends, until this drops.
    pub(crate) fn import(memory: ImportedHostMemory, counter: &Arc<MemoryCounter>) -> Self {
        let (ptr, size) = (memory.ptr(), memory.length());
        counter.0.fetch_add(size, Ordering::Relaxed);
        let owner = Owner::Embedder { _release: memory.into_release() };
        HostMemory { ptr, owner, size, state: AtomicU8::new(RESIDENT), counter: counter.clone() }
    }

    /// The skeleton's memory behind `buffer`, or `InvalidArgument`.
    pub(crate) fn of(buffer: &Buffer) -> Result<&HostMemory> {
        buffer.backend().as_any().downcast_ref::<HostMemory>().ok_or_else(|| {
            Error::invalid_argument(format!(
                "{buffer}: its memory was not allocated by the {} driver",
                crate::DRIVER_NAME
            ))
        })
    }

    /// Makes a transient buffer's memory reachable (its alloca ran).
    pub(crate) fn commit(&self, buffer: &Buffer) -> Result<()> {
        self.step(NOT_COMMITTED, COMMITTED).map_err(|_| {
            Error::failed_precondition(format!("{buffer}: alloca of a buffer that is not waiting for one"))
        })
    }

    /// Makes a transient buffer's memory unreachable again (its dealloca ran).
    pub(crate) fn release(&self, buffer: &Buffer) -> Result<()> {
        self.step(COMMITTED, RELEASED)
            .map_err(|_| Error::failed_precondition(format!("{buffer}: dealloca of a buffer whose alloca has not run")))
    }

    /// Moves the state from `from` to `to`; `Err` (and no change) when it is not at `from`.
    fn step(&self, from: u8, to: u8) -> std::result::Result<(), u8> {
        self.state.compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire).map(drop)
    }
}

// SAFETY: `size` never changes; a view is handed out only while the memory is reachable and
// points to `size` allocated, initialised bytes that live as long as this backend
// (`HostView::borrowed`): zeroed at allocation, or lent by the embedder until the release this
// backend holds runs (`ImportedHostMemory::new`'s contract); reached only through raw pointers
// and atomics.
unsafe impl BufferBackend for HostMemory {
    fn size(&self) -> u64 {
        self.size
    }

    fn host_view(&self) -> Option<HostView<'_>> {
        match self.state.load(Ordering::Acquire) {
            RESIDENT | COMMITTED => Some(HostView::borrowed(self.ptr)),
            _ => None,
        }
    }

    fn device_address(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        self.counter.0.fetch_sub(self.size, Ordering::Relaxed);
        if let Owner::Driver(layout) = self.owner {
            // SAFETY: allocated in `new` with this layout, freed once, here; no view outlives `self`.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
        // An embedder's memory is released when `owner` drops, right after this.
    }
}
