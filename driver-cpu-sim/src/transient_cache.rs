//! Blocks of released transient buffers, kept for the next allocas of the same size.
//!
//! A program that allocates its intermediates on every call (IREE's programs do, through
//! `queue_alloca`) would otherwise ask the system allocator for them every time, on the stream
//! thread, in queue order: blocks under the allocator's mapping threshold come back zeroed byte by
//! byte (a 7 MiB intermediate of IREE's convolution took about 1 ms), larger ones as fresh pages
//! that fault on first touch. A transient buffer holds whatever was there when its alloca ran (the
//! HAL's contract), so a reused block is handed out as it is.
//!
//! The cache holds at most its byte limit, the oldest blocks going first; what it holds is the
//! device's `memory_kept` and goes back to the system at `Device::trim`. Cached bytes are not in
//! the device's memory budget: they count again when an alloca takes them.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Mutex;

use hal::driver::lock;

/// Released transient blocks, oldest first, and what they hold in all.
#[derive(Debug)]
pub struct TransientCache {
    limit: u64,
    state: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    blocks: Vec<Block>,
    bytes: u64,
}

/// A block from the system allocator: its first byte and the layout it was allocated with.
#[derive(Debug)]
struct Block {
    base: NonNull<u8>,
    layout: Layout,
}

// SAFETY: a cached block is owned by the cache alone (no buffer points into it any more); its
// pointer is plain data until `take` hands it to one new owner.
unsafe impl Send for Block {}

impl Block {
    /// Gives the block back to the system allocator.
    fn free(self) {
        // SAFETY: the block came from the system allocator with exactly `layout` (`put`'s
        // contract), and the cache frees or hands it out once.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) };
    }
}

impl TransientCache {
    /// A cache holding at most `limit` bytes (0: none, every block goes back at once).
    pub fn new(limit: u64) -> Self {
        TransientCache { limit, state: Mutex::new(Kept::default()) }
    }

    /// A kept block allocated with exactly `layout`, newest first, now owned by the caller; `None`
    /// when there is none.
    pub fn take(&self, layout: Layout) -> Option<NonNull<u8>> {
        let mut kept = lock(&self.state);
        let at = kept.blocks.iter().rposition(|block| block.layout == layout)?;
        let block = kept.blocks.remove(at);
        kept.bytes -= block.layout.size() as u64;
        Some(block.base)
    }

    /// Keeps the block at `base`, dropping the oldest blocks while over the limit (a block larger
    /// than the limit is freed at once).
    ///
    /// # Safety
    /// `base` came from `std::alloc::alloc_zeroed` (or `alloc`) with exactly `layout`, and nothing
    /// uses it any more: the cache now owns it.
    pub unsafe fn put(&self, base: NonNull<u8>, layout: Layout) {
        let block = Block { base, layout };
        let size = layout.size() as u64;
        if size > self.limit {
            block.free();
            return;
        }
        let mut evicted = Vec::new();
        {
            let mut kept = lock(&self.state);
            kept.bytes += size;
            kept.blocks.push(block);
            while kept.bytes > self.limit {
                let oldest = kept.blocks.remove(0);
                kept.bytes -= oldest.layout.size() as u64;
                evicted.push(oldest);
            }
        }
        // Outside the lock: freeing a large block unmaps it.
        evicted.into_iter().for_each(Block::free);
    }

    /// Bytes kept now.
    pub fn kept(&self) -> u64 {
        lock(&self.state).bytes
    }

    /// Gives every kept block back to the system.
    pub fn trim(&self) {
        let blocks = std::mem::take(&mut *lock(&self.state));
        blocks.blocks.into_iter().for_each(Block::free);
    }
}

impl Drop for TransientCache {
    fn drop(&mut self) {
        self.trim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(size: usize) -> (NonNull<u8>, Layout) {
        let layout = Layout::from_size_align(size, 8).unwrap();
        // SAFETY: nonzero size.
        let base = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).unwrap();
        (base, layout)
    }

    #[test]
    fn a_kept_block_is_reused_for_the_same_layout_only() {
        let cache = TransientCache::new(1 << 20);
        let (base, layout) = block(4096);
        // SAFETY: from `alloc_zeroed` with `layout`, unused.
        unsafe { cache.put(base, layout) };
        assert_eq!(cache.kept(), 4096);
        assert_eq!(cache.take(Layout::from_size_align(8192, 8).unwrap()), None);
        assert_eq!(cache.take(layout), Some(base));
        assert_eq!(cache.kept(), 0);
        assert_eq!(cache.take(layout), None, "a block is handed out once");
        // SAFETY: `take` handed it back to us; freed once.
        unsafe { cache.put(base, layout) };
    }

    #[test]
    fn the_oldest_blocks_go_past_the_limit_and_trim_empties_it() {
        let cache = TransientCache::new(10_000);
        let (first, small) = block(4000);
        let (second, _) = block(4000);
        let (third, _) = block(4000);
        // SAFETY: each from `alloc_zeroed` with `small`, unused.
        unsafe {
            cache.put(first, small);
            cache.put(second, small);
            cache.put(third, small);
        }
        assert_eq!(cache.kept(), 8000, "the oldest block went");
        assert_eq!(cache.take(small), Some(third), "the newest block first");
        assert_eq!(cache.take(small), Some(second));
        assert_eq!(cache.take(small), None);
        // SAFETY: handed back by `take`.
        unsafe { cache.put(third, small) };
        let (huge, big) = block(20_000);
        // SAFETY: from `alloc_zeroed` with `big`, unused.
        unsafe { cache.put(huge, big) };
        assert_eq!(cache.kept(), 4000, "a block over the limit is not kept");
        cache.trim();
        assert_eq!(cache.kept(), 0);
        // SAFETY: `second` was handed out by `take` and is ours.
        unsafe { cache.put(second, small) };
    }
}
