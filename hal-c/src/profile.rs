//! Profiling: per-queue-operation and per-dispatch device timings, as records on `thal_now_ns`'s
//! clock.

use std::ffi::{CString, c_char};
use std::ops::Range;

use hal::{Device, Error, Profile, ProfileOptions, Result};

use crate::handle::{self, check_out, get, store, thal_device_t, thal_profile_t};
use crate::semaphore::{thal_time_t, time_of};
use crate::status::{c_string, guard, thal_status_t};

/// Record one entry per queue operation that runs on a device stream (execute, fill, copy, ...).
pub const THAL_PROFILE_QUEUE_OPERATIONS: u32 = 1 << 0;
/// Record one entry per dispatch of executed command buffers.
pub const THAL_PROFILE_DISPATCHES: u32 = 1 << 1;

/// What a profiling session records. Versioned: set `struct_size` to `sizeof(thal_profile_params_t)`.
#[repr(C)]
pub struct thal_profile_params_t {
    /// `sizeof(thal_profile_params_t)` as the caller was compiled.
    pub struct_size: usize,
    /// `THAL_PROFILE_*` bits (at least one).
    pub flags: u32,
    /// With `command_end > command_begin`: time only the dispatches at command indices
    /// `[command_begin, command_end)` of each command buffer; both 0: every dispatch.
    pub command_begin: usize,
    /// The end of that range (exclusive).
    pub command_end: usize,
}

/// What a profile holds. Versioned: set `struct_size` to `sizeof(thal_profile_summary_t)`.
#[repr(C)]
pub struct thal_profile_summary_t {
    /// `sizeof(thal_profile_summary_t)` as the caller was compiled.
    pub struct_size: usize,
    /// Records for `thal_profile_queue_operation`.
    pub queue_operation_count: usize,
    /// Records for `thal_profile_dispatch`.
    pub dispatch_count: usize,
    /// How far a record's time may be off from when the device reached it, at most (0 when the
    /// device's clock is the host's); differences within one device are more precise.
    pub clock_uncertainty_ns: u64,
    /// How device times were put on the host's clock, in words; valid until the profile is released.
    pub clock_method: *const c_char,
}

/// One queue operation's time on its device stream. Versioned: set `struct_size` to
/// `sizeof(thal_queue_operation_timing_t)`.
#[repr(C)]
pub struct thal_queue_operation_timing_t {
    /// `sizeof(thal_queue_operation_timing_t)` as the caller was compiled.
    pub struct_size: usize,
    /// The queue it ran on.
    pub queue: usize,
    /// The device's submission number (as in `thal_device_report`).
    pub submission: u64,
    /// Its kind ("execute", "fill", "copy", ...); valid until the profile is released.
    pub operation: *const c_char,
    /// When the stream started it, on `thal_now_ns`'s clock.
    pub start_ns: thal_time_t,
    /// When it finished.
    pub end_ns: thal_time_t,
}

/// One dispatch of an executed command buffer. Versioned: set `struct_size` to
/// `sizeof(thal_dispatch_timing_t)`.
#[repr(C)]
pub struct thal_dispatch_timing_t {
    /// `sizeof(thal_dispatch_timing_t)` as the caller was compiled.
    pub struct_size: usize,
    /// The queue it ran on.
    pub queue: usize,
    /// The submission (the execute) it belongs to.
    pub submission: u64,
    /// Its position in the command buffer's recording.
    pub command_index: usize,
    /// The entry point's name; valid until the profile is released.
    pub entry_point: *const c_char,
    /// Its workgroup count; all 0 for an indirect dispatch whose count the driver did not report.
    pub workgroups: [u32; 3],
    /// When the device started it, on `thal_now_ns`'s clock.
    pub start_ns: thal_time_t,
    /// When it finished.
    pub end_ns: thal_time_t,
}

/// A collected profile, with its text as C strings that live as long as it.
pub(crate) struct ProfileSnapshot {
    profile: Profile,
    clock_method: CString,
    operations: Vec<CString>,
    entry_points: Vec<CString>,
}

