//! How the scheduler uses a stream model's host gate (`StreamModel::create_host_gate`) for a
//! semaphore only the host signals: a wait on it is covered by the gate's event and the work issued
//! at once; the host's signal and a failure reach the gate. (Teardown with such work waiting is
//! the CTS case `host_signal_only::device_dropped_while_work_waits`: this model completes work
//! whatever it waits for.)
#![cfg(not(loom))]

use std::time::Duration;

use hal::driver::QueueOp;
use hal::{Error, SemaphoreFlags, SemaphoreValue as SV, StatusCode, Timeout};

#[path = "support/manual_streams.rs"]
mod manual_streams;
use manual_streams::scheduler;

fn log(s: &manual_streams::Tested) -> Vec<String> {
    s.model().gate_log.lock().unwrap().clone()
}

#[test]
fn a_wait_on_a_host_gate_is_issued_before_the_signal_which_reaches_the_gate() {
    let s = scheduler(2);
    s.model().release_completion_threads();
    let gate = s.create_semaphore_with(0, SemaphoreFlags::HOST_SIGNAL_ONLY).unwrap();
    let done = s.create_semaphore(0);
    let calls = s.model().work_calls();
    s.submit(1, QueueOp::Barrier, &[SV::new(&gate, 2)], &[SV::new(&done, 1)]).unwrap();
    assert_eq!(s.model().work_calls(), calls + 1, "the work was enqueued before the host's signal");
    assert_eq!(log(&s), ["event q1 v2"]);
    gate.signal(1).unwrap();
    gate.signal(2).unwrap();
    assert_eq!(log(&s), ["event q1 v2", "signal 1", "signal 2"]);
    assert!(gate.signal(2).is_err(), "values only grow");
    assert_eq!(log(&s).len(), 3, "a refused signal does not reach the gate");
    s.model().complete_up_to(u64::MAX);
    done.wait(1, Timeout::After(Duration::from_secs(5))).unwrap();
    // A reached value needs no gate.
    s.submit(0, QueueOp::Barrier, &[SV::new(&gate, 2)], &[SV::new(&done, 2)]).unwrap();
    done.wait(2, Timeout::After(Duration::from_secs(5))).unwrap();
    assert_eq!(log(&s).len(), 3, "{:?}", log(&s));
}

#[test]
fn a_failure_releases_the_gate_and_the_issued_work_carries_it() {
    let s = scheduler(1);
    s.model().release_completion_threads();
    let gate = s.create_semaphore_with(0, SemaphoreFlags::HOST_SIGNAL_ONLY).unwrap();
    let done = s.create_semaphore(0);
    s.submit(0, QueueOp::Barrier, &[SV::new(&gate, 1)], &[SV::new(&done, 1)]).unwrap();
    gate.fail(Error::aborted("given up"));
    assert_eq!(log(&s), ["event q0 v1", "release"]);
    s.model().complete_up_to(u64::MAX);
    let e = done.wait(1, Timeout::After(Duration::from_secs(5))).unwrap_err();
    assert_eq!(e.code(), StatusCode::Aborted, "{e}");
}

#[test]
fn a_host_signal_only_semaphore_without_a_gate_is_still_host_only() {
    let host = hal::Semaphore::with_flags(4, SemaphoreFlags::HOST_SIGNAL_ONLY);
    assert!(host.is_host_signal_only());
    assert_eq!(host.owner(), None);
    host.signal(5).unwrap();
    assert_eq!(host.query().unwrap(), 5);
    assert!(!hal::Semaphore::new(0).is_host_signal_only());
}
