//! An IREE device over a HAL device: every queue operation becomes a HAL queue operation with the
//! same waits and signals.

use std::ffi::c_void;
use std::sync::Arc;

use hal::SemaphoreValue;

use crate::allocator::DeviceMemory;
use crate::executable::{self, Loaded};
use crate::ffi::{self, code, iree_status_t, sys};
use crate::file_io::{Direction, FileTransfer};
use crate::pinned_pool::PinnedPool;
use crate::profiling::{Origin, Profiling, Recording};
use crate::queue_pool::QueuePools;
use crate::table_recording::TableRecordings;
use crate::{allocator, buffer, buffer_import, recorder, semaphore};

/// The device kind of IREE's CUDA targets (`--iree-hal-target-device=cuda`).
pub(crate) const CUDA_KIND: &str = "cuda";
/// The device kind of IREE's Vulkan targets (`--iree-hal-target-device=vulkan`).
pub(crate) const VULKAN_KIND: &str = "vulkan";

/// The GPU executable format a device of IREE kind `iree_kind` loads (`None`: IREE's CPU ones).
fn gpu_format(iree_kind: &str) -> Option<executable::GpuFormat> {
    match iree_kind {
        CUDA_KIND => Some(executable::GpuFormat::Cuda),
        VULKAN_KIND => Some(executable::GpuFormat::Vulkan),
        _ => None,
    }
}

/// An IREE device of this driver.
#[repr(C)]
pub(crate) struct Device {
    resource: sys::iree_hal_resource_t,
    identifier: String,
    /// The device kind IREE's compiler targets that this device runs ("local": IREE's CPU executables).
    iree_kind: &'static str,
    host_allocator: sys::iree_allocator_t,
    device_allocator: *mut sys::iree_hal_allocator_t,
    proactor_pool: *mut sys::iree_async_proactor_pool_t,
    proactor: *mut sys::iree_async_proactor_t,
    block_pool: *mut c_void,
    topology: sys::iree_hal_device_topology_info_t,
    loaded: Loaded,
    /// Where its IREE buffers' memory comes from (shared with its allocator).
    memory: Arc<DeviceMemory>,
    /// IREE's profiling sessions, over the HAL's.
    profiling: Profiling,
    /// The queue-pool backend, made on the first query.
    queue_pools: std::sync::Mutex<Option<Arc<QueuePools>>>,
    /// Its reusable command buffers, recorded once for binding tables.
    table_recordings: TableRecordings,
    hal: hal::Device,
}

impl Device {
    pub(crate) fn hal(&self) -> &hal::Device {
        &self.hal
    }

    /// Where its IREE buffers' memory comes from.
    pub(crate) fn memory(&self) -> &DeviceMemory {
        &self.memory
    }

    pub(crate) fn loaded(&self) -> &Loaded {
        &self.loaded
    }

    pub(crate) fn profiling(&self) -> &Profiling {
        &self.profiling
    }

    /// Executes `hal_cb`, recorded from IREE commands; while profiling, after noting what it
    /// stands for (`recording`).
    fn execute_recorded(
        &self,
        queue: &hal::Queue,
        waits: &[SemaphoreValue],
        hal_cb: &hal::CommandBuffer,
        recording: Option<Recording>,
        signals: &[SemaphoreValue],
    ) -> Result<(), hal::Error> {
        if let Some(recording) = recording {
            self.profiling.submitted(hal_cb.id(), recording)?;
        }
        queue.execute(waits, hal_cb, signals)
    }

    pub(crate) fn device_allocator(&self) -> *mut sys::iree_hal_allocator_t {
        self.device_allocator
    }

    /// The queue-pool state, made on first use.
    fn queue_pools(&self) -> Result<Arc<QueuePools>, hal::Error> {
        let mut pools = hal::driver::lock(&self.queue_pools);
        if let Some(pools) = &*pools {
            return Ok(pools.clone());
        }
        let made = QueuePools::new(
            &self.hal,
            self.memory.clone(),
            self.proactor,
            self.host_allocator,
            self.topology.frontier.base_axis,
        )?;
        *pools = Some(made.clone());
        Ok(made)
    }
}

