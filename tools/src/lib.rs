//! `tools`: the library behind the `hal` command line.
//!
//! - [`registry`] builds the registry of every driver this build knows (the one place drivers are
//!   listed); [`devices`] renders what `hal devices` prints; [`cts`] runs the conformance suite.
//! - [`stencil`] is the main job (`hal run`): a 2-D Jacobi heat stencil split over two queues whose
//!   halo exchanges are ordered by timeline semaphores, checked against a CPU reference.
//! - [`trace`] is the `--trace` timeline: a `tracing_subscriber::Layer` that records the HAL's
//!   `submit` / `issue` / `complete` spans and writes Chrome trace (Perfetto) JSON, to a
//!   [`trace_file`] opened before the run.
//! - [`probe`] timestamps the values a semaphore reaches (the completion of each submission as the
//!   host sees it), for per-queue utilisation and the semaphore counters of a trace.
//! - [`progress`] is the one-line progress display of long runs.
//!
//! The repository's README (with its doc-tested embedding example) is [`readme`]; the embedding
//! guide with its doc-tested snippets is [`embedding`].

pub mod cts;
pub mod devices;
pub mod probe;
pub mod progress;
pub mod stencil;
pub mod trace;
pub mod trace_file;

#[doc = include_str!("../../README.md")]
pub mod readme {}

#[doc = include_str!("../../docs/embedding.md")]
pub mod embedding {}

use hal::Registry;

/// The registry of every driver compiled into the tools: `cpu-sim` (the default) first, then `cuda`
/// (always registered; it reports `Unavailable` with the reason where there is no GPU or `libcuda`).
///
/// ```
/// let registry = tools::registry();
/// assert_eq!(registry.names(), ["cpu-sim", "cuda"]);
/// let device = registry.create_default_device().unwrap();
/// assert!(device.queue_count() >= 2);
/// ```
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    driver_cpu_sim::register(&mut registry);
    driver_cuda::register(&mut registry);
    registry
}

/// [`registry`], with CUDA devices that time every submission on the GPU
/// (`CudaOptions::submission_timings`): `hal run --trace` puts those times on the timeline.
pub fn registry_with_device_timings() -> Registry {
    let mut registry = Registry::new();
    driver_cpu_sim::register(&mut registry);
    match driver_cuda::CudaOptions::from_env() {
        Ok(options) => {
            let options = driver_cuda::CudaOptions { submission_timings: true, ..options };
            registry.register(std::sync::Arc::new(driver_cuda::CudaDriver::with_options(options)));
        }
        // Keeps the error: the driver reports it when asked for a device.
        Err(_) => driver_cuda::register(&mut registry),
    }
    registry
}

/// Creates device 0 of driver `name` from [`registry`], with an error that names the driver.
pub fn open_device(name: &str) -> hal::Result<hal::Device> {
    registry().create_device(name, 0).map_err(|e| e.context(format!("opening driver '{name}'")))
}

/// [`open_device`] from [`registry_with_device_timings`].
pub fn open_device_with_timings(name: &str) -> hal::Result<hal::Device> {
    registry_with_device_timings().create_device(name, 0).map_err(|e| e.context(format!("opening driver '{name}'")))
}
