//! A counting global allocator: the bench reports heap allocations per steady-state submission.
//! Each front-end (the `bench` binary, `hal`) installs it with
//! `#[global_allocator] static GLOBAL: bench::alloc_count::CountingAllocator = bench::alloc_count::CountingAllocator;`;
//! [`installed`] tells whether the running binary did.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting allocations and reallocations (process-wide and per thread).
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Allocations made by this thread (so the bench can leave out its own bookkeeping).
    static THREAD_ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Counts one allocation, process-wide and for the calling thread.
fn count_allocation() {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    // A const-initialised `Cell` has no destructor, so this works during thread teardown too; should
    // the slot be unavailable anyway, only the per-thread count misses it.
    let _ = THREAD_ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

/// Allocations on every thread since the process started (0 when [`CountingAllocator`] is not the
/// global allocator).
pub fn total() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Allocations made by the calling thread.
pub fn on_this_thread() -> u64 {
    THREAD_ALLOCATIONS.try_with(Cell::get).unwrap_or(0)
}

/// Whether [`CountingAllocator`] is the running binary's global allocator (one allocation moves
/// the count).
pub fn installed() -> bool {
    let before = on_this_thread();
    drop(std::hint::black_box(Box::new(0u64)));
    on_this_thread() != before
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we pass on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (we forward every allocation).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: as for `dealloc`; the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
