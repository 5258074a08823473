//! A counting global allocator: the bench reports heap allocations per steady-state submission.
//! Each front-end (the `bench` binary, `hal`) installs it with
//! `#[global_allocator] static GLOBAL: bench::alloc_count::CountingAllocator = bench::alloc_count::CountingAllocator;`;
//! [`installed`] tells whether the running binary did.

use std::alloc::{GlobalAlloc, Layout, System};
use std::backtrace::Backtrace;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The system allocator, counting allocations and reallocations (process-wide and per thread).
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Allocations made by this thread (so the bench can leave out its own bookkeeping).
    static THREAD_ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    /// Set while this thread records an allocation's backtrace (which allocates itself).
    static RECORDING_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Whether allocations' backtraces are kept ([`record_sites`]).
static RECORDING: AtomicBool = AtomicBool::new(false);

/// The backtraces kept while [`RECORDING`] is set.
static SITES: Mutex<Vec<Backtrace>> = Mutex::new(Vec::new());

/// Counts one allocation, process-wide and for the calling thread, and keeps its backtrace while
/// sites are recorded (the recording's own allocations are neither counted nor kept).
fn count_allocation() {
    // The recording's own allocations are not the program's.
    if RECORDING_HERE.try_with(Cell::get).unwrap_or(false) {
        return;
    }
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    // A const-initialised `Cell` has no destructor, so this works during thread teardown too; should
    // the slot be unavailable anyway, only the per-thread count misses it.
    let _ = THREAD_ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    if RECORDING.load(Ordering::Relaxed) {
        record_site();
    }
}

/// Keeps the calling allocation's backtrace (not for the allocations the recording makes).
#[cold]
fn record_site() {
    let entered = RECORDING_HERE.try_with(|here| !here.replace(true)).unwrap_or(false);
    if !entered {
        return;
    }
    let trace = Backtrace::force_capture();
    if let Ok(mut sites) = SITES.lock() {
        sites.push(trace);
    }
    let _ = RECORDING_HERE.try_with(|here| here.set(false));
}

/// Runs `f` while keeping the backtrace of every allocation any thread makes, and returns the
/// `top` most frequent allocation sites: each the first `depth` frames of this program's crates
/// below the allocator, with how many allocations it made.
pub fn record_sites<T>(top: usize, depth: usize, f: impl FnOnce() -> T) -> (T, Vec<(u64, String)>) {
    if let Ok(mut sites) = SITES.lock() {
        sites.clear();
    }
    RECORDING.store(true, Ordering::SeqCst);
    let out = f();
    RECORDING.store(false, Ordering::SeqCst);
    // Summing up is not counted either: the caller's count brackets this call.
    let outer = RECORDING_HERE.try_with(|here| here.replace(true)).unwrap_or(true);
    let traces = SITES.lock().map(|mut sites| std::mem::take(&mut *sites)).unwrap_or_default();
    let mut counts: HashMap<String, u64> = HashMap::new();
    for trace in traces {
        *counts.entry(site(&trace, depth)).or_default() += 1;
    }
    let mut sites: Vec<(u64, String)> = counts.into_iter().map(|(site, n)| (n, site)).collect();
    sites.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    sites.truncate(top);
    let _ = RECORDING_HERE.try_with(|here| here.set(outer));
    (out, sites)
}

/// The first `depth` frames of `trace` below the allocator, as `a <- b <- c`: the frames after
/// this module's own, leaving out the standard library's (by their source file where the program
/// has line tables, else by their path: `std`, `core`, `alloc`).
fn site(trace: &Backtrace, depth: usize) -> String {
    let text = trace.to_string();
    // Each frame is a line `N: name`, followed by `at FILE:LINE:COL` where line tables say.
    let mut frames: Vec<(&str, Option<&str>)> = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(file) = line.strip_prefix("at ") {
            if let Some(last) = frames.last_mut() {
                last.1.get_or_insert(file);
            }
        } else if let Some((n, name)) = line.split_once(": ")
            && n.chars().all(|c| c.is_ascii_digit())
        {
            frames.push((name, None));
        }
    }
    // The allocator's frames are the innermost ones of this module (the program may call into the
    // module further out: `record_sites` itself).
    let first = frames.iter().position(|(name, _)| name.contains("alloc_count")).unwrap_or(0);
    let below = first + frames[first..].iter().take_while(|(name, _)| name.contains("alloc_count")).count();
    let own = |(name, file): &&(&str, Option<&str>)| {
        let std = ["std::", "core::", "alloc::", "__rust", "<std::", "<core::", "<alloc::"];
        !std.iter().any(|prefix| name.starts_with(prefix))
            && match file {
                Some(file) => !file.contains("/rustc/") && !file.contains("/library/"),
                None => name.split('<').next().is_some_and(|path| path.contains("::")),
            }
    };
    frames[below..]
        .iter()
        .filter(own)
        .take(depth)
        .map(|(name, _)| name.rsplit_once("::h").map_or(*name, |(head, _)| head))
        .collect::<Vec<_>>()
        .join(" <- ")
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
