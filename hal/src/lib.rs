//! `hal`: an IREE-style hardware abstraction layer with timeline semaphores.
//!
//! A compiler or runtime embeds it to run kernels on a device's queues without blocking on device
//! progress, ordering work across queues, devices and the host with timeline semaphores: `u64`
//! values that only grow, or a failure that every waiter sees. Users hold the handle types below,
//! which are cheap to clone, `Send + Sync`, and need no lifetimes; that is the whole embedder API.
//!
//! **Start with the [embedding guide](guide)**: it walks a runtime through each step (choose a
//! driver, load kernels, allocate and record, submit with semaphores, wait, handle failure), states
//! the API's [conventions](guide#conventions), and points to whole example programs that build
//! against the published crates alone.
//!
//! Drivers (`timeline-hal-cpu-sim`, `timeline-hal-cuda`) implement the traits of a `driver` module
//! that an embedder never needs, so its items are left out of these docs. A driver author builds
//! them with `RUSTDOCFLAGS="--cfg hal_driver_docs" cargo doc -p timeline-hal` (a cfg rather than a
//! cargo feature, which any dependency could switch on for every embedder).
//!
//! ```
//! use hal::{Semaphore, SemaphoreValue, StatusCode, Timeout, WaitMode, wait_semaphores, Error};
//! use std::time::Duration;
//!
//! // A producer thread advances a timeline; a consumer waits for each step.
//! let timeline = Semaphore::new(0);
//! let producer = {
//!     let timeline = timeline.clone();
//!     std::thread::spawn(move || {
//!         for step in 1..=3 {
//!             timeline.signal(step).unwrap();
//!         }
//!     })
//! };
//! timeline.wait(3, Timeout::After(Duration::from_secs(5))).unwrap();
//! producer.join().unwrap();
//!
//! // Failure travels to every waiter, with its status.
//! let other = Semaphore::new(0);
//! other.fail(Error::data_loss("kernel trapped"));
//! let list = [SemaphoreValue::new(&timeline, 3), SemaphoreValue::new(&other, 1)];
//! let err = wait_semaphores(WaitMode::All, &list, Timeout::Infinite).unwrap_err();
//! assert_eq!(err.code(), StatusCode::DataLoss);
//! ```

mod binding_table;
mod buffer;
mod collective;
mod command_buffer;
mod constants;
mod device;
#[cfg_attr(not(hal_driver_docs), doc(hidden))]
pub mod driver;
mod error;
mod executable;
mod executable_kind;
mod external;
mod fill_pattern;
mod flag_names;
mod host_data;
mod label;
mod profile;
mod queue;
mod readback;
mod registry;
mod semaphore;
mod sync;
mod timeout;

pub use binding_table::{BindingRef, BufferRef};
pub use buffer::{Buffer, BufferParams, BufferUsage, Mapping, MemoryType};
/// The `bytemuck` crate the typed host I/O is written against (`Pod` is re-exported at the top),
/// for its casts without a dependency of your own: `hal::bytemuck::cast_slice(&values)`,
/// `hal::bytemuck::Zeroable`.
pub use bytemuck;
pub use bytemuck::Pod;
pub use collective::{Channel, ChannelId, CollectiveArgs, CollectiveOp, ElementType, ReduceOp};
pub use command_buffer::{BufferBinding, CommandBuffer, CommandBufferMode};
pub use constants::Constant;
pub use device::{Device, DeviceId, DeviceInfo, PoolUsage, ResourceUsage, WeakDevice};
pub use error::{Error, Result, StatusCode};
pub use executable::{
    EntryPointInfo, Executable, ExecutableFormat, ExecutableSource, KernelParam, NativeBinding, NativeEntryPoint,
    NativeInvocation, NativeKernel, OutOfRangeAccess,
};
pub use executable_kind::ExecutableKind;
pub use external::{ExternalMemory, ExternalTimepoint, ExternalUse};
pub use fill_pattern::FillPattern;
pub use label::MAX_LABEL_BYTES;
pub use profile::{ClockCorrelation, DispatchTiming, Profile, ProfileOptions, QueueOperationTiming};
pub use queue::{HostCallFlags, Queue};
pub use readback::{Readback, ReadbackAsFuture, ReadbackFuture};
pub use registry::{DEFAULT_DRIVER, DriverListing, Registry};
pub use semaphore::{Semaphore, SemaphoreFlags, SemaphoreList, SemaphoreValue, WaitFuture, WaitMode, wait_semaphores};
pub use timeout::Timeout;

/// The embedding guide: the life of a program from choosing a driver to handling a failure, the
/// API's conventions, and where the example programs are. Every snippet in it is a doc test.
#[doc = include_str!("../guide.md")]
pub mod guide {}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
