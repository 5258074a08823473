//! `bench`: the HAL's workloads on any driver, each beside a baseline measured in the same run, as
//! a table of ratios (and JSON, and an SVG plot). On CUDA the baselines are the same patterns issued
//! straight through cudarc ([`cuda_baseline`]) and each ratio is shown beside its target; on cpu-sim
//! they are host hand-offs through `Mutex` + `Condvar` ([`baseline`]).
//!
//! ```no_run
//! let device = driver_cpu_sim::create_device().unwrap();
//! let env = bench::workloads::Env::new(device).unwrap();
//! let rows = bench::workloads::run_all(&env, bench::workloads::Sizes::quick(), |_| {}).unwrap();
//! println!("{}", bench::report::table(&rows));
//! ```

pub mod baseline;
pub mod cuda_baseline;
pub mod report;
pub mod stats;
pub mod workloads;
