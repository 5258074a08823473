//! A completion thread whose oldest submission is open (its stream mark waits for the next record,
//! see the scheduler's `seal` module) while a slow issue holds the queue's issue lock: it asks for
//! the record, watches briefly, then blocks on the lock instead of keeping a core busy, and retires
//! the open submission once the issue lets go. Alone in its test binary: it reads the CPU time of
//! the process's completion thread, which another test's scheduler would share a name with.
#![cfg(not(loom))]

use std::sync::atomic::Ordering;
use std::time::Duration;

use hal::driver::QueueOp;
use hal::{SemaphoreValue as SV, Timeout};

#[path = "support/manual_streams.rs"]
mod manual_streams;
use manual_streams::scheduler;

/// Nanoseconds on a CPU so far of each thread of this process whose name starts with `prefix`
/// (`/proc/self/task/*/schedstat`); `None` where the kernel does not expose it.
fn cpu_time_of_threads(prefix: &str) -> Option<Vec<u64>> {
    let mut times = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let Ok(name) = std::fs::read_to_string(path.join("comm")) else { continue };
        if !name.starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
        times.push(stat.split_whitespace().next()?.parse().ok()?);
    }
    Some(times)
}

#[test]
fn a_completion_thread_waiting_for_a_slow_issue_to_seal_its_front_blocks_instead_of_spinning() {
    let s = scheduler(1);
    let model = s.model();
    model.open_marks.store(true, Ordering::SeqCst);
    model.polling.store(true, Ordering::SeqCst);
    let done = s.create_semaphore(0);
    // The first records (the queue was idle); the second is left open behind it.
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&done, 1)]).unwrap();
    s.submit(0, QueueOp::Barrier, &[], &[SV::new(&done, 2)]).unwrap();
    assert_eq!(model.records(), 1);
    // A third issue blocks in its enqueue, holding the issue lock.
    model.hold_enqueues(true);
    std::thread::scope(|scope| {
        let third = scope.spawn(|| s.submit(0, QueueOp::Barrier, &[], &[SV::new(&done, 3)]));
        while model.enqueues_held() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The completion thread retires the first and reaches the open second.
        model.complete_up_to(1);
        done.wait(1, Timeout::After(Duration::from_secs(5))).unwrap();
        let Some(before) = cpu_time_of_threads("hal-completion") else {
            model.hold_enqueues(false);
            println!("not run: this kernel shows no per-thread CPU time");
            return;
        };
        assert_eq!(before.len(), 1, "one completion thread in this process");
        let window = Duration::from_millis(200);
        std::thread::sleep(window);
        let after = cpu_time_of_threads("hal-completion");
        let retired = done.query();
        // The issue lets go (before anything is asserted: the scope joins its thread): it records,
        // as the completion thread asked, which seals the second.
        model.hold_enqueues(false);
        third.join().unwrap().unwrap();
        let spent = Duration::from_nanos(after.unwrap()[0].saturating_sub(before[0]));
        assert!(
            spent < window / 4,
            "the completion thread spent {spent:?} on a CPU in {window:?} waiting for the issue lock"
        );
        assert_eq!(retired.unwrap(), 1, "the open second is not retired before it is sealed");
    });
    model.complete_up_to(u64::MAX);
    done.wait(3, Timeout::After(Duration::from_secs(5))).unwrap();
    assert_eq!(model.records(), 2, "the third issue's record marked the open second and itself");
}
