//! IREE events: split barriers within a queue. A HAL queue runs its work in order and a command
//! buffer's barrier orders everything recorded before it, so an event needs no state here: a
//! `wait_events` becomes a full barrier (at least as strong as waiting for the events it names,
//! which IREE requires to be signalled earlier on the same queue), and `signal_event` /
//! `reset_event` record nothing.

use crate::ffi::{self, sys};

/// An IREE event of this driver.
#[repr(C)]
struct Event {
    resource: sys::iree_hal_resource_t,
}

static VTABLE: sys::iree_hal_event_vtable_t = sys::iree_hal_event_vtable_t { destroy: Some(destroy) };

/// A new event.
pub(crate) fn create() -> *mut sys::iree_hal_event_t {
    let event = Box::into_raw(Box::new(Event { resource: sys::iree_hal_resource_t::default() }));
    // SAFETY: a fresh allocation; this sets its reference count and vtable.
    unsafe { ffi::thal_iree_resource_initialize((&raw const VTABLE).cast(), &raw mut (*event).resource) };
    event.cast()
}

unsafe extern "C" fn destroy(event: *mut sys::iree_hal_event_t) {
    // SAFETY: IREE calls this once, with the last reference to an event `create` boxed.
    drop(unsafe { Box::from_raw(event.cast::<Event>()) });
}
