//! What a steady stream of submissions allocates on the heap (the bench's hygiene figure, target
//! 0), held as a test on cpu-sim where it is deterministic enough to hold: the seals that mark runs
//! of open submissions are reused, not allocated anew.

use bench::alloc_count::{self, CountingAllocator};
use bench::session;
use bench::workloads::{Bursts, Env};
use driver_cpu_sim::{CpuSimDriver, CpuSimOptions};
use hal::driver::Driver;

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

/// Runs `bursts` once to warm the pools, then again counting every thread's allocations; fails with
/// the allocation sites if there was one for every 20 submissions or more.
fn assert_allocation_free(what: &str, mut bursts: Bursts) {
    // The count is process-wide: the tests of this file take turns.
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    assert!(alloc_count::installed());
    bursts.run(COUNTED).expect("warm-up");
    let (allocations, sites) = alloc_count::record_sites(8, 4, || {
        let before = alloc_count::total();
        bursts.run(COUNTED).expect("counted submissions");
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
    assert_allocation_free("host round trips", Bursts::round_trips(&env).expect("round trips"));
}

/// An indirect dispatch reads its workgroup count when it runs and allocates nothing for it (the
/// name an error would give is formatted only for the error).
#[test]
fn indirect_dispatches_allocate_nothing() {
    let env = environment(1);
    let cb = env.indirect_dispatch().expect("an indirect dispatch");
    let round_trips = Bursts::round_trips(&env).expect("round trips").executing(cb);
    assert_allocation_free("indirect dispatches waited for", round_trips);
}

/// Work that another queue's stream waited on is held by that dependant until the dependant
/// retires, after the producer's own retirement: the dependant's retirement takes the producer's
/// record back, or each hop allocates a new one.
#[test]
fn cross_queue_hops_reuse_their_producers_records() {
    let env = environment(2);
    let hops = Bursts::hops(&env).expect("hops").expect("two queues");
    assert_allocation_free("cross-queue hops", hops);
}

/// A join waiting on three queues keeps its per-wait records (the events its stream waits on, the
/// work they follow) inline: rounds of a fan-out and fan-in allocate nothing once warm.
#[test]
fn fan_out_and_in_keeps_its_waits_inline() {
    let env = environment(4);
    let rounds = Bursts::fan_out_in(&env).expect("fan-out/fan-in").expect("four queues");
    assert_allocation_free("fan-out/fan-in submissions", rounds);
}

/// A host thread that parks wait after wait (each value comes from another thread, later than the
/// waiter's spin) reuses its parker: the waiting thread allocates nothing once warm. (Waking it
/// allocates on the signalling thread: the list of timepoints a signal resolves.)
#[test]
fn parked_host_waits_reuse_their_parker() {
    const WAITS: u64 = 200;
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let semaphore = hal::Semaphore::new(0);
    let signaller = {
        let semaphore = semaphore.clone();
        std::thread::spawn(move || {
            for value in 1..=WAITS {
                std::thread::sleep(std::time::Duration::from_micros(200));
                semaphore.signal(value).expect("signal");
            }
        })
    };
    semaphore.wait(1, hal::Timeout::Infinite).expect("the first wait");
    let before = alloc_count::on_this_thread();
    for value in 2..=WAITS {
        semaphore.wait(value, hal::Timeout::Infinite).expect("a wait");
    }
    let made = alloc_count::on_this_thread() - before;
    signaller.join().expect("the signalling thread");
    assert!(made * 20 < WAITS, "the waiting thread made {made} allocations in {} parked waits", WAITS - 1);
}
