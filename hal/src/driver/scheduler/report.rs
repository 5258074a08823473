//! The hang report: what every pending action waits on (semaphore, wanted value, current value) and
//! what is in flight on each queue. One call instead of a day with a debugger.

use std::fmt::Write;

use super::Shared;
use crate::driver::stream_model::StreamModel;
use crate::sync::lock;

pub(super) fn render<M: StreamModel>(shared: &Shared<M>) -> String {
    let mut out = String::new();
    let mut pending: Vec<_> = lock(&shared.pending).values().cloned().collect();
    pending.sort_by_key(|a| a.id);
    let _ = writeln!(out, "{}: {} pending action(s)", shared.device, pending.len());
    for action in &pending {
        for line in action.describe_waits() {
            let _ = writeln!(out, "  {line}");
        }
    }
    for queue in 0..shared.queues.len() {
        shared.describe_admission(queue, &mut out);
    }
    for (queue, action) in shared.host_calls.running() {
        let _ = writeln!(
            out,
            "  host call action {action} of queue {queue}: running (user code; a call that waits forever for \
             something only later work provides is a deadlock of the program's)"
        );
    }
    for (queue, slot) in shared.queues.iter().enumerate() {
        let inflight = lock(&slot.inflight);
        let ids: Vec<String> = inflight.iter().map(|e| format!("{} ({})", e.work.id, e.describe())).collect();
        let _ = writeln!(out, "  queue {queue}: {} in flight [{}]", ids.len(), ids.join(", "));
    }
    let _ = write!(out, "  events: {} in use / {} created", shared.events_in_use(), shared.events.created());
    out
}
