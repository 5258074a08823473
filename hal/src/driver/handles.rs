//! What a driver needs of the embedder handles, kept off their own pages: building a handle around a
//! backend, finding the backend again, and the listener hooks of a semaphore.
//!
//! The traits are sealed (only the handles implement them), and the constructors that let a caller
//! attach memory or code to a device are `unsafe`: a handle's device id is what every other call
//! trusts to decide which backend may touch it.

use std::any::Any;
use std::sync::Arc;

use crate::buffer::{Buffer, BufferParams};
use crate::command_buffer::{Command, CommandBuffer};
use crate::device::{Device, DeviceId};
use crate::driver::{BindingState, BufferBackend, DeviceBackend, ExecutableBackend, PreparedCommands};
use crate::error::Error;
use crate::executable::Executable;
use crate::semaphore::core::{Registration, TimepointId, TimepointKind, TimepointListener};
use crate::semaphore::{Semaphore, SemaphoreDriverData};

mod sealed {
    /// Keeps the extension traits implemented by the handles only.
    pub trait Sealed {}
    impl Sealed for crate::Device {}
    impl Sealed for crate::Buffer {}
    impl Sealed for crate::Executable {}
    impl Sealed for crate::CommandBuffer {}
    impl Sealed for crate::Semaphore {}
}

/// Driver access to a [`Device`].
pub trait DeviceExt: sealed::Sealed {
    /// Wraps a driver's device. Drivers call it from [`Driver::create_device`](crate::driver::Driver::create_device).
    ///
    /// # Safety
    /// `id` is a fresh [`DeviceId::next`] that names this device only, and `backend` tags every
    /// buffer, executable and semaphore it makes with `id`. Handles decide which backend may touch a
    /// buffer or run an executable by comparing these ids; two devices sharing one would hand one
    /// device's memory addresses to the other's kernels.
    unsafe fn from_backend(id: DeviceId, backend: Arc<dyn DeviceBackend>) -> Self
    where
        Self: Sized;

    /// The device's backend as a `T`, if it is one: how a driver's interop functions reach their
    /// own device type (the CUDA context, the `VkDevice`) from an embedder's handle.
    fn backend_as<T: Any>(&self) -> Option<&T>
    where
        Self: Sized;
}

impl DeviceExt for Device {
    unsafe fn from_backend(id: DeviceId, backend: Arc<dyn DeviceBackend>) -> Self {
        Device::wrap(id, backend)
    }

    fn backend_as<T: Any>(&self) -> Option<&T> {
        self.backend().as_any().downcast_ref::<T>()
    }
}

/// Driver access to a [`Buffer`].
pub trait BufferExt: sealed::Sealed {
    /// Wraps memory `backend` of device `device` as a buffer with `params`.
    ///
    /// # Safety
    /// `backend` is memory of the device `device` names, made by that device's [`DeviceBackend`] (or
    /// memory that device's kernels and copies may use as theirs): the device's backend downcasts it
    /// and hands its address to its own kernels.
    unsafe fn from_backend(device: DeviceId, params: BufferParams, backend: Arc<dyn BufferBackend>) -> Self
    where
        Self: Sized;

    /// The memory behind the buffer, for the owning driver to downcast. A subspan shares its
    /// root's backend: add [`memory_offset`](Self::memory_offset) to every address taken from it.
    fn backend(&self) -> &Arc<dyn BufferBackend>;

    /// Where the buffer starts in its backend's memory: 0, or a subspan's offset in its root.
    fn memory_offset(&self) -> u64;
}

impl BufferExt for Buffer {
    unsafe fn from_backend(device: DeviceId, params: BufferParams, backend: Arc<dyn BufferBackend>) -> Self {
        Buffer::wrap(device, params, backend)
    }

    fn backend(&self) -> &Arc<dyn BufferBackend> {
        Buffer::backend(self)
    }

    fn memory_offset(&self) -> u64 {
        Buffer::memory_offset(self)
    }
}

/// Driver access to an [`Executable`].
pub trait ExecutableExt: sealed::Sealed {
    /// Wraps code `backend` loaded by device `device`.
    ///
    /// # Safety
    /// `backend` was loaded by the device `device` names (its [`DeviceBackend::load_executable`]):
    /// that device's backend downcasts it and launches its functions in its own context.
    unsafe fn from_backend(device: DeviceId, backend: Arc<dyn ExecutableBackend>) -> Self
    where
        Self: Sized;

    /// The loaded code, for the owning driver to downcast.
    fn backend(&self) -> &Arc<dyn ExecutableBackend>;
}

