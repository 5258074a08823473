//! The `Work` pool: retired submissions' allocations, reused by later ones so that a steady stream
//! of submissions allocates nothing. Completion threads push retired records onto a device-wide list;
//! an issuer takes them from there in batches into its queue's cache (under the issue lock it holds
//! anyway), so an issue does not touch a list the completion threads write.

use std::sync::Arc;

use super::Shared;
use crate::driver::stream_model::{PerWait, StreamModel, Submitted, Work};
use crate::driver::{HostCall, ProfileSink, QueueOp, Submission};
use crate::sync::{lock, take_batch, try_lock};

/// How many spares (`Work` allocations, events) an issuer takes from a device-wide list at once.
pub(super) const REFILL: usize = 32;

impl<M: StreamModel> Shared<M> {
    /// A `Work` for `op`, reusing a retired allocation when one is free (see [`Self::work_for`]),
    /// with the host call `op` is, if it is one: its work is a barrier, never profiled.
    pub(super) fn new_work(
        &self,
        cache: &mut Vec<Arc<Work>>,
        id: u64,
        queue: usize,
        op: Submission,
        upstream: PerWait<Arc<Work>>,
        submitted: Option<Submitted>,
    ) -> (Arc<Work>, Option<HostCall>) {
        // Split where the op moves into the work: each move of it is a copy.
        match op {
            Submission::Stream(op) => {
                let profile = self.profiling.current().map(|sink| (sink, submitted));
                (self.work_for(cache, id, queue, op, profile, upstream), None)
            }
            Submission::HostCall(call) => {
                (self.work_for(cache, id, queue, QueueOp::Barrier, None, upstream), Some(call))
            }
        }
    }

    /// A `Work`, reusing a retired allocation when one is free: from `cache`, refilled with up to
    /// [`REFILL`] spares at a time.
    #[inline(always)]
    fn work_for(
        &self,
        cache: &mut Vec<Arc<Work>>,
        id: u64,
        queue: usize,
        op: QueueOp,
        profile: Option<(Arc<ProfileSink>, Option<Submitted>)>,
        upstream: PerWait<Arc<Work>>,
    ) -> Arc<Work> {
        let (profile, submitted) = profile.map_or((None, None), |(sink, submitted)| (Some(sink), submitted));
        if cache.is_empty() {
            take_batch(&self.spare_work, cache, REFILL);
        }
        if let Some(mut work) = cache.pop()
            && let Some(reused) = Arc::get_mut(&mut work)
        {
            reused.reset(id, queue, op, upstream);
            reused.set_profile(profile);
            reused.set_submitted(submitted);
            return work;
        }
        let mut work = Work::new(id, queue, op, upstream);
        work.set_profile(profile);
        work.set_submitted(submitted);
        Arc::new(work)
    }

    /// Takes back a retired `Work` if nothing else refers to it (onto the device-wide list, from
    /// which issuers refill their queue's cache); its op is dropped now either way. So are the
    /// producers it referred to (work whose faults it checked) that it held last.
    pub(crate) fn recycle_work(&self, work: Arc<Work>) {
        let (spent, upstream) = spent(work);
        if let Some(spent) = spent {
            self.keep_spare(spent);
        }
        self.reclaim_producers(upstream);
    }

    /// Takes back a `Work` retired on the thread that just issued it (see
    /// `completion::retire_at_issue`): into its queue's issuer cache when the issue lock is free, so
    /// the next issue on this thread neither locks the device-wide list nor refills from it.
    pub(crate) fn recycle_work_at_issue(&self, queue: usize, work: Arc<Work>) {
        let (spent, upstream) = spent(work);
        self.reclaim_producers(upstream);
        let Some(spent) = spent else { return };
        match try_lock(&self.queues[queue].issuer) {
            Some(mut issuer) if issuer.work.len() < REFILL => issuer.work.push(spent),
            _ => self.keep_spare(spent),
        }
    }

    /// Takes back the producers a retired submission referred to that nothing else refers to any
    /// more. A producer retires before its dependants, so while a dependant on another queue (or
    /// one whose backend checks upstream faults) holds it, its own retirement cannot; without this
    /// the dependant's retirement would free it, and a later issue allocate another. (A producer's
    /// own upstream references went when it retired.)
    pub(crate) fn reclaim_producers(&self, producers: impl IntoIterator<Item = Arc<Work>>) {
        for mut work in producers {
            if let Some(spent) = Arc::get_mut(&mut work) {
                drop(spent.clear_for_reuse());
                self.keep_spare(work);
            }
        }
    }

    fn keep_spare(&self, spent: Arc<Work>) {
        // Enough for any realistic number in flight; the pool, like the event pool, never shrinks.
        const SPARES: usize = 1 << 16;
        let mut spare = lock(&self.spare_work);
        if spare.len() < SPARES {
            spare.push(spent);
        }
    }
}

/// The references to upstream work a retired `Work` let go of.
type Released = PerWait<Arc<Work>>;

/// `work` emptied for reuse if nothing else refers to it; otherwise it only lets go of its upstream
/// references (the last holder drops the rest). Either way the upstream references are returned,
/// for [`Shared::reclaim_producers`].
fn spent(mut work: Arc<Work>) -> (Option<Arc<Work>>, Released) {
    match Arc::get_mut(&mut work) {
        Some(spent) => {
            let upstream = spent.clear_for_reuse();
            (Some(work), upstream)
        }
        None => {
            let upstream = work.release_upstream();
            (None, upstream)
        }
    }
}
