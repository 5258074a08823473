//! IREE's queue pools on this driver: the backend a caller builds its own pools from
//! (`query_queue_pool_backend`), and `queue_alloca`/`queue_dealloca` through such a pool.
//!
//! - **Slabs** are HAL buffers of the device's device-local memory (host memory on cpu-sim, mapped
//!   in place): IREE's pools (TLSF, fixed-block, pass-through) keep the offsets, the slab provider
//!   (`src/c/shim.c`, hooks here) allocates the slabs and wraps a placed range as an IREE buffer
//!   over a HAL subspan of its slab.
//! - **Death frontiers.** Each queue is an IREE axis (the device's topology axis, with the queue's
//!   index) whose epoch counts that queue's pool deallocas. A dealloca signals its epoch on the
//!   queue's epoch semaphore, a HAL timeline semaphore, and returns its block to the pool at
//!   submission, tagged with the frontier `{(queue, epoch)}`. Epoch signals of a queue are made in
//!   order (a dealloca's epoch signal also waits for the epoch before), so the semaphore never
//!   steps back; the caller's signals are a barrier of their own behind the caller's waits alone.
//! - **Reservation.** An alloca asks the pool with its queue's frontier (the epoch of the last pool
//!   dealloca submitted there) and waits for that epoch on the HAL (IREE's queues are in order, and
//!   the memory it reuses may still be read by work that dealloca followed). A block whose death
//!   frontier the alloca's does not dominate comes with a wait on the frontier's epochs; the caller must
//!   allow such hidden waits (`IREE_HAL_ALLOCA_FLAG_ALLOW_POOL_WAIT_FRONTIER`), otherwise the block
//!   goes back and the alloca is `RESOURCE_EXHAUSTED`. The bytes are usable once the alloca's
//!   signals are: it is a HAL barrier behind the caller's waits and those.
//!
//! Not done: an alloca that finds its pool exhausted fails (`RESOURCE_EXHAUSTED`) instead of
//! waiting for the pool's notification, since the HAL buffer of a queue operation is fixed when the
//! operation is submitted; a block whose buffer IREE drops without a dealloca goes back tagged with
//! its queue's latest epoch, which covers work of that queue only.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hal::driver::lock;
use hal::{MemoryType, SemaphoreValue};

use crate::allocator::{DeviceMemory, Source, bits};
use crate::buffer::{HalBuffer, Host, Memory, SlabView, host_address};
use crate::ffi::{self, iree_status_t, sys};

/// Slab lengths are multiples of this.
const SLAB_GRANULE: u64 = 256;

/// A slab as IREE's pools see it (`iree_hal_slab_t`, not in the bindings).
#[repr(C)]
pub(crate) struct Slab {
    base_ptr: *mut u8,
    length: sys::iree_device_size_t,
    /// A `Box<hal::Buffer>` turned into an address.
    provider_handle: u64,
}

/// The slab provider's hooks (`thal_iree_slab_hooks_t` in the shim).
#[repr(C)]
struct SlabHooks {
    acquire: unsafe extern "C" fn(*mut c_void, sys::iree_device_size_t, *mut Slab) -> iree_status_t,
    release: unsafe extern "C" fn(*mut c_void, *const Slab),
    wrap: unsafe extern "C" fn(
        *mut c_void,
        *const Slab,
        sys::iree_device_size_t,
        sys::iree_device_size_t,
        sys::iree_hal_buffer_params_t,
        sys::iree_hal_buffer_release_callback_t,
        *mut *mut sys::iree_hal_buffer_t,
    ) -> iree_status_t,
    properties: unsafe extern "C" fn(*mut c_void, *mut sys::iree_hal_memory_type_t, *mut sys::iree_hal_buffer_usage_t),
    drop_owner: unsafe extern "C" fn(*mut c_void),
}

unsafe extern "C" {
    fn thal_iree_slab_provider_create(
        hooks: *const SlabHooks,
        owner: *mut c_void,
        host_allocator: sys::iree_allocator_t,
        out: *mut *mut sys::iree_hal_slab_provider_t,
    ) -> iree_status_t;
    fn thal_iree_slab_provider_release(provider: *mut sys::iree_hal_slab_provider_t);
}

static HOOKS: SlabHooks = SlabHooks {
    acquire: slab_acquire,
    release: slab_release,
    wrap: slab_wrap,
    properties: slab_properties,
    drop_owner,
};

