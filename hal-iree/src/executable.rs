//! Executables: IREE's CPU executables (its embedded-ELF format), loaded by IREE's own loader and
//! run one workgroup at a time by cpu-sim's workgroup runners.
//!
//! IREE passes a dispatch's workgroup size per dispatch, where a HAL entry point declares one; the
//! HAL dispatch carries it (and the dynamic workgroup-local memory) as four constants after the
//! export's own, which the kernel reads back.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use hal::{EntryPointInfo, ExecutableSource, NativeEntryPoint, NativeInvocation, NativeKernel};

use crate::ffi::{self, iree_status_t, sys};

/// Constants a HAL dispatch adds after the export's: workgroup size x, y, z and dynamic local memory.
pub(crate) const EXTRA_CONSTANTS: u32 = 4;

/// IREE's executable cache for this driver: a loader, and the format it loads.
#[repr(C)]
pub(crate) struct Cache {
    resource: sys::iree_hal_resource_t,
    loader: *mut sys::iree_hal_executable_loader_t,
}

static CACHE_VTABLE: sys::iree_hal_executable_cache_vtable_t = sys::iree_hal_executable_cache_vtable_t {
    destroy: Some(cache_destroy),
    infer_format: Some(cache_infer_format),
    can_prepare_format: Some(cache_can_prepare),
    prepare_executable: Some(cache_prepare),
};

/// An executable cache whose executables IREE's embedded-ELF loader makes.
pub(crate) fn create_cache(
    host_allocator: sys::iree_allocator_t,
) -> Result<*mut sys::iree_hal_executable_cache_t, hal::Error> {
    let mut loader = std::ptr::null_mut();
    // SAFETY: `loader` is writable; no plugins are offered.
    ffi::into_result(unsafe {
        sys::iree_hal_embedded_elf_loader_create(std::ptr::null_mut(), host_allocator, &mut loader)
    })?;
    let cache = Box::into_raw(Box::new(Cache { resource: sys::iree_hal_resource_t::default(), loader }));
    // SAFETY: `cache` is a fresh allocation; this sets its reference count and vtable.
    unsafe { ffi::thal_iree_resource_initialize((&raw const CACHE_VTABLE).cast(), &raw mut (*cache).resource) };
    Ok(cache.cast())
}

unsafe extern "C" fn cache_destroy(cache: *mut sys::iree_hal_executable_cache_t) {
    // SAFETY: IREE calls this once with the last reference to a cache `create_cache` made.
    let cache = unsafe { Box::from_raw(cache.cast::<Cache>()) };
    // SAFETY: the cache held the loader's only reference.
    unsafe { sys::iree_hal_executable_loader_release(cache.loader) };
}

unsafe extern "C" fn cache_infer_format(
    cache: *mut sys::iree_hal_executable_cache_t,
    caching_mode: sys::iree_hal_executable_caching_mode_t,
    data: sys::iree_const_byte_span_t,
    capacity: usize,
    format: *mut std::ffi::c_char,
    inferred_size: *mut usize,
) -> iree_status_t {
    // SAFETY: IREE passes a live cache of ours; the loader answers for its own format.
    unsafe {
        let cache = &*cache.cast::<Cache>();
        sys::iree_hal_executable_loader_infer_format(cache.loader, caching_mode, data, capacity, format, inferred_size)
    }
}

unsafe extern "C" fn cache_can_prepare(
    cache: *mut sys::iree_hal_executable_cache_t,
    caching_mode: sys::iree_hal_executable_caching_mode_t,
    format: sys::iree_string_view_t,
) -> bool {
    // SAFETY: IREE passes a live cache of ours.
    unsafe {
        let cache = &*cache.cast::<Cache>();
        sys::iree_hal_executable_loader_query_support(cache.loader, caching_mode, format)
    }
}

unsafe extern "C" fn cache_prepare(
    cache: *mut sys::iree_hal_executable_cache_t,
    params: *const sys::iree_hal_executable_params_t,
    out: *mut *mut sys::iree_hal_executable_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live cache of ours, valid params and a writable output.
    unsafe {
        let cache = &*cache.cast::<Cache>();
        sys::iree_hal_executable_loader_try_load(cache.loader, params, 1, out)
    }
}

/// A retained IREE executable, usable from any runner thread.
struct Retained(*mut sys::iree_hal_executable_t);
// SAFETY: IREE executables are immutable once loaded and reference counted; CPU exports may be
// called from any thread at once (IREE's task executor does).
unsafe impl Send for Retained {}
// SAFETY: see `Send`.
unsafe impl Sync for Retained {}

impl Drop for Retained {
    fn drop(&mut self) {
        // SAFETY: the reference `Retained::new` took.
        unsafe { sys::iree_hal_executable_release(self.0) };
    }
}

