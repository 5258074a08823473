//! Host memory behind cpu-sim buffers: zeroed, 64-byte aligned allocations counted against a
//! [`MemoryBudget`], and transient buffers for `queue_alloca` whose memory is committed and released
//! in queue order on a stream worker.
//!
//! Every memory type (device-local included) is host memory here, so [`HostMemory`]'s `host_view`
//! always answers once committed; `hal::Buffer::map` is what refuses mapping non-`HOST_VISIBLE` types.
//!
//! Queue reads and writes, commands and collectives reach a buffer's bytes through [`host_range`]
//! ([`read_buffer`], [`write_buffer`]), which checks the range and holds the buffer's view while
//! they copy: a transient buffer whose alloca has not run, or whose dealloca ran, has none, which
//! is a `FailedPrecondition`.
//!
//! A transient buffer's allocation is shared: the release drops the buffer's hold on it, and the
//! memory is freed (or kept for a later alloca of the same size, [`TransientCache`]) when the last
//! view taken before (a mapping, a queue operation that is running on another stream) drops too. So
//! no view ever sees freed memory, without holding a lock while it copies. A transient buffer's
//! memory is zeroed the first time and holds what the last user left when it is reused.

use std::alloc::Layout;
use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use hal::driver::BufferBackend;
use hal::driver::BufferExt;
use hal::driver::HostView;
use hal::driver::lock;
use hal::driver::{ImportedHostMemory, ReleaseOnce};
use hal::{Buffer, Error, Result};

use crate::transient_cache::TransientCache;

/// Alignment of every allocation's first byte (a cache line, and enough for any vector load).
pub const HOST_MEMORY_ALIGNMENT: usize = 64;

/// Bytes in use, the peak, and an optional limit, shared by every allocation of a device, and the
/// blocks of released transient buffers kept for reuse ([`TransientCache`]).
///
/// Allocations reserve their size before asking the system allocator and give it back when freed.
#[derive(Debug)]
pub struct MemoryBudget {
    in_use: AtomicU64,
    peak: AtomicU64,
    /// `u64::MAX` means no limit.
    limit: AtomicU64,
    transients: TransientCache,
}

impl MemoryBudget {
    /// A budget with no limit.
    pub fn unlimited() -> Self {
        MemoryBudget {
            in_use: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            transients: TransientCache::new(0),
        }
    }

    /// The same budget keeping up to `bytes` of released transient blocks for reuse (none by
    /// default).
    pub fn with_transient_cache(mut self, bytes: u64) -> Self {
        self.transients = TransientCache::new(bytes);
        self
    }

    /// The released transient blocks kept for reuse.
    pub fn transients(&self) -> &TransientCache {
        &self.transients
    }

    /// A budget of at most `limit` bytes in use at once.
    pub fn with_limit(limit: u64) -> Self {
        let budget = Self::unlimited();
        budget.set_limit(Some(limit));
        budget
    }

    /// Changes the limit (`None`: no limit). Memory already in use stays; only new reservations see it.
    pub fn set_limit(&self, limit: Option<u64>) {
        self.limit.store(limit.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The limit, if any.
    #[cfg(test)]
    pub fn limit(&self) -> Option<u64> {
        match self.limit.load(Ordering::Relaxed) {
            u64::MAX => None,
            limit => Some(limit),
        }
    }

    /// Bytes reserved now.
    pub fn in_use(&self) -> u64 {
        self.in_use.load(Ordering::Relaxed)
    }

    /// The most bytes ever reserved at once.
    #[cfg(test)]
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Reserves `size` bytes, or `ResourceExhausted` naming the sizes when the limit would be passed.
    /// The reservation is given back when the returned guard drops.
    pub fn reserve(self: &Arc<Self>, size: u64) -> Result<Reservation> {
        let limit = self.limit.load(Ordering::Relaxed);
        let mut current = self.in_use.load(Ordering::Relaxed);
        loop {
            let next = match current.checked_add(size) {
                Some(next) if next <= limit => next,
                _ => {
                    return Err(Error::resource_exhausted(format!(
                        "host memory: allocation of {size} bytes with {current} bytes in use exceeds the limit of \
                         {limit} bytes"
                    )));
                }
            };
            match self.in_use.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    self.peak.fetch_max(next, Ordering::Relaxed);
                    return Ok(Reservation { budget: self.clone(), size });
                }
                Err(actual) => current = actual,
            }
        }
    }
}