/// A frontier of one entry (`iree_async_frontier_t` with its entries inline).
#[repr(C)]
struct OneEntryFrontier {
    entry_count: u8,
    reserved: [u8; 7],
    entries: [sys::iree_async_frontier_entry_t; 1],
}

impl OneEntryFrontier {
    fn new(axis: sys::iree_async_axis_t, epoch: u64) -> Self {
        OneEntryFrontier {
            entry_count: 1,
            reserved: [0; 7],
            entries: [sys::iree_async_frontier_entry_t { axis, epoch }],
        }
    }

    fn as_ptr(&self) -> *const sys::iree_async_frontier_t {
        (self as *const Self).cast()
    }
}

/// The queue-pool state of one device (made on the first backend query).
pub(crate) struct QueuePools {
    provider: *mut sys::iree_hal_slab_provider_t,
    notification: *mut sys::iree_async_notification_t,
    /// The axis of queue 0; queue `i`'s is this with `i` in its queue byte.
    base_axis: u64,
    /// The offset alignment the device's bindings need.
    binding_alignment: u64,
    queues: Vec<QueueEpochs>,
}

// SAFETY: the provider and the notification are IREE objects made for use from any thread
// (reference-counted, internally synchronized); the rest is `Sync` Rust state.
unsafe impl Send for QueuePools {}
// SAFETY: see `Send`.
unsafe impl Sync for QueuePools {}

/// One queue's pool deallocas.
struct QueueEpochs {
    /// Reaches epoch `e` when the queue's `e`-th pool dealloca has run.
    semaphore: hal::Semaphore,
    /// Epochs handed out (the last pool dealloca submitted); held while one is submitted.
    submitted: Mutex<u64>,
}

/// A pool reservation a `queue_alloca` placed an IREE buffer in, until its dealloca (or the
/// buffer's destruction) gives it back.
pub(crate) struct Reserved {
    pool: *mut sys::iree_hal_pool_t,
    reservation: sys::iree_hal_pool_reservation_t,
    queue: usize,
    pools: Arc<QueuePools>,
}

/// Where queue axes of devices with no topology axis start (one device index each).
static NEXT_DEVICE_AXIS: AtomicU64 = AtomicU64::new(0);

impl QueuePools {
    /// The queue-pool state of `hal`'s device: a slab provider over `memory`, a notification of
    /// `proactor`, an epoch semaphore per queue. `topology_axis`: the device's frontier axis from
    /// its topology (0 when it has none).
    pub(crate) fn new(
        hal: &hal::Device,
        memory: Arc<DeviceMemory>,
        proactor: *mut sys::iree_async_proactor_t,
        host_allocator: sys::iree_allocator_t,
        topology_axis: u64,
    ) -> Result<Arc<QueuePools>, hal::Error> {
        let queues = (0..hal.queue_count())
            .map(|_| Ok(QueueEpochs { semaphore: hal.create_semaphore(0)?, submitted: Mutex::new(0) }))
            .collect::<Result<Vec<_>, hal::Error>>()?;
        let base_axis = match topology_axis {
            0 => {
                // A queue axis of machine 0 with a device index of this process's own.
                let device = NEXT_DEVICE_AXIS.fetch_add(1, Ordering::Relaxed) & 0xff;
                (2u64 << 40) | (device << 32)
            }
            axis => axis & !(0xffu64 << 24),
        };
        let mut provider = std::ptr::null_mut();
        let owner = Arc::into_raw(memory).cast_mut().cast::<c_void>();
        // SAFETY: static hooks; `owner` is one reference the provider gives back through
        // `drop_owner` (also on failure).
        ffi::into_result(unsafe { thal_iree_slab_provider_create(&HOOKS, owner, host_allocator, &mut provider) })?;
        let mut notification = std::ptr::null_mut();
        // SAFETY: a live proactor of the device; the output is a local.
        let made = ffi::into_result(unsafe { sys::iree_async_notification_create(proactor, 0, &mut notification) });
        if let Err(error) = made {
            // SAFETY: the one reference made above.
            unsafe { thal_iree_slab_provider_release(provider) };
            return Err(error);
        }
        Ok(Arc::new(QueuePools {
            binding_alignment: hal.info().binding_alignment.max(1),
            provider,
            notification,
            base_axis,
            queues,
        }))
    }