/// A HAL executable made for an IREE executable, and the ABI of its exports (shared: every
/// dispatch looks it up).
pub(crate) type LoadedExecutable = (hal::Executable, Arc<[ffi::ExportInfo]>);

/// The HAL executables made for IREE executables, one per IREE executable, kept for the device's
/// life (each holds a reference to its IREE executable).
#[derive(Default)]
pub(crate) struct Loaded {
    by_executable: Mutex<HashMap<usize, LoadedExecutable>>,
}

impl Loaded {
    /// The HAL executable running `executable`'s exports on `device`, and its exports' ABI.
    ///
    /// # Safety
    /// `executable` is a live IREE CPU executable (made by this driver's cache).
    pub(crate) unsafe fn get(
        &self,
        device: &hal::Device,
        executable: *mut sys::iree_hal_executable_t,
    ) -> Result<LoadedExecutable, hal::Error> {
        let mut map =
            self.by_executable.lock().map_err(|_| hal::Error::internal("the executable map's lock is poisoned"))?;
        if let Some(found) = map.get(&(executable as usize)) {
            return Ok(found.clone());
        }
        // SAFETY: the caller's contract.
        let count = unsafe { ffi::thal_iree_export_count(executable) };
        let mut infos = Vec::with_capacity(count as usize);
        let mut entries = Vec::with_capacity(count as usize);
        // SAFETY: the caller's contract; the reference is given back when the HAL executable goes.
        unsafe { sys::iree_hal_executable_retain(executable) };
        let retained = Arc::new(Retained(executable));
        for ordinal in 0..count {
            let mut info = ffi::ExportInfo::default();
            // SAFETY: `ordinal` is below the export count; `info` is writable.
            ffi::into_result(unsafe { ffi::thal_iree_export_info(executable, ordinal, &mut info) })?;
            let kernel = export_kernel(retained.clone(), ordinal, info);
            let abi = EntryPointInfo::new(
                format!("iree-export-{ordinal}"),
                1,
                info.binding_count as usize,
                (info.constant_count + EXTRA_CONSTANTS) as usize,
            );
            entries.push(NativeEntryPoint::new(abi, kernel));
            infos.push(info);
        }
        let loaded = device.load_executable(&ExecutableSource::Native(entries))?;
        let infos: Arc<[ffi::ExportInfo]> = infos.into();
        map.insert(executable as usize, (loaded.clone(), infos.clone()));
        Ok((loaded, infos))
    }
}

/// The native kernel running export `ordinal` of `executable`, one workgroup per call.
fn export_kernel(executable: Arc<Retained>, ordinal: u32, info: ffi::ExportInfo) -> NativeKernel {
    Arc::new(move |invocation: &NativeInvocation<'_>| {
        let constants = invocation.constants;
        let own = info.constant_count as usize;
        let extra =
            constants.get(own..own + EXTRA_CONSTANTS as usize).ok_or("missing the dispatch's workgroup constants")?;
        let mut pointers: Vec<*mut c_void> = Vec::with_capacity(invocation.bindings.len());
        let mut lengths: Vec<usize> = Vec::with_capacity(invocation.bindings.len());
        for (index, binding) in invocation.bindings.iter().enumerate() {
            let words = binding.as_atomic_u32().ok_or_else(|| format!("binding {index} is not 4-byte aligned"))?;
            pointers.push(words.as_ptr().cast_mut().cast());
            lengths.push(binding.len());
        }
        let local_bytes = info.local_memory_bytes as usize + extra[3] as usize;
        let mut local = vec![0u64; local_bytes.div_ceil(8)];
        let workgroup = ffi::Workgroup {
            workgroup_size: [extra[0].max(1), extra[1].max(1), extra[2].max(1)],
            workgroup_count: invocation.workgroup_count,
            workgroup_id: invocation.workgroup_id,
            constants: constants.as_ptr(),
            constant_count: info.constant_count,
            binding_ptrs: pointers.as_ptr(),
            binding_lengths: lengths.as_ptr(),
            binding_count: pointers.len() as u32,
            local_memory: if local_bytes == 0 { std::ptr::null_mut() } else { local.as_mut_ptr().cast() },
            local_memory_size: local_bytes as u32,
            max_concurrency: 1,
            worker_id: 0,
        };
        // SAFETY: the executable is retained; the workgroup's arrays live across the call; the
        // bindings are the dispatch's ranges, valid while the dispatch runs.
        let status = unsafe { ffi::thal_iree_run_workgroup(executable.0, ordinal, &workgroup) };
        ffi::into_result(status).map_err(|e| format!("IREE export {ordinal}: {}", e.message()))
    })
}