/// Wraps `hal` as an IREE device named `identifier`, answering to IREE's `iree_kind` devices too.
///
/// # Safety
/// `create_params` is IREE's valid device-creation parameters (with a proactor pool).
pub(crate) unsafe fn create(
    identifier: &str,
    iree_kind: &'static str,
    hal: hal::Device,
    create_params: *const sys::iree_hal_device_create_params_t,
    host_allocator: sys::iree_allocator_t,
) -> Result<*mut sys::iree_hal_device_t, hal::Error> {
    // SAFETY: the caller's contract.
    let pool = unsafe { (*create_params).proactor_pool };
    if pool.is_null() {
        return Err(hal::Error::invalid_argument("device creation without a proactor pool"));
    }
    // A GPU device's host-visible memory comes from a pool of blocks (see `pinned_pool`).
    let host_pool =
        gpu_format(iree_kind).map(|format| PinnedPool::new(hal.clone(), format == executable::GpuFormat::Cuda));
    let memory = DeviceMemory::new(hal.clone(), host_pool);
    let mut device = Box::new(Device {
        resource: sys::iree_hal_resource_t::default(),
        identifier: identifier.to_owned(),
        iree_kind,
        host_allocator,
        device_allocator: std::ptr::null_mut(),
        proactor_pool: pool,
        proactor: std::ptr::null_mut(),
        block_pool: std::ptr::null_mut(),
        topology: sys::iree_hal_device_topology_info_t::default(),
        loaded: Loaded::default(),
        memory: memory.clone(),
        profiling: Profiling::new(),
        queue_pools: std::sync::Mutex::new(None),
        table_recordings: TableRecordings::default(),
        hal,
    });
    device.device_allocator = allocator::create(memory.clone(), host_allocator);
    // SAFETY: fresh, writable fields; the pool is retained and given back in `destroy`.
    unsafe {
        ffi::thal_iree_resource_initialize((&raw const VTABLE).cast(), &mut device.resource);
        sys::iree_async_proactor_pool_retain(pool);
        device.block_pool = ffi::thal_iree_block_pool_create(host_allocator);
    }
    let device = Box::into_raw(device);
    memory.set_iree_device(device.cast());
    // SAFETY: `device` is live; the output is its field.
    let setup = unsafe { ffi::into_result(sys::iree_async_proactor_pool_get(pool, 0, &mut (*device).proactor)) };
    // SAFETY: `device` is live.
    let setup = setup.and_then(|()| match unsafe { (*device).block_pool.is_null() } {
        true => Err(hal::Error::resource_exhausted("the device's command-recording block pool")),
        false => Ok(()),
    });
    if let Err(error) = setup {
        // SAFETY: gives up the only reference, which runs `destroy`.
        unsafe { sys::iree_hal_device_release(device.cast()) };
        return Err(error);
    }
    Ok(device.cast())
}

/// This driver's device behind `device`.
///
/// # Safety
/// `device` is a live device made by `create` (IREE calls a device's vtable only with it).
unsafe fn cast<'a>(device: *mut sys::iree_hal_device_t) -> &'a Device {
    // SAFETY: the caller's contract.
    unsafe { &*device.cast::<Device>() }
}

unsafe extern "C" fn destroy(device: *mut sys::iree_hal_device_t) {
    // SAFETY: IREE calls this once, with the last reference to a device `create` boxed.
    let device = *unsafe { Box::from_raw(device.cast::<Device>()) };
    let Device {
        hal, loaded, memory, device_allocator, block_pool, host_allocator, proactor_pool, queue_pools, ..
    } = device;
    // The HAL side goes first: dropping the device's handle (and the executables made for IREE's)
    // drains its streams, so work in flight is done before the IREE objects it may touch go. The
    // allocator's memory lets go of its handle first (IREE's buffers and allocator may outlive the
    // device; their memory is freed when IREE frees them).
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        memory.close();
        drop(queue_pools);
        drop(loaded);
        drop(hal);
    }));
    // SAFETY: the device held one reference to each; none is used after this.
    unsafe {
        if !device_allocator.is_null() {
            sys::iree_hal_allocator_release(device_allocator);
        }
        ffi::thal_iree_block_pool_destroy(block_pool, host_allocator);
        sys::iree_async_proactor_pool_release(proactor_pool);
    }
}

unsafe extern "C" fn id(device: *mut sys::iree_hal_device_t) -> sys::iree_string_view_t {
    // SAFETY: IREE passes a live device of ours.
    ffi::view(&unsafe { cast(device) }.identifier)
}

unsafe extern "C" fn host_allocator(device: *mut sys::iree_hal_device_t) -> sys::iree_allocator_t {
    // SAFETY: IREE passes a live device of ours.
    unsafe { cast(device) }.host_allocator
}

unsafe extern "C" fn device_allocator(device: *mut sys::iree_hal_device_t) -> *mut sys::iree_hal_allocator_t {
    // SAFETY: IREE passes a live device of ours.
    unsafe { cast(device) }.device_allocator
}

unsafe extern "C" fn replace_device_allocator(
    device: *mut sys::iree_hal_device_t,
    new_allocator: *mut sys::iree_hal_allocator_t,
) {
    // SAFETY: IREE passes a live device of ours and holds it exclusively while replacing.
    unsafe {
        let device = &mut *device.cast::<Device>();
        sys::iree_hal_allocator_retain(new_allocator);
        sys::iree_hal_allocator_release(device.device_allocator);
        device.device_allocator = new_allocator;
    }
}

unsafe extern "C" fn replace_channel_provider(
    _device: *mut sys::iree_hal_device_t,
    _provider: *mut sys::iree_hal_channel_provider_t,
) {
    // Channels are not bridged (`create_channel` says so); there is nothing to give a provider.
}

unsafe extern "C" fn trim(device: *mut sys::iree_hal_device_t) -> iree_status_t {
    // SAFETY: IREE passes a live device.
    let device = unsafe { cast(device) };
    match device.hal.trim() {
        Ok(()) => ffi::ok(),
        Err(e) => ffi::from_error(&e),
    }
}