impl ProfileSnapshot {
    fn new(profile: Profile) -> ProfileSnapshot {
        ProfileSnapshot {
            clock_method: c_string(&profile.clock.method),
            operations: profile.queue_operations.iter().map(|r| c_string(r.operation)).collect(),
            entry_points: profile.dispatches.iter().map(|r| c_string(&r.entry_point)).collect(),
            profile,
        }
    }
}

/// The HAL options for the caller's params.
///
/// # Safety
/// `params` is NULL or a valid versioned struct.
unsafe fn profile_options(params: *const thal_profile_params_t) -> Result<ProfileOptions> {
    // SAFETY: the caller's contract.
    let params = unsafe { crate::params::versioned(params, "params", "thal_profile_params_t") }?;
    let known = THAL_PROFILE_QUEUE_OPERATIONS | THAL_PROFILE_DISPATCHES;
    if params.flags & !known != 0 {
        return Err(Error::invalid_argument(format!("params.flags {:#x}: unknown bits", params.flags)));
    }
    let options = match (params.flags & THAL_PROFILE_QUEUE_OPERATIONS != 0, params.flags & THAL_PROFILE_DISPATCHES != 0)
    {
        (true, true) => ProfileOptions::everything(),
        (true, false) => ProfileOptions::queue_operations(),
        (false, true) => ProfileOptions::dispatches(),
        (false, false) => {
            return Err(Error::invalid_argument(format!(
                "params.flags {:#x}: records nothing (set THAL_PROFILE_QUEUE_OPERATIONS or THAL_PROFILE_DISPATCHES)",
                params.flags
            )));
        }
    };
    let commands: Range<usize> = params.command_begin..params.command_end;
    Ok(match (commands.start, commands.end) {
        (0, 0) => options,
        (begin, end) if begin < end => options.only_commands(commands),
        (begin, end) => {
            return Err(Error::invalid_argument(format!(
                "params.command_begin {begin}, command_end {end}: an empty range of commands"
            )));
        }
    })
}

/// Starts profiling `device`: every submission issued from now on records timings as `params` ask,
/// until `thal_device_end_profiling`. `FAILED_PRECONDITION` while a session is in progress,
/// `UNIMPLEMENTED` for a driver that cannot time work.
///
/// # Safety
/// `device` is a handle the caller holds; `params` is a valid versioned struct.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_begin_profiling(
    device: *mut thal_device_t,
    params: *const thal_profile_params_t,
) -> thal_status_t {
    guard("thal_device_begin_profiling", || {
        // SAFETY: the caller's contract.
        unsafe { get::<Device>(device, "device")?.begin_profiling(profile_options(params)?) }
    })
}

/// Takes the records of profiled submissions that completed since the last collect into `*out` (a
/// submission's records are there once its signals are reached). Never blocks.
/// `FAILED_PRECONDITION` when not profiling.
///
/// # Safety
/// `device` is a handle the caller holds; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_collect_profile(
    device: *mut thal_device_t,
    out: *mut *mut thal_profile_t,
) -> thal_status_t {
    guard("thal_device_collect_profile", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let profile = get::<Device>(device, "device")?.collect_profile()?;
            store(out, ProfileSnapshot::new(profile))?;
        }
        Ok(())
    })
}

/// Stops profiling and stores the records not collected yet in `*out`; submissions still in flight
/// add nothing more (wait for them first). `FAILED_PRECONDITION` when not profiling.
///
/// # Safety
/// `device` is a handle the caller holds; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_end_profiling(
    device: *mut thal_device_t,
    out: *mut *mut thal_profile_t,
) -> thal_status_t {
    guard("thal_device_end_profiling", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let profile = get::<Device>(device, "device")?.end_profiling()?;
            store(out, ProfileSnapshot::new(profile))?;
        }
        Ok(())
    })
}

