//! The queue-local fast path: a submission that puts nothing on its stream (a barrier, an execute
//! of a command buffer with no device work), or whose one stream call is done once it returns on an
//! idle stream (CUDA's stream-ordered allocation and free), whose waits have all been reached
//! retires on the submitting thread when its queue has nothing in flight. The backend makes its
//! stream call there (`StreamModel::run_at_submission`), and its signals are applied there and
//! then (or failed with the call's error), with no work item, wait cover, admission entry or issue
//! built for it.
//!
//! It is the issue path's `Route::RetireNow` (`issue.rs`) taken before the issue is built: the
//! same conditions, checked under the same locks in the same order (the issue lock, then the
//! retiring lock tried, then the in-flight list), so work with nothing to run takes it only where
//! the general path would have retired it at issue too, and work with a stream call only where that
//! call would have been the only thing on an idle stream. Anything else (a wait not reached or failed, a
//! profiling session, work held behind a blocking host call, work in flight, a device shutting
//! down) goes the general way, which holds, fails, times or cancels it.

use super::{Shared, completion};
use crate::driver::Submission;
use crate::driver::stream_model::StreamModel;
use crate::semaphore::SemaphoreValue;
use crate::sync::atomic::Ordering;
use crate::sync::{lock, try_lock};

impl<M: StreamModel> Shared<M> {
    /// Retires `op` of `queue` now if it qualifies (see the module docs); `false` when it must be
    /// submitted the general way.
    pub(crate) fn retire_quiet_at_submission(
        &self,
        queue: usize,
        op: &Submission,
        waits: &[SemaphoreValue],
        signals: &[SemaphoreValue],
    ) -> bool {
        let Submission::Stream(op) = op else { return false };
        if !self.model.retires_at_submission(op) || self.profiling.current().is_some() {
            return false;
        }
        if !waits.iter().all(|w| w.semaphore.query().is_ok_and(|value| value >= w.value)) {
            return false;
        }
        let slot = &self.queues[queue];
        // Work held behind a blocking host call of this queue: the call's order decides.
        if !slot.admission.is_empty() {
            return false;
        }
        let mut issuer = lock(&slot.issuer);
        if self.shutting_down.load(Ordering::Acquire) {
            return false;
        }
        let Some(retiring) = try_lock(&slot.retiring) else { return false };
        if !lock(&slot.inflight).is_empty() {
            return false;
        }
        // As an issue does: the stream's last mark is not shared past this point.
        drop(issuer.last_mark.take());
        // Under the issue lock: no other issuer reaches the stream before this call returns.
        let outcome = self
            .model
            .run_at_submission(&slot.stream, op)
            .map_err(|status| status.context(format!("queue {queue} ({})", op.describe())));
        drop(issuer);
        if let Err(status) = &outcome {
            op.will_not_run(status);
            tracing::warn!(%status, "run at submission failed");
        }
        tracing::trace!(queue, op = op.kind(), "retired at submission");
        completion::retire_at_submission(self, signals, outcome, retiring);
        true
    }
}
