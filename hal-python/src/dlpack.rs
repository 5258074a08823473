//! DLPack both ways, with the C structs of `dlpack.h` (see [`crate::ffi`]) and the capsule rules:
//! a producer's capsule is named `dltensor` (DLPack 0.x, `DLManagedTensor`) or
//! `dltensor_versioned` (DLPack 1.x, `DLManagedTensorVersioned`, which can say "read-only"); the
//! consumer renames it `used_dltensor` / `used_dltensor_versioned` and then owns the tensor,
//! calling its deleter exactly once when done.
//!
//! - Export (`Buffer.__dlpack__`): a one-dimensional `uint8` tensor over the whole buffer: its
//!   mapping for host-visible memory (`kDLCPU`), its device pointer for CUDA device memory
//!   (`kDLCUDA`); a versioned, writable capsule when the consumer passes `max_version` of 1.0 or
//!   later, else a `dltensor` capsule. The tensor keeps the mapping, or the buffer, alive until
//!   its deleter runs.
//! - Import (`timeline_hal.from_dlpack(x, device)`): a compact (row-major), writable tensor's bytes
//!   lent to the device as a buffer, CPU memory through `Device::import_host_memory` and CUDA
//!   memory through `Device::import_external_memory`; the HAL's release of the memory calls the
//!   tensor's deleter, which lets the producer's array go.

use std::ffi::{CStr, c_void};
use std::ptr::NonNull;

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi::{self, PyObject};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use hal::BufferParams;

use crate::buffer::{Buffer, MappedView};
use crate::device::Device;
use crate::errors::OrRaise;
use crate::ffi::{
    DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPACK_FLAG_READ_ONLY, DLPackVersion, DLTENSOR,
    DLTENSOR_VERSIONED, DLTensor, KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_UINT, USED_DLTENSOR, USED_DLTENSOR_VERSIONED,
};
use crate::gil::drop_detached;

/// `(device_type, device_id)` of a buffer's memory for DLPack.
pub fn device_of(buffer: &Buffer) -> PyResult<(i32, i32)> {
    if buffer.mappable() {
        return Ok((KDL_CPU, 0));
    }
    #[cfg(feature = "cuda")]
    if buffer.driver() == driver_cuda::DRIVER_NAME {
        return Ok((KDL_CUDA, buffer.ordinal() as i32));
    }
    Err(PyBufferError::new_err(format!(
        "a {} buffer of device memory has no DLPack export: allocate it with memory=\"host\" for a CPU tensor",
        buffer.driver()
    )))
}

/// What an exported tensor keeps alive.
enum Keep {
    /// The mapping of host-visible memory (and through it the buffer).
    Mapped(#[allow(dead_code)] MappedView),
    /// CUDA device memory: the buffer.
    #[cfg(feature = "cuda")]
    Device(#[allow(dead_code)] hal::Buffer),
}

/// An exported tensor: the managed tensor (`M`: either DLPack struct) first, so the deleter gets
/// this whole struct back from its pointer; then the shape it points to and what it keeps alive.
#[repr(C)]
struct Export<M> {
    managed: M,
    shape: [i64; 1],
    keep: Keep,
}

// SAFETY: the raw pointers in `managed` point into this same allocation or into memory `keep`
// keeps alive, which any thread may use; `keep` is `Send`.
unsafe impl<M> Send for Export<M> {}

/// The deleter of an exported tensor of either kind: drops the export (the GIL released where it
/// is held).
///
/// # Safety
/// `managed` is NULL or the `managed` field of an `Export<M>` made by `Box::into_raw` in
/// [`export`], given once.
unsafe extern "C" fn export_deleter<M>(managed: *mut M) {
    if !managed.is_null() {
        // SAFETY: the caller's contract; `managed` is the first field of a `repr(C)` `Export<M>`.
        drop_detached(unsafe { Box::from_raw(managed.cast::<Export<M>>()) });
    }
}

/// The destructor of an exported capsule: a capsule nobody consumed (still named `name`) deletes
/// its tensor; a consumed one belongs to its consumer.
///
/// # Safety
/// `capsule` is a capsule made by [`export`], the GIL held.
unsafe fn delete_unconsumed(capsule: *mut PyObject, name: &CStr, delete: unsafe fn(*mut c_void)) {
    // SAFETY: the caller's contract; `PyCapsule_IsValid` sets no error.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, name.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(capsule, name.as_ptr());
            if !managed.is_null() {
                delete(managed);
            }
        }
    }
}

/// Calls the deleter of a `DLManagedTensor`.
///
/// # Safety
/// `managed` is a live `DLManagedTensor` the caller owns.
unsafe fn delete_legacy(managed: *mut c_void) {
    let managed = managed.cast::<DLManagedTensor>();
    // SAFETY: the caller's contract.
    unsafe {
        if let Some(deleter) = (*managed).deleter {
            deleter(managed);
        }
    }
}

