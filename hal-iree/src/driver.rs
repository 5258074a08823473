//! The driver factory IREE's registry lists, and the drivers it makes: one per HAL driver offered
//! (`thal-cpu-sim`, `thal-cuda`, `thal-vulkan`).

use std::sync::OnceLock;

use crate::device;
use crate::ffi::{self, code, iree_status_t, sys};

/// A HAL driver offered to IREE: its IREE name and how to open its devices.
struct Offered {
    iree_name: &'static str,
    full_name: &'static str,
    hal_name: &'static str,
    /// The device kind of IREE's compiler targets its devices run.
    iree_kind: &'static str,
}

const OFFERED: &[Offered] = &[
    Offered {
        iree_name: crate::CPU_SIM_DRIVER,
        full_name: "timeline-hal cpu-sim (host threads)",
        hal_name: "cpu-sim",
        iree_kind: "local",
    },
    Offered {
        iree_name: crate::VULKAN_DRIVER,
        full_name: "timeline-hal Vulkan (any Vulkan 1.3 device)",
        hal_name: "vulkan",
        iree_kind: device::VULKAN_KIND,
    },
    Offered {
        iree_name: crate::CUDA_DRIVER,
        full_name: "timeline-hal CUDA (NVIDIA GPUs)",
        hal_name: "cuda",
        iree_kind: device::CUDA_KIND,
    },
];

/// The HAL registry the drivers open devices from.
fn registry() -> &'static hal::Registry {
    static REGISTRY: OnceLock<hal::Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut registry = hal::Registry::new();
        registry.register(std::sync::Arc::new(cpu_sim_driver()));
        registry.register(std::sync::Arc::new(cuda_driver()));
        driver_vulkan::register(&mut registry);
        registry
    })
}

/// The cpu-sim driver with light work run on the submitting thread
/// (`CpuSimOptions::with_light_work_at_issue`): IREE calls a function, then waits for it, so a small
/// dispatch handed to a stream thread and retired by a completion thread costs two thread wake-ups
/// more than it takes; IREE's dispatches never wait on what the caller does after submitting them,
/// which that option needs.
fn cpu_sim_driver() -> driver_cpu_sim::CpuSimDriver {
    driver_cpu_sim::CpuSimDriver::with_options(driver_cpu_sim::CpuSimOptions::default().with_light_work_at_issue(true))
}

/// How long a completion thread of `thal-cuda` queries a submission's event before it sleeps
/// between queries: IREE's programs run a call's kernels in well under this, so IREE's waits are
/// answered within a poll interval. (IREE's own CUDA driver spins for the whole wait.)
const CUDA_POLL_BUDGET: std::time::Duration = std::time::Duration::from_millis(10);

/// Time between two queries of a polling `thal-cuda` completion thread.
const CUDA_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_micros(2);

/// The CUDA driver with options for how IREE drives it, where the environment leaves them open:
/// - IREE's synchronous calls block on the semaphore a call's last submission signals, which the
///   HAL's completion thread advances when it sees that submission's event. The driver's default
///   completion sleeps 10-100 us between queries, and blocking on an interrupt-armed event wakes
///   tens of microseconds late on an H200; either adds that to every IREE call. So completion
///   threads query every [`CUDA_POLL_INTERVAL`] for up to [`CUDA_POLL_BUDGET`] of in-flight work,
///   then sleep between queries (`HAL_CUDA_COMPLETION`, `HAL_CUDA_POLL_BUDGET_US` and
///   `HAL_CUDA_POLL_US` still pick any of this).
/// - Every IREE execute replays into a fresh one-shot command buffer, so a CUDA graph would be
///   instantiated for one launch: one-shot buffers launch directly.
fn cuda_driver() -> driver_cuda::CudaDriver {
    let Ok(mut options) = driver_cuda::CudaOptions::from_env() else {
        // Carries the environment's error to every device request.
        return driver_cuda::CudaDriver::from_env();
    };
    let unset = |name: &str| std::env::var_os(name).is_none();
    if unset(driver_cuda::ENV_COMPLETION) && unset(driver_cuda::ENV_POLL_BUDGET_US) {
        options.completion_wait = driver_cuda::CompletionWait::PollThenSleep(CUDA_POLL_BUDGET);
    }
    if unset(driver_cuda::ENV_POLL_US) {
        options.poll_interval = CUDA_POLL_INTERVAL;
    }
    options.graph_min_commands = usize::MAX;
    driver_cuda::CudaDriver::with_options(options)
}

