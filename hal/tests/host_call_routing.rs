//! Host calls are the scheduler's own work: the stream model is never handed one, whatever route
//! the call takes (issued at once, or held by its waits first), and the order a blocking call
//! imposes on its queue is a list the hang report prints.
#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hal::driver::{HostCall, QueueOp, Submission};
use hal::{HostCallFlags, SemaphoreValue as SV, Timeout};

#[path = "support/manual_streams.rs"]
mod manual_streams;
use manual_streams::scheduler;

fn counting_call(runs: &Arc<AtomicUsize>, flags: HostCallFlags) -> Submission {
    let runs = runs.clone();
    Submission::HostCall(HostCall::new(
        move || {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        },
        flags,
    ))
}

#[test]
fn host_calls_never_reach_the_stream_model() {
    let s = scheduler(1);
    let model = s.model();
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = s.create_semaphore(0);
    let done = s.create_semaphore(0);
    // One issued at once, one held until `gate` is signalled, one that lets later work go.
    s.submit(0, counting_call(&runs, HostCallFlags::empty()), &[], &[SV::new(&done, 1)]).unwrap();
    s.submit(0, counting_call(&runs, HostCallFlags::empty()), &[SV::new(&gate, 1)], &[SV::new(&done, 2)]).unwrap();
    s.submit(0, counting_call(&runs, HostCallFlags::NON_BLOCKING), &[SV::new(&done, 2)], &[SV::new(&done, 3)]).unwrap();
    gate.signal(1).unwrap();
    // The completion thread retires entries without an event on its own; polling only helps it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while done.query().unwrap() < 3 && std::time::Instant::now() < deadline {
        s.poll_completions(0);
        std::thread::yield_now();
    }
    done.wait(3, Timeout::Immediate).unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3, "every call ran");
    assert_eq!(model.work_calls(), 0, "no call was enqueued, completed or discarded by the model");

    // Stream work after them still reaches the model (the count above can move).
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&done, 4)]).unwrap();
    s.poll_completions(0);
    assert!(model.work_calls() > 0, "a barrier is completed by the model");
}

#[test]
fn the_hang_report_prints_the_admission_list() {
    let s = scheduler(1);
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (called, done) = (s.create_semaphore(0), s.create_semaphore(0));
    let call = HostCall::new(
        move || {
            released
                .recv_timeout(Duration::from_secs(5))
                .map_err(|e| hal::Error::internal(format!("not released: {e}")))
        },
        HostCallFlags::empty(),
    );
    s.submit(0, Submission::HostCall(call), &[], &[SV::new(&called, 1)]).unwrap();
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&done, 1)]).unwrap();
    let report = s.report();
    assert!(report.contains("queue 0 admission list, in order:"), "{report}");
    assert!(report.contains("host call action 1: later work of the queue waits until it returns"), "{report}");
    assert!(report.contains("action 2 (barrier): held behind action 1"), "{report}");
    assert_eq!(done.query().unwrap(), 0, "the barrier is held while the call has not returned");

    release.send(()).unwrap();
    s.model().complete_up_to(u64::MAX);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while done.query().unwrap() < 1 && std::time::Instant::now() < deadline {
        s.poll_completions(0);
        std::thread::yield_now();
    }
    // The call's own signal is applied after it let the barrier go: the two may land in either order.
    called.wait(1, Timeout::After(Duration::from_secs(5))).unwrap();
    done.wait(1, Timeout::Immediate).unwrap();
    assert!(!s.report().contains("admission list"), "the list is empty once the call returned");
}

#[test]
fn the_hang_report_prints_a_call_waiting_for_its_waits() {
    let s = scheduler(1);
    let runs = Arc::new(AtomicUsize::new(0));
    let (gate, done) = (s.create_semaphore(0), s.create_semaphore(0));
    s.submit(0, counting_call(&runs, HostCallFlags::empty()), &[SV::new(&gate, 1)], &[SV::new(&done, 1)]).unwrap();
    let report = s.report();
    assert!(report.contains("queue 0 admission list, in order:"), "{report}");
    assert!(report.contains(&format!("host call action 1: waiting for {gate} >= 1")), "{report}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the call waits");

    gate.signal(1).unwrap();
    done.wait(1, Timeout::After(Duration::from_secs(5))).unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the call ran once");
    assert!(!s.report().contains("admission list"), "the list is empty once the call returned");
}

#[test]
fn a_call_whose_wait_fails_leaves_the_admission_list() {
    let s = scheduler(1);
    let runs = Arc::new(AtomicUsize::new(0));
    let (gate, done) = (s.create_semaphore(0), s.create_semaphore(0));
    s.submit(0, counting_call(&runs, HostCallFlags::empty()), &[SV::new(&gate, 1)], &[SV::new(&done, 1)]).unwrap();
    assert!(s.report().contains("admission list"));
    gate.fail(hal::Error::aborted("the gate failed"));
    let failed = done.wait(1, Timeout::After(Duration::from_secs(5))).unwrap_err();
    assert!(failed.message().contains("the gate failed"), "{failed}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the call never ran");
    assert!(!s.report().contains("admission list"), "it left the list: {}", s.report());
    // Later work of the queue is not held by it.
    let later = s.create_semaphore(0);
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&later, 1)]).unwrap();
    s.model().complete_up_to(u64::MAX);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while later.query().unwrap() < 1 && std::time::Instant::now() < deadline {
        s.poll_completions(0);
        std::thread::yield_now();
    }
    later.wait(1, Timeout::Immediate).unwrap();
}
