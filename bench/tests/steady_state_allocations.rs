//! What a steady stream of submissions allocates on the heap (the bench's hygiene figure, target
//! 0), held as a test on cpu-sim where it is deterministic enough to hold: the seals that mark runs
//! of open submissions are reused, not allocated anew.

use bench::alloc_count::{self, CountingAllocator};
use bench::session;
use bench::workloads::{self, Env};
use driver_cpu_sim::{CpuSimDriver, CpuSimOptions};
use hal::driver::Driver;
use hal::{SemaphoreValue as SV, Timeout};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Counted rounds at most: a round allocates seals while a queue's spares grow to the most it ever
/// had in use at once, and how deep a round of 1 000 chained submissions gets depends on how fast
/// this machine issues against how fast it retires; once a round was as deep as a round can be,
/// later rounds allocate none.
const ROUNDS: usize = 10;

#[test]
fn chained_submissions_reuse_their_seals() {
    let options = CpuSimOptions::default().with_queue_count(1).with_workgroup_threads(1);
    let device = CpuSimDriver::with_options(options).create_device(0).expect("cpu-sim device");
    let env = Env::new(device).expect("bench environment");
    assert!(alloc_count::installed());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut rounds = Vec::new();
    for _ in 0..ROUNDS {
        let ((per_submission, _), sites) =
            alloc_count::record_sites(8, 2, || session::allocations_per_submission(&env).expect("counted round"));
        let seals: u64 = sites.iter().filter(|(_, site)| site.contains("Seal")).map(|(count, _)| count).sum();
        if seals == 0 {
            return;
        }
        rounds.push((per_submission, seals, sites));
    }
    panic!("every round allocated seals (allocations per submission, seal allocations, sites): {rounds:#?}");
}

/// Submissions counted in each of the tests below: enough that one allocation a submission stands
/// far above what the pools still grow by late (a waiter that found the work already retired, a
/// completion thread's batch).
const COUNTED: u64 = 2_000;

/// Held by a test while it counts.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A cpu-sim device with `queues` queues and one workgroup thread, in the bench's environment.
fn environment(queues: usize) -> Env {
    let options = CpuSimOptions::default().with_queue_count(queues).with_workgroup_threads(1);
    let device = CpuSimDriver::with_options(options).create_device(0).expect("cpu-sim device");
    Env::new(device).expect("bench environment")
}

/// Runs `submissions` once to warm the pools, then again counting every thread's allocations; fails
/// with the allocation sites if there was one for every 20 submissions or more.
fn assert_allocation_free(what: &str, mut submissions: impl FnMut()) {
    // The count is process-wide: the tests of this file take turns.
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    assert!(alloc_count::installed());
    submissions();
    let (allocations, sites) = alloc_count::record_sites(8, 4, || {
        let before = alloc_count::total();
        submissions();
        alloc_count::total() - before
    });
    assert!(
        allocations * 20 < COUNTED,
        "{allocations} allocations in {COUNTED} {what}; sites (count, frames innermost first): {sites:#?}"
    );
}

/// A host thread that waits for each submission it makes (the round trip an embedder's synchronous
/// call makes) allocates nothing once warm: the waiter retires the work it waited for and must not
/// keep it from going back to the work pool, or every round trip allocates a new record.
#[test]
fn host_round_trips_reuse_their_work_records() {
    let env = environment(1);
    let cb = env.dispatches(1).expect("a one-dispatch command buffer");
    assert_allocation_free("host round trips", || {
        workloads::round_trip(&env, &cb, Timeout::Infinite, COUNTED).expect("round trips");
    });
}

/// Submissions a burst: the host waits for each burst, so the backlog (and with it the pools) is
/// the same from burst to burst.
const BURST: u64 = 20;

/// Work that another queue's stream waited on is held by that dependant until the dependant
/// retires, after the producer's own retirement: the dependant's retirement takes the producer's
/// record back, or each hop allocates a new one.
#[test]
fn cross_queue_hops_reuse_their_producers_records() {
    let env = environment(2);
    let cb = env.dispatches(1).expect("a one-dispatch command buffer");
    let queues = [env.device.queue(0).expect("queue 0"), env.device.queue(1).expect("queue 1")];
    let hops = env.device.create_semaphore(0).expect("a semaphore");
    let mut value = 0u64;
    assert_allocation_free("cross-queue hops", || {
        for _ in 0..COUNTED / BURST {
            for _ in 0..BURST {
                let queue = &queues[(value % 2) as usize];
                queue.execute(&[SV::new(&hops, value)], &cb, &[SV::new(&hops, value + 1)]).expect("a hop");
                value += 1;
            }
            hops.wait(value, Timeout::Infinite).expect("the burst's last hop");
        }
    });
}

/// A join waiting on three queues keeps its per-wait records (the events its stream waits on, the
/// work they follow) inline: rounds of a fan-out and fan-in allocate nothing once warm.
#[test]
fn fan_out_and_in_keeps_its_waits_inline() {
    const CONSUMERS: usize = 3;
    let env = environment(CONSUMERS + 1);
    let cb = env.dispatches(1).expect("a one-dispatch command buffer");
    let queues: Vec<_> = (0..=CONSUMERS).map(|k| env.device.queue(k).expect("a queue")).collect();
    let produced = env.device.create_semaphore(0).expect("a semaphore");
    let joined = env.device.create_semaphore(0).expect("a semaphore");
    let consumed: Vec<_> = (0..CONSUMERS).map(|_| env.device.create_semaphore(0).expect("a semaphore")).collect();
    let mut joins = Vec::with_capacity(CONSUMERS);
    let mut round = 0u64;
    // Five submissions a round.
    assert_allocation_free("fan-out/fan-in submissions", || {
        for _ in 0..COUNTED / 5 / BURST {
            for _ in 0..BURST {
                round += 1;
                queues[0].execute(&[SV::new(&joined, round - 1)], &cb, &[SV::new(&produced, round)]).expect("fan-out");
                for (queue, consumed) in queues[1..].iter().zip(&consumed) {
                    queue.execute(&[SV::new(&produced, round)], &cb, &[SV::new(consumed, round)]).expect("a consumer");
                }
                joins.clear();
                joins.extend(consumed.iter().map(|c| SV::new(c, round)));
                queues[0].execute(&joins, &cb, &[SV::new(&joined, round)]).expect("fan-in");
            }
            joined.wait(round, Timeout::Infinite).expect("the burst's last join");
        }
    });
}
