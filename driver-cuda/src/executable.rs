//! Executables: PTX, cubin or fatbin loaded with `cuModuleLoadData(Ex)`, one `CUfunction` per declared
//! entry point, and the dispatch ABI that maps a HAL dispatch onto a kernel launch.
//!
//! # Dispatch ABI
//! The one IREE's compiler emits, so its PTX runs unchanged:
//! - kernel parameters: one device pointer (`u64`) per binding, in binding order, each the buffer's
//!   device address plus the binding's offset; then each 32-bit constant, in order;
//! - grid: the dispatch's workgroup count;
//! - block: the entry point's declared workgroup size (PTX's `.maxntid` is only a bound, so the size
//!   is declared when the executable is created and checked against the kernel's limit then);
//! - dynamic shared memory: the entry point's `dynamic_workgroup_memory` (0 by default; past 48 KiB
//!   the function is allowed more at load, up to what the device gives a block).
//!
//! For example `extern "C" __global__ void scale(float* in, float* out, unsigned n, float k)` is an
//! entry point with 2 bindings and 2 constants (`k` passed as its bit pattern).
//!
//! An entry point may declare another order instead ([`hal::KernelParam`]): pointers to bindings,
//! null pointers and 32- or 64-bit constants in any order, as Triton's kernels take them. On a CUDA
//! 12.4 or newer driver the layout's parameter sizes are compared with the kernel's at load
//! (`cuFuncGetParamInfo`), so a layout that does not match the kernel is an error there, not a
//! fault at launch.

use std::any::Any;
use std::ffi::{CString, c_void};
use std::sync::Arc;

use cudarc::driver::sys::{CUfunction, CUfunction_attribute, CUmodule};
use hal::driver::ExecutableBackend;
use hal::driver::{BufferExt, ExecutableExt};
use hal::{BufferBinding, DeviceInfo, EntryPointInfo, Error, Executable, ExecutableFormat, ExecutableSource, Result};
use smallvec::SmallVec;

use crate::sys::context::{Bound, Context};
use crate::sys::result;

/// A loaded CUDA module and its entry points.
pub(crate) struct CudaExecutable {
    context: Arc<Context>,
    module: CUmodule,
    format: ExecutableFormat,
    functions: Vec<CUfunction>,
    entry_points: Vec<EntryPointInfo>,
}

// SAFETY: module and function handles are driver objects usable from any thread with the context
// bound; this type never mutates them after loading.
unsafe impl Send for CudaExecutable {}
// SAFETY: see `Send`.
unsafe impl Sync for CudaExecutable {}

/// Bytes of the JIT error log kept for messages.
const JIT_LOG_BYTES: usize = 8192;

