//! `driver-cuda`: the HAL driver for NVIDIA GPUs, through cudarc's raw `sys` bindings.
//!
//! It runs the same scheduler as `driver-cpu-sim` ([`hal::driver::scheduler`]) over real CUDA streams and
//! events: one non-blocking `CUstream` per queue, pooled `DISABLE_TIMING` events, device-side waits
//! (`cuStreamWaitEvent`) between this device's queues, and one completion thread per queue that
//! retires every finished submission in one wake-up. Reusable command buffers replay as CUDA graphs;
//! `queue_alloca` uses the device's stream-ordered memory pool. Kernels follow the dispatch ABI in
//! [`executable`].
//!
//! Without a GPU or driver library the driver reports `Unavailable` with the reason (it probes for
//! `libcuda` with libloading before any cudarc call, see [`loader`]) and the registry keeps working:
//!
//! ```
//! use hal::{BufferParams, Registry, SemaphoreValue, Timeout};
//!
//! let mut registry = Registry::new();
//! driver_cuda::register(&mut registry);
//! match registry.create_device("cuda", 0) {
//!     Err(reason) => println!("no CUDA here: {reason}"),
//!     Ok(device) => {
//!         let queue = device.queue(0).unwrap();
//!         let buffer = device.allocate_buffer(BufferParams::device_local(), 64).unwrap();
//!         let done = device.create_semaphore(0).unwrap();
//!         queue.fill(&[], &buffer, 0, 64, 0xABu8, &[SemaphoreValue::new(&done, 1)]).unwrap();
//!         let bytes = queue.read(&[SemaphoreValue::new(&done, 1)], &buffer, 0, 64, &[SemaphoreValue::new(&done, 2)]).unwrap();
//!         done.wait(2, Timeout::Infinite).unwrap();
//!         assert_eq!(bytes.take().unwrap(), vec![0xAB; 64]);
//!     }
//! }
//! ```
//!
//! # What the crate exports
//! The driver ([`CudaDriver`], [`register`], [`create_device`]) and its options ([`CudaOptions`],
//! [`CompletionWait`], the `HAL_CUDA_*` names); [`CudaDevice`] and [`Context`] for embedders that
//! build a device themselves or keep the GPU's primary context retained; [`CudaPreparedCommands`]
//! to see how an ended command buffer replays; the probe ([`loader`]), CUDA results as HAL errors
//! ([`error`]), NCCL ids and settings ([`collective`]) and the kernel
//! dispatch ABI ([`executable`]). The streams, events, memory, graphs, staging and
//! timing behind them are the crate's own.
//!
//! # Files
//! Every driver names the same concept alike; the CUDA extras stand beside them.
//! - `device.rs`: [`CudaDevice`], the HAL device over the shared scheduler; `options.rs`:
//!   [`CudaOptions`], [`CompletionWait`] and the `HAL_CUDA_*` variables.
//! - `stream.rs`: the stream model (each queue operation onto stream work); `queue_stream.rs`: one
//!   queue's stream; `event.rs`, `progress_word.rs`, `host_callback.rs`: how completion is seen;
//!   `indirect_launcher.rs`: the host launcher of indirect dispatches replayed directly.
//! - `commands/`: prepared command buffers (`mod.rs`), their graphs (`graph.rs`), device-set grids
//!   of indirect dispatch nodes (`indirect_node.rs`) and update payloads (`payload.rs`).
//! - `executable.rs`: modules, entry points and the dispatch ABI; `memory.rs`: buffers and device
//!   address resolution; `collective.rs`: NCCL; `timing.rs`: timing events for profiles and
//!   per-submission times.
//! - Backend extras: `staging.rs`, `pinned_cache.rs`, `host_copy.rs`, `free_gate.rs`,
//!   `counted_fifo.rs`, `error.rs`.
//! - `sys/`: the FFI layer, which imports nothing from the files above: the driver-call wrappers
//!   (`result.rs`), the primary context and its `Bound` token (`context.rs`), the probe ([`loader`])
//!   and the module unloader.
//!
//! # The driver-call layer
//! Every CUDA driver and NCCL function the crate calls is wrapped once, in `src/sys/result.rs` (crate-private):
//! one small function per call (`event_record`, `stream_wait_event`, `launch_kernel`, ...) that
//! makes the `sys` call and returns a [`hal::Result`] whose error names the call. Functions that need
//! the device's context current take a `Bound` token, which only `Context::bind`
//! makes and which cannot leave its thread; so "the context is bound" is checked by the compiler
//! instead of asserted by comments. The rest of the crate writes no `unsafe` for a driver call except
//! where it must promise something the layer cannot check: destroying or freeing a handle once,
//! host memory an asynchronous copy or host function uses later, kernel parameter pointers, a whole
//! module image (each such wrapper is an `unsafe fn` with a `# Safety` section). A HIP driver would
//! mirror that one file (`hipEventRecord`, `hipStreamWaitEvent`, `hipModuleLaunchKernel`, ...) and
//! keep the stream model, pools, memory, graphs and completion logic above it.
//!
//! # Device faults
//! A kernel that traps or touches an illegal address raises a *sticky* error in the CUDA context.
//! What the driver does with one, held by `tests/cuda_fault.rs` (a kernel that executes `trap`;
//! the times it printed on a GPU are in `docs/decisions.md#cuda-device-fault`):
//! - the submission that faulted fails its signal semaphores with `DataLoss` naming the CUDA error
//!   (`cuEventSynchronize: CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)`), once the CUDA
//!   driver's fault handling reported it; a watchdog timeout maps to `Aborted`;
//! - work behind it on the same queue, work on other queues waiting on it, and every later
//!   submission on any queue fail their signals with `DataLoss` and the same CUDA error; nothing
//!   hangs, and the submitting calls themselves still return `Ok`;
//! - every other `hal::Device` of the same GPU in the process fails too (they share the GPU's
//!   primary context): its allocations return `DataLoss`;
//! - the process does not abort; host-visible memory stays readable; dropping the faulted devices
//!   does not hang (teardown errors are logged);
//! - the GPU stays unusable **for the rest of the process**: once every device and object is
//!   dropped, creating a new device fails at once with `DataLoss` (`cuDevicePrimaryCtxRetain:
//!   CUDA_ERROR_LAUNCH_FAILED`), and `cuDevicePrimaryCtxReset` does not change that.
//!   As CUDA documents for sticky errors, only a new process gets the GPU back: run kernels you do
//!   not trust in a child process.
//!
//! # Threads and contexts
//! The scheduler calls into the driver from the submitting thread, from the completion threads,
//! from host threads waiting for a semaphore value (they wait on the device event themselves, until
//! their deadline if they have one) and from whichever thread signals a semaphore that releases held
//! work. Each call binds the device's primary context on that thread (a thread-local check, see
//! `src/sys/context.rs`), and leaves it bound; the `Bound` token it gets is what it hands to the
//! driver calls.
//!
//! # Completion
//! Completion threads wait on events as [`CompletionWait`] says; the default, `PollThenSleep(0)`,
//! queries `cuEventQuery` with sleeps growing from 10 us to 100 us between queries, on plain
//! (`DISABLE_TIMING`) events (a budget above zero first polls every [`CudaOptions::poll_interval`]). Host threads that wait for a value poll their own
//! event back to back for 200 us first (`StreamModel::host_wait`).
//!
//! **Host callbacks against a polling completion thread.** [`CompletionWait::HostCallback`] is the
//! other way to wake the completion thread: each queue gets a callback stream that waits on the event and runs one
//! host function (`cuLaunchHostFunc`), which wakes the completion thread; at most one callback is
//! outstanding per queue and each retires everything that completed (see `src/host_callback.rs`). Polling
//! stays the default because the callback costs a stream-wait, a host function and a thread wake-up
//! per burst and is the slowest on the cross-queue hop; every `cuEventQuery` takes a libcuda lock
//! the submitting thread's launches need, so the completion thread sleeps between queries while host
//! waiters query their own event. The measurements behind this (`examples/completion_modes.rs`,
//! `examples/chain_costs.rs`, the bench) are in `docs/decisions.md#completion-thread-default`.
//! While an indirect dispatch waits for the launcher to launch its kernel, a completion thread
//! polls instead: CUDA may hold the launcher's side-stream launches behind a pending host
//! function, which would wait for them forever.
//!
//! # Indirect dispatches
//! An indirect dispatch reads its workgroup count from device memory when it runs. CUDA launches
//! take the grid from the host, so the driver has two ways:
//! - **on the device** (the default, CUDA 12.4 and its device runtime library `libcudadevrt.a`):
//!   in a command buffer that replays as a graph (a reusable one, or a one-shot one of at least
//!   `CudaOptions::graph_min_commands` commands), the dispatch is a kernel node whose grid a
//!   one-thread kernel just before it sets, or disables for a count with a zero (see
//!   `src/commands/indirect_node.rs`). No host round trip: the submitting thread and the stream never wait
//!   for the count.
//! - **on the host** (`HAL_CUDA_INDIRECT=host`, a driver before 12.4, no `libcudadevrt.a`, or a
//!   buffer that replays directly, such as a one-shot buffer of one command or one touching
//!   `queue_alloca` buffers): the queue's
//!   stream copies the count to pinned memory and waits; a launcher thread reads it, launches the
//!   kernel and releases the stream (`src/indirect_launcher.rs`).
//!
//! Both fail the execute with `OutOfRange` for a count past the device's grid limits, and run
//! nothing for a count with a zero.
//!
//! # Choosing options without a rebuild
//! [`register`] and [`create_device`] read [`CudaOptions::from_env`]:
//!
//! | variable | values | option |
//! | --- | --- | --- |
//! | `HAL_CUDA_COMPLETION` | `poll` (default), `spin`, `blocking`, `spin-then-block`, `host-callback` | [`CudaOptions::completion_wait`] |
//! | `HAL_CUDA_TIMINGS` | `0` (default), `1` | [`CudaOptions::submission_timings`] |
//! | `HAL_CUDA_POLL_US` | microseconds, 1 to 10000 (default 10) | [`CudaOptions::poll_interval`] |
//! | `HAL_CUDA_POLL_BUDGET_US` | microseconds, 0 (default) to 10000; `poll` only | the budget of [`CompletionWait::PollThenSleep`] |
//! | `HAL_CUDA_INDIRECT` | `device` (default), `host` | [`CudaOptions::indirect_on_device`] |
//! | `HAL_CUDA_GRAPH_INSTANCES` | 1 to 64 (default 16) | [`CudaOptions::bound_graph_instances`] |
//! | `HAL_CUDA_DEVRT` | path of `libcudadevrt.a` | where the updater of indirect dispatch nodes is linked from |
//!
//! An unknown value makes the driver answer every device request with `InvalidArgument` naming the
//! variable and the value.
//!
//! # Profiling
//! [`hal::Device::begin_profiling`] is implemented with timing events (`src/timing.rs`). Queue
//! operations are bracketed on their stream. The dispatches of a graph-replayed command buffer are
//! bracketed by event-record nodes in a profiled copy of its graph, pointed at each launch's own
//! events. Device times reach the host's clock through anchor events stamped on an idle stream.
//!
//! # Device timings per submission
//! With [`CudaOptions::submission_timings`] each submission is bracketed by two timing events, and the
//! time the GPU spent on it appears as `device_ns` on its `complete` tracing span (`src/timing.rs`); `hal
//! run --trace` turns it on and puts the figure on the timeline. It costs two event records per
//! submission.

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(target_endian = "big")]
compile_error!("driver-cuda passes kernel constants as little-endian 8-byte slots; big-endian hosts are not supported");

