//! An IREE device of a registered driver opened through IREE's own API, and small helpers for
//! its semaphores, for the tests that drive the bridge as IREE's runtime does.
#![allow(dead_code)]

use std::ptr::null_mut;

use hal_iree::eerie_sys::runtime as sys;

/// An IREE device of `driver` (from the default registry) and what keeps it alive.
pub struct Opened {
    pub device: *mut sys::iree_hal_device_t,
    pub pool: *mut sys::iree_async_proactor_pool_t,
}

impl Drop for Opened {
    fn drop(&mut self) {
        // SAFETY: the test's own references.
        unsafe {
            sys::iree_hal_device_release(self.device);
            sys::iree_async_proactor_pool_release(self.pool);
        }
    }
}

pub fn open(driver: &str) -> Opened {
    hal_iree::runner::register_default().expect("the thal drivers register");
    static IREE_DRIVERS: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers IREE's own drivers into the default registry, once.
    IREE_DRIVERS.call_once(|| unsafe {
        hal_iree::check(sys::iree_hal_register_all_available_drivers(sys::iree_hal_driver_registry_default()))
            .expect("IREE's drivers register")
    });
    let allocator = hal_iree::system_allocator();
    let (mut pool, mut device) = (null_mut(), null_mut());
    // SAFETY: IREE's creation functions with writable outputs; `registry` is the process's default.
    unsafe {
        let options = sys::iree_async_proactor_pool_options_default();
        hal_iree::check(sys::iree_async_proactor_pool_create(1, std::ptr::null(), options, allocator, &mut pool))
            .expect("a proactor pool");
        let params = sys::iree_hal_device_create_params_t { next: std::ptr::null(), proactor_pool: pool };
        let uri = sys::iree_string_view_t { data: driver.as_ptr().cast(), size: driver.len() };
        hal_iree::check(sys::iree_hal_create_device(
            sys::iree_hal_driver_registry_default(),
            uri,
            &params,
            allocator,
            &mut device,
        ))
        .unwrap_or_else(|e| panic!("device {driver}: {e}"));
    }
    Opened { device, pool }
}

pub fn semaphore(device: &Opened, initial: u64) -> *mut sys::iree_hal_semaphore_t {
    let mut semaphore = null_mut();
    // SAFETY: a live device and a writable output.
    unsafe { hal_iree::check(sys::iree_hal_semaphore_create(device.device, 0, initial, 0, &mut semaphore)) }
        .expect("a semaphore");
    semaphore
}

pub fn list(semaphores: &mut [*mut sys::iree_hal_semaphore_t], values: &mut [u64]) -> sys::iree_hal_semaphore_list_t {
    sys::iree_hal_semaphore_list_t {
        count: semaphores.len(),
        semaphores: semaphores.as_mut_ptr(),
        payload_values: values.as_mut_ptr(),
    }
}

pub fn timeout(ms: i64) -> sys::iree_timeout_t {
    sys::iree_timeout_t { type_: sys::iree_timeout_type_e_IREE_TIMEOUT_RELATIVE, nanos: ms * 1_000_000 }
}

pub fn query(semaphore: *mut sys::iree_hal_semaphore_t) -> Result<u64, hal::Error> {
    let mut value = 0;
    // SAFETY: a live semaphore and a writable output.
    unsafe { hal_iree::check(sys::iree_hal_semaphore_query(semaphore, &mut value)) }.map(|()| value)
}

pub fn release(semaphores: &[*mut sys::iree_hal_semaphore_t]) {
    for &s in semaphores {
        // SAFETY: the test's own references.
        unsafe { sys::iree_hal_semaphore_release(s) };
    }
}

/// Runs a queue call `submit` with a wait list of `wait` alone and a signal list of `signal` alone.
pub fn with_lists(
    wait: (*mut sys::iree_hal_semaphore_t, u64),
    signal: (*mut sys::iree_hal_semaphore_t, u64),
    submit: impl FnOnce(sys::iree_hal_semaphore_list_t, sys::iree_hal_semaphore_list_t) -> sys::iree_status_t,
) -> Result<(), hal::Error> {
    let (mut ws, mut wv, mut ss, mut sv) = ([wait.0], [wait.1], [signal.0], [signal.1]);
    // The lists point into the arrays above, which live across the call.
    let status = submit(list(&mut ws, &mut wv), list(&mut ss, &mut sv));
    // SAFETY: the status the call returned, ours to give up.
    unsafe { hal_iree::check(status) }
}

/// A buffer of `size` bytes from `device`'s allocator, with `params`.
pub fn allocate(device: &Opened, params: sys::iree_hal_buffer_params_t, size: usize) -> *mut sys::iree_hal_buffer_t {
    let mut buffer = null_mut();
    // SAFETY: a live device and a writable output.
    unsafe {
        let allocator = sys::iree_hal_device_allocator(device.device);
        hal_iree::check(sys::iree_hal_allocator_allocate_buffer(allocator, params, size as _, &mut buffer))
            .expect("a buffer");
    }
    buffer
}
