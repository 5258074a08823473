//! Executables: IREE's CPU executables (its embedded-ELF format), loaded by IREE's own loader and
//! run one workgroup at a time by cpu-sim's workgroup runners; on GPU devices, IREE's CUDA and
//! Vulkan executables (see `cuda_executable`, `vulkan_executable`).
//!
//! IREE passes a dispatch's workgroup size per dispatch, where a HAL entry point declares one; for
//! CPU executables the HAL dispatch carries it (and the dynamic workgroup-local memory) as four
//! constants after the export's own, which the kernel reads back.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use hal::{EntryPointInfo, ExecutableSource, NativeEntryPoint, NativeInvocation, NativeKernel};

use crate::ffi::{self, code, iree_status_t, sys};

/// Constants a HAL dispatch adds after the export's: workgroup size x, y, z and dynamic local memory.
pub(crate) const EXTRA_CONSTANTS: u32 = 4;

/// The GPU executable formats of IREE's this driver loads as HAL executables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GpuFormat {
    /// IREE's CUDA executables (PTX), on the HAL's CUDA driver.
    Cuda,
    /// IREE's Vulkan executables (SPIR-V), on the HAL's Vulkan driver.
    Vulkan,
}

impl GpuFormat {
    /// The file identifier its executables start with.
    fn identifier(self) -> &'static [u8; 4] {
        match self {
            GpuFormat::Cuda => crate::cuda_executable::IDENTIFIER,
            GpuFormat::Vulkan => crate::vulkan_executable::IDENTIFIER,
        }
    }

    /// The format IREE's executable caches name it by.
    fn cache_format(self) -> &'static str {
        match self {
            GpuFormat::Cuda => crate::cuda_executable::FORMAT,
            GpuFormat::Vulkan => crate::vulkan_executable::FORMAT,
        }
    }

    /// The format IREE's compiler names it by (`hal.executable.format` queries).
    pub(crate) fn compiler_format(self) -> &'static str {
        match self {
            GpuFormat::Cuda => crate::cuda_executable::COMPILER_FORMAT,
            GpuFormat::Vulkan => crate::vulkan_executable::FORMAT,
        }
    }

    fn create(self, device: &hal::Device, data: &[u8]) -> Result<*mut sys::iree_hal_executable_t, hal::Error> {
        match self {
            GpuFormat::Cuda => crate::cuda_executable::create(device, data),
            GpuFormat::Vulkan => crate::vulkan_executable::create(device, data),
        }
    }
}

/// IREE's executable cache for this driver: IREE's embedded-ELF loader (CPU devices), or the GPU
/// device and format its executables load as.
#[repr(C)]
pub(crate) struct Cache {
    resource: sys::iree_hal_resource_t,
    /// NULL for a GPU device's cache.
    loader: *mut sys::iree_hal_executable_loader_t,
    gpu: Option<(hal::Device, GpuFormat)>,
}

static CACHE_VTABLE: sys::iree_hal_executable_cache_vtable_t = sys::iree_hal_executable_cache_vtable_t {
    destroy: Some(cache_destroy),
    infer_format: Some(cache_infer_format),
    can_prepare_format: Some(cache_can_prepare),
    prepare_executable: Some(cache_prepare),
};

/// An executable cache whose executables IREE's embedded-ELF loader makes (`gpu`: `None`), or
/// that loads IREE's executables of a GPU format on a GPU device.
pub(crate) fn create_cache(
    host_allocator: sys::iree_allocator_t,
    gpu: Option<(hal::Device, GpuFormat)>,
) -> Result<*mut sys::iree_hal_executable_cache_t, hal::Error> {
    let mut loader = std::ptr::null_mut();
    if gpu.is_none() {
        // SAFETY: `loader` is writable; no plugins are offered.
        ffi::into_result(unsafe {
            sys::iree_hal_embedded_elf_loader_create(std::ptr::null_mut(), host_allocator, &mut loader)
        })?;
    }
    let cache = Box::into_raw(Box::new(Cache { resource: sys::iree_hal_resource_t::default(), loader, gpu }));
    // SAFETY: `cache` is a fresh allocation; this sets its reference count and vtable.
    unsafe { ffi::thal_iree_resource_initialize((&raw const CACHE_VTABLE).cast(), &raw mut (*cache).resource) };
    Ok(cache.cast())
}

unsafe extern "C" fn cache_destroy(cache: *mut sys::iree_hal_executable_cache_t) {
    // SAFETY: IREE calls this once with the last reference to a cache `create_cache` made.
    let cache = unsafe { Box::from_raw(cache.cast::<Cache>()) };
    if !cache.loader.is_null() {
        // SAFETY: the cache held the loader's only reference.
        unsafe { sys::iree_hal_executable_loader_release(cache.loader) };
    }
}