impl Default for MemoryBudget {
    fn default() -> Self {
        Self::unlimited()
    }
}

/// Bytes reserved in a [`MemoryBudget`]; given back on drop.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    size: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.in_use.fetch_sub(self.size, Ordering::Relaxed);
    }
}

/// One block of buffer memory: zeroed and aligned from the system allocator, or lent by the
/// embedder; given back on drop.
#[derive(Debug)]
struct Allocation {
    /// The block's first byte, [`HOST_MEMORY_ALIGNMENT`]-aligned.
    ptr: NonNull<u8>,
    owner: Owner,
}

/// Who the block goes back to.
#[derive(Debug)]
enum Owner {
    /// The system allocator: the allocation starts at `base`, with this layout (`ptr` is inside
    /// it); counted in the budget meanwhile. A transient buffer's block goes to the budget's
    /// [`TransientCache`] first.
    System { base: NonNull<u8>, layout: Layout, reservation: Reservation, transient: bool },
    /// The embedder (`Device::import_host_memory`): its release runs when the block drops.
    Embedder(ReleaseOnce),
}

// SAFETY: the block is owned by this value alone and freed only in `Drop`; the pointer is plain data.
unsafe impl Send for Allocation {}
// SAFETY: `&Allocation` exposes only the address; accesses through it are ordered by the queues.
unsafe impl Sync for Allocation {}

/// The alignment asked of the system allocator: one it serves with `calloc`, which hands out
/// fresh pages (a large block) without writing them. An allocation aligned beyond it is zeroed byte
/// by byte instead: a 40 MiB transient of IREE's transformer took 36 ms on a stream thread.
const SYSTEM_ALIGNMENT: usize = 8;

impl Allocation {
    /// `size` bytes: zeroed, or for a `transient` buffer a block of the same size that one
    /// released before, as it is, where the budget's cache keeps one.
    fn new(size: u64, budget: &Arc<MemoryBudget>, transient: bool) -> Result<Self> {
        let exhausted = |why: &str| Error::resource_exhausted(format!("host memory: allocation of {size} bytes {why}"));
        let bytes = usize::try_from(size).map_err(|_| exhausted("does not fit the address space"))?;
        // A zero-size layout may not be passed to the allocator; hal refuses 0-byte buffers anyway.
        // The extra bytes let the start be aligned here (see `SYSTEM_ALIGNMENT`).
        let layout = bytes
            .max(1)
            .checked_add(HOST_MEMORY_ALIGNMENT)
            .and_then(|padded| Layout::from_size_align(padded, SYSTEM_ALIGNMENT).ok())
            .ok_or_else(|| exhausted("is larger than the largest possible allocation"))?;
        let reservation = budget.reserve(size)?;
        let kept = if transient { budget.transients.take(layout) } else { None };
        let base = match kept {
            Some(base) => base,
            None => {
                // SAFETY: `layout` has a nonzero size (at least 1 + HOST_MEMORY_ALIGNMENT bytes).
                let base = unsafe { std::alloc::alloc_zeroed(layout) };
                NonNull::new(base).ok_or_else(|| exhausted("failed: the system allocator is out of memory"))?
            }
        };
        // Below HOST_MEMORY_ALIGNMENT, so `bytes` bytes from there lie inside the allocation.
        let offset = base.as_ptr().align_offset(HOST_MEMORY_ALIGNMENT);
        // SAFETY: `base + offset` is inside the allocation (see above), so in bounds and not null.
        let ptr = unsafe { NonNull::new_unchecked(base.as_ptr().add(offset)) };
        Ok(Allocation { ptr, owner: Owner::System { base, layout, reservation, transient } })
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        match &self.owner {
            // SAFETY: `base` came from `alloc_zeroed` with exactly `layout` (here or, kept, for an
            // earlier transient buffer), nothing uses it any more, and it is given away only here, once.
            Owner::System { base, layout, reservation, transient: true } => unsafe {
                reservation.budget.transients.put(*base, *layout)
            },
            // SAFETY: as above.
            Owner::System { base, layout, .. } => unsafe { std::alloc::dealloc(base.as_ptr(), *layout) },
            // Nothing uses the memory any more: hand it back.
            Owner::Embedder(release) => release.release(),
        }
    }
}

