//! The steps a bench run tells its progress display: as many names as `progress_steps` counts, with
//! and without the rows that need a peer device.

use bench::scaling::ScalingSizes;
use bench::session::{self, Options};
use bench::workloads::{self, Env, Sizes};
use driver_cpu_sim::{CpuSimDriver, CpuSimOptions};
use hal::driver::Driver;

fn cpu_sim(queues: usize) -> hal::Device {
    let options = CpuSimOptions::default().with_queue_count(queues).with_workgroup_threads(1);
    CpuSimDriver::with_options(options).create_device(0).expect("cpu-sim device")
}

#[test]
fn every_workload_is_counted() {
    let tiny = Sizes { warmup: 0, trials: 2, ops: 10, round_trips: 4 };
    for (queues, peer) in [(2, false), (2, true)] {
        let mut env = Env::new(cpu_sim(queues)).unwrap();
        if peer {
            env = env.with_peer(cpu_sim(queues)).unwrap();
        }
        let mut names = Vec::new();
        workloads::run_all(&env, tiny, |name| names.push(name.to_string())).unwrap();
        let counted = workloads::progress_steps(env.device.info(), peer);
        assert_eq!(names.len(), counted, "{queues} queues, peer {peer}: {names:?}");
    }
}

#[test]
fn every_scaling_row_is_counted() {
    let options = Options { scaling: true, quick: true, max_threads: 2, ..Options::default() };
    assert_eq!(ScalingSizes::quick(2).thread_counts(), [1, 2]);
    let device = cpu_sim(2);
    let counted = session::progress_steps(&device, false, &options);
    let mut names = Vec::new();
    session::run(device, None, &options, &mut Vec::new(), &mut |name| names.push(name.to_string())).unwrap();
    assert_eq!(names.len(), counted, "{names:?}");
    assert_eq!(counted, 4, "two tables of two rows");
}