unsafe extern "C" fn cache_infer_format(
    cache: *mut sys::iree_hal_executable_cache_t,
    caching_mode: sys::iree_hal_executable_caching_mode_t,
    data: sys::iree_const_byte_span_t,
    capacity: usize,
    format: *mut std::ffi::c_char,
    inferred_size: *mut usize,
) -> iree_status_t {
    // SAFETY: IREE passes a live cache of ours.
    let cache = unsafe { &*cache.cast::<Cache>() };
    let Some((_, gpu)) = cache.gpu else {
        // SAFETY: IREE's arguments; the loader answers for its own format.
        return unsafe {
            sys::iree_hal_executable_loader_infer_format(
                cache.loader,
                caching_mode,
                data,
                capacity,
                format,
                inferred_size,
            )
        };
    };
    // SAFETY: IREE passes `data_length` readable bytes (0: unknown, then the header is read alone).
    let bytes = unsafe {
        let length = if data.data_length == 0 { 64 } else { data.data_length };
        std::slice::from_raw_parts(data.data, length)
    };
    match crate::flatbuffer::inferred_size(bytes, gpu.identifier()) {
        Ok(Some(size)) => {
            let name = gpu.cache_format().as_bytes();
            if name.len() >= capacity {
                return ffi::status(code::OUT_OF_RANGE, "the executable format buffer is too small");
            }
            // SAFETY: `format` holds `capacity` bytes; `inferred_size` is writable.
            unsafe {
                std::ptr::copy_nonoverlapping(name.as_ptr(), format.cast::<u8>(), name.len());
                *format.add(name.len()) = 0;
                *inferred_size = size;
            }
            ffi::ok()
        }
        Ok(None) => ffi::status(
            code::INCOMPATIBLE,
            &format!(
                "not an IREE {} executable (no {} identifier)",
                gpu.cache_format(),
                String::from_utf8_lossy(gpu.identifier())
            ),
        ),
        Err(error) => ffi::from_result(Err(error)),
    }
}

unsafe extern "C" fn cache_can_prepare(
    cache: *mut sys::iree_hal_executable_cache_t,
    caching_mode: sys::iree_hal_executable_caching_mode_t,
    format: sys::iree_string_view_t,
) -> bool {
    // SAFETY: IREE passes a live cache of ours.
    let cache = unsafe { &*cache.cast::<Cache>() };
    if let Some((_, gpu)) = cache.gpu {
        // SAFETY: a valid view.
        return unsafe { ffi::text(format) } == gpu.cache_format();
    }
    // SAFETY: the loader answers for its own format.
    unsafe { sys::iree_hal_executable_loader_query_support(cache.loader, caching_mode, format) }
}

unsafe extern "C" fn cache_prepare(
    cache: *mut sys::iree_hal_executable_cache_t,
    params: *const sys::iree_hal_executable_params_t,
    out: *mut *mut sys::iree_hal_executable_t,
) -> iree_status_t {
    // SAFETY: IREE passes a live cache of ours, valid params and a writable output.
    let cache = unsafe { &*cache.cast::<Cache>() };
    let Some((device, gpu)) = &cache.gpu else {
        // SAFETY: as above.
        return unsafe { sys::iree_hal_executable_loader_try_load(cache.loader, params, 1, out) };
    };
    // SAFETY: IREE's params hold `data_length` readable bytes.
    let data = unsafe {
        let span = (*params).executable_data;
        std::slice::from_raw_parts(span.data, span.data_length)
    };
    // SAFETY: writable, per IREE's contract.
    unsafe { ffi::write_out(out, gpu.create(device, data)) }
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

/// One export of an IREE executable as the HAL runs it.
#[derive(Clone)]
pub(crate) struct LoadedExport {
    /// The HAL executable holding it.
    pub executable: hal::Executable,
    /// Its entry point there.
    pub entry: u32,
    /// 32-bit constants IREE passes.
    pub constant_count: u32,
    /// Bindings IREE passes.
    pub binding_count: u32,
    /// Whether a dispatch appends the workgroup size and dynamic local memory as constants (CPU
    /// executables, whose workgroup size IREE picks per dispatch).
    pub workgroup_constants: bool,
    /// The workgroup size the entry point declares (CUDA: the block size; CPU: none, zeros).
    pub workgroup_size: [u32; 3],
}

/// The exports of an IREE executable, in IREE's order (shared: every dispatch looks one up).
pub(crate) type LoadedExecutable = Arc<[LoadedExport]>;

/// The HAL executables made for IREE executables, one per IREE executable, kept for the device's
/// life (each holds a reference to its IREE executable).
#[derive(Default)]
pub(crate) struct Loaded {
    by_executable: Mutex<HashMap<usize, LoadedExecutable>>,
}

impl Loaded {
    /// The HAL executables running `executable`'s exports on `device`.
    ///
    /// # Safety
    /// `executable` is a live IREE executable made by this driver's cache.
    pub(crate) unsafe fn get(
        &self,
        device: &hal::Device,
        executable: *mut sys::iree_hal_executable_t,
    ) -> Result<LoadedExecutable, hal::Error> {
        // SAFETY: the caller's contract.
        if let Some(cuda) = unsafe { crate::gpu_executable::downcast(executable) } {
            return Ok(cuda.exports.clone());
        }
        let mut map =
            self.by_executable.lock().map_err(|_| hal::Error::internal("the executable map's lock is poisoned"))?;
        if let Some(found) = map.get(&(executable as usize)) {
            return Ok(found.clone());
        }
        // SAFETY: the caller's contract.
        let count = unsafe { ffi::thal_iree_export_count(executable) };
        let mut infos: Vec<ffi::ExportInfo> = Vec::with_capacity(count as usize);
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
        let exports: LoadedExecutable = infos
            .iter()
            .enumerate()
            .map(|(ordinal, info)| LoadedExport {
                executable: loaded.clone(),
                entry: ordinal as u32,
                constant_count: info.constant_count,
                binding_count: info.binding_count,
                workgroup_constants: true,
                workgroup_size: [0; 3],
            })
            .collect();
        map.insert(executable as usize, exports.clone());
        Ok(exports)
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