/// Where a buffer's memory is in its life.
#[derive(Debug)]
enum State {
    /// A transient buffer whose alloca has not run.
    Uncommitted,
    /// Memory is there; views of a transient buffer share it, so it outlives the release while one lives.
    Committed(Arc<Allocation>),
    /// A transient buffer whose dealloca ran.
    Released,
}

/// The memory of one cpu-sim buffer: allocated at creation, or transient (committed by the alloca
/// and released by the dealloca that a stream worker runs in queue order).
#[derive(Debug)]
pub struct HostMemory {
    size: u64,
    transient: bool,
    budget: Arc<MemoryBudget>,
    /// The committed address, null when there is no memory: read without the lock for resident
    /// memory (which never changes) and `device_address`.
    ptr: AtomicPtr<u8>,
    /// Transitions (commit, release) take this lock, so each happens once.
    state: Mutex<State>,
}

impl HostMemory {
    /// `size` zeroed bytes now, counted against `budget`.
    pub fn new(size: u64, budget: &Arc<MemoryBudget>) -> Result<Self> {
        let allocation = Allocation::new(size, budget, false)?;
        Ok(HostMemory {
            size,
            transient: false,
            budget: budget.clone(),
            ptr: AtomicPtr::new(allocation.ptr.as_ptr()),
            state: Mutex::new(State::Committed(Arc::new(allocation))),
        })
    }

    /// The embedder's memory, lent until its release (which runs when the last view and buffer of
    /// it are gone). Not counted against the budget: the embedder allocated it.
    pub fn import(memory: ImportedHostMemory, budget: &Arc<MemoryBudget>) -> Self {
        let (ptr, size) = (memory.ptr(), memory.length());
        let allocation = Allocation { ptr, owner: Owner::Embedder(memory.into_release()) };
        HostMemory {
            size,
            transient: false,
            budget: budget.clone(),
            ptr: AtomicPtr::new(ptr.as_ptr()),
            state: Mutex::new(State::Committed(Arc::new(allocation))),
        }
    }

    /// A transient buffer of `size` bytes with no memory yet; [`commit`](Self::commit) allocates
    /// (and counts it against `budget` then).
    pub fn transient(size: u64, budget: &Arc<MemoryBudget>) -> Self {
        HostMemory {
            size,
            transient: true,
            budget: budget.clone(),
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            state: Mutex::new(State::Uncommitted),
        }
    }

    /// Whether it was created by [`transient`](Self::transient).
    #[cfg(test)]
    pub fn is_transient(&self) -> bool {
        self.transient
    }

    /// Whether memory is there now.
    #[cfg(test)]
    pub fn is_committed(&self) -> bool {
        !self.ptr.load(Ordering::Acquire).is_null()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Transitions never panic half way, so a poisoned lock still holds a consistent state.
        lock(&self.state)
    }

    fn describe(&self) -> String {
        let kind = if self.transient { "transient memory" } else { "memory" };
        format!("{kind} of {} bytes", self.size)
    }