    /// The backend IREE builds pools for `queue` from (the same for every queue: one memory).
    pub(crate) fn backend(self: &Arc<Self>) -> sys::iree_hal_queue_pool_backend_t {
        sys::iree_hal_queue_pool_backend_t {
            slab_provider: self.provider,
            notification: self.notification,
            epoch_query: sys::iree_hal_pool_epoch_query_t {
                fn_: Some(epoch_reached),
                user_data: Arc::as_ptr(self).cast_mut().cast(),
            },
        }
    }

    fn axis(&self, queue: usize) -> sys::iree_async_axis_t {
        self.base_axis | ((queue as u64 & 0xff) << 24)
    }

    /// The queue `axis` names on this device, if any.
    fn queue_of(&self, axis: sys::iree_async_axis_t) -> Option<usize> {
        let queue = ((axis >> 24) & 0xff) as usize;
        (axis & !(0xffu64 << 24) == self.base_axis && queue < self.queues.len()).then_some(queue)
    }

    /// `queue_alloca` of `size` bytes from `pool` on `queue`: see the module docs.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn alloca(
        self: &Arc<Self>,
        queue: &hal::Queue,
        waits: &[SemaphoreValue],
        pool: *mut sys::iree_hal_pool_t,
        params: &sys::iree_hal_buffer_params_t,
        size: u64,
        flags: sys::iree_hal_alloca_flags_t,
        signals: &[SemaphoreValue],
    ) -> Result<*mut sys::iree_hal_buffer_t, hal::Error> {
        let index = queue.index();
        let epochs = self.epochs(index)?;
        // What the caller asks, at least what a binding's offset needs on the device (Vulkan's
        // `minStorageBufferOffsetAlignment`).
        let alignment = (params.min_alignment as u64).max(self.binding_alignment).next_power_of_two();
        // Held until the alloca is submitted: its frontier stays the queue's.
        let submitted = lock(&epochs.submitted);
        let frontier = OneEntryFrontier::new(self.axis(index), *submitted);
        let mut reservation = sys::iree_hal_pool_reservation_t::default();
        let mut info = sys::iree_hal_pool_acquire_info_t::default();
        let mut result = 0;
        // SAFETY: IREE's live pool; the frontier and outputs are locals.
        ffi::into_result(unsafe {
            sys::iree_hal_pool_acquire_reservation(
                pool,
                size.max(1) as usize,
                alignment as usize,
                frontier.as_ptr(),
                sys::iree_hal_pool_reserve_flag_bits_e_IREE_HAL_POOL_RESERVE_FLAG_ALLOW_WAIT_FRONTIER,
                &mut reservation,
                &mut info,
                &mut result,
            )
        })
        .map_err(|e| e.context(format!("queue_alloca of {size} bytes from an IREE pool")))?;
        let give_back = |death: *const sys::iree_async_frontier_t| {
            // SAFETY: the reservation just acquired from this pool, given back once.
            unsafe { sys::iree_hal_pool_release_reservation(pool, &reservation, death) }
        };
        let mut hidden: Vec<SemaphoreValue> = Vec::new();
        match result {
            sys::iree_hal_pool_acquire_result_e_IREE_HAL_POOL_ACQUIRE_OK
            | sys::iree_hal_pool_acquire_result_e_IREE_HAL_POOL_ACQUIRE_OK_FRESH => {}
            sys::iree_hal_pool_acquire_result_e_IREE_HAL_POOL_ACQUIRE_OK_NEEDS_WAIT => {
                let allowed = flags
                    & u64::from(sys::iree_hal_alloca_flag_bits_t_IREE_HAL_ALLOCA_FLAG_ALLOW_POOL_WAIT_FRONTIER)
                    != 0;
                // SAFETY: the pool's frontier, valid while the reservation is held.
                let waits = unsafe { self.frontier_waits(info.wait_frontier) };
                match (allowed, waits) {
                    (true, Ok(waits)) => hidden = waits,
                    (false, _) => {
                        give_back(info.wait_frontier);
                        return Err(hal::Error::resource_exhausted(format!(
                            "queue_alloca of {size} bytes on queue {index}: the pool's free block is still in use \
                             by other queues' work, and the alloca does not allow waiting for it \
                             (IREE_HAL_ALLOCA_FLAG_ALLOW_POOL_WAIT_FRONTIER)"
                        )));
                    }
                    (true, Err(error)) => {
                        give_back(info.wait_frontier);
                        return Err(error);
                    }
                }
            }
            other => {
                let why = match other {
                    sys::iree_hal_pool_acquire_result_e_IREE_HAL_POOL_ACQUIRE_OVER_BUDGET => "over its budget",
                    _ => "exhausted",
                };
                return Err(hal::Error::resource_exhausted(format!(
                    "queue_alloca of {size} bytes on queue {index}: the IREE pool is {why} (this driver does not \
                     wait for the pool's notification)"
                )));
            }
        }
        // The queue's earlier pool deallocas first, as on IREE's in-order queues.
        if *submitted > 0 {
            hidden.push(SemaphoreValue::new(&epochs.semaphore, *submitted));
        }
        let mut view = std::ptr::null_mut();
        // SAFETY: the live pool and its reservation; the output is a local.
        let materialized = ffi::into_result(unsafe {
            sys::iree_hal_pool_materialize_reservation(pool, *params, &reservation, 0, &mut view)
        });
        if let Err(error) = materialized {
            give_back(std::ptr::null());
            return Err(error.context("materializing an IREE pool reservation"));
        }
        let all_waits: Vec<SemaphoreValue> = waits.iter().cloned().chain(hidden).collect();
        if let Err(error) = queue.barrier(&all_waits, signals) {
            // SAFETY: the view made above, not handed out; the bytes were never used.
            unsafe { sys::iree_hal_buffer_release(view) };
            give_back(std::ptr::null());
            return Err(error);
        }
        drop(submitted);
        // Placed by this queue in queue order, so IREE hands its dealloca to the device (which
        // turns a buffer of indeterminate lifetime's into a barrier, as IREE's own queues do).
        let mut placement_flags =
            sys::iree_hal_buffer_placement_flag_bits_t_IREE_HAL_BUFFER_PLACEMENT_FLAG_ASYNCHRONOUS;
        if flags & u64::from(sys::iree_hal_alloca_flag_bits_t_IREE_HAL_ALLOCA_FLAG_INDETERMINATE_LIFETIME) != 0 {
            placement_flags |=
                sys::iree_hal_buffer_placement_flag_bits_t_IREE_HAL_BUFFER_PLACEMENT_FLAG_INDETERMINATE_LIFETIME;
        }
        // SAFETY: the view is live and not yet handed out.
        unsafe {
            (*view).placement.queue_affinity = 1u64 << (index % 64);
            (*view).placement.flags = placement_flags;
        }
        // SAFETY: the view's allocated buffer is the record our `slab_wrap` made.
        let slab = unsafe { crate::buffer::cast(view) }.and_then(HalBuffer::slab_view);
        match slab {
            Some(slab) => slab.hold(Reserved { pool, reservation, queue: index, pools: self.clone() }),
            // Another provider's buffer: nothing to tie the reservation to (it goes back now).
            None => give_back(std::ptr::null()),
        }
        Ok(view)
    }

    /// `queue_dealloca` of a buffer placed by [`alloca`](Self::alloca): the block goes back to its
    /// pool tagged with this dealloca's epoch (see the module docs). On an error the reservation
    /// comes back when the block is still the caller's (`None`: it went back to the pool, and only
    /// the caller's signals could not be submitted).
    pub(crate) fn dealloca(
        &self,
        queue: &hal::Queue,
        waits: &[SemaphoreValue],
        reserved: Reserved,
        signals: &[SemaphoreValue],
    ) -> Result<(), (hal::Error, Option<Reserved>)> {
        let index = queue.index();
        let epochs = match self.epochs(index) {
            Ok(epochs) => epochs,
            Err(error) => return Err((error, Some(reserved))),
        };
        let mut submitted = lock(&epochs.submitted);
        let epoch = *submitted + 1;
        // The caller's signals follow its waits alone: only the epoch signal waits for the epoch
        // before (a dealloca is done once its waits are reached), so a dealloca held by an earlier
        // one of its queue never holds work its own signals release.
        let mut epoch_waits = waits.to_vec();
        if *submitted > 0 {
            epoch_waits.push(SemaphoreValue::new(&epochs.semaphore, *submitted));
        }
        if let Err(error) = queue.barrier(&epoch_waits, &[SemaphoreValue::new(&epochs.semaphore, epoch)]) {
            return Err((error, Some(reserved)));
        }
        *submitted = epoch;
        drop(submitted);
        let death = OneEntryFrontier::new(self.axis(index), epoch);
        reserved.give_back(death.as_ptr());
        queue.barrier(waits, signals).map_err(|error| (error, None))
    }

    fn epochs(&self, queue: usize) -> Result<&QueueEpochs, hal::Error> {
        self.queues.get(queue).ok_or_else(|| hal::Error::internal(format!("queue {queue} has no pool epochs")))
    }

    /// HAL waits for every entry of `frontier` (each an axis of this device's queues).
    ///
    /// # Safety
    /// `frontier` is NULL or a live frontier.
    unsafe fn frontier_waits(
        &self,
        frontier: *const sys::iree_async_frontier_t,
    ) -> Result<Vec<SemaphoreValue>, hal::Error> {
        if frontier.is_null() {
            return Err(hal::Error::internal("a pool reservation that needs a wait named no frontier"));
        }
        // SAFETY: the caller's contract; the entries follow the header, `entry_count` of them.
        let entries =
            unsafe { std::slice::from_raw_parts((*frontier).entries.as_ptr(), usize::from((*frontier).entry_count)) };
        entries
            .iter()
            .map(|entry| match self.queue_of(entry.axis) {
                Some(queue) => Ok(SemaphoreValue::new(&self.queues[queue].semaphore, entry.epoch)),
                None => Err(hal::Error::unimplemented(format!(
                    "queue_alloca: the pool's free block waits for axis {:#x} epoch {}, which is not a queue of this \
                     device (pools shared across devices are not bridged)",
                    entry.axis, entry.epoch
                ))),
            })
            .collect()
    }
}

