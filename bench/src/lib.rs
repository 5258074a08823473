//! `bench`: the HAL's workloads on any driver, each beside a baseline measured in the same run, as
//! a table of ratios (and JSON, and an SVG plot). On CUDA the baselines are the same patterns issued
//! straight through cudarc ([`cuda_baseline`]) and each ratio is shown beside its target; on cpu-sim
//! on Vulkan the same patterns done by hand on `ash` ([`vulkan_baseline`]: recorded command buffers,
//! `vkQueueSubmit` with timeline semaphores, `vkWaitSemaphores`); on cpu-sim they are host
//! hand-offs through `Mutex` + `Condvar` ([`baseline`]).
//!
//! The `cuda` feature builds in the CUDA driver and the raw-CUDA baselines, the `vulkan` feature the
//! Vulkan driver and the raw-Vulkan baselines (both on by default); without them the bench runs on
//! cpu-sim only. [`session`] is one run with the options both front-ends
//! share (the `bench` binary and `hal bench`); [`alloc_count`] counts heap allocations; [`output_file`]
//! is a result file opened before the run.
//!
//! ```no_run
//! let device = driver_cpu_sim::create_device().unwrap();
//! let env = bench::workloads::Env::new(device).unwrap();
//! let rows = bench::workloads::run_all(&env, bench::workloads::Sizes::quick(), |_| {}).unwrap();
//! println!("{}", bench::report::table(&rows));
//! ```

pub mod alloc_count;
pub mod baseline;
#[cfg_attr(not(feature = "cuda"), path = "cuda_baseline_absent.rs")]
pub mod cuda_baseline;
pub mod gpu_clock;
pub mod output_file;
pub mod placement;
pub mod provenance;
pub mod report;
pub mod scaling;
pub mod session;
pub mod stats;
pub mod tables;
#[cfg_attr(not(feature = "vulkan"), path = "vulkan_baseline_absent.rs")]
pub mod vulkan_baseline;
pub mod workloads;

/// A device of `info`'s driver and GPU with `queues` queues, for the drivers whose queues are
/// streams made on request (cpu-sim with default options otherwise; CUDA with the options from the
/// environment); `None` for other drivers, whose queues are the hardware's.
pub fn device_with_queues(info: &hal::DeviceInfo, queues: usize) -> Option<hal::Result<hal::Device>> {
    use hal::driver::Driver;
    if info.driver == driver_cpu_sim::DRIVER_NAME {
        let options = driver_cpu_sim::CpuSimOptions::default().with_queue_count(queues);
        return Some(driver_cpu_sim::CpuSimDriver::with_options(options).create_device(info.ordinal));
    }
    #[cfg(feature = "cuda")]
    if info.driver == driver_cuda::DRIVER_NAME {
        return Some(driver_cuda::CudaOptions::from_env().and_then(|options| {
            let options = driver_cuda::CudaOptions { queue_count: queues, ..options };
            driver_cuda::CudaDriver::with_options(options).create_device(info.ordinal)
        }));
    }
    None
}

/// A registry of the drivers the bench can run on: cpu-sim, Vulkan with the `vulkan` feature, and
/// CUDA with the `cuda` feature.
pub fn registry() -> hal::Registry {
    let mut registry = hal::Registry::new();
    driver_cpu_sim::register(&mut registry);
    #[cfg(feature = "vulkan")]
    driver_vulkan::register(&mut registry);
    #[cfg(feature = "cuda")]
    driver_cuda::register(&mut registry);
    registry
}
