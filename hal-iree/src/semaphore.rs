//! IREE semaphores over HAL semaphores.
//!
//! IREE keeps a semaphore's host-side state (timeline value, timepoints, failure) in an
//! `iree_async_semaphore_t` that every HAL semaphore embeds as its first member; device queues of
//! this driver wait on and signal the HAL semaphore inside. The two are kept in step:
//! - a host signal through IREE signals the HAL semaphore, then advances IREE's timeline and fires
//!   its timepoints;
//! - a device signal is watched ([`watch`]): once the HAL semaphore reaches the value, IREE's
//!   timeline advances and its timepoints fire (a failure fails IREE's side with the same status);
//! - a failure set through IREE (`on_fail`) fails the HAL semaphore, so device work waiting on it
//!   fails instead of hanging.
//!
//! Queries and waits read the HAL semaphore, which is never behind IREE's view.

use std::alloc::Layout;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use crate::ffi::{self, code, iree_status_t, sys};
use crate::poll_claim::PollClaim;

/// An IREE semaphore of this driver.
#[repr(C)]
pub(crate) struct Semaphore {
    /// IREE's state; first, so a `*mut Semaphore` is an `iree_hal_semaphore_t*`.
    base: sys::iree_async_semaphore_t,
    /// The allocation's layout (the frontier storage follows the struct).
    layout: Layout,
    /// The device-side timeline.
    hal: hal::Semaphore,
}

static VTABLE: sys::iree_hal_semaphore_vtable_t = sys::iree_hal_semaphore_vtable_t {
    async_: sys::iree_async_semaphore_vtable_t {
        destroy: Some(destroy),
        query: Some(query),
        signal: Some(signal),
        on_fail: Some(on_fail),
    },
    wait: Some(wait),
    import_timepoint: Some(import_timepoint),
    export_timepoint: Some(export_timepoint),
};

/// Creates a semaphore at `initial` whose HAL side is `hal`.
pub(crate) fn create(
    proactor: *mut sys::iree_async_proactor_t,
    initial: u64,
    hal: hal::Semaphore,
) -> Result<*mut sys::iree_hal_semaphore_t, hal::Error> {
    let (mut frontier_offset, mut total) = (0usize, 0usize);
    // SAFETY: both outputs are writable.
    ffi::into_result(unsafe {
        ffi::thal_iree_async_semaphore_layout(size_of::<Semaphore>(), &mut frontier_offset, &mut total)
    })?;
    let layout =
        Layout::from_size_align(total, 16).map_err(|e| hal::Error::internal(format!("semaphore layout: {e}")))?;
    // SAFETY: `layout` has a nonzero size (it holds a `Semaphore`).
    let memory = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Semaphore>();
    if memory.is_null() {
        return Err(hal::Error::resource_exhausted(format!("semaphore: {total} bytes of host memory")));
    }
    // SAFETY: `memory` is a fresh zeroed allocation sized and aligned for a `Semaphore`; the
    // non-IREE fields are written before IREE's initializer runs, and that initializer writes the
    // embedded base (its frontier at `frontier_offset`, inside the allocation).
    unsafe {
        std::ptr::addr_of_mut!((*memory).layout).write(layout);
        std::ptr::addr_of_mut!((*memory).hal).write(hal);
        sys::iree_async_semaphore_initialize(
            (&raw const VTABLE).cast(),
            proactor,
            initial,
            frontier_offset,
            0,
            &raw mut (*memory).base,
        );
    }
    Ok(memory.cast())
}

/// This driver's semaphore behind `semaphore`, or `None` for another driver's.
pub(crate) fn cast<'a>(semaphore: *mut sys::iree_hal_semaphore_t) -> Option<&'a Semaphore> {
    if semaphore.is_null() {
        return None;
    }
    let base = semaphore.cast::<sys::iree_async_semaphore_t>();
    // SAFETY: every HAL semaphore begins with an async semaphore whose vtable pointer says what it is.
    let vtable = unsafe { (*base).vtable };
    if !std::ptr::eq(vtable.cast::<sys::iree_hal_semaphore_vtable_t>(), &raw const VTABLE) {
        return None;
    }
    // SAFETY: the vtable is ours, so `semaphore` is a live `Semaphore` the caller holds.
    Some(unsafe { &*semaphore.cast::<Semaphore>() })
}

impl Semaphore {
    /// The HAL semaphore queues wait on and signal.
    pub(crate) fn hal(&self) -> &hal::Semaphore {
        &self.hal
    }

    fn base_ptr(&self) -> *mut sys::iree_async_semaphore_t {
        (&raw const self.base).cast_mut()
    }
}

