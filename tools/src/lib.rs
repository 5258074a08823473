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
//! - [`progress`] is the progress bar of long runs (drawn only when stdout and stderr are
//!   terminals); [`counts`] words the reports' counts.
//! - [`collective_job`] is `hal collective`: one rank of a collective job per process, meeting
//!   through a channel id that rank 0 hands out at a TCP [`rendezvous`] (or writes to a file);
//!   [`launcher`] reads a process's rank, world size and local rank from torchrun's, mpirun's or
//!   srun's environment. An embedder that runs one rank per process uses these two to join a
//!   channel.
//!
//! The repository's README (with its doc-tested embedding example) is [`readme`]; the embedding
//! guide is `hal::guide`, doc-tested with the `hal` library.

pub mod collective_job;
pub mod counts;
pub mod cts;
pub mod device_spec;
pub mod devices;
pub mod launcher;
pub mod probe;
pub mod progress;
pub mod rendezvous;
pub mod stencil;
pub mod trace;
pub mod trace_file;

#[doc = include_str!("../../README.md")]
pub mod readme {}

use hal::Registry;

use device_spec::DeviceSpec;

/// The name of the CUDA driver (`driver_cuda::DRIVER_NAME`, also in builds without it).
pub const CUDA_DRIVER: &str = bench::workloads::CUDA_DRIVER;

/// The name of the Vulkan driver (`driver_vulkan::DRIVER_NAME`, also in builds without it).
pub const VULKAN_DRIVER: &str = "vulkan";

/// The drivers this build leaves out, each with the reason: the `cuda` driver without the `cuda`
/// feature, the `vulkan` driver without the `vulkan` feature (`cargo build -p tools
/// --no-default-features`).
pub fn drivers_not_built_in() -> Vec<(&'static str, &'static str)> {
    let mut left_out = Vec::new();
    if !cfg!(feature = "cuda") {
        left_out.push((CUDA_DRIVER, "not built in (this hal was built without the `cuda` feature)"));
    }
    if !cfg!(feature = "vulkan") {
        left_out.push((VULKAN_DRIVER, "not built in (this hal was built without the `vulkan` feature)"));
    }
    left_out
}

/// The registry of every driver compiled into the tools: `cpu-sim` (the default) first, then `cuda`
/// with the `cuda` feature and `vulkan` with the `vulkan` feature (both on by default; registered
/// always, each reports `Unavailable` with the reason where there is no device or library).
///
/// ```
/// let registry = tools::registry();
/// assert_eq!(registry.names()[0], "cpu-sim");
/// assert_eq!(registry.names().iter().any(|n| n == "cuda"), cfg!(feature = "cuda"));
/// let device = registry.create_default_device().unwrap();
/// assert!(device.queue_count() >= 2);
/// ```
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    driver_cpu_sim::register(&mut registry);
    #[cfg(feature = "cuda")]
    driver_cuda::register(&mut registry);
    #[cfg(feature = "vulkan")]
    driver_vulkan::register(&mut registry);
    registry
}

/// [`registry`], with CUDA devices that time every submission on the GPU
/// (`CudaOptions::submission_timings`): `hal run --trace` puts those times on the timeline.
pub fn registry_with_device_timings() -> Registry {
    #[cfg_attr(not(feature = "cuda"), allow(unused_mut))]
    let mut registry = registry();
    #[cfg(feature = "cuda")]
    if let Ok(options) = driver_cuda::CudaOptions::from_env() {
        // Otherwise keeps `registry`'s driver, which reports the error when asked for a device.
        let options = driver_cuda::CudaOptions { submission_timings: true, ..options };
        registry.register(std::sync::Arc::new(driver_cuda::CudaDriver::with_options(options)));
    }
    registry
}

/// Opens the device `spec` names from `registry`. An error names the device, says why, and lists
/// the devices there are (as `--device` spells them) and the drivers without devices, each reason
/// said once.
pub fn open(registry: &Registry, spec: &DeviceSpec) -> Result<hal::Device, String> {
    registry.create_device_at(spec.path()).map_err(|e| {
        let reason = match drivers_not_built_in().iter().find(|(name, _)| *name == spec.driver()) {
            Some((name, why)) => format!("driver '{name}' is {why}"),
            // The registry's own list of unavailable drivers is left to the listing below.
            None => e.to_string().split("; unavailable: ").next().unwrap_or_default().to_string(),
        };
        format!("cannot open device '{spec}': {reason}; {}", available_devices(registry, spec.driver()))
    })
}

/// Why driver `name` has no devices: `error`'s message without the driver's own name before it
/// (the listing names the driver already).
pub fn unavailable_reason(name: &str, error: &hal::Error) -> String {
    let message = error.message();
    message.strip_prefix(name).and_then(|rest| rest.strip_prefix(": ")).unwrap_or(message).to_string()
}

/// One line: the devices of `registry` as `--device` spells them, then the drivers without
/// devices (with the reason, but for driver `reported`, whose error says it already) and those not
/// built in (`hal devices` says more).
pub fn available_devices(registry: &Registry, reported: &str) -> String {
    let mut usable = Vec::new();
    let mut unusable = Vec::new();
    for listing in registry.list() {
        match listing.devices {
            Ok(devices) if !devices.is_empty() => {
                usable.extend(devices.iter().map(|d| format!("{}:{}", listing.name, d.ordinal)));
            }
            Ok(_) => unusable.push(format!("{} (no devices)", listing.name)),
            Err(_) if listing.name == reported => unusable.push(format!("{} (unavailable)", listing.name)),
            Err(e) => {
                unusable.push(format!("{} (unavailable: {})", listing.name, unavailable_reason(&listing.name, &e)))
            }
        }
    }
    unusable.extend(drivers_not_built_in().iter().map(|(name, _)| format!("{name} (not built in)")));
    let mut line = format!("available devices: {}", if usable.is_empty() { "none".into() } else { usable.join(", ") });
    if !unusable.is_empty() {
        line += &format!("; without devices: {} (see `hal devices`)", unusable.join(", "));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_device_names_it_and_lists_the_available_ones() {
        let registry = registry();
        let error = open(&registry, &"nope:2".parse().unwrap()).unwrap_err();
        assert!(error.starts_with("cannot open device 'nope:2': "), "{error}");
        assert!(error.contains("no driver named 'nope'") && error.contains("available devices: cpu-sim:0"), "{error}");
        let error = open(&registry, &"cpu-sim:1".parse().unwrap()).unwrap_err();
        assert!(error.contains("device 1 does not exist") && error.contains("cpu-sim:0"), "{error}");
        if !cfg!(feature = "cuda") {
            let error = open(&registry, &"cuda".parse().unwrap()).unwrap_err();
            assert!(
                error.contains("driver 'cuda' is not built in") && error.contains("cuda (not built in)"),
                "{error}"
            );
        }
        assert!(open(&registry, &DeviceSpec::default()).is_ok());
    }

    #[cfg(feature = "vulkan")]
    #[test]
    fn vulkan_driver_name_is_the_drivers() {
        assert_eq!(VULKAN_DRIVER, driver_vulkan::DRIVER_NAME);
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_driver_name_is_the_drivers() {
        assert_eq!(CUDA_DRIVER, driver_cuda::DRIVER_NAME);
    }
}