/// Calls the deleter of a `DLManagedTensorVersioned`.
///
/// # Safety
/// `managed` is a live `DLManagedTensorVersioned` the caller owns.
unsafe fn delete_versioned(managed: *mut c_void) {
    let managed = managed.cast::<DLManagedTensorVersioned>();
    // SAFETY: the caller's contract.
    unsafe {
        if let Some(deleter) = (*managed).deleter {
            deleter(managed);
        }
    }
}

unsafe extern "C" fn legacy_capsule_destructor(capsule: *mut PyObject) {
    // SAFETY: CPython calls this with our capsule, the GIL held.
    unsafe { delete_unconsumed(capsule, DLTENSOR, delete_legacy) }
}

unsafe extern "C" fn versioned_capsule_destructor(capsule: *mut PyObject) {
    // SAFETY: CPython calls this with our capsule, the GIL held.
    unsafe { delete_unconsumed(capsule, DLTENSOR_VERSIONED, delete_versioned) }
}

/// Wraps a boxed export in a capsule named `name`; deletes it when no capsule can be made.
///
/// # Safety
/// `export` comes from `Box::into_raw` and is given up; `destructor` deletes unconsumed capsules
/// of `name`, `deleter` deletes `export`.
unsafe fn capsule<'py>(
    py: Python<'py>,
    export: *mut c_void,
    name: &'static CStr,
    destructor: unsafe extern "C" fn(*mut PyObject),
    delete: unsafe fn(*mut c_void),
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the caller's contract: the capsule owns the export until a consumer takes it.
    let made = unsafe { ffi::PyCapsule_New(export, name.as_ptr(), Some(destructor)) };
    // SAFETY: an owned reference or NULL with an exception set.
    unsafe { Bound::from_owned_ptr_or_err(py, made) }.inspect_err(|_| {
        // SAFETY: no capsule owns the export: delete it here, once.
        unsafe { delete(export) };
    })
}

/// `buffer.__dlpack__()`: a capsule of the buffer's bytes, versioned when `versioned`.
pub fn export<'py>(py: Python<'py>, buffer: &Buffer, versioned: bool) -> PyResult<Bound<'py, PyAny>> {
    let (device_type, device_id) = device_of(buffer)?;
    let (data, length, keep) = if device_type == KDL_CPU {
        let mapped = MappedView::new(buffer.hal(), 0, buffer.hal().size()).or_raise()?;
        (mapped.ptr().cast::<c_void>(), mapped.len() as u64, Keep::Mapped(mapped))
    } else {
        cuda_export(buffer)?
    };
    let dl_tensor = DLTensor {
        data,
        device: DLDevice { device_type, device_id },
        ndim: 1,
        dtype: DLDataType { code: KDL_UINT, bits: 8, lanes: 1 },
        shape: std::ptr::null_mut(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let shape = [length as i64];
    if versioned {
        let managed = DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(export_deleter::<DLManagedTensorVersioned>),
            flags: 0,
            dl_tensor,
        };
        let export = Box::into_raw(Box::new(Export { managed, shape, keep }));
        // SAFETY: a live allocation of ours; its shape field does not move while it lives.
        unsafe {
            (*export).managed.dl_tensor.shape = (*export).shape.as_mut_ptr();
            (*export).managed.manager_ctx = export.cast::<c_void>();
            capsule(py, export.cast(), DLTENSOR_VERSIONED, versioned_capsule_destructor, delete_versioned)
        }
    } else {
        let managed = DLManagedTensor {
            dl_tensor,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(export_deleter::<DLManagedTensor>),
        };
        let export = Box::into_raw(Box::new(Export { managed, shape, keep }));
        // SAFETY: as above.
        unsafe {
            (*export).managed.dl_tensor.shape = (*export).shape.as_mut_ptr();
            (*export).managed.manager_ctx = export.cast::<c_void>();
            capsule(py, export.cast(), DLTENSOR, legacy_capsule_destructor, delete_legacy)
        }
    }
}

#[cfg(feature = "cuda")]
fn cuda_export(buffer: &Buffer) -> PyResult<(*mut c_void, u64, Keep)> {
    // SAFETY: the exported tensor keeps the buffer alive while the pointer is used; ordering the
    // consumer's accesses with HAL work is the caller's part (documented on `__dlpack__`).
    let (pointer, length) = unsafe { driver_cuda::interop::buffer_pointer(buffer.hal()) }.or_raise()?;
    Ok((pointer as usize as *mut c_void, length, Keep::Device(buffer.hal().clone())))
}

