//! The driver-facing surface: what a driver author implements, and the machinery a driver is built
//! from. An embedder (a compiler runtime, a tool) never needs this module: the handles at the top of
//! [`crate`] are the whole embedder API.
//!
//! - [`Driver`], [`DeviceBackend`], [`BufferBackend`], [`ExecutableBackend`], [`PreparedCommands`]:
//!   the traits a driver implements. A handle holds an `Arc<dyn ...>` of one and validates every
//!   call before the backend sees it.
//! - [`DeviceExt`], [`BufferExt`], [`ExecutableExt`], [`CommandBufferExt`], [`SemaphoreExt`]:
//!   what a driver needs of the handles (building a handle around its backend, finding the backend
//!   again, hanging listeners on a semaphore). Sealed: implemented for the handles only.
//! - [`scheduler`]: the pending-queue-actions scheduler, written once over a [`stream_model`]; a
//!   driver supplies streams and events, the scheduler does waits, signals, retirement and teardown.
//! - [`ScheduledDevice`]: a device on that scheduler. A driver implements it with what differs
//!   (memory, executables, prepared commands, collectives) and gets the [`DeviceBackend`] that
//!   forwards semaphores, submissions, profiling, reports and usage to the scheduler.
//! - [`timeline`]: the pure timeline state behind [`Semaphore`](crate::Semaphore), and the listener
//!   hook drivers register.
//! - [`ProfileSink`]: where a driver puts the timings of profiled submissions.
//! - [`shared_memory`]: copies into memory other threads (and kernels) may touch concurrently.
//! - [`lock`], [`try_lock`], [`get_mut`], [`wait`], [`wait_timeout`]: `std::sync` locking with one
//!   policy for poisoned locks (ignored: a driver's critical sections keep their data whole), so
//!   drivers do not each spell it out.
//!
//! Building a driver step by step is in `docs/drivers.md` ("Writing a driver").
//!
//! What could break the scheduler's invariants is out of an embedder's reach. Announcing an
//! enqueued value the scheduler has no event for is crate-private:
//!
//! ```compile_fail,E0624
//! let timeline = hal::Semaphore::new(0);
//! timeline.advance_enqueued(5); // the scheduler's own call
//! ```
//!
//! and attaching memory to a device is `unsafe`, with the promise that the memory is that device's:
//!
//! ```compile_fail,E0133
//! use hal::driver::BufferExt;
//!
//! fn forge(other_devices_buffer: &hal::Buffer, device: hal::DeviceId) -> hal::Buffer {
//!     let memory = other_devices_buffer.backend().clone();
//!     hal::Buffer::from_backend(device, hal::BufferParams::device_local(), memory)
//! }
//! ```

mod backend;
mod binding_state;
mod handles;
mod imported;
mod locks;
mod profiling;
mod scheduled_device;
pub mod scheduler;
pub mod shared_memory;
pub mod stream_model;

/// The pure timeline state of a semaphore (value, failure, registered timepoints) and the listener
/// hook drivers hang their work on. [`Semaphore`](crate::Semaphore) wraps it with a lock.
pub mod timeline {
    pub use crate::semaphore::core::{
        Registration, Resolved, TimelineState, Timepoint, TimepointId, TimepointKind, TimepointListener,
    };
}

pub use crate::buffer::{HostPtr, HostView};
pub use crate::collective::{AbandonFn, ChannelBackend, CollectiveCall};
pub use crate::command_buffer::{Command, INDIRECT_COUNT_BYTES, indirect_workgroups};
pub use crate::semaphore::SemaphoreDriverData;
pub use backend::{
    BufferBackend, DeviceBackend, Driver, ExecutableBackend, HostCall, HostFn, NativeOp, PreparedCommands, QueueOp,
    ReadTarget, Submission,
};
pub use binding_state::BindingState;
pub use handles::{BufferExt, CommandBufferExt, DeviceExt, ExecutableExt, SemaphoreExt};
pub use imported::{ImportedHostMemory, ReleaseOnce};
pub use locks::{get_mut, lock, try_lock, wait, wait_timeout};
pub use profiling::ProfileSink;
pub(crate) use profiling::ProfileSwitch;
pub use scheduled_device::{QueueScheduler, ScheduledDevice};
