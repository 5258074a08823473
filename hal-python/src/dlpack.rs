//! DLPack both ways, with the C structs of `dlpack.h` (see [`crate::ffi`]) and the capsule rules:
//! a producer's capsule is named `dltensor`; the consumer renames it `used_dltensor` and then owns
//! the tensor, calling its deleter exactly once when done.
//!
//! - Export (`Buffer.__dlpack__`): a one-dimensional `uint8` tensor over the whole buffer: its
//!   mapping for host-visible memory (`kDLCPU`), its device pointer for CUDA device memory
//!   (`kDLCUDA`). The tensor keeps the mapping, or the buffer, alive until its deleter runs.
//! - Import (`timeline_hal.from_dlpack(x, device)`): a compact (row-major) tensor's bytes lent to
//!   the device as a buffer, CPU memory through `Device::import_host_memory` and CUDA memory
//!   through `Device::import_external_memory`; the HAL's release of the memory calls the tensor's
//!   deleter, which lets the producer's array go.

use std::ffi::c_void;
use std::ptr::NonNull;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi::{self, PyObject};
use pyo3::prelude::*;

use hal::BufferParams;

use crate::buffer::{Buffer, MappedView};
use crate::device::Device;
use crate::errors::OrRaise;
use crate::ffi::{
    DLDataType, DLDevice, DLManagedTensor, DLTENSOR, DLTensor, KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_UINT,
    USED_DLTENSOR,
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

/// An exported tensor: the managed tensor first (the deleter gets this whole struct back from its
/// pointer), then the shape it points to and what it keeps alive.
#[repr(C)]
struct Export {
    managed: DLManagedTensor,
    shape: [i64; 1],
    keep: Keep,
}

// SAFETY: the raw pointers in `managed` point into this same allocation or into memory `keep`
// keeps alive, which any thread may use; `keep` is `Send`.
unsafe impl Send for Export {}

/// The deleter of an exported tensor: drops the export (the GIL released where it is held).
unsafe extern "C" fn export_deleter(managed: *mut DLManagedTensor) {
    if !managed.is_null() {
        // SAFETY: `managed` is the first field of an `Export` made by `Box::into_raw` in `export`;
        // the consumer calls the deleter once.
        drop_detached(unsafe { Box::from_raw(managed.cast::<Export>()) });
    }
}

/// The destructor of an exported capsule: a capsule nobody consumed (still `dltensor`) deletes
/// its tensor; a consumed one (`used_dltensor`) belongs to its consumer.
unsafe extern "C" fn capsule_destructor(capsule: *mut PyObject) {
    // SAFETY: CPython calls this with the capsule, the GIL held; `PyCapsule_IsValid` sets no error.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr()).cast::<DLManagedTensor>();
            if !managed.is_null()
                && let Some(deleter) = (*managed).deleter
            {
                deleter(managed);
            }
        }
    }
}

