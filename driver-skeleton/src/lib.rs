//! `driver-skeleton`: the smallest complete HAL driver, kept compiling and conformant as the
//! template the next driver starts from (`docs/drivers.md`, "Writing a driver").
//!
//! It is an *inline* driver: a queue operation runs to its end on the thread that issues it, inside
//! [`StreamModel::enqueue`](hal::driver::stream_model::StreamModel::enqueue), so an event recorded
//! after it has completed the moment it is recorded. The HAL's scheduler still does everything
//! about semaphores: it issues work only once its waits are reached, runs host calls on its own
//! threads, and retires work on a completion thread per queue. What the skeleton supplies is the
//! part every driver supplies, each in its own file, named as in every driver:
//!
//! - `device.rs`: the device backend, with the scheduler inside;
//! - `stream.rs`: the stream model (streams, events, running an operation);
//! - `commands.rs`: fills, updates, copies, reads and writes on host memory, and command buffers;
//! - `memory.rs`: buffer memory (`unsafe impl BufferBackend`, the one promise the HAL cannot check);
//! - this file: the [`hal::driver::Driver`] the registry lists.
//!
//! A driver that does more adds rooms under the names the other drivers use: `options.rs`,
//! `executable.rs`, `collective.rs` (or `collective/`), `timing.rs`, with what only its backend needs
//! beside them.
//!
//! It loads no executables (its [`DeviceInfo`] lists no executable kinds) and has no collectives
//! or profiling (the trait defaults refuse them with `Unimplemented`). Its `tests/cts.rs` runs the
//! conformance suite's cases that need no kernel.
//!
//! ```
//! use hal::{BufferParams, Registry, SemaphoreValue, Timeout};
//!
//! let mut registry = Registry::new();
//! driver_skeleton::register(&mut registry);
//! let device = registry.create_device(driver_skeleton::DRIVER_NAME, 0).unwrap();
//! let queue = device.queue(0).unwrap();
//! let buffer = device.allocate_buffer(BufferParams::device_local(), 16).unwrap();
//! let done = device.create_semaphore(0).unwrap();
//! queue.fill(&[], &buffer, 0, 16, 0x7Fu8, &[SemaphoreValue::new(&done, 1)]).unwrap();
//! let bytes = queue.read(&[SemaphoreValue::new(&done, 1)], &buffer, 0, 16, &[SemaphoreValue::new(&done, 2)]).unwrap();
//! done.wait(2, Timeout::Infinite).unwrap();
//! assert_eq!(bytes.take().unwrap(), vec![0x7F; 16]);
//! ```

mod commands;
mod device;
mod memory;
mod stream;

use std::sync::Arc;

use hal::driver::{DeviceExt, Driver};
use hal::{Device, DeviceId, DeviceInfo, Error, Registry, Result};

pub use device::SkeletonDevice;

/// The name the registry knows this driver by.
pub const DRIVER_NAME: &str = "skeleton";

/// The skeleton driver: one device.
#[derive(Clone, Copy, Debug, Default)]
pub struct SkeletonDriver;

impl Driver for SkeletonDriver {
    fn name(&self) -> &str {
        DRIVER_NAME
    }

    fn probe(&self) -> Result<()> {
        Ok(())
    }

    fn enumerate(&self) -> Result<Vec<DeviceInfo>> {
        Ok(vec![device::device_info()])
    }

    fn create_device(&self, ordinal: usize) -> Result<Device> {
        if ordinal != 0 {
            return Err(Error::out_of_range(format!("{DRIVER_NAME}: device {ordinal} does not exist (it has 1)")));
        }
        let id = DeviceId::next();
        let backend = Arc::new(SkeletonDevice::new(id)?);
        // SAFETY: `id` is fresh and names this device only, and the backend tags every buffer and
        // semaphore it makes with the `id` it was built with.
        Ok(unsafe { Device::from_backend(id, backend) })
    }
}

/// Registers the skeleton driver.
pub fn register(registry: &mut Registry) {
    registry.register(Arc::new(SkeletonDriver));
}