unsafe extern "C" fn query_i64(
    device: *mut sys::iree_hal_device_t,
    category: sys::iree_string_view_t,
    key: sys::iree_string_view_t,
    out_value: *mut i64,
) -> iree_status_t {
    // SAFETY: IREE passes a live device, valid views and a writable output.
    let (device, category, key) = unsafe { (cast(device), ffi::text(category), ffi::text(key)) };
    let value = match (&*category, &*key) {
        ("hal.device.id", pattern) => {
            // A module compiled for IREE's CPU targets asks for a "local" device: cpu-sim is one (it
            // runs IREE's local executables), so it answers to that name as well as its own.
            let names = [device.identifier.as_str(), device.iree_kind];
            // SAFETY: pure string matching.
            names.iter().any(|name| unsafe { sys::iree_string_view_match_pattern(ffi::view(name), ffi::view(pattern)) })
                as i64
        }
        ("hal.executable.format", format) if gpu_format(device.iree_kind).is_some() => {
            gpu_format(device.iree_kind).is_some_and(|gpu| format == gpu.compiler_format()) as i64
        }
        ("hal.executable.format", format) => {
            let format = format.to_owned();
            let mut loader = std::ptr::null_mut();
            // SAFETY: `loader` is writable; it is released below.
            let supported = unsafe {
                ffi::into_result(sys::iree_hal_embedded_elf_loader_create(
                    std::ptr::null_mut(),
                    device.host_allocator,
                    &mut loader,
                ))
                .map(|()| {
                    let yes = sys::iree_hal_executable_loader_query_support(loader, 0, ffi::view(&format));
                    sys::iree_hal_executable_loader_release(loader);
                    yes
                })
                .unwrap_or(false)
            };
            supported as i64
        }
        ("hal.device", "concurrency") => device.hal.queue_count() as i64,
        ("hal.dispatch", "concurrency") => std::thread::available_parallelism().map_or(1, |n| n.get()) as i64,
        _ => {
            return ffi::status(code::NOT_FOUND, &format!("unknown device configuration key '{category} :: {key}'"));
        }
    };
    // SAFETY: writable, per IREE's contract.
    unsafe { *out_value = value };
    ffi::ok()
}

unsafe extern "C" fn query_capabilities(
    _device: *mut sys::iree_hal_device_t,
    out: *mut sys::iree_hal_device_capabilities_t,
) -> iree_status_t {
    // SAFETY: writable, per IREE's contract.
    unsafe { *out = sys::iree_hal_device_capabilities_t::default() };
    ffi::ok()
}

unsafe extern "C" fn topology_info(device: *mut sys::iree_hal_device_t) -> *const sys::iree_hal_device_topology_info_t {
    // SAFETY: IREE passes a live device of ours.
    &raw const unsafe { cast(device) }.topology
}

unsafe extern "C" fn refine_topology_edge(
    _src: *mut sys::iree_hal_device_t,
    _dst: *mut sys::iree_hal_device_t,
    _edge: *mut sys::iree_hal_topology_edge_t,
) -> iree_status_t {
    ffi::ok()
}

unsafe extern "C" fn assign_topology_info(
    device: *mut sys::iree_hal_device_t,
    info: *const sys::iree_hal_device_topology_info_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live device it holds exclusively while assigning, and NULL or valid info.
    unsafe {
        let device = &mut *device.cast::<Device>();
        device.topology = if info.is_null() { sys::iree_hal_device_topology_info_t::default() } else { *info };
    }
    ffi::ok()
}

unsafe extern "C" fn create_channel(
    _device: *mut sys::iree_hal_device_t,
    _affinity: sys::iree_hal_queue_affinity_t,
    _params: sys::iree_hal_channel_params_t,
    _out: *mut *mut sys::iree_hal_channel_t,
) -> iree_status_t {
    ffi::unimplemented("IREE channels are not bridged yet (the HAL's own channels serve its collectives)")
}

unsafe extern "C" fn create_command_buffer(
    device: *mut sys::iree_hal_device_t,
    mode: sys::iree_hal_command_buffer_mode_t,
    categories: sys::iree_hal_command_category_t,
    affinity: sys::iree_hal_queue_affinity_t,
    binding_capacity: usize,
    out: *mut *mut sys::iree_hal_command_buffer_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live device of ours and a writable output.
    unsafe {
        let device = &mut *device.cast::<Device>();
        ffi::iree_hal_deferred_command_buffer_create(
            device.device_allocator,
            mode,
            categories,
            affinity,
            binding_capacity,
            device.block_pool,
            device.host_allocator,
            out,
        )
    }
}

unsafe extern "C" fn create_event(
    _device: *mut sys::iree_hal_device_t,
    _affinity: sys::iree_hal_queue_affinity_t,
    _flags: sys::iree_hal_event_flags_t,
    out: *mut *mut sys::iree_hal_event_t,
) -> iree_status_t {
    // SAFETY: writable, per IREE's contract.
    unsafe { *out = crate::event::create() };
    ffi::ok()
}

unsafe extern "C" fn create_executable_cache(
    device: *mut sys::iree_hal_device_t,
    _identifier: sys::iree_string_view_t,
    out: *mut *mut sys::iree_hal_executable_cache_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live device of ours and a writable output.
    let device = unsafe { cast(device) };
    // SAFETY: writable, per IREE's contract.
    let gpu = gpu_format(device.iree_kind).map(|format| (device.hal.clone(), format));
    // SAFETY: writable, per IREE's contract.
    unsafe { ffi::write_out(out, executable::create_cache(device.host_allocator, gpu)) }
}

unsafe extern "C" fn import_file(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    access: sys::iree_hal_memory_access_t,
    handle: *mut sys::iree_io_file_handle_t,
    _flags: sys::iree_hal_external_file_flags_t,
    out: *mut *mut sys::iree_hal_file_t,
) -> iree_status_t {
    // IREE's own file objects: a host allocation is a memory file whose storage buffer this
    // driver's allocator imports (queue reads and writes of it are queue copies).
    // SAFETY: IREE passes a live device of ours, a live handle and a writable output.
    unsafe {
        let device = cast(device);
        ffi::thal_iree_file_from_handle(
            device.device_allocator,
            affinity,
            access,
            handle,
            device.proactor,
            device.host_allocator,
            out,
        )
    }
}