/// Fills `*summary` with the profile's record counts and clock correlation.
///
/// # Safety
/// `profile` is a handle the caller holds; `summary` is a versioned struct with `struct_size`
/// writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_profile_summary(
    profile: *mut thal_profile_t,
    summary: *mut thal_profile_summary_t,
) -> thal_status_t {
    guard("thal_profile_summary", || {
        // SAFETY: the caller's contract.
        let (snapshot, summary) = unsafe {
            (
                get::<ProfileSnapshot>(profile, "profile")?,
                crate::params::versioned_out(summary, "summary", "thal_profile_summary_t")?,
            )
        };
        *summary = thal_profile_summary_t {
            struct_size: summary.struct_size,
            queue_operation_count: snapshot.profile.queue_operations.len(),
            dispatch_count: snapshot.profile.dispatches.len(),
            clock_uncertainty_ns: u64::try_from(snapshot.profile.clock.uncertainty.as_nanos()).unwrap_or(u64::MAX),
            clock_method: snapshot.clock_method.as_ptr(),
        };
        Ok(())
    })
}

/// Record `index` of `list`, `OUT_OF_RANGE` naming the list past its end.
fn record<'a, T>(list: &'a [T], index: usize, what: &str) -> Result<&'a T> {
    list.get(index).ok_or_else(|| Error::out_of_range(format!("{what} record {index}: the profile has {}", list.len())))
}

/// Fills `*timing` with queue-operation record `index` (completion order, queue by queue).
///
/// # Safety
/// `profile` is a handle the caller holds; `timing` is a versioned struct with `struct_size`
/// writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_profile_queue_operation(
    profile: *mut thal_profile_t,
    index: usize,
    timing: *mut thal_queue_operation_timing_t,
) -> thal_status_t {
    guard("thal_profile_queue_operation", || {
        // SAFETY: the caller's contract.
        let (snapshot, timing) = unsafe {
            (
                get::<ProfileSnapshot>(profile, "profile")?,
                crate::params::versioned_out(timing, "timing", "thal_queue_operation_timing_t")?,
            )
        };
        let found = record(&snapshot.profile.queue_operations, index, "queue operation")?;
        *timing = thal_queue_operation_timing_t {
            struct_size: timing.struct_size,
            queue: found.queue,
            submission: found.submission,
            operation: snapshot.operations[index].as_ptr(),
            start_ns: time_of(found.start),
            end_ns: time_of(found.end),
        };
        Ok(())
    })
}

/// Fills `*timing` with dispatch record `index` (dispatches of one execute in command order).
///
/// # Safety
/// `profile` is a handle the caller holds; `timing` is a versioned struct with `struct_size`
/// writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_profile_dispatch(
    profile: *mut thal_profile_t,
    index: usize,
    timing: *mut thal_dispatch_timing_t,
) -> thal_status_t {
    guard("thal_profile_dispatch", || {
        // SAFETY: the caller's contract.
        let (snapshot, timing) = unsafe {
            (
                get::<ProfileSnapshot>(profile, "profile")?,
                crate::params::versioned_out(timing, "timing", "thal_dispatch_timing_t")?,
            )
        };
        let found = record(&snapshot.profile.dispatches, index, "dispatch")?;
        *timing = thal_dispatch_timing_t {
            struct_size: timing.struct_size,
            queue: found.queue,
            submission: found.submission,
            command_index: found.command_index,
            entry_point: snapshot.entry_points[index].as_ptr(),
            workgroups: found.workgroups.unwrap_or([0; 3]),
            start_ns: time_of(found.start),
            end_ns: time_of(found.end),
        };
        Ok(())
    })
}

/// Adds a reference to `profile`.
///
/// # Safety
/// `profile` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_profile_retain(profile: *mut thal_profile_t) -> thal_status_t {
    guard("thal_profile_retain", || handle::retain::<ProfileSnapshot>(profile, "profile"))
}

/// Drops a reference to `profile`; the last one frees its records and strings. NULL is allowed.
///
/// # Safety
/// `profile` is NULL or a handle the caller holds and gives up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_profile_release(profile: *mut thal_profile_t) -> thal_status_t {
    if profile.is_null() {
        return std::ptr::null_mut();
    }
    guard("thal_profile_release", || handle::release::<ProfileSnapshot>(profile, "profile"))
}