/// Watches a device signal of `semaphore` to `value`, bringing IREE's view along when it lands.
pub(crate) fn watch(semaphore: &Semaphore, value: u64) {
    let base = semaphore.base_ptr();
    // SAFETY: `base` is live; the watch keeps a reference until it finishes.
    unsafe { sys::iree_async_semaphore_retain(base) };
    let watch = Arc::new(Watch {
        base: SendPtr(base),
        value,
        future: Mutex::new(Some(semaphore.hal.wait_async(value))),
        claim: PollClaim::default(),
    });
    watch.poll();
}

/// A raw pointer that IREE's semaphores allow on any thread.
struct SendPtr(*mut sys::iree_async_semaphore_t);
// SAFETY: IREE's async semaphores are thread-safe and reference counted; the watch holds one.
unsafe impl Send for SendPtr {}
// SAFETY: see `Send`.
unsafe impl Sync for SendPtr {}

struct Watch {
    base: SendPtr,
    value: u64,
    future: Mutex<Option<hal::WaitFuture>>,
    /// Which thread polls `future` (see `poll_claim`): the lock above is then never contended.
    claim: PollClaim,
}

impl Wake for Watch {
    fn wake(self: Arc<Self>) {
        self.poll();
    }
}

impl Watch {
    fn poll(self: &Arc<Self>) {
        if !self.claim.claim() {
            return;
        }
        loop {
            let outcome = {
                let mut slot = self.future.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(future) = slot.as_mut() else { return };
                let waker = Waker::from(self.clone());
                match Pin::new(future).poll(&mut Context::from_waker(&waker)) {
                    Poll::Ready(outcome) => {
                        *slot = None;
                        Some(outcome)
                    }
                    Poll::Pending => None,
                }
            };
            if let Some(outcome) = outcome {
                self.claim.finish();
                self.finish(outcome);
                return;
            }
            if self.claim.release() {
                return;
            }
        }
    }

    fn finish(&self, outcome: Result<(), hal::Error>) {
        let base = self.base.0;
        match outcome {
            // SAFETY: the watch holds a reference to `base`.
            Ok(()) => unsafe { advance(base, self.value) },
            // SAFETY: as above; IREE takes the status.
            Err(error) => unsafe { sys::iree_async_semaphore_fail(base, ffi::from_error(&error)) },
        }
        // SAFETY: gives up the reference `watch` took.
        unsafe { sys::iree_async_semaphore_release(base) };
    }
}

/// Advances IREE's timeline to `value` (if it is behind) and fires the timepoints it reached.
///
/// # Safety
/// `base` is a live semaphore of this driver.
unsafe fn advance(base: *mut sys::iree_async_semaphore_t, value: u64) {
    // A later value may have been published first (a host signal, or watches finishing out of
    // order): IREE refuses to go back, which is the outcome wanted here.
    // SAFETY: the caller's contract.
    let status = unsafe { sys::iree_async_semaphore_advance_timeline(base, value, std::ptr::null()) };
    let _ = ffi::into_result(status);
    // SAFETY: as above.
    unsafe { sys::iree_async_semaphore_dispatch_timepoints(base, value) };
}

unsafe extern "C" fn destroy(base: *mut sys::iree_async_semaphore_t) {
    let semaphore = base.cast::<Semaphore>();
    // SAFETY: IREE calls this once, when the last reference goes; the HAL semaphore is dropped in
    // place and the allocation freed with the layout it was made with.
    unsafe {
        let layout = (*semaphore).layout;
        sys::iree_async_semaphore_deinitialize(base);
        std::ptr::drop_in_place(&raw mut (*semaphore).hal);
        std::alloc::dealloc(semaphore.cast(), layout);
    }
}

unsafe extern "C" fn query(base: *mut sys::iree_async_semaphore_t) -> u64 {
    // SAFETY: IREE passes one of this driver's live semaphores.
    let semaphore = unsafe { &*base.cast::<Semaphore>() };
    // IREE records a failure before it tells this driver (`on_fail`), so its side is read first.
    // SAFETY: `base` is live; the stored failure is only read (IREE's decoder clones it).
    let stored = unsafe { ffi::thal_iree_semaphore_failure(base) };
    if !stored.is_null() {
        // SAFETY: the status lives as long as the semaphore.
        return unsafe { ffi::thal_iree_failure_value(stored) };
    }
    match semaphore.hal.query() {
        Ok(value) => value,
        Err(error) => {
            // IREE decodes a failure by cloning the status the value points at, so the value must
            // point at a status that lives on: the one IREE's side keeps. A device failure not yet
            // carried over is carried over now.
            // SAFETY: `base` is live; IREE keeps the first failure and frees a later one.
            unsafe {
                if ffi::thal_iree_semaphore_failure(base).is_null() {
                    sys::iree_async_semaphore_fail(base, ffi::from_error(&error));
                }
                ffi::thal_iree_failure_value(ffi::thal_iree_semaphore_failure(base))
            }
        }
    }
}

