//! The `Work` pool: retired submissions' allocations, reused by later ones so that a steady stream
//! of submissions allocates nothing. Completion threads push retired records onto a device-wide list;
//! an issuer takes them from there in batches into its queue's cache (under the issue lock it holds
//! anyway), so an issue does not touch a list the completion threads write.

use std::sync::Arc;

use smallvec::SmallVec;

use super::Shared;
use crate::driver::QueueOp;
use crate::driver::stream_model::{StreamModel, Work};
use crate::sync::{lock, take_batch};

/// How many spares (`Work` allocations, events) an issuer takes from a device-wide list at once.
pub(super) const REFILL: usize = 32;

impl<M: StreamModel> Shared<M> {
    /// A `Work`, reusing a retired allocation when one is free: from `cache`, refilled with up to
    /// [`REFILL`] spares at a time. Work for a stream (`on_stream`) records into the profiling
    /// session in progress, if any; a host call's record is never timed.
    pub(super) fn new_work(
        &self,
        cache: &mut Vec<Arc<Work>>,
        id: u64,
        queue: usize,
        op: QueueOp,
        on_stream: bool,
        upstream: SmallVec<[Arc<Work>; 2]>,
    ) -> Arc<Work> {
        let profile = if on_stream { self.profiling.current() } else { None };
        if cache.is_empty() {
            take_batch(&self.spare_work, cache, REFILL);
        }
        if let Some(mut work) = cache.pop()
            && let Some(reused) = Arc::get_mut(&mut work)
        {
            reused.reset(id, queue, op, upstream);
            reused.set_profile(profile);
            return work;
        }
        let mut work = Work::new(id, queue, op, upstream);
        work.set_profile(profile);
        Arc::new(work)
    }

    /// Takes back a retired `Work` if nothing else refers to it (onto the device-wide list, from
    /// which issuers refill their queue's cache); its op is dropped now either way.
    pub(crate) fn recycle_work(&self, mut work: Arc<Work>) {
        // Enough for any realistic number in flight; the pool, like the event pool, never shrinks.
        const SPARES: usize = 1 << 16;
        work.release_upstream();
        if let Some(spent) = Arc::get_mut(&mut work) {
            spent.op = QueueOp::Barrier;
            spent.set_profile(None);
            let mut spare = lock(&self.spare_work);
            if spare.len() < SPARES {
                spare.push(work);
            }
        }
    }
}
