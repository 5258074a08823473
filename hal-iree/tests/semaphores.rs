//! IREE's semaphores on a thal device stay in step with the HAL's both ways, through IREE's own API:
//! host signals release queued work, device signals reach IREE's waits (both the vtable wait and
//! IREE's timepoint-based multi-wait), failures travel both ways, and a semaphore of another IREE
//! driver is refused by name.

mod common;

use common::iree_device::{Opened, list, open, query, release, semaphore, timeout, with_lists};
use hal::StatusCode;
use hal_iree::eerie_sys::runtime as sys;

fn barrier(
    device: &Opened,
    wait: (*mut sys::iree_hal_semaphore_t, u64),
    signal: (*mut sys::iree_hal_semaphore_t, u64),
) -> Result<(), hal::Error> {
    // SAFETY: live objects; the lists live across the call.
    with_lists(wait, signal, |w, s| unsafe { sys::iree_hal_device_queue_barrier(device.device, u64::MAX, w, s, 0) })
}

#[test]
fn a_host_signal_releases_queued_work_and_iree_waits_see_the_device_signal() {
    let device = open(hal_iree::CPU_SIM_DRIVER);
    let (input, vtable_waited, timepoint_waited) =
        (semaphore(&device, 0), semaphore(&device, 0), semaphore(&device, 0));
    barrier(&device, (input, 1), (vtable_waited, 1)).unwrap();
    barrier(&device, (vtable_waited, 1), (timepoint_waited, 7)).unwrap();
    assert_eq!(query(timepoint_waited).unwrap(), 0, "held behind the host signal");
    // SAFETY: live semaphores.
    unsafe {
        let still = hal_iree::check(sys::iree_hal_semaphore_wait(vtable_waited, 1, timeout(20), 0)).unwrap_err();
        assert_eq!(still.code(), StatusCode::DeadlineExceeded, "{still}");
        hal_iree::check(sys::iree_hal_semaphore_signal(input, 1, std::ptr::null())).unwrap();
        hal_iree::check(sys::iree_hal_semaphore_wait(vtable_waited, 1, timeout(5000), 0)).unwrap();
        // IREE's multi-wait registers timepoints on IREE's side: only a watched device signal
        // reaches it.
        let (mut s, mut v) = ([timepoint_waited], [7u64]);
        hal_iree::check(sys::iree_hal_semaphore_list_wait(list(&mut s, &mut v), timeout(5000), 0)).unwrap();
    }
    assert_eq!(query(timepoint_waited).unwrap(), 7);
    release(&[input, vtable_waited, timepoint_waited]);
}

#[test]
fn a_failure_through_iree_fails_the_device_work_behind_it() {
    let device = open(hal_iree::CPU_SIM_DRIVER);
    let (input, output) = (semaphore(&device, 0), semaphore(&device, 0));
    barrier(&device, (input, 1), (output, 1)).unwrap();
    // SAFETY: live semaphores; IREE takes the status.
    unsafe {
        let status = sys::iree_status_allocate_f(
            10,
            c"test".as_ptr(),
            0,
            c"%s".as_ptr(),
            c"the upstream producer broke".as_ptr(),
        );
        sys::iree_hal_semaphore_fail(input, status);
        let waited = hal_iree::check(sys::iree_hal_semaphore_wait(output, 1, timeout(5000), 0)).unwrap_err();
        assert_eq!(waited.code(), StatusCode::Aborted, "a failed wait is ABORTED: {waited}");
        let (mut s, mut v) = ([output], [1u64]);
        let listed =
            hal_iree::check(sys::iree_hal_semaphore_list_wait(list(&mut s, &mut v), timeout(5000), 0)).unwrap_err();
        assert_ne!(listed.code(), StatusCode::DeadlineExceeded, "IREE's own wait sees the failure: {listed}");
    }
    let queried = query(input).unwrap_err();
    assert_eq!(queried.code(), StatusCode::Aborted, "{queried}");
    assert!(query(output).is_err(), "the failure reached the work's signal");
    release(&[input, output]);
}

#[test]
fn a_host_signal_that_goes_back_is_refused_naming_the_value() {
    let device = open(hal_iree::CPU_SIM_DRIVER);
    let (input, output) = (semaphore(&device, 0), semaphore(&device, 0));
    barrier(&device, (input, 1), (output, 1)).unwrap();
    // Values must increase: a second signal to 1 is refused with the value it found.
    // SAFETY: live semaphores.
    unsafe {
        hal_iree::check(sys::iree_hal_semaphore_signal(input, 1, std::ptr::null())).unwrap();
        let back = hal_iree::check(sys::iree_hal_semaphore_signal(input, 1, std::ptr::null())).unwrap_err();
        assert_eq!(back.code(), StatusCode::FailedPrecondition, "{back}");
        assert!(back.message().contains("value is already 1"), "names the value: {back}");
    }
    release(&[input, output]);
}

#[test]
fn a_semaphore_of_another_iree_driver_is_refused_by_name() {
    let ours = open(hal_iree::CPU_SIM_DRIVER);
    let theirs = open("local-sync");
    let (foreign, mine) = (semaphore(&theirs, 0), semaphore(&ours, 0));
    let error = barrier(&ours, (foreign, 1), (mine, 1)).unwrap_err();
    assert_eq!(error.code(), StatusCode::Unimplemented, "{error}");
    assert!(error.message().contains("another IREE driver"), "{error}");
    assert_eq!(query(mine).unwrap(), 0, "nothing was submitted");
    release(&[foreign, mine]);
}