/// IREE's memory access bits for file reads and writes.
mod code_access {
    use crate::ffi::sys;
    pub const READ: u16 = sys::iree_hal_memory_access_bits_t_IREE_HAL_MEMORY_ACCESS_READ as u16;
    pub const WRITE: u16 = sys::iree_hal_memory_access_bits_t_IREE_HAL_MEMORY_ACCESS_WRITE as u16;
}

/// A queue read or write of a file, checked for its access: a memory file's is a queue copy of its
/// storage buffer, a descriptor's is staged through host memory (see `file_io.rs`).
///
/// # Safety
/// The file and buffer of `transfer` are live and the lists valid, per IREE's contract.
unsafe fn file_transfer(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    waits: sys::iree_hal_semaphore_list_t,
    signals: sys::iree_hal_semaphore_list_t,
    transfer: FileTransfer,
) -> iree_status_t {
    let (access, what) = match transfer.direction {
        Direction::Read => (code_access::READ, "queue_read"),
        Direction::Write => (code_access::WRITE, "queue_write"),
    };
    // SAFETY: the caller's contract.
    let (status, storage) = unsafe {
        (sys::iree_hal_file_validate_access(transfer.file, access), sys::iree_hal_file_storage_buffer(transfer.file))
    };
    if !status.is_null() {
        return status;
    }
    if storage.is_null() {
        // SAFETY: the caller's contract.
        return unsafe { submit(what, device, affinity, &waits, &signals, |d, q, w, s| transfer.submit(d, q, w, s)) };
    }
    let (source, source_offset, target, target_offset) = match transfer.direction {
        Direction::Read => (storage, transfer.file_offset, transfer.buffer, transfer.offset),
        Direction::Write => (transfer.buffer, transfer.offset, storage, transfer.file_offset),
    };
    // SAFETY: the caller's contract; a memory file's storage buffer lives as long as the file.
    unsafe {
        queue_copy(
            device,
            affinity,
            waits,
            signals,
            source,
            source_offset as _,
            target,
            target_offset as _,
            transfer.length as _,
            0,
        )
    }
}

unsafe extern "C" fn create_semaphore(
    device: *mut sys::iree_hal_device_t,
    _affinity: sys::iree_hal_queue_affinity_t,
    initial: u64,
    _flags: sys::iree_hal_semaphore_flags_t,
    out: *mut *mut sys::iree_hal_semaphore_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live device of ours and a writable output.
    let device = unsafe { cast(device) };
    ffi::guarded("create_semaphore", || {
        let created =
            device.hal.create_semaphore(initial).and_then(|hal| semaphore::create(device.proactor, initial, hal));
        // SAFETY: writable, per IREE's contract.
        unsafe { ffi::write_out(out, created) }
    })
}

unsafe extern "C" fn query_semaphore_compatibility(
    _device: *mut sys::iree_hal_device_t,
    semaphore: *mut sys::iree_hal_semaphore_t,
) -> sys::iree_hal_semaphore_compatibility_t {
    if semaphore::cast(semaphore).is_some() {
        sys::iree_hal_semaphore_compatibility_bits_t_IREE_HAL_SEMAPHORE_COMPATIBILITY_ALL
    } else {
        sys::iree_hal_semaphore_compatibility_bits_t_IREE_HAL_SEMAPHORE_COMPATIBILITY_NONE
    }
}

unsafe extern "C" fn query_queue_pool_backend(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    out: *mut sys::iree_hal_queue_pool_backend_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live device of ours.
    let device = unsafe { cast(device) };
    ffi::guarded("query_queue_pool_backend", || {
        let count = device.hal.queue_count() as u32;
        let first = if affinity == u64::MAX { 0 } else { affinity.trailing_zeros() };
        if affinity == 0 || first >= count {
            return ffi::status(
                code::INVALID_ARGUMENT,
                &format!("{}: queue affinity {affinity:#x} names none of its {count} queues", device.identifier),
            );
        }
        match device.queue_pools() {
            Ok(pools) => {
                // SAFETY: writable, per IREE's contract; the backend lives as long as the device.
                unsafe { *out = pools.backend() };
                ffi::ok()
            }
            Err(error) => ffi::from_error(&error.context(format!("{} queue pools", device.identifier))),
        }
    })
}

/// A semaphore list as HAL (semaphore, value) pairs; another driver's semaphore is refused.
///
/// # Safety
/// `list` holds `count` live semaphores and values.
unsafe fn hal_list(list: &sys::iree_hal_semaphore_list_t) -> Result<Vec<SemaphoreValue>, hal::Error> {
    (0..list.count)
        .map(|i| {
            // SAFETY: the caller's contract.
            let (semaphore, value) = unsafe { (*list.semaphores.add(i), *list.payload_values.add(i)) };
            let ours = semaphore::cast(semaphore).ok_or_else(|| {
                hal::Error::unimplemented(format!(
                    "semaphore {i} of the list belongs to another IREE driver (not bridged yet)"
                ))
            })?;
            Ok(SemaphoreValue::new(ours.hal(), value))
        })
        .collect()
}