// Public: what embedders, the tools and the benchmarks use (`error`, `executable`, `collective`,
// `cts` with the `cts` feature, and `loader` re-exported from `sys` below). The rest is the
// driver's own.
pub mod collective;
mod commands;
mod counted_fifo;
#[cfg(feature = "cts")]
pub mod cts;
mod device;
pub mod error;
mod event;
pub mod executable;
mod free_gate;
mod host_callback;
mod host_copy;
mod indirect_launcher;
pub mod interop;
mod memory;
mod options;
mod pinned_cache;
mod progress_word;
mod queue_stream;
mod staging;
mod stream;
mod sys;
mod timing;

use std::sync::Arc;

use hal::driver::DeviceExt;
use hal::driver::Driver;
use hal::{Device, DeviceId, DeviceInfo, Error, Registry, Result};

pub use commands::CudaPreparedCommands;
pub use commands::indirect_node::ENV_DEVRT;
pub use device::CudaDevice;
pub use options::{
    CompletionWait, CudaOptions, ENV_COMPLETION, ENV_COMPLETION_WORD, ENV_INDIRECT, ENV_POLL_BUDGET_US, ENV_POLL_US,
    ENV_TIMINGS,
};
pub use sys::context::Context;
pub use sys::loader;

/// The name the registry knows this driver by.
pub const DRIVER_NAME: &str = "cuda";