impl Drop for QueuePools {
    fn drop(&mut self) {
        // SAFETY: the one reference each that `new` made; pools hold their own.
        unsafe {
            thal_iree_slab_provider_release(self.provider);
            sys::iree_async_notification_release(self.notification);
        }
    }
}

impl Reserved {
    /// Gives the block back to its pool tagged with `death` (NULL: free for any use now).
    fn give_back(self, death: *const sys::iree_async_frontier_t) {
        // SAFETY: the pool outlives its reservations (IREE's contract); given back once (consumed).
        unsafe { sys::iree_hal_pool_release_reservation(self.pool, &self.reservation, death) };
    }

    /// Gives the block back when IREE dropped its buffer without a dealloca: tagged with its queue's
    /// latest epoch (see the module docs).
    pub(crate) fn give_back_unused(self) {
        let epoch = self.pools.queues.get(self.queue).map_or(0, |q| *lock(&q.submitted));
        let death = OneEntryFrontier::new(self.pools.axis(self.queue), epoch);
        self.give_back(death.as_ptr());
    }

    /// The device state the reservation came from (a dealloca goes through it).
    pub(crate) fn pools(&self) -> Arc<QueuePools> {
        self.pools.clone()
    }
}

/// The pools' epoch query: whether `axis` (a queue of this device) has reached `epoch`.
unsafe extern "C" fn epoch_reached(user_data: *mut c_void, axis: sys::iree_async_axis_t, epoch: u64) -> bool {
    // SAFETY: `backend` passed a live `QueuePools` (the device keeps it while pools may ask).
    let pools = unsafe { &*user_data.cast::<QueuePools>() };
    pools.queue_of(axis).is_some_and(|queue| pools.queues[queue].semaphore.query().is_ok_and(|value| value >= epoch))
}

