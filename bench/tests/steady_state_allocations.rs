//! What a steady stream of submissions allocates on the heap (the bench's hygiene figure, target
//! 0), held as a test on cpu-sim where it is deterministic enough to hold: the seals that mark runs
//! of open submissions are reused, not allocated anew.

use bench::alloc_count::{self, CountingAllocator};
use bench::session;
use bench::workloads::Env;
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