#[cfg(not(feature = "cuda"))]
fn cuda_export(buffer: &Buffer) -> PyResult<(*mut c_void, u64, Keep)> {
    Err(PyBufferError::new_err(format!("a {} buffer of device memory has no DLPack export", buffer.driver())))
}

/// A consumed tensor, owned until the HAL releases the memory lent from it.
enum Consumed {
    Legacy(NonNull<DLManagedTensor>),
    Versioned(NonNull<DLManagedTensorVersioned>),
}

// SAFETY: DLPack lets a consumer call the deleter from any thread; it is called with the GIL taken.
unsafe impl Send for Consumed {}

impl Consumed {
    /// Calls the deleter once, holding the GIL (skipped once the interpreter is shutting down: the
    /// producer's object is then left to the interpreter's teardown).
    fn release(self) {
        let _ = crate::gil::with_python(|_py| {
            // SAFETY: the tensor is ours (its capsule was renamed) and deleted once, here.
            unsafe {
                match self {
                    Consumed::Legacy(managed) => delete_legacy(managed.as_ptr().cast()),
                    Consumed::Versioned(managed) => delete_versioned(managed.as_ptr().cast()),
                }
            }
        });
    }
}

/// The bytes of a compact row-major tensor: its element size times its elements, or a
/// `BufferError` naming what does not fit.
fn tensor_bytes(tensor: &DLTensor) -> PyResult<u64> {
    let element_bits = u64::from(tensor.dtype.bits) * u64::from(tensor.dtype.lanes);
    if element_bits == 0 || element_bits % 8 != 0 {
        return Err(PyBufferError::new_err(format!(
            "from_dlpack: elements of {element_bits} bits are not whole bytes"
        )));
    }
    let ndim = usize::try_from(tensor.ndim).map_err(|_| PyBufferError::new_err("from_dlpack: negative ndim"))?;
    let shape: &[i64] = if ndim == 0 || tensor.shape.is_null() {
        &[]
    } else {
        // SAFETY: a DLTensor's shape has ndim entries.
        unsafe { std::slice::from_raw_parts(tensor.shape, ndim) }
    };
    let strides: Option<&[i64]> = if ndim == 0 || tensor.strides.is_null() {
        None
    } else {
        // SAFETY: non-NULL strides have ndim entries.
        Some(unsafe { std::slice::from_raw_parts(tensor.strides, ndim) })
    };
    let mut elements: u64 = 1;
    for (axis, &extent) in shape.iter().enumerate().rev() {
        let extent = u64::try_from(extent).map_err(|_| PyBufferError::new_err("from_dlpack: a negative extent"))?;
        if let Some(strides) = strides
            && extent > 1
            && u64::try_from(strides[axis]).ok() != Some(elements)
        {
            return Err(PyBufferError::new_err(
                "from_dlpack: the tensor is not compact row-major (make it contiguous first)",
            ));
        }
        elements = elements.saturating_mul(extent);
    }
    Ok(elements.saturating_mul(element_bits / 8))
}

/// The producer's capsule: versioned where the producer speaks DLPack 1.x (asked with
/// `max_version=(1, 0)`), else the `dltensor` one.
fn producer_capsule<'py>(tensor: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let kwargs = PyDict::new(tensor.py());
    kwargs.set_item("max_version", (1, 0))?;
    match tensor.call_method("__dlpack__", (), Some(&kwargs)) {
        Err(e) if e.is_instance_of::<PyTypeError>(tensor.py()) => tensor.call_method0("__dlpack__"),
        other => other,
    }
}