/// The factory record IREE's registry keeps a pointer to.
#[repr(transparent)]
pub(crate) struct Factory(pub(crate) sys::iree_hal_driver_factory_t);
// SAFETY: the record is immutable and its `self` pointer is NULL.
unsafe impl Sync for Factory {}

pub(crate) static FACTORY: Factory = Factory(sys::iree_hal_driver_factory_t {
    self_: std::ptr::null_mut(),
    enumerate: Some(enumerate),
    try_create: Some(try_create),
});

/// The driver infos `enumerate` hands out (IREE keeps the pointer).
struct Infos(Vec<sys::iree_hal_driver_info_t>);
// SAFETY: the infos point at `'static` strings and are never written after they are built.
unsafe impl Send for Infos {}
// SAFETY: see `Send`.
unsafe impl Sync for Infos {}

unsafe extern "C" fn enumerate(
    _self: *mut std::ffi::c_void,
    out_count: *mut usize,
    out_infos: *mut *const sys::iree_hal_driver_info_t,
) -> iree_status_t {
    static INFOS: OnceLock<Infos> = OnceLock::new();
    let infos = INFOS.get_or_init(|| {
        Infos(
            OFFERED
                .iter()
                .map(|o| sys::iree_hal_driver_info_t {
                    driver_name: ffi::view(o.iree_name),
                    full_name: ffi::view(o.full_name),
                })
                .collect(),
        )
    });
    // SAFETY: writable, per IREE's contract; the infos are static.
    unsafe {
        *out_count = infos.0.len();
        *out_infos = infos.0.as_ptr();
    }
    ffi::ok()
}

/// An IREE driver: one of the offered HAL drivers.
#[repr(C)]
struct Driver {
    resource: sys::iree_hal_resource_t,
    offered: &'static Offered,
}

unsafe extern "C" fn try_create(
    _self: *mut std::ffi::c_void,
    name: sys::iree_string_view_t,
    _host_allocator: sys::iree_allocator_t,
    out: *mut *mut sys::iree_hal_driver_t,
) -> iree_status_t {
    // SAFETY: IREE passes a valid view.
    let name = unsafe { ffi::text(name) };
    let Some(offered) = OFFERED.iter().find(|o| o.iree_name == name) else {
        return ffi::status(code::UNAVAILABLE, &format!("no driver '{name}' in this factory"));
    };
    let driver = Box::into_raw(Box::new(Driver { resource: sys::iree_hal_resource_t::default(), offered }));
    // SAFETY: fresh allocation; `out` is writable per IREE's contract.
    unsafe {
        ffi::thal_iree_resource_initialize((&raw const VTABLE).cast(), &raw mut (*driver).resource);
        *out = driver.cast();
    }
    ffi::ok()
}

/// The driver behind `driver`.
///
/// # Safety
/// `driver` is a live driver `try_create` made.
unsafe fn cast<'a>(driver: *mut sys::iree_hal_driver_t) -> &'a Driver {
    // SAFETY: the caller's contract.
    unsafe { &*driver.cast::<Driver>() }
}

unsafe extern "C" fn destroy(driver: *mut sys::iree_hal_driver_t) {
    // SAFETY: IREE calls this once, with the last reference.
    drop(unsafe { Box::from_raw(driver.cast::<Driver>()) });
}

unsafe extern "C" fn query_available_devices(
    driver: *mut sys::iree_hal_driver_t,
    host_allocator: sys::iree_allocator_t,
    out_count: *mut usize,
    out_infos: *mut *mut sys::iree_hal_device_info_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live driver of ours.
    let offered = unsafe { cast(driver) }.offered;
    ffi::guarded("query_available_devices", || {
        let count = registry().driver(offered.hal_name).and_then(|d| d.enumerate()).map_or(0, |devices| devices.len());
        // One allocation holds the infos and then their names ("<hal name> <ordinal>"), as IREE
        // frees the whole with one call.
        let names: Vec<String> = (0..count).map(|i| format!("{} {i}", offered.hal_name)).collect();
        let head = count * size_of::<sys::iree_hal_device_info_t>();
        let total = head + names.iter().map(String::len).sum::<usize>();
        let mut memory: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: `memory` is writable.
        let status = unsafe { sys::iree_allocator_malloc(host_allocator, total.max(1), &mut memory) };
        if !status.is_null() {
            return status;
        }
        let infos = memory.cast::<sys::iree_hal_device_info_t>();
        let mut text = memory.cast::<u8>().wrapping_add(head);
        for (i, name) in names.iter().enumerate() {
            // SAFETY: `memory` holds `count` infos and then every name's bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(name.as_ptr(), text, name.len());
                infos.add(i).write(sys::iree_hal_device_info_t {
                    device_id: i as sys::iree_hal_device_id_t,
                    path: sys::iree_string_view_t { data: text.cast(), size: 0 },
                    name: sys::iree_string_view_t { data: text.cast(), size: name.len() },
                });
                text = text.add(name.len());
            }
        }
        // SAFETY: writable, per IREE's contract; IREE frees `memory` with `host_allocator`.
        unsafe {
            *out_count = count;
            *out_infos = infos;
        }
        ffi::ok()
    })
}