/// `buffer.__dlpack__()`: a `dltensor` capsule of the buffer's bytes (see the module's docs).
pub fn export<'py>(py: Python<'py>, buffer: &Buffer) -> PyResult<Bound<'py, PyAny>> {
    let (device_type, device_id) = device_of(buffer)?;
    let (data, length, keep) = if device_type == KDL_CPU {
        let mapped = MappedView::new(buffer.hal(), 0, buffer.hal().size()).or_raise()?;
        (mapped.ptr().cast::<c_void>(), mapped.len() as u64, Keep::Mapped(mapped))
    } else {
        cuda_export(buffer)?
    };
    let export = Box::into_raw(Box::new(Export {
        managed: DLManagedTensor {
            dl_tensor: DLTensor {
                data,
                device: DLDevice { device_type, device_id },
                ndim: 1,
                dtype: DLDataType { code: KDL_UINT, bits: 8, lanes: 1 },
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(export_deleter),
        },
        shape: [length as i64],
        keep,
    }));
    // SAFETY: `export` is a live allocation of ours; its shape field does not move while it lives.
    unsafe {
        (*export).managed.dl_tensor.shape = (*export).shape.as_mut_ptr();
        (*export).managed.manager_ctx = export.cast::<c_void>();
    }
    // SAFETY: the capsule holds the tensor's pointer under the DLPack name, with a destructor that
    // deletes it unless a consumer took it.
    let capsule = unsafe { ffi::PyCapsule_New(export.cast::<c_void>(), DLTENSOR.as_ptr(), Some(capsule_destructor)) };
    // SAFETY: an owned reference or NULL with an exception set.
    match unsafe { Bound::from_owned_ptr_or_err(py, capsule) } {
        Ok(capsule) => Ok(capsule),
        Err(error) => {
            // SAFETY: no capsule owns the export: delete it here.
            unsafe { export_deleter(export.cast::<DLManagedTensor>()) };
            Err(error)
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
struct Consumed(NonNull<DLManagedTensor>);

// SAFETY: DLPack lets a consumer call the deleter from any thread; it is called with the GIL taken.
unsafe impl Send for Consumed {}

impl Consumed {
    /// Calls the deleter once, holding the GIL (skipped once the interpreter is shutting down: the
    /// producer's object is then left to the interpreter's teardown).
    fn release(self) {
        let _ = crate::gil::with_python(|_py| {
            // SAFETY: the tensor is ours (its capsule was renamed `used_dltensor`) and deleted once.
            unsafe {
                if let Some(deleter) = (*self.0.as_ptr()).deleter {
                    deleter(self.0.as_ptr());
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

/// Lends the memory of `tensor` (any object with `__dlpack__` and `__dlpack_device__`: a NumPy
/// array, a PyTorch tensor) to `device` as a Buffer, without a copy: CPU memory (host-visible,
/// mappable) on any device that imports host memory, CUDA device memory on the CUDA device that
/// holds it. The tensor must be compact row-major. The producer's object stays alive until the
/// buffer and every queued use of it are done. Order the producer's own use of the memory with
/// HAL work yourself (for a CUDA tensor: synchronize its stream before the HAL uses it).
#[pyfunction]
pub fn from_dlpack(py: Python<'_>, tensor: &Bound<'_, PyAny>, device: &Device) -> PyResult<Buffer> {
    let (device_type, _device_id): (i32, i32) = tensor.call_method0("__dlpack_device__")?.extract()?;
    if ![KDL_CPU, KDL_CUDA_HOST, KDL_CUDA].contains(&device_type) {
        return Err(PyBufferError::new_err(format!(
            "from_dlpack: memory of DLPack device type {device_type} cannot be lent (CPU, CUDA host and CUDA memory can)"
        )));
    }
    let capsule = tensor.call_method0("__dlpack__")?;
    let raw = capsule.as_ptr();
    // SAFETY: `raw` is a live object; `PyCapsule_IsValid` checks it is a capsule of that name.
    let managed = unsafe {
        if ffi::PyCapsule_IsValid(raw, DLTENSOR.as_ptr()) != 1 {
            return Err(PyBufferError::new_err("from_dlpack: __dlpack__ did not return an unused 'dltensor' capsule"));
        }
        ffi::PyCapsule_GetPointer(raw, DLTENSOR.as_ptr()).cast::<DLManagedTensor>()
    };
    let Some(managed) = NonNull::new(managed) else {
        return Err(PyErr::fetch(py));
    };
    // SAFETY: a valid capsule's tensor, alive while the capsule is unconsumed.
    let tensor_ref = unsafe { &managed.as_ref().dl_tensor };
    if tensor_ref.device.device_type != device_type {
        return Err(PyBufferError::new_err("from_dlpack: the tensor's device differs from __dlpack_device__()"));
    }
    let length = tensor_bytes(tensor_ref)?;
    let address = (tensor_ref.data as usize as u64).wrapping_add(tensor_ref.byte_offset);
    // From here the tensor is ours: the HAL's release (which runs exactly once, at once when the
    // import is refused) calls its deleter.
    // SAFETY: renaming a live capsule; the name is static.
    if unsafe { ffi::PyCapsule_SetName(raw, USED_DLTENSOR.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let consumed = Consumed(managed);
    let release = move || consumed.release();
    let hal_device = device.hal();
    let imported = if device_type == KDL_CUDA {
        import_cuda(py, hal_device, address, length, release)
    } else {
        if address == 0 {
            release();
            return Err(PyBufferError::new_err("from_dlpack: the tensor's data pointer is NULL"));
        }
        py.detach(|| {
            let ptr = NonNull::new(address as usize as *mut u8);
            let Some(ptr) = ptr else {
                release();
                return Err(hal::Error::internal("from_dlpack: NULL pointer"));
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