/// Takes the tensor out of `capsule` (renaming it, so its destructor leaves the tensor alone):
/// the tensor's description and the owner to release. Checks before taking: a tensor refused
/// here stays the capsule's.
fn consume(py: Python<'_>, capsule: &Bound<'_, PyAny>) -> PyResult<(DLTensor, Consumed)> {
    let raw = capsule.as_ptr();
    // SAFETY: `raw` is a live object; `PyCapsule_IsValid` checks it is a capsule of that name and
    // sets no error; a valid capsule's pointer is its tensor, alive while it is unconsumed.
    unsafe {
        let (tensor, consumed, used) = if ffi::PyCapsule_IsValid(raw, DLTENSOR_VERSIONED.as_ptr()) == 1 {
            let managed =
                ffi::PyCapsule_GetPointer(raw, DLTENSOR_VERSIONED.as_ptr()).cast::<DLManagedTensorVersioned>();
            let Some(managed) = NonNull::new(managed) else { return Err(PyErr::fetch(py)) };
            let m = managed.as_ref();
            if m.version.major != 1 {
                return Err(PyBufferError::new_err(format!(
                    "from_dlpack: DLPack {}.{} is not 1.x",
                    m.version.major, m.version.minor
                )));
            }
            if m.flags & DLPACK_FLAG_READ_ONLY != 0 {
                return Err(PyBufferError::new_err(
                    "from_dlpack: the tensor is read-only, and device work may write a buffer",
                ));
            }
            (std::ptr::read(&m.dl_tensor), Consumed::Versioned(managed), USED_DLTENSOR_VERSIONED)
        } else if ffi::PyCapsule_IsValid(raw, DLTENSOR.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(raw, DLTENSOR.as_ptr()).cast::<DLManagedTensor>();
            let Some(managed) = NonNull::new(managed) else { return Err(PyErr::fetch(py)) };
            (std::ptr::read(&managed.as_ref().dl_tensor), Consumed::Legacy(managed), USED_DLTENSOR)
        } else {
            return Err(PyBufferError::new_err("from_dlpack: __dlpack__ did not return an unused DLPack capsule"));
        };
        // Checked before the capsule is renamed: a refusal leaves the tensor to the capsule.
        tensor_bytes(&tensor)?;
        if ffi::PyCapsule_SetName(raw, used.as_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok((tensor, consumed))
    }
}

/// Lends the memory of `tensor` (any object with `__dlpack__` and `__dlpack_device__`: a NumPy
/// array, a PyTorch tensor) to `device` as a Buffer, without a copy: CPU memory (host-visible,
/// mappable) on any device that imports host memory, CUDA device memory on the CUDA device that
/// holds it. The tensor must be compact row-major and writable. The producer's object stays alive
/// until the buffer and every queued use of it are done. Order the producer's own use of the
/// memory with HAL work yourself (for a CUDA tensor: synchronize its stream before the HAL uses
/// it).
#[pyfunction]
pub fn from_dlpack(py: Python<'_>, tensor: &Bound<'_, PyAny>, device: &Device) -> PyResult<Buffer> {
    let (device_type, _device_id): (i32, i32) = tensor.call_method0("__dlpack_device__")?.extract()?;
    if ![KDL_CPU, KDL_CUDA_HOST, KDL_CUDA].contains(&device_type) {
        return Err(PyBufferError::new_err(format!(
            "from_dlpack: memory of DLPack device type {device_type} cannot be lent (CPU, CUDA host and CUDA memory can)"
        )));
    }
    let capsule = producer_capsule(tensor)?;
    let (described, consumed) = consume(py, &capsule)?;
    // From here the tensor is ours: the HAL's release (which runs exactly once, at once when the
    // import is refused) calls its deleter.
    let release = move || consumed.release();
    if described.device.device_type != device_type {
        release();
        return Err(PyBufferError::new_err("from_dlpack: the tensor's device differs from __dlpack_device__()"));
    }
    let length = tensor_bytes(&described)?;
    let address = (described.data as usize as u64).wrapping_add(described.byte_offset);
    let hal_device = device.hal();
    let imported = if device_type == KDL_CUDA {
        import_cuda(py, hal_device, address, length, release)
    } else {
        py.detach(|| {
            let Some(ptr) = NonNull::new(address as usize as *mut u8) else {
                release();
                return Err(hal::Error::invalid_argument("from_dlpack: the tensor's data pointer is NULL"));
            };
            // SAFETY: the producer keeps the memory allocated until its deleter runs, which only
            // the release does; the caller orders the producer's accesses with HAL work.
            unsafe { hal_device.import_host_memory(ptr, length, BufferParams::host_visible(), release) }
        })
        .or_raise()
    }?;
    Ok(Buffer::wrap(imported, hal_device))
}

#[cfg(feature = "cuda")]
fn import_cuda(
    py: Python<'_>,
    device: &hal::Device,
    address: u64,
    length: u64,
    release: impl FnOnce() + Send + 'static,
) -> PyResult<hal::Buffer> {
    let memory = hal::ExternalMemory::CudaDevicePointer { address, length };
    // SAFETY: as for host memory: allocated until the release runs, accesses ordered by the caller.
    py.detach(|| unsafe { device.import_external_memory(memory, BufferParams::device_local(), release) }).or_raise()
}

#[cfg(not(feature = "cuda"))]
fn import_cuda(
    _py: Python<'_>,
    device: &hal::Device,
    address: u64,
    length: u64,
    release: impl FnOnce() + Send + 'static,
) -> PyResult<hal::Buffer> {
    release();
    Err(crate::errors::to_py_err(hal::Error::unimplemented(format!(
        "{}: this build of timeline_hal has no CUDA driver to import CUDA memory at {address:#x} (+{length} bytes)",
        device.info().driver
    ))))
}
