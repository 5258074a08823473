//! The counting allocator's site recording: what it keeps, and that it leaves the count alone.

use bench::alloc_count::{self, CountingAllocator};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Makes `n` allocations (and their list) that stay alive until the caller drops them.
#[inline(never)]
#[allow(clippy::vec_box)] // the boxes are the point: one allocation each
fn allocate_some(n: usize) -> Vec<Box<u64>> {
    let mut kept = Vec::with_capacity(n);
    for i in 0..n {
        kept.push(std::hint::black_box(Box::new(i as u64)));
    }
    kept
}

/// One test: recording is process-wide, so a second test running beside it would be recorded too.
#[test]
fn sites_are_this_programs_frames_and_the_recording_is_not_counted() {
    assert!(alloc_count::installed());
    let before = alloc_count::total();
    let (kept, sites) = alloc_count::record_sites(10, 2, || allocate_some(7));
    let counted = alloc_count::total() - before;
    drop(kept);
    let recorded: u64 = sites.iter().map(|(count, _)| count).sum();
    // Capturing and summing up the backtraces allocated far more than the program did: none of it
    // is counted, and every allocation counted is recorded once.
    assert_eq!(recorded, counted, "sites: {sites:?}");
    let (allocations, site) = sites.iter().max_by_key(|(count, _)| *count).unwrap();
    assert_eq!(*allocations, 8, "the Vec and its seven boxes: {sites:?}");
    // Named with its path or without (an inlined frame where the program has only line tables).
    assert!(
        site.split(" <- ").next().is_some_and(|f| f.ends_with("allocate_some")),
        "the allocating function comes first: {site}"
    );
    assert!(!site.contains("alloc_count"), "the allocator's own frames are left out: {site}");

    // Nothing is recorded outside the closure.
    let (_, sites) = alloc_count::record_sites(10, 2, || ());
    let kept = allocate_some(3);
    assert!(sites.iter().all(|(_, site)| !site.contains("allocate_some")), "sites: {sites:?}");
    drop(kept);
}
