//! Timeline semaphores, semaphore lists and absolute nanosecond deadlines.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hal::{Device, Error, Result, Semaphore, SemaphoreValue, Timeout, WaitMode};
use smallvec::SmallVec;

use crate::handle::{self, check_out, get, store, thal_device_t, thal_semaphore_t, write_value};
use crate::status::{guard, take_status, thal_status_t};

/// A deadline in nanoseconds on `thal_now_ns`'s clock.
pub type thal_time_t = i64;
/// A deadline that never passes: wait until reached or failed.
pub const THAL_TIME_INFINITE_FUTURE: thal_time_t = i64::MAX;
/// A deadline already passed: poll without blocking.
pub const THAL_TIME_INFINITE_PAST: thal_time_t = i64::MIN;

/// Wait until every (semaphore, value) of the list is reached.
pub const THAL_WAIT_MODE_ALL: u32 = 0;
/// Wait until any one (semaphore, value) of the list is reached.
pub const THAL_WAIT_MODE_ANY: u32 = 1;

/// `count` pairs: `semaphores[i]` reaching `values[i]`. Both arrays may be NULL when `count` is 0,
/// and a NULL list pointer is an empty list.
#[repr(C)]
pub struct thal_semaphore_list_t {
    /// Number of pairs.
    pub count: usize,
    /// `count` semaphore handles.
    pub semaphores: *const *mut thal_semaphore_t,
    /// `count` values.
    pub values: *const u64,
}

/// The instant `thal_now_ns` counts from (the first use of the clock in this process).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// `at` on `thal_now_ns`'s clock (negative before its epoch).
pub(crate) fn time_of(at: Instant) -> thal_time_t {
    let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX - 1);
    match at.checked_duration_since(epoch()) {
        Some(after) => nanos(after),
        None => -nanos(epoch().duration_since(at)),
    }
}

/// The timeout an absolute deadline on `thal_now_ns`'s clock means.
pub(crate) fn timeout_of(deadline_ns: thal_time_t) -> Timeout {
    match deadline_ns {
        THAL_TIME_INFINITE_FUTURE => Timeout::Infinite,
        ns if ns <= 0 => Timeout::Immediate,
        ns => match epoch().checked_add(Duration::from_nanos(ns as u64)) {
            Some(at) => Timeout::At(at),
            None => Timeout::Infinite,
        },
    }
}

/// Now, in nanoseconds on the monotonic clock deadlines use (add a relative timeout to it).
#[unsafe(no_mangle)]
pub extern "C" fn thal_now_ns() -> thal_time_t {
    crate::status::guard_value(0, || i64::try_from(epoch().elapsed().as_nanos()).unwrap_or(i64::MAX - 1))
}

/// A converted semaphore list: short lists, the common case, stay off the heap.
pub(crate) type SemaphoreValues = SmallVec<[SemaphoreValue; 4]>;

/// The (semaphore, value) pairs of a C list, each semaphore cloned.
///
/// # Safety
/// `list` is NULL or a valid list whose arrays hold `count` entries.
pub(crate) unsafe fn semaphore_list(list: *const thal_semaphore_list_t, arg: &str) -> Result<SemaphoreValues> {
    // SAFETY: the caller's contract.
    let Some(list) = (unsafe { list.as_ref() }) else { return Ok(SemaphoreValues::new()) };
    if list.count == 0 {
        return Ok(SemaphoreValues::new());
    }
    if list.semaphores.is_null() || list.values.is_null() {
        return Err(Error::invalid_argument(format!("argument '{arg}': NULL arrays with count {}", list.count)));
    }
    (0..list.count)
        .map(|i| {
            // SAFETY: both arrays hold `count` entries by the caller's contract.
            unsafe {
                let semaphore = get::<Semaphore>(*list.semaphores.add(i), format_args!("{arg}.semaphores[{i}]"))?;
                Ok(SemaphoreValue::new(&semaphore, *list.values.add(i)))
            }
        })
        .collect()
}

/// A semaphore at `initial` that `device`'s queues wait on and signal on the device, into `*out`.
///
/// # Safety
/// `device` is a handle the caller holds; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_semaphore_create(
    device: *mut thal_device_t,
    initial: u64,
    out: *mut *mut thal_semaphore_t,
) -> thal_status_t {
    guard("thal_semaphore_create", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let semaphore = get::<Device>(device, "device")?.create_semaphore(initial)?;
            store(out, semaphore)?;
        }
        Ok(())
    })
}

