//! Teardown: what dropping the last handle of a device does, on whichever thread that happens.
//!
//! Held work can never run now, so it is cancelled (its signals get `Cancelled`); work already on
//! the streams drains. On an ordinary thread the drop waits for that and joins the completion
//! threads. On a thread of the scheduler's own (a completion thread that retired the work holding
//! the last reference, a host call whose closure held it), or inside a retirement, waiting could
//! deadlock: those threads may be waiting for this one. Then nothing is joined: each completion
//! thread finishes its queue and exits on its own, and the last one frees the streams.

use std::sync::Arc;
use std::thread::JoinHandle;

use super::pending_actions::Action;
use super::{Shared, completion, on_scheduler_thread};
use crate::driver::stream_model::StreamModel;
use crate::error::Error;
use crate::sync::atomic::Ordering;
use crate::sync::lock;

pub(super) fn shut_down<M: StreamModel>(shared: &Arc<Shared<M>>, completion_threads: Vec<JoinHandle<()>>) {
    shared.shutting_down.store(true, Ordering::Release);
    // Close every queue: an issue already under its issue lock finishes handing its work to the
    // completion thread (which then retires it before exiting); one after this sees the flag under
    // the lock and cancels instead (`Shared::issue`).
    for slot in &shared.queues {
        drop(lock(&slot.issuer));
    }
    // Pending actions can never run now: fail their signals so nobody waits forever.
    let abandoned: Vec<Arc<Action<M>>> = lock(&shared.pending).values().cloned().collect();
    for action in abandoned {
        let status = Error::cancelled(format!(
            "{}: device destroyed while queue {} action {} was waiting",
            shared.device, action.queue, action.id
        ));
        action.abandon(status, shared);
    }
    for queue in 0..shared.queues.len() {
        shared.abandon_admission(queue);
    }
    // Work on the streams is abandoned too: a driver that can stop it early does (cpu-sim between
    // workgroups), so teardown never waits for work nobody can observe any more.
    for slot in &shared.queues {
        for entry in lock(&slot.inflight).iter() {
            entry.work.request_cancel();
        }
    }
    let may_wait = !on_scheduler_thread() && !completion::retiring_here();
    for (queue, slot) in shared.queues.iter().enumerate() {
        // Drain every stream before its completion thread stops and the stream is destroyed.
        if may_wait && let Err(e) = shared.model.synchronize_stream(&slot.stream) {
            tracing::warn!(queue, %e, "stream did not drain cleanly at teardown");
        }
        let _guard = lock(&slot.inflight);
        slot.wake.notify_all();
    }
    if may_wait {
        for handle in completion_threads {
            if handle.join().is_err() {
                tracing::error!("a completion thread panicked");
            }
        }
    }
    shared.host_calls.shut_down();
}
