//! `driver-cpu-sim`: the default HAL driver. A CPU device that simulates a GPU: each queue is a stream
//! (a worker thread running a FIFO), events are completion points, dispatches run their workgroups in
//! parallel on a pool of host threads. It runs the same scheduler as the CUDA driver, so CI exercises
//! the code a GPU runs.
//!
//! The files are the rooms every driver has, `device.rs`, `options.rs`, `stream.rs`, `commands.rs`
//! (recorded commands run on the host), `executable.rs`, `memory.rs` and `collective/`, and
//! cpu-sim's own beside them: `event.rs` (completion points), `stream_rules.rs` (the stream model's
//! rules, checked as it runs), `workgroup_pool.rs` (the threads running a dispatch's workgroups)
//! and `kernel_panics.rs` (a kernel's panic failing its dispatch).
//!
//! ```
//! use hal::{Registry, BufferParams, CommandBufferMode, SemaphoreValue, Timeout};
//!
//! let mut registry = Registry::new();
//! driver_cpu_sim::register(&mut registry);
//! let device = registry.create_default_device().unwrap();
//! let queue = device.queue(0).unwrap();
//! let buffer = device.allocate_buffer(BufferParams::host_visible(), 16).unwrap();
//! let done = device.create_semaphore(0).unwrap();
//! queue.fill(&[], &buffer, 0, 16, 0xABu8, &[SemaphoreValue::new(&done, 1)]).unwrap();
//! done.wait(1, Timeout::Infinite).unwrap();
//! assert_eq!(buffer.read_to_vec().unwrap(), vec![0xAB; 16]);
//! ```
//!
//! # Configuration
//!
//! [`register`] and [`create_device`] build the default device ([`CpuSimOptions::default`]: 4
//! queues, one workgroup runner per core, allocations up to 4 GiB, 8 GiB in all). For another, give
//! a [`CpuSimDriver`] its options and register it (or call its `create_device` directly):
//!
//! ```
//! use std::sync::Arc;
//! use driver_cpu_sim::{CpuSimDriver, CpuSimOptions};
//! use hal::{BufferParams, Registry, StatusCode};
//!
//! let options = CpuSimOptions::default()
//!     .with_queue_count(2) // queues, each a stream with its own worker thread
//!     .with_workgroup_threads(3) // pool threads beside the stream thread (0: cores - 1)
//!     .with_max_allocation_size(1 << 20) // bytes of one allocation
//!     .with_memory_limit(4 << 20); // bytes of all allocations at once
//! let mut registry = Registry::new();
//! registry.register(Arc::new(CpuSimDriver::with_options(options)));
//! let device = registry.create_device("cpu-sim", 0)?;
//! assert_eq!(device.queue_count(), 2);
//! assert_eq!(device.info().name, "cpu-sim (4 workgroup runners)");
//! let too_big = device.allocate_buffer(BufferParams::device_local(), 2 << 20).unwrap_err();
//! assert_eq!(too_big.code(), StatusCode::ResourceExhausted);
//! # Ok::<(), hal::Error>(())
//! ```

mod collective;
mod commands;
#[cfg(feature = "cts")]
pub mod cts;
mod device;
mod event;
mod executable;
mod kernel_panics;
mod memory;
mod options;
mod stream;
mod stream_rules;
mod transient_cache;
mod workgroup_pool;

use std::sync::Arc;

use hal::driver::DeviceExt;
use hal::driver::Driver;
use hal::{Device, DeviceId, DeviceInfo, Error, Registry, Result};

use device::CpuDevice;

#[cfg(target_os = "linux")]
pub use collective::host_socket_name;
pub use device::device_info;
pub use options::CpuSimOptions;

/// The name the registry knows this driver by.
pub const DRIVER_NAME: &str = "cpu-sim";

/// The cpu-sim driver: one device per driver instance, built with its options.
#[derive(Clone, Debug, Default)]
pub struct CpuSimDriver {
    options: CpuSimOptions,
}

impl CpuSimDriver {
    /// A driver whose device uses `options`.
    pub fn with_options(options: CpuSimOptions) -> Self {
        CpuSimDriver { options }
    }
}

impl Driver for CpuSimDriver {
    fn name(&self) -> &str {
        DRIVER_NAME
    }

    fn probe(&self) -> Result<()> {
        Ok(())
    }

    fn enumerate(&self) -> Result<Vec<DeviceInfo>> {
        Ok(vec![device::device_info(&self.options)])
    }

    fn create_device(&self, ordinal: usize) -> Result<Device> {
        if ordinal != 0 {
            return Err(Error::out_of_range(format!("cpu-sim: device {ordinal} does not exist (it has 1)")));
        }
        let id = DeviceId::next();
        let backend = Arc::new(CpuDevice::new(id, &self.options)?);
        // SAFETY: `id` is fresh and names this device only, and the backend tags every buffer,
        // executable and semaphore it makes with the `id` it was built with.
        Ok(unsafe { Device::from_backend(id, backend) })
    }
}

/// Registers the cpu-sim driver with default options.
pub fn register(registry: &mut Registry) {
    registry.register(Arc::new(CpuSimDriver::default()));
}

/// A cpu-sim device with default options, without a registry.
pub fn create_device() -> Result<Device> {
    CpuSimDriver::default().create_device(0)
}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