/// The CUDA driver: one device per GPU, created with its options.
#[derive(Clone, Debug, Default)]
pub struct CudaDriver {
    options: CudaOptions,
    /// Why the options could not be read from the environment ([`CudaDriver::from_env`]); every
    /// device request answers with it.
    options_error: Option<Error>,
}

impl CudaDriver {
    /// A driver whose devices use `options`.
    pub fn with_options(options: CudaOptions) -> Self {
        CudaDriver { options, options_error: None }
    }

    /// A driver whose devices use [`CudaOptions::from_env`]; a bad variable is reported by `probe`,
    /// `enumerate` and `create_device`.
    pub fn from_env() -> Self {
        match CudaOptions::from_env() {
            Ok(options) => CudaDriver::with_options(options),
            Err(e) => CudaDriver { options: CudaOptions::default(), options_error: Some(e) },
        }
    }

    fn check_options(&self) -> Result<()> {
        match &self.options_error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The options its devices use.
    pub fn options(&self) -> &CudaOptions {
        &self.options
    }
}

impl Driver for CudaDriver {
    fn name(&self) -> &str {
        DRIVER_NAME
    }

    fn probe(&self) -> Result<()> {
        self.check_options()?;
        loader::probe().map(|_| ())
    }

    fn enumerate(&self) -> Result<Vec<DeviceInfo>> {
        self.check_options()?;
        let probe = loader::probe()?;
        (0..probe.device_count).map(|ordinal| device::device_info(ordinal, &self.options)).collect()
    }