unsafe extern "C" fn signal(
    base: *mut sys::iree_async_semaphore_t,
    value: u64,
    _frontier: *const sys::iree_async_frontier_t,
) -> iree_status_t {
    // SAFETY: IREE passes one of this driver's live semaphores.
    let semaphore = unsafe { &*base.cast::<Semaphore>() };
    ffi::guarded("semaphore signal", || {
        if let Err(error) = semaphore.hal.signal(value) {
            return ffi::from_error(&error);
        }
        // SAFETY: `base` is live for the call.
        unsafe { advance(base, value) };
        ffi::ok()
    })
}

unsafe extern "C" fn on_fail(base: *mut sys::iree_async_semaphore_t, status_code: sys::iree_status_code_t) {
    // SAFETY: IREE passes one of this driver's live semaphores.
    let semaphore = unsafe { &*base.cast::<Semaphore>() };
    let code = ffi::hal_code(status_code);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        semaphore
            .hal
            .fail(hal::Error::new(code, format!("semaphore {} failed through IREE ({code})", semaphore.hal.id())))
    }));
}

/// How long until IREE's `timeout`, as a HAL timeout.
pub(crate) fn hal_timeout(timeout: sys::iree_timeout_t) -> hal::Timeout {
    let deadline = if timeout.type_ == sys::iree_timeout_type_e_IREE_TIMEOUT_RELATIVE {
        // SAFETY: a pure function of its argument and the clock.
        unsafe { sys::iree_relative_timeout_to_deadline_ns(timeout.nanos) }
    } else {
        timeout.nanos
    };
    if deadline == i64::MAX {
        return hal::Timeout::Infinite;
    }
    // SAFETY: reads the clock.
    let now = unsafe { sys::iree_time_now() };
    if deadline <= now {
        return hal::Timeout::Immediate;
    }
    hal::Timeout::After(Duration::from_nanos((deadline - now) as u64))
}

unsafe extern "C" fn wait(
    semaphore: *mut sys::iree_hal_semaphore_t,
    value: u64,
    timeout: sys::iree_timeout_t,
    _flags: sys::iree_async_wait_flags_t,
) -> iree_status_t {
    // SAFETY: IREE passes one of this driver's live semaphores.
    let semaphore = unsafe { &*semaphore.cast::<Semaphore>() };
    // SAFETY: the semaphore is live; the stored failure is only read.
    let stored = unsafe { ffi::thal_iree_semaphore_failure(semaphore.base_ptr()) };
    if !stored.is_null() {
        // IREE records a failure before it tells this driver: it may not have reached the HAL yet.
        // SAFETY: a live status owned by the semaphore.
        return ffi::status(
            unsafe { ffi::thal_iree_status_code(stored) },
            "the semaphore failed (query it for the cause)",
        );
    }
    ffi::guarded("semaphore wait", || match semaphore.hal.wait(value, hal_timeout(timeout)) {
        Ok(()) => ffi::ok(),
        Err(error) if error.code() == hal::StatusCode::DeadlineExceeded => {
            ffi::status(code::DEADLINE_EXCEEDED, error.message())
        }
        // A failed semaphore's wait fails with the failure's code (IREE's side keeps the first
        // failure; a device failure not carried over yet gives its own).
        Err(error) => {
            // SAFETY: the semaphore is live; the stored failure is only read.
            let stored = unsafe { ffi::thal_iree_semaphore_failure(semaphore.base_ptr()) };
            let failure_code = if stored.is_null() {
                ffi::iree_code(error.code())
            } else {
                // SAFETY: a live status owned by the semaphore.
                unsafe { ffi::thal_iree_status_code(stored) }
            };
            ffi::status(failure_code, error.message())
        }
    })
}

unsafe extern "C" fn import_timepoint(
    _semaphore: *mut sys::iree_hal_semaphore_t,
    _value: u64,
    _queue_affinity: sys::iree_hal_queue_affinity_t,
    _external_timepoint: sys::iree_hal_external_timepoint_t,
) -> iree_status_t {
    ffi::status(code::UNIMPLEMENTED, "timeline-hal semaphores import no external timepoints")
}

unsafe extern "C" fn export_timepoint(
    _semaphore: *mut sys::iree_hal_semaphore_t,
    _value: u64,
    _queue_affinity: sys::iree_hal_queue_affinity_t,
    _requested_type: sys::iree_hal_external_timepoint_type_t,
    _requested_flags: sys::iree_hal_external_timepoint_flags_t,
    _out_external_timepoint: *mut sys::iree_hal_external_timepoint_t,
) -> iree_status_t {
    ffi::status(code::UNIMPLEMENTED, "timeline-hal semaphores export no external timepoints")
}