impl CudaExecutable {
    /// Loads `source` (PTX, cubin or fatbin bytes) and looks up every declared entry point.
    /// Declared workgroup sizes are checked against `device`'s block limits (per axis and in all)
    /// before anything is loaded.
    pub(crate) fn load(context: &Arc<Context>, source: &ExecutableSource, device: &DeviceInfo) -> Result<Self> {
        let (format, data, entry_points) = match source {
            ExecutableSource::Bytes { format: ExecutableFormat::Spirv, .. } => {
                return Err(Error::unimplemented(
                    "cuda: cannot load SPIR-V (a Vulkan format); load PTX, cubin or fatbin",
                ));
            }
            ExecutableSource::Bytes { format, data, entry_points } => (*format, data, entry_points),
            other => {
                return Err(Error::unimplemented(format!(
                    "cuda: cannot load an executable of kind {}; load PTX, cubin or fatbin",
                    hal::ExecutableKind::of(other)
                )));
            }
        };
        if entry_points.is_empty() {
            return Err(Error::invalid_argument("cuda executable: no entry points declared"));
        }
        for entry in entry_points {
            check_workgroup_size(entry, device.max_workgroup_size, device.max_workgroup_threads)?;
        }
        // PTX must be NUL-terminated text; binary images are copied to an 8-byte aligned buffer.
        let image: Vec<u64> = match format {
            ExecutableFormat::Ptx => {
                let mut text = data.to_vec();
                if text.last() != Some(&0) {
                    text.push(0);
                }
                if text[..text.len() - 1].contains(&0) {
                    return Err(Error::invalid_argument("cuda executable: PTX text contains a NUL byte"));
                }
                aligned_copy(&text)
            }
            _ => aligned_copy(data),
        };
        let bound = context.bind()?;
        let mut log = vec![0u8; JIT_LOG_BYTES];
        // SAFETY: `image` is the whole image of `format`: PTX was NUL-terminated above (its only NUL
        // is the last byte), binary images are copied whole.
        let loaded = unsafe { result::module_load_data_ex(&bound, &image, &mut log) };
        let module = match loaded {
            Ok(module) => module,
            Err(error) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let log = String::from_utf8_lossy(&log[..end]);
                let log = log.trim();
                let message = if log.is_empty() {
                    format!("cuda executable ({format:?}): {}", error.message())
                } else {
                    format!("cuda executable ({format:?}): {}: {log}", error.message())
                };
                return Err(Error::new(error.code(), message));
            }
        };
        let mut executable = CudaExecutable {
            context: context.clone(),
            module,
            format,
            functions: Vec::with_capacity(entry_points.len()),
            entry_points: entry_points.clone(),
        };
        for entry in entry_points {
            let function = executable.function_named(&bound, entry)?;
            executable.functions.push(function);
        }
        Ok(executable)
    }

    fn function_named(&self, bound: &Bound<'_>, entry: &EntryPointInfo) -> Result<CUfunction> {
        let name = CString::new(entry.name.as_str()).map_err(|_| {
            Error::invalid_argument(format!("cuda executable: entry point name {:?} contains a NUL byte", entry.name))
        })?;
        let function = match result::module_get_function(bound, self.module, &name) {
            Ok(Some(function)) => function,
            Ok(None) => {
                return Err(Error::not_found(format!(
                    "cuda executable ({:?}): entry point '{}' is not in the module (is it `extern \"C\"`?)",
                    self.format, entry.name
                )));
            }
            Err(e) => return Err(e.context(format!("entry point '{}'", entry.name))),
        };
        let attribute = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
        let limit = result::func_get_attribute(bound, function, attribute)?;
        // Sizes were checked per axis at load, so the product fits a u64.
        let threads: u64 = entry.workgroup_size.iter().map(|&n| u64::from(n)).product();
        if threads > limit.max(0) as u64 {
            return Err(Error::invalid_argument(format!(
                "cuda executable: entry point '{}' declares a workgroup of {threads} threads {:?} but the kernel \
                 allows at most {limit} per block (.maxntid or register use)",
                entry.name, entry.workgroup_size
            )));
        }
        check_param_layout(bound, function, entry)?;
        set_dynamic_shared_memory(bound, self.context.device(), function, entry)?;
        Ok(function)
    }

    /// The `CudaExecutable` behind `executable`, or `InvalidArgument`.
    pub(crate) fn of(executable: &Executable) -> Result<&CudaExecutable> {
        executable
            .backend()
            .as_any()
            .downcast_ref::<CudaExecutable>()
            .ok_or_else(|| Error::invalid_argument(format!("{}: was not loaded by the cuda driver", executable)))
    }

    /// The function and ABI of entry point `ordinal`.
    pub(crate) fn entry(&self, ordinal: u32) -> Result<(CUfunction, &EntryPointInfo)> {
        let at = ordinal as usize;
        match (self.functions.get(at), self.entry_points.get(at)) {
            (Some(&function), Some(info)) => Ok((function, info)),
            _ => Err(Error::out_of_range(format!(
                "cuda executable: entry point {ordinal} does not exist (it has {})",
                self.entry_points.len()
            ))),
        }
    }
}

/// Checks `entry`'s declared workgroup size against the device's block limits: each axis within
/// `max_size`, and at most `max_threads` threads in all.
fn check_workgroup_size(entry: &EntryPointInfo, max_size: [u32; 3], max_threads: u32) -> Result<()> {
    let size = entry.workgroup_size;
    for (axis, (&n, &limit)) in ["x", "y", "z"].iter().zip(size.iter().zip(&max_size)) {
        if n == 0 || n > limit {
            return Err(Error::invalid_argument(format!(
                "cuda executable: entry point '{}' declares workgroup size {size:?}; {axis} = {n} but the \
                 device allows 1 to {limit}",
                entry.name
            )));
        }
    }
    // Checked: three u32 factors can exceed a u64.
    let threads = size.iter().try_fold(1u64, |acc, &n| acc.checked_mul(u64::from(n)));
    if threads.is_none_or(|t| t > u64::from(max_threads)) {
        return Err(Error::invalid_argument(format!(
            "cuda executable: entry point '{}' declares workgroup size {size:?}; the device allows at most \
             {max_threads} threads in all",
            entry.name
        )));
    }
    Ok(())
}