    fn create_device(&self, ordinal: usize) -> Result<Device> {
        self.check_options()?;
        let probe = loader::probe()?;
        if ordinal >= probe.device_count {
            return Err(Error::out_of_range(format!(
                "cuda: device {ordinal} does not exist (it has {})",
                probe.device_count
            )));
        }
        if self.options.queue_count == 0 {
            return Err(Error::invalid_argument("cuda: a device needs at least one queue"));
        }
        let id = DeviceId::next();
        let backend = Arc::new(CudaDevice::new(id, ordinal, &self.options)?);
        // SAFETY: `id` is fresh and names this device only, and the backend tags every buffer,
        // executable and semaphore it makes with the `id` it was built with.
        Ok(unsafe { Device::from_backend(id, backend) })
    }
}

/// Registers the CUDA driver with [`CudaOptions::from_env`] (the defaults unless `HAL_CUDA_*`
/// variables say otherwise). Safe without a GPU: the driver then reports `Unavailable` when asked for
/// devices.
pub fn register(registry: &mut Registry) {
    registry.register(Arc::new(CudaDriver::from_env()));
}

/// Device `ordinal` with [`CudaOptions::from_env`], without a registry.
pub fn create_device(ordinal: usize) -> Result<Device> {
    CudaDriver::from_env().create_device(ordinal)
}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