    /// Allocates a transient buffer's zeroed memory (the alloca running). `FailedPrecondition` when
    /// not transient, already committed or released; `ResourceExhausted` when the budget or the
    /// system is out of memory.
    pub fn commit(&self) -> Result<()> {
        let mut state = self.state();
        let refuse = |why: &str| Err(Error::failed_precondition(format!("{}: commit {why}", self.describe())));
        if !self.transient {
            return refuse("of a buffer that is not transient (it was allocated at creation)");
        }
        match &*state {
            State::Uncommitted => {}
            State::Committed(_) => return refuse("a second time (the alloca already ran)"),
            State::Released => return refuse("after release (the dealloca already ran)"),
        }
        let allocation = Allocation::new(self.size, &self.budget, true)?;
        // Release: the zeroing done by the allocator is visible to whoever loads the pointer.
        self.ptr.store(allocation.ptr.as_ptr(), Ordering::Release);
        *state = State::Committed(Arc::new(allocation));
        Ok(())
    }

    /// Frees a transient buffer's memory (the dealloca running). `FailedPrecondition` when not
    /// transient, not committed yet, or released already.
    pub fn release(&self) -> Result<()> {
        let mut state = self.state();
        let refuse = |why: &str| Err(Error::failed_precondition(format!("{}: release {why}", self.describe())));
        if !self.transient {
            return refuse("of a buffer that is not transient (it is freed when its last handle drops)");
        }
        match &*state {
            State::Committed(_) => {}
            State::Uncommitted => return refuse("before commit (the alloca has not run)"),
            State::Released => return refuse("a second time (the dealloca already ran)"),
        }
        self.ptr.store(std::ptr::null_mut(), Ordering::Release);
        // Dropping the buffer's hold frees the memory and gives back its reservation, now or when the
        // last view taken before drops.
        *state = State::Released;
        Ok(())
    }

    /// The `HostMemory` behind `buffer`, or `InvalidArgument` when another driver made it.
    pub fn of(buffer: &Buffer) -> Result<&HostMemory> {
        buffer
            .backend()
            .as_any()
            .downcast_ref::<HostMemory>()
            .ok_or_else(|| Error::invalid_argument(format!("{}: its memory was not allocated by cpu-sim", buffer)))
    }
}

// SAFETY: `size` is fixed at creation and every allocation holds `size` initialized bytes (zeroed
// by `Allocation::new`, or a kept transient block's earlier contents)
// that only raw pointers reach. Resident memory is freed only when `self` drops, so a borrowed view is
// valid while the backend lives; a transient view holds an `Arc` of the allocation, taken under the
// state lock that `release` takes too, so the memory stays allocated while the view lives.
unsafe impl BufferBackend for HostMemory {
    fn size(&self) -> u64 {
        self.size
    }

    fn host_view(&self) -> Option<HostView<'_>> {
        if !self.transient {
            return NonNull::new(self.ptr.load(Ordering::Acquire)).map(HostView::borrowed);
        }
        match &*self.state() {
            State::Committed(allocation) => Some(HostView::kept_alive(allocation.ptr, allocation.clone())),
            State::Uncommitted | State::Released => None,
        }
    }

    fn device_address(&self) -> u64 {
        self.ptr.load(Ordering::Acquire) as u64
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Commits the memory of transient `buffer` (what `queue_alloca` runs); errors name the buffer.
pub fn commit_buffer(buffer: &Buffer) -> Result<()> {
    HostMemory::of(buffer)?.commit().map_err(|e| e.context(format!("{}", buffer)))
}

/// Releases the memory of transient `buffer` (what `queue_dealloca` runs); errors name the buffer.
pub fn release_buffer(buffer: &Buffer) -> Result<()> {
    HostMemory::of(buffer)?.release().map_err(|e| e.context(format!("{}", buffer)))
}

/// Copies `data` into `target` at `offset` (what `queue_write` and an update run). Unlike
/// `Buffer::write`, works on every memory type.
pub fn write_buffer(target: &Buffer, offset: u64, data: &[u8]) -> Result<()> {
    let dst = host_range(target, offset, data.len() as u64)?;
    // SAFETY: `dst` addresses `data.len()` bytes of `target` (checked) and keeps them allocated;
    // racing accesses (kernels, mappings) are atomic, as this copy is.
    unsafe { hal::driver::shared_memory::store(dst.ptr, data) };
    Ok(())
}

/// Copies `length` bytes of `source` at `offset` out (what `queue_read` runs). Unlike `Buffer::read`,
/// works on every memory type.
pub fn read_buffer(source: &Buffer, offset: u64, length: u64) -> Result<Vec<u8>> {
    let src = host_range(source, offset, length)?;
    let mut out = vec![0u8; length as usize];
    // SAFETY: `src` addresses `length` bytes of `source` (checked) and keeps them allocated; racing
    // accesses are atomic, as this copy is.
    unsafe { hal::driver::shared_memory::load(src.ptr, &mut out) };
    Ok(out)
}

/// `[offset, offset + length)` of a buffer's host memory, which stays allocated while this lives.
pub(crate) struct HostRange<'a> {
    pub(crate) ptr: *mut u8,
    _view: HostView<'a>,
}