/// Compares `entry`'s parameter layout (declared, or IREE's) with the parameter sizes the loaded
/// kernel has, where the driver can tell them (CUDA 12.4 and newer, any format): `InvalidArgument`
/// naming the first parameter that differs.
fn check_param_layout(bound: &Bound<'_>, function: CUfunction, entry: &EntryPointInfo) -> Result<()> {
    let Ok(probe) = crate::sys::loader::probe() else { return Ok(()) };
    if crate::sys::loader::VERSIONED_SYMBOLS.iter().any(|&(_, version)| probe.driver_version < version) {
        return Ok(());
    }
    let sizes = result::func_param_sizes(bound, function)?;
    let layout = entry.param_layout();
    // Formatted only for an error.
    let list = |sizes: &mut dyn Iterator<Item = usize>| sizes.map(|s| s.to_string()).collect::<Vec<_>>().join(", ");
    let kernel_sizes = || list(&mut sizes.iter().copied());
    let layout_sizes = || list(&mut layout.iter().map(|p| p.size()));
    for (index, (param, &size)) in layout.iter().zip(&sizes).enumerate() {
        if param.size() != size {
            return Err(Error::invalid_argument(format!(
                "cuda executable: entry point '{}': parameter {index} of the kernel is {size} bytes but the \
                 declared layout passes {param} there (kernel sizes [{}], layout sizes [{}])",
                entry.name,
                kernel_sizes(),
                layout_sizes()
            )));
        }
    }
    if sizes.len() != layout.len() {
        return Err(Error::invalid_argument(format!(
            "cuda executable: entry point '{}': the kernel takes {} parameters (sizes [{}]) but the declared \
             layout passes {} (sizes [{}]){}",
            entry.name,
            sizes.len(),
            kernel_sizes(),
            layout.len(),
            layout_sizes(),
            if entry.params.is_none() {
                format!(" from {} bindings and {} constants", entry.binding_count, entry.constant_count)
            } else {
                String::new()
            }
        )));
    }
    Ok(())
}