impl ExecutableExt for Executable {
    unsafe fn from_backend(device: DeviceId, backend: Arc<dyn ExecutableBackend>) -> Self {
        Executable::wrap(device, backend)
    }

    fn backend(&self) -> &Arc<dyn ExecutableBackend> {
        Executable::backend(self)
    }
}

/// Driver access to a recorded [`CommandBuffer`].
pub trait CommandBufferExt: sealed::Sealed {
    /// The recorded commands (validated when recorded).
    fn commands(&self) -> Arc<[Command]>;

    /// What [`DeviceBackend::prepare_commands`] made of them at `end`; `None` before `end`.
    fn prepared(&self) -> Option<Arc<dyn PreparedCommands>>;

    /// [`prepared`](Self::prepared) borrowed: no reference count touched, no lock taken (every
    /// execute reads it).
    fn prepared_ref(&self) -> Option<&Arc<dyn PreparedCommands>>;

    /// What the driver keeps across executes with binding tables (the `state` that
    /// [`DeviceBackend::prepare_bound`] is given).
    fn binding_state(&self) -> &BindingState;
}

impl CommandBufferExt for CommandBuffer {
    fn commands(&self) -> Arc<[Command]> {
        CommandBuffer::commands(self)
    }

    fn prepared(&self) -> Option<Arc<dyn PreparedCommands>> {
        CommandBuffer::prepared(self)
    }

    fn prepared_ref(&self) -> Option<&Arc<dyn PreparedCommands>> {
        CommandBuffer::prepared_ref(self)
    }

    fn binding_state(&self) -> &BindingState {
        CommandBuffer::binding_state(self)
    }
}

/// Driver access to a [`Semaphore`]: its driver data and its timepoint listeners.
pub trait SemaphoreExt: sealed::Sealed {
    /// A semaphore owned by `owner`, carrying the driver's per-semaphore data (e.g. the events its
    /// device recorded for pending signals). Drivers call this from `create_semaphore`.
    fn with_driver_data(initial: u64, owner: DeviceId, data: Arc<dyn SemaphoreDriverData>) -> Self
    where
        Self: Sized;

    /// The driver's data attached at creation, if any.
    fn driver_data(&self) -> Option<&dyn Any>;

    /// Registers `listener` to be told once the value reaches `value` or the semaphore fails; when
    /// that is already decided nothing is stored and the outcome is returned instead.
    fn register(&self, value: u64, listener: Arc<dyn TimepointListener>, tag: u64) -> Registration;

    /// Registers `listener` for `kind` at `value` (see [`TimepointKind`]).
    fn register_kind(
        &self,
        kind: TimepointKind,
        value: u64,
        listener: Arc<dyn TimepointListener>,
        tag: u64,
    ) -> Registration;

    /// Cancels a registration: `true` if it was removed before it resolved (the listener will not
    /// be called), `false` if it resolved already or `id` was minted by another semaphore (which
    /// is left as it was).
    fn cancel(&self, id: TimepointId) -> bool;

    /// How many timepoints are registered and unresolved (0 when nothing waits).
    fn pending_count(&self) -> usize;

    /// Fails the semaphore with `status` (a failed semaphore keeps its first failure) and runs
    /// `decide` with the failure it keeps before the waiters this call wakes can see it: state that
    /// must agree with the semaphore (a read's readback) is decided by the time they wake. `decide`
    /// runs under the semaphore's lock: it must not touch the semaphore nor run user code.
    fn fail_deciding(&self, status: Error, decide: &mut dyn FnMut(&Error));
}

impl SemaphoreExt for Semaphore {
    fn with_driver_data(initial: u64, owner: DeviceId, data: Arc<dyn SemaphoreDriverData>) -> Self {
        Semaphore::with_driver_data(initial, owner, data, crate::SemaphoreFlags::empty())
    }

    fn driver_data(&self) -> Option<&dyn Any> {
        Semaphore::driver_data(self)
    }

    fn register(&self, value: u64, listener: Arc<dyn TimepointListener>, tag: u64) -> Registration {
        Semaphore::register(self, value, listener, tag)
    }

    fn register_kind(
        &self,
        kind: TimepointKind,
        value: u64,
        listener: Arc<dyn TimepointListener>,
        tag: u64,
    ) -> Registration {
        Semaphore::register_kind(self, kind, value, listener, tag)
    }

    fn cancel(&self, id: TimepointId) -> bool {
        Semaphore::cancel(self, id)
    }

    fn pending_count(&self) -> usize {
        Semaphore::pending_count(self)
    }

    fn fail_deciding(&self, status: Error, decide: &mut dyn FnMut(&Error)) {
        Semaphore::fail_deciding(self, status, decide)
    }
}