/// The memory slabs come from: the HAL memory type device-local IREE requests resolve to.
fn slab_memory_type(memory: &DeviceMemory) -> Option<MemoryType> {
    let params = slab_params();
    match memory.resolve(&params).source {
        Source::Hal(memory_type) => Some(memory_type),
        Source::Pool => None,
    }
}

fn slab_params() -> sys::iree_hal_buffer_params_t {
    sys::iree_hal_buffer_params_t {
        usage: bits::USAGE_TRANSFER | bits::USAGE_DISPATCH,
        access: bits::ACCESS_ALL,
        type_: bits::DEVICE_LOCAL,
        ..Default::default()
    }
}

/// # Safety
/// `owner` is the `Arc<DeviceMemory>` the provider was made with.
unsafe fn owner<'a>(owner: *mut c_void) -> &'a DeviceMemory {
    // SAFETY: the caller's contract; the provider holds the reference until `drop_owner`.
    unsafe { &*owner.cast::<DeviceMemory>() }
}

unsafe extern "C" fn slab_acquire(
    memory: *mut c_void,
    min_length: sys::iree_device_size_t,
    out: *mut Slab,
) -> iree_status_t {
    ffi::guarded("slab_acquire", || {
        // SAFETY: the provider's owner.
        let memory = unsafe { owner(memory) };
        let length = (min_length as u64).max(1).next_multiple_of(SLAB_GRANULE);
        let made = slab_memory_type(memory)
            .ok_or_else(|| hal::Error::unavailable("this device has no device-local memory for pool slabs"))
            .and_then(|memory_type| memory.allocate_hal(memory_type, length).map(|buffer| (memory_type, buffer)));
        let (memory_type, buffer) = match made {
            Ok(made) => made,
            Err(error) => return ffi::from_error(&error.context(format!("a pool slab of {length} bytes"))),
        };
        let base_ptr = match memory_type.contains(MemoryType::HOST_VISIBLE) {
            true => match host_address(&buffer) {
                Ok(host) => host.as_ptr(),
                Err(error) => return ffi::from_error(&error),
            },
            false => std::ptr::null_mut(),
        };
        let handle = Box::into_raw(Box::new(buffer)) as u64;
        // SAFETY: writable, per IREE's contract.
        unsafe { out.write(Slab { base_ptr, length: length as usize, provider_handle: handle }) };
        ffi::ok()
    })
}