/// Dynamic shared memory past the default 48 KiB must be allowed per function; more than the device
/// gives a block (less the kernel's static shared memory) is `ResourceExhausted` at load.
fn set_dynamic_shared_memory(
    bound: &Bound<'_>,
    device: cudarc::driver::sys::CUdevice,
    function: CUfunction,
    entry: &EntryPointInfo,
) -> Result<()> {
    let bytes = entry.dynamic_workgroup_memory;
    if bytes == 0 {
        return Ok(());
    }
    let optin = cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN;
    let device_max = result::device_get_attribute(device, optin)?.max(0) as u64;
    let static_bytes =
        result::func_get_attribute(bound, function, CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?.max(0)
            as u64;
    let allowed = device_max.saturating_sub(static_bytes);
    if u64::from(bytes) > allowed {
        return Err(Error::resource_exhausted(format!(
            "cuda executable: entry point '{}' declares {bytes} bytes of dynamic shared memory; the device gives \
             a block at most {device_max}, of which the kernel's static shared memory takes {static_bytes}",
            entry.name
        )));
    }
    let attribute = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    result::func_set_attribute(bound, function, attribute, bytes as i32).map_err(|e| {
        e.context(format!("entry point '{}': allowing {bytes} bytes of dynamic shared memory", entry.name))
    })
}

fn aligned_copy(bytes: &[u8]) -> Vec<u64> {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    // SAFETY: `words` holds at least `bytes.len()` bytes; the regions are distinct allocations.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast::<u8>(), bytes.len()) };
    words
}

impl ExecutableBackend for CudaExecutable {
    fn entry_points(&self) -> &[EntryPointInfo] {
        &self.entry_points
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for CudaExecutable {
    fn drop(&mut self) {
        // SAFETY: the module is retired once, from here; every command buffer or submission that
        // launches its functions holds the executable, so none is left. An unload waits for the
        // whole device, so the context keeps the module (see `sys/unloader.rs`).
        unsafe { crate::sys::unloader::retire(&self.context, self.module) };
    }
}

/// One resolved dispatch: the function, grid, block, dynamic shared memory and parameter values per
/// the entry point's layout.
#[derive(Clone, PartialEq)]
pub(crate) struct KernelLaunch {
    /// The kernel.
    pub(crate) function: CUfunction,
    /// Workgroup count.
    pub(crate) grid: [u32; 3],
    /// Declared workgroup size.
    pub(crate) block: [u32; 3],
    /// Dynamic shared memory bytes.
    pub(crate) shared_bytes: u32,
    /// One value per kernel parameter, each in its own 8-byte slot (little-endian, so a 4-byte
    /// parameter's value is the slot's first bytes).
    values: SmallVec<[u64; 16]>,
}

// SAFETY: a `CUfunction` is a handle to an immutable driver object, usable from any thread with its
// context current; whoever launches it keeps its executable (and so its module) loaded.
unsafe impl Send for KernelLaunch {}
// SAFETY: see `Send`; nothing in a launch is mutated through a shared reference.
unsafe impl Sync for KernelLaunch {}

impl KernelLaunch {
    /// Resolves a dispatch: reads each binding's current device address (so a transient buffer must
    /// be committed by now) and lays the values out as the entry point declares.
    pub(crate) fn resolve(
        executable: &Executable,
        entry_point: u32,
        workgroups: [u32; 3],
        constants: &[u32],
        bindings: &[BufferBinding],
    ) -> Result<Self> {
        let cuda = CudaExecutable::of(executable)?;
        let (function, info) = cuda.entry(entry_point)?;
        if bindings.len() != info.binding_count || constants.len() != info.constant_count {
            return Err(Error::invalid_argument(format!(
                "dispatch of '{}': {} bindings and {} constants given, entry point declares {} and {}",
                info.name,
                bindings.len(),
                constants.len(),
                info.binding_count,
                info.constant_count
            )));
        }
        let address = |index: usize| -> Result<u64> {
            let binding = &bindings[index];
            if binding.length == 0 {
                // No byte of the buffer is the kernel's to touch.
                return Ok(cuda.context.empty_binding());
            }
            let base = binding.buffer.backend().device_address();
            if base == 0 {
                return Err(Error::failed_precondition(format!(
                    "dispatch of '{}' binding {index}: {} has no memory (a transient buffer whose \
                     queue_alloca has not run, or whose queue_dealloca already ran)",
                    info.name, binding.buffer
                )));
            }
            Ok(base + binding.buffer.memory_offset() + binding.offset)
        };
        let mut values: SmallVec<[u64; 16]> = SmallVec::new();
        match &info.params {
            None => {
                for index in 0..bindings.len() {
                    values.push(address(index)?);
                }
                values.extend(constants.iter().map(|&c| u64::from(c)));
            }
            // Indices were checked against the counts at load (`EntryPointInfo::check`), and the
            // counts against this dispatch above.
            Some(params) => {
                for param in params.iter() {
                    values.push(match *param {
                        hal::KernelParam::Binding(n) => address(n as usize)?,
                        hal::KernelParam::Constant32(n) => u64::from(constants[n as usize]),
                        hal::KernelParam::Constant64(n) => {
                            u64::from(constants[n as usize]) | (u64::from(constants[n as usize + 1]) << 32)
                        }
                        _ => 0,
                    });
                }
            }
        }
        Ok(KernelLaunch {
            function,
            grid: workgroups,
            block: info.workgroup_size,
            shared_bytes: info.dynamic_workgroup_memory,
            values,
        })
    }

    /// Calls `f` with the `kernelParams` array (one pointer per parameter); the pointers are valid
    /// only during the call, which is when CUDA copies the values.
    pub(crate) fn with_params<R>(&mut self, f: impl FnOnce(*mut *mut c_void) -> R) -> R {
        let mut params: SmallVec<[*mut c_void; 16]> =
            self.values.iter_mut().map(|v| (v as *mut u64).cast::<c_void>()).collect();
        f(params.as_mut_ptr())
    }

    /// Enqueues the launch on the raw stream `stream` (a live stream of the bound context).
    pub(crate) fn launch_on(&mut self, bound: &Bound<'_>, stream: cudarc::driver::sys::CUstream) -> Result<()> {
        let (grid, block, shared, function) = (self.grid, self.block, self.shared_bytes, self.function);
        self.with_params(|params| {
            // SAFETY: `params` has one pointer per kernel parameter in layout order (counts checked
            // against the entry point in `resolve`, sizes against the kernel at load where the
            // driver tells them), each to an 8-byte slot whose low bytes are the value
            // (little-endian); live during the call.
            unsafe { result::launch_kernel(bound, function, grid, block, shared, stream, params) }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hal::StatusCode;

    fn entry(size: [u32; 3]) -> EntryPointInfo {
        EntryPointInfo::new("k", 1, 0, 0).with_workgroup_size(size)
    }

    #[test]
    fn workgroup_size_checked_per_axis_and_in_all() {
        let (limits, threads) = ([1024, 1024, 64], 1024);
        assert!(check_workgroup_size(&entry([32, 8, 4]), limits, threads).is_ok());
        let cases: [([u32; 3], &str); 4] = [
            ([1, 1, 65], "z = 65 but the device allows 1 to 64"),
            ([0, 1, 1], "x = 0"),
            ([1024, 2, 1], "at most 1024 threads"),
            // Above the limit on every axis: refused, never an overflowing product.
            ([u32::MAX; 3], "x = 4294967295"),
        ];
        for (size, expected) in cases {
            let err = check_workgroup_size(&entry(size), limits, threads).unwrap_err();
            assert_eq!(err.code(), StatusCode::InvalidArgument);
            assert!(err.message().contains(expected), "{err} should mention {expected:?}");
        }
        // With limits that let every axis through, the product still must not overflow.
        let err = check_workgroup_size(&entry([u32::MAX; 3]), [u32::MAX; 3], threads).unwrap_err();
        assert!(err.message().contains("at most 1024 threads"), "{err}");
    }
}