/// A host semaphore at `initial` (of no device; queues wait on it from the host) into `*out`.
///
/// # Safety
/// `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_semaphore_create_host(initial: u64, out: *mut *mut thal_semaphore_t) -> thal_status_t {
    guard("thal_semaphore_create_host", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            store(out, Semaphore::new(initial))?;
        }
        Ok(())
    })
}

/// Advances `semaphore` to `value` from the host (values only grow; a failed semaphore returns its
/// failure).
///
/// # Safety
/// `semaphore` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_semaphore_signal(semaphore: *mut thal_semaphore_t, value: u64) -> thal_status_t {
    guard("thal_semaphore_signal", || get::<Semaphore>(semaphore, "semaphore")?.signal(value))
}

/// Writes the current value to `*value`, or returns the semaphore's failure (its status and message).
///
/// # Safety
/// `semaphore` is a handle the caller holds; `value` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_semaphore_query(semaphore: *mut thal_semaphore_t, value: *mut u64) -> thal_status_t {
    guard("thal_semaphore_query", || {
        // SAFETY: the caller's contract.
        unsafe { write_value(value, "value", get::<Semaphore>(semaphore, "semaphore")?.query()?) }
    })
}

/// Fails `semaphore` for good with `status`, which this call takes over (NULL is refused):
/// everything waiting on it, host or queued work, gets that status.
///
/// # Safety
/// `semaphore` is a handle the caller holds; `status` is a live status the caller gives up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_semaphore_fail(semaphore: *mut thal_semaphore_t, status: thal_status_t) -> thal_status_t {
    guard("thal_semaphore_fail", || {
        // SAFETY: the caller's contract; the status is consumed whatever happens next.
        let failure = unsafe { take_status(status) };
        let semaphore = get::<Semaphore>(semaphore, "semaphore")?;
        match failure {
            Ok(()) => Err(Error::invalid_argument(format!("{semaphore}: fail with an OK (NULL) status"))),
            Err(error) => {
                semaphore.fail(error);
                Ok(())
            }
        }
    })
}

/// Blocks until `semaphore` reaches `value` (NULL), fails (its status), or `deadline_ns` passes
/// (`DEADLINE_EXCEEDED`; `THAL_TIME_INFINITE_PAST` polls).
///
/// # Safety
/// `semaphore` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_semaphore_wait(
    semaphore: *mut thal_semaphore_t,
    value: u64,
    deadline_ns: thal_time_t,
) -> thal_status_t {
    guard("thal_semaphore_wait", || get::<Semaphore>(semaphore, "semaphore")?.wait(value, timeout_of(deadline_ns)))
}

/// Blocks until all (`THAL_WAIT_MODE_ALL`) or any (`THAL_WAIT_MODE_ANY`) pairs of `list` are
/// reached, a semaphore fails, or `deadline_ns` passes.
///
/// # Safety
/// `list` is NULL or a valid list.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_semaphore_wait_list(
    mode: u32,
    list: *const thal_semaphore_list_t,
    deadline_ns: thal_time_t,
) -> thal_status_t {
    guard("thal_semaphore_wait_list", || {
        let mode = match mode {
            THAL_WAIT_MODE_ALL => WaitMode::All,
            THAL_WAIT_MODE_ANY => WaitMode::Any,
            other => return Err(Error::invalid_argument(format!("wait mode {other}: not ALL (0) or ANY (1)"))),
        };
        // SAFETY: the caller's contract.
        let list = unsafe { semaphore_list(list, "list") }?;
        hal::wait_semaphores(mode, &list, timeout_of(deadline_ns))
    })
}

/// Adds a reference to `semaphore`.
///
/// # Safety
/// `semaphore` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_semaphore_retain(semaphore: *mut thal_semaphore_t) -> thal_status_t {
    guard("thal_semaphore_retain", || handle::retain::<Semaphore>(semaphore, "semaphore"))
}

/// Drops a reference to `semaphore`. NULL is allowed.
///
/// # Safety
/// `semaphore` is NULL or a handle the caller holds and gives up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_semaphore_release(semaphore: *mut thal_semaphore_t) -> thal_status_t {
    if semaphore.is_null() {
        return std::ptr::null_mut();
    }
    guard("thal_semaphore_release", || handle::release::<Semaphore>(semaphore, "semaphore"))
}