unsafe extern "C" fn slab_release(_memory: *mut c_void, slab: *const Slab) {
    // SAFETY: a slab `slab_acquire` made, released once: its handle is the boxed HAL buffer (views of
    // it keep their own handles to the memory).
    drop(unsafe { Box::from_raw((*slab).provider_handle as *mut hal::Buffer) });
}

unsafe extern "C" fn slab_wrap(
    memory: *mut c_void,
    slab: *const Slab,
    offset: sys::iree_device_size_t,
    length: sys::iree_device_size_t,
    params: sys::iree_hal_buffer_params_t,
    release: sys::iree_hal_buffer_release_callback_t,
    out: *mut *mut sys::iree_hal_buffer_t,
) -> iree_status_t {
    ffi::guarded("slab_wrap", || {
        // SAFETY: the provider's owner, and a live slab of it.
        let (memory, slab) = unsafe { (owner(memory), &*slab) };
        // SAFETY: the slab's handle is its boxed HAL buffer (see `slab_acquire`).
        let buffer = unsafe { &*(slab.provider_handle as *const hal::Buffer) };
        let made = buffer.subspan(offset as u64, length as u64).map(|view| {
            let host = match slab.base_ptr.is_null() {
                true => Host::Unmapped,
                // SAFETY: `offset` lies inside the slab (IREE's contract), mapped at `base_ptr`.
                false => Host::At(unsafe { std::ptr::NonNull::new_unchecked(slab.base_ptr.add(offset)) }),
            };
            let shape = memory.slab_shape(&params, length as u64);
            HalBuffer::create(&shape, Memory::Slab(Box::new(SlabView::new(view, release))), host)
        });
        match made {
            Ok(buffer) => {
                // SAFETY: writable, per IREE's contract; the buffer is IREE's.
                unsafe { *out = buffer };
                ffi::ok()
            }
            Err(error) => ffi::from_error(&error.context("wrapping a pool slab's range")),
        }
    })
}

unsafe extern "C" fn slab_properties(
    memory: *mut c_void,
    out_memory_type: *mut sys::iree_hal_memory_type_t,
    out_usage: *mut sys::iree_hal_buffer_usage_t,
) {
    // SAFETY: the provider's owner.
    let memory = unsafe { owner(memory) };
    let resolved = memory.resolve(&slab_params());
    // SAFETY: writable, per IREE's contract.
    unsafe {
        *out_memory_type = resolved.memory_type;
        *out_usage = resolved.usage;
    }
}

unsafe extern "C" fn drop_owner(memory: *mut c_void) {
    // SAFETY: the reference `QueuePools::new` gave the provider, given back once.
    drop(unsafe { Arc::from_raw(memory.cast::<DeviceMemory>().cast_const()) });
}