/// The host range `[offset, offset + length)` of `buffer`, after checking the range.
pub(crate) fn host_range(buffer: &Buffer, offset: u64, length: u64) -> Result<HostRange<'_>> {
    buffer.check_range(offset, length)?;
    let view = buffer.backend().host_view().ok_or_else(|| {
        Error::failed_precondition(format!(
            "{}: has no memory (a transient buffer whose queue_alloca has not run, or whose \
             queue_dealloca already ran)",
            buffer
        ))
    })?;
    // SAFETY: `offset + length <= size` (checked above), the buffer lies inside its backend's memory
    // (`memory_offset + size <= backend.size()`, a `Buffer` invariant), and the view addresses that
    // many bytes (the backend's `unsafe impl` promises it), so the offset stays inside the
    // allocation (and fits a usize).
    let ptr = unsafe { view.ptr().as_ptr().add((buffer.memory_offset() + offset) as usize) };
    Ok(HostRange { ptr, _view: view })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hal::{BufferParams, DeviceId, StatusCode};

    fn budget() -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget::unlimited())
    }

    #[test]
    fn allocation_is_zeroed_and_aligned() {
        let budget = budget();
        let memory = HostMemory::new(1000, &budget).unwrap();
        let view = memory.host_view().unwrap();
        let ptr = view.ptr();
        assert_eq!(ptr.as_ptr() as usize % HOST_MEMORY_ALIGNMENT, 0);
        assert_eq!(memory.device_address(), ptr.as_ptr() as u64);
        // SAFETY: the allocation holds 1000 bytes and nothing else touches it.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.as_ptr(), 1000) };
        assert!(bytes.iter().all(|&b| b == 0));
        assert!(memory.is_committed() && !memory.is_transient());
    }

    #[test]
    fn budget_counts_in_use_and_peak() {
        let budget = budget();
        let a = HostMemory::new(100, &budget).unwrap();
        let b = HostMemory::new(50, &budget).unwrap();
        assert_eq!(budget.in_use(), 150);
        drop(a);
        assert_eq!(budget.in_use(), 50);
        assert_eq!(budget.peak(), 150);
        drop(b);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn over_limit_is_resource_exhausted_naming_sizes() {
        let budget = Arc::new(MemoryBudget::with_limit(1024));
        assert_eq!(budget.limit(), Some(1024));
        let _a = HostMemory::new(1000, &budget).unwrap();
        let err = HostMemory::new(100, &budget).unwrap_err();
        assert_eq!(err.code(), StatusCode::ResourceExhausted);
        assert!(
            err.message().contains("100 bytes") && err.message().contains("1000") && err.message().contains("1024")
        );
        assert_eq!(budget.in_use(), 1000, "a refused allocation reserves nothing");
        budget.set_limit(None);
        let _b = HostMemory::new(100, &budget).unwrap();
    }

    #[test]
    fn impossible_sizes_are_errors_not_aborts() {
        let budget = budget();
        // Too large for a Layout.
        let err = HostMemory::new(u64::MAX, &budget).unwrap_err();
        assert_eq!(err.code(), StatusCode::ResourceExhausted);
        // A valid Layout the system allocator cannot satisfy (4 EiB).
        let err = HostMemory::new(1 << 62, &budget).unwrap_err();
        assert_eq!(err.code(), StatusCode::ResourceExhausted, "{err}");
        assert_eq!(budget.in_use(), 0, "failed allocations give back their reservation");
    }

    #[test]
    fn transient_life_cycle() {
        let budget = budget();
        let memory = HostMemory::transient(256, &budget);
        assert!(memory.host_view().is_none());
        assert_eq!(memory.device_address(), 0);
        assert_eq!(budget.in_use(), 0, "no memory before the alloca");

        let err = memory.release().unwrap_err();
        assert_eq!(err.code(), StatusCode::FailedPrecondition);
        assert!(err.message().contains("before commit"), "{err}");

        memory.commit().unwrap();
        assert_eq!(memory.host_view().unwrap().ptr().as_ptr() as usize % HOST_MEMORY_ALIGNMENT, 0);
        assert_eq!(budget.in_use(), 256);
        assert_eq!(memory.commit().unwrap_err().code(), StatusCode::FailedPrecondition);

        memory.release().unwrap();
        assert!(memory.host_view().is_none());
        assert_eq!(budget.in_use(), 0);
        let err = memory.release().unwrap_err();
        assert_eq!(err.code(), StatusCode::FailedPrecondition);
        assert!(err.message().contains("second time"), "{err}");
        assert_eq!(memory.commit().unwrap_err().code(), StatusCode::FailedPrecondition);
    }

    /// A released transient block is kept (outside the budget) and the next alloca of its size
    /// takes it as it is, once its last view dropped; other sizes and resident buffers get new
    /// zeroed memory, and trimming gives the kept block back.
    #[test]
    fn released_transient_memory_is_reused_for_the_same_size() {
        let budget = Arc::new(MemoryBudget::unlimited().with_transient_cache(1 << 20));
        let first = HostMemory::transient(4096, &budget);
        first.commit().unwrap();
        let view = first.host_view().unwrap();
        let address = view.ptr();
        // SAFETY: the view keeps the 4096 bytes allocated; nothing else reaches them.
        unsafe { address.as_ptr().write_bytes(7, 4096) };
        first.release().unwrap();
        assert_eq!(budget.transients().kept(), 0, "a view still holds the block");
        drop(view);
        assert!(budget.transients().kept() >= 4096, "released, the block is kept");
        assert_eq!(budget.in_use(), 0, "kept bytes are outside the budget");

        let other_size = HostMemory::transient(2048, &budget);
        other_size.commit().unwrap();
        assert_ne!(other_size.host_view().unwrap().ptr(), address);
        let resident = HostMemory::new(4096, &budget).unwrap();
        assert_ne!(resident.host_view().unwrap().ptr(), address);

        let second = HostMemory::transient(4096, &budget);
        second.commit().unwrap();
        let reused = second.host_view().unwrap();
        assert_eq!(reused.ptr(), address, "the kept block is reused");
        // SAFETY: the view keeps the 4096 bytes allocated.
        assert_eq!(unsafe { reused.ptr().as_ptr().add(4095).read() }, 7, "as the last user left it");
        assert_eq!(budget.transients().kept(), 0);
        assert_eq!(budget.in_use(), 4096 + 2048 + 4096);
        drop(reused);
        second.release().unwrap();
        assert!(budget.transients().kept() >= 4096);
        budget.transients().trim();
        assert_eq!(budget.transients().kept(), 0, "trim gives it back");
    }

    #[test]
    fn view_keeps_released_memory_until_it_drops() {
        let budget = budget();
        let memory = HostMemory::transient(128, &budget);
        memory.commit().unwrap();
        let view = memory.host_view().unwrap();
        memory.release().unwrap();
        assert!(memory.host_view().is_none(), "no new view after the release");
        assert_eq!(budget.in_use(), 128, "the view still holds the memory");
        // SAFETY: the view keeps the 128 bytes allocated; nothing else reaches them.
        unsafe { view.ptr().as_ptr().add(127).write(1) };
        drop(view);
        assert_eq!(budget.in_use(), 0, "the last view frees it");
    }

    #[test]
    fn transient_commit_respects_budget_and_drop_frees() {
        let budget = Arc::new(MemoryBudget::with_limit(100));
        let too_big = HostMemory::transient(200, &budget);
        assert_eq!(too_big.commit().unwrap_err().code(), StatusCode::ResourceExhausted);
        assert!(!too_big.is_committed());
        let fits = HostMemory::transient(100, &budget);
        fits.commit().unwrap();
        assert_eq!(budget.in_use(), 100);
        drop(fits);
        assert_eq!(budget.in_use(), 0, "dropping a committed transient buffer frees it");
    }

    #[test]
    fn resident_memory_refuses_transitions() {
        let budget = budget();
        let memory = HostMemory::new(8, &budget).unwrap();
        assert_eq!(memory.commit().unwrap_err().code(), StatusCode::FailedPrecondition);
        assert_eq!(memory.release().unwrap_err().code(), StatusCode::FailedPrecondition);
        assert!(memory.is_committed());
    }

    #[test]
    fn buffer_helpers_name_the_buffer() {
        let budget = budget();
        let backend = Arc::new(HostMemory::transient(64, &budget));
        // SAFETY: cpu-sim host memory, and only this test's cpu-sim code touches it.
        let buffer = unsafe { Buffer::from_backend(DeviceId::next(), BufferParams::host_visible(), backend) };
        let err = release_buffer(&buffer).unwrap_err();
        assert!(err.message().starts_with(&format!("{}:", buffer)), "{err}");
        commit_buffer(&buffer).unwrap();
        buffer.write(0, &[1, 2, 3]).unwrap();
        let mut out = [0u8; 4];
        buffer.read(0, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 0]);
        release_buffer(&buffer).unwrap();
        assert_eq!(buffer.read(0, &mut out).unwrap_err().code(), StatusCode::FailedPrecondition);
    }

    #[test]
    fn commit_on_another_thread_is_seen() {
        let budget = budget();
        let memory = Arc::new(HostMemory::transient(4096, &budget));
        let worker = {
            let memory = memory.clone();
            std::thread::spawn(move || memory.commit())
        };
        let view = loop {
            if let Some(view) = memory.host_view() {
                break view;
            }
            std::thread::yield_now();
        };
        // SAFETY: the view keeps 4096 committed bytes allocated while `bytes` lives; nobody writes them.
        let bytes = unsafe { std::slice::from_raw_parts(view.ptr().as_ptr(), 4096) };
        assert!(bytes.iter().all(|&b| b == 0));
        worker.join().unwrap().unwrap();
    }

    #[test]
    fn a_buffer_takes_its_size_from_the_memory_behind_it() {
        // The buffer's size is the one its backend's `unsafe impl` vouches for, not a caller's
        // choice, so a mapping past the memory is refused.
        use hal::driver::BufferExt;
        use hal::{Buffer, BufferParams, DeviceId, StatusCode};
        let budget = Arc::new(MemoryBudget::unlimited());
        let memory = Arc::new(HostMemory::new(8, &budget).unwrap());
        // SAFETY: cpu-sim host memory, touched only through this buffer's host calls.
        let buffer = unsafe { Buffer::from_backend(DeviceId::next(), BufferParams::host_visible(), memory) };
        assert_eq!(buffer.size(), 8);
        assert_eq!(buffer.map(0, 64).err().unwrap().code(), StatusCode::OutOfRange);
        assert_eq!(buffer.read_to_vec().unwrap(), vec![0; 8]);
    }
}