/// Runs one queue operation: resolves the lists, submits with `submit`, then watches the signals so
/// that IREE's side of each semaphore follows.
///
/// # Safety
/// The lists are IREE's valid semaphore lists.
unsafe fn submit(
    what: &str,
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    waits: &sys::iree_hal_semaphore_list_t,
    signals: &sys::iree_hal_semaphore_list_t,
    submit: impl FnOnce(&Device, &hal::Queue, &[SemaphoreValue], &[SemaphoreValue]) -> Result<(), hal::Error>,
) -> iree_status_t {
    // SAFETY: IREE passes a live device of ours.
    let device = unsafe { cast(device) };
    ffi::guarded(what, || {
        let run = || -> Result<(), hal::Error> {
            // SAFETY: the caller's contract.
            let (wait_list, signal_list) = unsafe { (hal_list(waits)?, hal_list(signals)?) };
            let count = device.hal.queue_count().max(1) as u64;
            let index =
                if affinity == 0 || affinity == u64::MAX { 0 } else { u64::from(affinity.trailing_zeros()) % count };
            let queue = device.hal.queue(index as usize)?;
            submit(device, &queue, &wait_list, &signal_list)?;
            for i in 0..signals.count {
                // SAFETY: the caller's contract; each was checked to be ours above.
                let (semaphore, value) = unsafe { (*signals.semaphores.add(i), *signals.payload_values.add(i)) };
                if let Some(ours) = semaphore::cast(semaphore) {
                    semaphore::watch(ours, value);
                }
            }
            Ok(())
        };
        ffi::from_result(run().map_err(|e| e.context(format!("{} {what}", device.identifier))))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn queue_alloca(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    waits: sys::iree_hal_semaphore_list_t,
    signals: sys::iree_hal_semaphore_list_t,
    pool: *mut sys::iree_hal_pool_t,
    params: sys::iree_hal_buffer_params_t,
    size: sys::iree_device_size_t,
    flags: sys::iree_hal_alloca_flags_t,
    out: *mut *mut sys::iree_hal_buffer_t,
) -> iree_status_t {
    if !pool.is_null() {
        // A pool of the caller's, built from this device's queue-pool backend.
        let mut made = std::ptr::null_mut();
        // SAFETY: IREE's lists and live pool.
        let status = unsafe {
            submit("queue_alloca", device, affinity, &waits, &signals, |device, queue, w, s| {
                made = device.queue_pools()?.alloca(queue, w, pool, &params, size as u64, flags, s)?;
                Ok(())
            })
        };
        // SAFETY: writable, per IREE's contract; the buffer is IREE's on success.
        unsafe { *out = if status.is_null() { made } else { std::ptr::null_mut() } };
        return status;
    }
    // Memory the host need not map is the HAL's queue-ordered allocation. Memory it maps is
    // allocated now and handed out at once; a barrier orders the signals behind the waits.
    let mut made = std::ptr::null_mut();
    // SAFETY: IREE's lists.
    let status = unsafe {
        submit("queue_alloca", device, affinity, &waits, &signals, |device, queue, w, s| {
            made = match device.memory.alloca(queue, w, &params, size as u64, s)? {
                Some(buffer) => buffer,
                None => {
                    let buffer = device.memory.allocate(&params, size as u64)?;
                    if let Err(error) = queue.barrier(w, s) {
                        // SAFETY: the buffer allocated above is not handed out.
                        sys::iree_hal_buffer_release(buffer);
                        return Err(error);
                    }
                    buffer
                }
            };
            Ok(())
        })
    };
    // SAFETY: writable, per IREE's contract; the buffer is IREE's on success.
    unsafe { *out = if status.is_null() { made } else { std::ptr::null_mut() } };
    status
}

unsafe extern "C" fn queue_dealloca(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    waits: sys::iree_hal_semaphore_list_t,
    signals: sys::iree_hal_semaphore_list_t,
    buffer: *mut sys::iree_hal_buffer_t,
    _flags: sys::iree_hal_dealloca_flags_t,
) -> iree_status_t {
    // A queue-ordered buffer's memory goes in queue order; other memory goes with IREE's last
    // reference, and the queue only keeps the order.
    // SAFETY: IREE's lists and a live buffer (or NULL).
    unsafe {
        let ours = if buffer.is_null() { None } else { buffer::cast(sys::iree_hal_buffer_allocated_buffer(buffer)) };
        submit("queue_dealloca", device, affinity, &waits, &signals, |_, queue, w, s| {
            if let Some(slab) = ours.and_then(|b| b.slab_view())
                && let Some(reserved) = slab.take_reserved()
            {
                // A pool's block goes back to its pool in queue order.
                return reserved.pools().dealloca(queue, w, reserved, s).map_err(|(error, reserved)| {
                    if let Some(reserved) = reserved {
                        slab.put_back(reserved);
                    }
                    error
                });
            }
            match ours.and_then(|b| b.transient()) {
                Some(transient) => queue.dealloca(w, transient, s),
                None => queue.barrier(w, s),
            }
        })
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn queue_fill(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    waits: sys::iree_hal_semaphore_list_t,
    signals: sys::iree_hal_semaphore_list_t,
    target: *mut sys::iree_hal_buffer_t,
    offset: sys::iree_device_size_t,
    length: sys::iree_device_size_t,
    pattern: *const c_void,
    pattern_length: usize,
    _flags: sys::iree_hal_fill_flags_t,
) -> iree_status_t {
    // SAFETY: IREE's lists, a live buffer and `pattern_length` readable bytes.
    unsafe {
        submit("queue_fill", device, affinity, &waits, &signals, |device, queue, w, s| {
            let pattern = recorder::fill_pattern(pattern, pattern_length)?;
            match buffer_import::import(device, target, offset as u64, length as u64)? {
                Some(t) => queue.fill(w, &t.buffer, t.offset, t.length, pattern, s),
                None => queue.barrier(w, s),
            }
        })
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn queue_update(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    waits: sys::iree_hal_semaphore_list_t,
    signals: sys::iree_hal_semaphore_list_t,
    source: *const c_void,
    source_offset: usize,
    target: *mut sys::iree_hal_buffer_t,
    offset: sys::iree_device_size_t,
    length: sys::iree_device_size_t,
    _flags: sys::iree_hal_update_flags_t,
) -> iree_status_t {
    // SAFETY: IREE's lists, a live buffer, and `length` readable bytes at `source + source_offset`
    // for the call (the HAL copies them before returning).
    unsafe {
        submit("queue_update", device, affinity, &waits, &signals, |device, queue, w, s| {
            match buffer_import::import(device, target, offset as u64, length as u64)? {
                Some(t) => {
                    let data = std::slice::from_raw_parts(source.cast::<u8>().add(source_offset), t.length as usize);
                    queue.update(w, &t.buffer, t.offset, data, s)
                }
                None => queue.barrier(w, s),
            }
        })
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn queue_copy(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    waits: sys::iree_hal_semaphore_list_t,
    signals: sys::iree_hal_semaphore_list_t,
    source: *mut sys::iree_hal_buffer_t,
    source_offset: sys::iree_device_size_t,
    target: *mut sys::iree_hal_buffer_t,
    target_offset: sys::iree_device_size_t,
    length: sys::iree_device_size_t,
    _flags: sys::iree_hal_copy_flags_t,
) -> iree_status_t {
    // SAFETY: IREE's lists and live buffers.
    unsafe {
        submit("queue_copy", device, affinity, &waits, &signals, |device, queue, w, s| {
            let from = buffer_import::import(device, source, source_offset as u64, length as u64)?;
            let to = buffer_import::import(device, target, target_offset as u64, length as u64)?;
            match (from, to) {
                (Some(f), Some(t)) => queue.copy(w, &f.buffer, f.offset, &t.buffer, t.offset, t.length, s),
                _ => queue.barrier(w, s),
            }
        })
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn queue_read(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    waits: sys::iree_hal_semaphore_list_t,
    signals: sys::iree_hal_semaphore_list_t,
    file: *mut sys::iree_hal_file_t,
    file_offset: u64,
    target: *mut sys::iree_hal_buffer_t,
    target_offset: sys::iree_device_size_t,
    length: sys::iree_device_size_t,
    _flags: sys::iree_hal_read_flags_t,
) -> iree_status_t {
    let transfer = FileTransfer {
        direction: Direction::Read,
        file,
        file_offset,
        buffer: target,
        offset: target_offset as u64,
        length: length as u64,
    };
    // SAFETY: IREE passes a live file and buffer, and valid lists.
    unsafe { file_transfer(device, affinity, waits, signals, transfer) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn queue_write(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    waits: sys::iree_hal_semaphore_list_t,
    signals: sys::iree_hal_semaphore_list_t,
    source: *mut sys::iree_hal_buffer_t,
    source_offset: sys::iree_device_size_t,
    file: *mut sys::iree_hal_file_t,
    file_offset: u64,
    length: sys::iree_device_size_t,
    _flags: sys::iree_hal_write_flags_t,
) -> iree_status_t {
    let transfer = FileTransfer {
        direction: Direction::Write,
        file,
        file_offset,
        buffer: source,
        offset: source_offset as u64,
        length: length as u64,
    };
    // SAFETY: IREE passes a live file and buffer, and valid lists.
    unsafe { file_transfer(device, affinity, waits, signals, transfer) }
}

unsafe extern "C" fn queue_host_call(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    waits: sys::iree_hal_semaphore_list_t,
    signals: sys::iree_hal_semaphore_list_t,
    call: sys::iree_hal_host_call_t,
    args: *const u64,
    flags: sys::iree_hal_host_call_flags_t,
) -> iree_status_t {
    let Some(function) = call.fn_ else {
        return ffi::status(code::INVALID_ARGUMENT, "a host call without a function");
    };
    // SAFETY: IREE passes four arguments, copied now (the call may run after this returns).
    let args: [u64; 4] = if args.is_null() { [0; 4] } else { unsafe { std::ptr::read(args.cast::<[u64; 4]>()) } };
    let non_blocking = flags & u64::from(sys::iree_hal_host_call_flag_bits_e_IREE_HAL_HOST_CALL_FLAG_NON_BLOCKING) != 0;
    // SAFETY: IREE's lists; the call's copy of the signal list retains its semaphores until the
    // call has signalled or failed them.
    let owned = if non_blocking { OwnedList::default() } else { unsafe { OwnedList::retain(&signals) } };
    let call = HostCall { function, user_data: call.user_data, args, device, affinity, signals: owned };
    // SAFETY: IREE's lists.
    unsafe {
        submit("queue_host_call", device, affinity, &waits, &signals, move |_, queue, w, s| {
            if non_blocking {
                // IREE's meaning: the signals fire once the call is issued, not when it returns;
                // the call still runs after the waits.
                queue.host_call_with(w, move || call.run(), hal::HostCallFlags::NON_BLOCKING, &[])?;
                return queue.barrier(w, s);
            }
            // The call signals (or fails) IREE's semaphores itself, as IREE's contract has it:
            // OK signals them, an error fails them, DEFERRED leaves them to the callee.
            queue.host_call(w, move || call.run(), &[])
        })
    }
}

/// A semaphore list whose semaphores are retained until it is dropped.
#[derive(Default)]
struct OwnedList {
    semaphores: Vec<*mut sys::iree_hal_semaphore_t>,
    values: Vec<u64>,
}

impl OwnedList {
    /// A retained copy of `list`.
    ///
    /// # Safety
    /// `list` holds `count` live semaphores and values.
    unsafe fn retain(list: &sys::iree_hal_semaphore_list_t) -> Self {
        let mut owned = OwnedList::default();
        for i in 0..list.count {
            // SAFETY: the caller's contract.
            unsafe {
                let semaphore = *list.semaphores.add(i);
                sys::iree_hal_semaphore_retain(semaphore);
                owned.semaphores.push(semaphore);
                owned.values.push(*list.payload_values.add(i));
            }
        }
        owned
    }

    fn list(&mut self) -> sys::iree_hal_semaphore_list_t {
        sys::iree_hal_semaphore_list_t {
            count: self.semaphores.len(),
            semaphores: self.semaphores.as_mut_ptr(),
            payload_values: self.values.as_mut_ptr(),
        }
    }
}

impl Drop for OwnedList {
    fn drop(&mut self) {
        for &semaphore in &self.semaphores {
            // SAFETY: the reference `retain` took.
            unsafe { sys::iree_hal_semaphore_release(semaphore) };
        }
    }
}

/// An IREE host call, carried to the HAL thread that makes it.
struct HostCall {
    function: unsafe extern "C" fn(*mut c_void, *const u64, *mut sys::iree_hal_host_call_context_t) -> iree_status_t,
    user_data: *mut c_void,
    args: [u64; 4],
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    signals: OwnedList,
}
// SAFETY: IREE's contract makes the call's user data and the device usable from the thread that
// runs it (IREE's own drivers call it from their worker threads); the semaphores are retained and
// thread-safe.
unsafe impl Send for HostCall {}

impl HostCall {
    fn run(mut self) -> Result<(), hal::Error> {
        let mut context = sys::iree_hal_host_call_context_t {
            device: self.device,
            queue_affinity: self.affinity,
            signal_semaphore_list: self.signals.list(),
        };
        // SAFETY: the function and its user data are the caller's, valid until the call returns
        // (IREE's contract); `args` and `context` live across the call.
        let status = unsafe { (self.function)(self.user_data, self.args.as_ptr(), &mut context) };
        let list = self.signals.list();
        if status.is_null() {
            // SAFETY: retained semaphores; the list lives across the call.
            return ffi::into_result(unsafe { sys::iree_hal_semaphore_list_signal(list, std::ptr::null()) });
        }
        // SAFETY: `status` is the call's, owned here.
        if unsafe { ffi::thal_iree_status_code(status) } == code::DEFERRED {
            // SAFETY: DEFERRED carries no storage to free; the callee signals later.
            let _ = ffi::into_result(status);
            return Ok(());
        }
        // SAFETY: IREE takes the status for the semaphores; a copy tells the HAL why.
        unsafe {
            let cause = ffi::thal_iree_status_clone(status);
            sys::iree_hal_semaphore_list_fail(list, status);
            ffi::into_result(cause)
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn queue_dispatch(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    waits: sys::iree_hal_semaphore_list_t,
    signals: sys::iree_hal_semaphore_list_t,
    executable: *mut sys::iree_hal_executable_t,
    function: sys::iree_hal_executable_function_t,
    config: sys::iree_hal_dispatch_config_t,
    constants: sys::iree_const_byte_span_t,
    bindings: sys::iree_hal_buffer_ref_list_t,
    flags: sys::iree_hal_dispatch_flags_t,
) -> iree_status_t {
    // SAFETY: IREE's lists and live objects.
    unsafe {
        submit("queue_dispatch", device, affinity, &waits, &signals, |device, queue, w, s| {
            let hal_cb = device.hal.create_command_buffer(hal::CommandBufferMode::OneShot)?;
            let (hal_cb, recording) = recorder::record_into(device, hal_cb, Origin::QueueDispatch, |target| {
                ffi::into_result(sys::iree_hal_command_buffer_dispatch(
                    target, executable, function, config, constants, bindings, flags,
                ))
            })?;
            hal_cb.end()?;
            device.execute_recorded(queue, w, &hal_cb, recording, s)
        })
    }
}

unsafe extern "C" fn queue_execute(
    device: *mut sys::iree_hal_device_t,
    affinity: sys::iree_hal_queue_affinity_t,
    waits: sys::iree_hal_semaphore_list_t,
    signals: sys::iree_hal_semaphore_list_t,
    command_buffer: *mut sys::iree_hal_command_buffer_t,
    binding_table: sys::iree_hal_buffer_binding_table_t,
    _flags: sys::iree_hal_execute_flags_t,
) -> iree_status_t {
    // SAFETY: IREE's lists and a live command buffer (NULL: a barrier).
    unsafe {
        submit("queue_execute", device, affinity, &waits, &signals, |device, queue, w, s| {
            if command_buffer.is_null() {
                return queue.barrier(w, s);
            }
            if !ffi::iree_hal_deferred_command_buffer_isa(command_buffer) {
                return Err(hal::Error::invalid_argument("a command buffer another IREE driver created"));
            }
            // A reusable command buffer runs from its recording for tables, unless the device
            // profiles (whose records come from each replay).
            let one_shot = u64::from(sys::iree_hal_command_buffer_mode(command_buffer))
                & u64::from(sys::iree_hal_command_buffer_mode_bits_t_IREE_HAL_COMMAND_BUFFER_MODE_ONE_SHOT)
                != 0;
            if !one_shot
                && !device.profiling.is_active()
                && device.table_recordings.execute(device, queue, w, command_buffer, binding_table, s)?
            {
                return Ok(());
            }
            let hal_cb = device.hal.create_command_buffer(hal::CommandBufferMode::OneShot)?;
            let origin = Origin::CommandBuffer {
                id: sys::iree_hal_command_buffer_profile_id(command_buffer),
                mode: u64::from(sys::iree_hal_command_buffer_mode(command_buffer)),
                categories: u64::from(sys::iree_hal_command_buffer_allowed_categories(command_buffer)),
                affinity: sys::iree_hal_command_buffer_queue_affinity(command_buffer),
            };
            let (hal_cb, recording) = recorder::record_into(device, hal_cb, origin, |target| {
                ffi::into_result(ffi::iree_hal_deferred_command_buffer_apply(command_buffer, target, binding_table))
            })?;
            hal_cb.end()?;
            device.execute_recorded(queue, w, &hal_cb, recording, s)
        })
    }
}

unsafe extern "C" fn queue_flush(
    device: *mut sys::iree_hal_device_t,
    _affinity: sys::iree_hal_queue_affinity_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live device of ours.
    let device = unsafe { cast(device) };
    ffi::guarded("queue_flush", || {
        let flush = || -> Result<(), hal::Error> {
            for index in 0..device.hal.queue_count() {
                device.hal.queue(index)?.flush()?;
            }
            Ok(())
        };
        ffi::from_result(flush())
    })
}

unsafe extern "C" fn profiling_begin(
    device: *mut sys::iree_hal_device_t,
    options: *const sys::iree_hal_device_profiling_options_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live device of ours.
    let device = unsafe { cast(device) };
    ffi::guarded("profiling_begin", || {
        if options.is_null() {
            return ffi::from_error(&hal::Error::invalid_argument("profiling options are NULL"));
        }
        // SAFETY: IREE's valid options (checked non-NULL).
        ffi::from_result(unsafe { device.profiling.begin(&device.hal, &*options, device.iree_kind == "local") })
    })
}

unsafe extern "C" fn profiling_flush(device: *mut sys::iree_hal_device_t) -> iree_status_t {
    // SAFETY: IREE passes a live device of ours.
    let device = unsafe { cast(device) };
    ffi::guarded("profiling_flush", || ffi::from_result(device.profiling.flush(&device.hal)))
}

unsafe extern "C" fn profiling_end(device: *mut sys::iree_hal_device_t) -> iree_status_t {
    // SAFETY: IREE passes a live device of ours.
    let device = unsafe { cast(device) };
    ffi::guarded("profiling_end", || ffi::from_result(device.profiling.end(&device.hal)))
}

unsafe extern "C" fn external_capture_begin(
    _device: *mut sys::iree_hal_device_t,
    _options: *const sys::iree_hal_device_external_capture_options_t,
) -> iree_status_t {
    ffi::unimplemented("external capture tools are not supported")
}

unsafe extern "C" fn external_capture_end(_device: *mut sys::iree_hal_device_t) -> iree_status_t {
    ffi::unimplemented("external capture tools are not supported")
}

static VTABLE: sys::iree_hal_device_vtable_t = sys::iree_hal_device_vtable_t {
    destroy: Some(destroy),
    id: Some(id),
    host_allocator: Some(host_allocator),
    device_allocator: Some(device_allocator),
    replace_device_allocator: Some(replace_device_allocator),
    replace_channel_provider: Some(replace_channel_provider),
    trim: Some(trim),
    query_i64: Some(query_i64),
    query_capabilities: Some(query_capabilities),
    topology_info: Some(topology_info),
    refine_topology_edge: Some(refine_topology_edge),
    assign_topology_info: Some(assign_topology_info),
    create_channel: Some(create_channel),
    create_command_buffer: Some(create_command_buffer),
    create_event: Some(create_event),
    create_executable_cache: Some(create_executable_cache),
    import_file: Some(import_file),
    create_semaphore: Some(create_semaphore),
    query_semaphore_compatibility: Some(query_semaphore_compatibility),
    query_queue_pool_backend: Some(query_queue_pool_backend),
    queue_alloca: Some(queue_alloca),
    queue_dealloca: Some(queue_dealloca),
    queue_fill: Some(queue_fill),
    queue_update: Some(queue_update),
    queue_copy: Some(queue_copy),
    queue_read: Some(queue_read),
    queue_write: Some(queue_write),
    queue_host_call: Some(queue_host_call),
    queue_dispatch: Some(queue_dispatch),
    queue_execute: Some(queue_execute),
    queue_flush: Some(queue_flush),
    profiling_begin: Some(profiling_begin),
    profiling_flush: Some(profiling_flush),
    profiling_end: Some(profiling_end),
    external_capture_begin: Some(external_capture_begin),
    external_capture_end: Some(external_capture_end),
};