unsafe extern "C" fn dump_device_info(
    driver: *mut sys::iree_hal_driver_t,
    device_id: sys::iree_hal_device_id_t,
    builder: *mut sys::iree_string_builder_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live driver of ours.
    let offered = unsafe { cast(driver) }.offered;
    let text = match registry().create_device(offered.hal_name, device_id) {
        Ok(device) => format!("\n- {}: {:?}", offered.iree_name, device.info()),
        Err(error) => format!("\n- {}: {error}", offered.iree_name),
    };
    // SAFETY: a live builder; the view is valid for the call.
    unsafe { sys::iree_string_builder_append_string(builder, ffi::view(&text)) }
}

/// Opens device `ordinal` of `offered` as an IREE device.
///
/// # Safety
/// IREE's creation parameters and output.
unsafe fn open(
    offered: &Offered,
    ordinal: usize,
    create_params: *const sys::iree_hal_device_create_params_t,
    host_allocator: sys::iree_allocator_t,
    out: *mut *mut sys::iree_hal_device_t,
) -> iree_status_t {
    ffi::guarded("create_device", || {
        let opened = registry().create_device(offered.hal_name, ordinal).and_then(|hal| {
            let identifier = format!("{}:{ordinal}", offered.iree_name);
            // SAFETY: the caller's contract.
            unsafe { device::create(&identifier, offered.iree_kind, hal, create_params, host_allocator) }
        });
        // SAFETY: the caller's contract.
        unsafe { ffi::write_out(out, opened) }
    })
}

unsafe extern "C" fn create_device_by_id(
    driver: *mut sys::iree_hal_driver_t,
    device_id: sys::iree_hal_device_id_t,
    _param_count: usize,
    _params: *const sys::iree_string_pair_t,
    create_params: *const sys::iree_hal_device_create_params_t,
    host_allocator: sys::iree_allocator_t,
    out: *mut *mut sys::iree_hal_device_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live driver of ours, its parameters and a writable output. Device id 0
    // is IREE's "default": the first device.
    unsafe { open(cast(driver).offered, device_id, create_params, host_allocator, out) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn create_device_by_path(
    driver: *mut sys::iree_hal_driver_t,
    _driver_name: sys::iree_string_view_t,
    path: sys::iree_string_view_t,
    _param_count: usize,
    _params: *const sys::iree_string_pair_t,
    create_params: *const sys::iree_hal_device_create_params_t,
    host_allocator: sys::iree_allocator_t,
    out: *mut *mut sys::iree_hal_device_t,
) -> iree_status_t {
    // SAFETY: a valid view.
    let path = unsafe { ffi::text(path) };
    let ordinal = if path.is_empty() {
        0
    } else {
        match path.parse::<usize>() {
            Ok(ordinal) => ordinal,
            Err(_) => {
                return ffi::status(code::INVALID_ARGUMENT, &format!("device path '{path}': expected an ordinal"));
            }
        }
    };
    // SAFETY: IREE passes a live driver of ours, its parameters and a writable output.
    unsafe { open(cast(driver).offered, ordinal, create_params, host_allocator, out) }
}

static VTABLE: sys::iree_hal_driver_vtable_t = sys::iree_hal_driver_vtable_t {
    destroy: Some(destroy),
    query_available_devices: Some(query_available_devices),
    dump_device_info: Some(dump_device_info),
    create_device_by_id: Some(create_device_by_id),
    create_device_by_path: Some(create_device_by_path),
};
