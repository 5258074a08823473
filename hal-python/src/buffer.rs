//! `Buffer`: device memory, mapped into Python as a `memoryview` (NumPy arrays over it without a
//! copy) when it is host-visible; and reading the bytes of any Python buffer.
//!
//! A mapping's view is `HostView`, a small type made with `PyType_FromSpec` that exports the
//! mapped bytes through the buffer protocol: `buffer.map()` returns `memoryview(HostView)`, so
//! every memoryview, slice of it and NumPy array over it keeps the mapping (and the buffer's
//! memory) alive.

use std::ffi::{c_int, c_void};
use std::mem::ManuallyDrop;

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::ffi::{self, Py_ssize_t, PyObject};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyTuple, PyType};

use hal::{BufferUsage, Mapping, MemoryType};

use crate::errors::OrRaise;
use crate::ffi::{PYBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release, PyBufferView, PyObject_GetBuffer};
use crate::gil::{Detached, drop_detached};

/// A buffer: `device.allocate(size, memory="device" | "host")`.
#[pyclass(module = "timeline_hal", frozen)]
pub struct Buffer {
    buffer: Detached<hal::Buffer>,
    /// The driver of its device (`"cuda"` buffers export CUDA DLPack tensors).
    driver: String,
    /// The device's ordinal among its driver's.
    ordinal: usize,
    /// Its device, not kept alive by the buffer: a DLPack export with a consumer's stream orders
    /// that stream after the device's queues.
    device: hal::WeakDevice,
}

impl Buffer {
    /// Wraps a HAL buffer of `device`.
    pub fn wrap(buffer: hal::Buffer, device: &hal::Device) -> Self {
        let info = device.info();
        Buffer {
            buffer: Detached::new(buffer),
            driver: info.driver.clone(),
            ordinal: info.ordinal,
            device: device.downgrade(),
        }
    }

    /// Its device, while some `Device` or queue still holds it.
    pub fn device(&self) -> Option<hal::Device> {
        self.device.upgrade()
    }

    /// The HAL buffer.
    pub fn hal(&self) -> &hal::Buffer {
        &self.buffer
    }

    /// Its device's driver.
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// Its device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Orders the DLPack consumer's CUDA stream `stream` (a DLPack stream value) after the work
    /// submitted to the device's queues so far.
    fn order_consumer_stream(&self, py: Python<'_>, stream: i64) -> PyResult<()> {
        let handle = match stream {
            0 => {
                return Err(PyBufferError::new_err(
                    "Buffer.__dlpack__: stream=0 is ambiguous in DLPack (pass 1 for the legacy default stream, 2 for the \
                     per-thread one)",
                ));
            }
            s if s < 0 => {
                return Err(PyBufferError::new_err(format!("Buffer.__dlpack__: stream={s} is not a CUDA stream")));
            }
            s => s as u64,
        };
        let Some(device) = self.device() else {
            // No queue of a dropped device has work left to order after.
            return Ok(());
        };
        crate::streams::after_every_queue(py, &device, handle)
    }

    /// Whether the host can map it.
    pub fn mappable(&self) -> bool {
        self.buffer.memory_type().contains(MemoryType::HOST_VISIBLE)
            && self.buffer.usage().contains(BufferUsage::MAPPING)
    }
}

/// A mapping that owns the buffer it maps: what a `HostView` or an exported DLPack tensor keeps.
pub struct MappedView {
    /// Dropped before `buffer` is freed (see `Drop`).
    mapping: ManuallyDrop<Mapping<'static>>,
    /// From `Box::into_raw`; freed in `Drop`, after the mapping that borrows it.
    buffer: *mut hal::Buffer,
    /// The mapped bytes.
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping's pointer is into device memory that any thread may access (ordering the
// accesses with device work is the embedder's part, as for `hal::Mapping`), and the buffer it
// owns is `Send`.
unsafe impl Send for MappedView {}

impl MappedView {
    /// Maps `length` bytes of `buffer` from `offset`.
    pub fn new(buffer: &hal::Buffer, offset: u64, length: u64) -> hal::Result<MappedView> {
        let owned: *mut hal::Buffer = Box::into_raw(Box::new(buffer.clone()));
        // SAFETY: `owned` stays allocated until `Drop` frees it, after the mapping that borrows it
        // is gone (or just below, when mapping fails and nothing borrows it).
        let borrowed: &'static hal::Buffer = unsafe { &*owned };
        let mut mapping = match borrowed.map(offset, length) {
            Ok(mapping) => mapping,
            Err(error) => {
                // SAFETY: from `Box::into_raw` above; nothing borrows it.
                drop(unsafe { Box::from_raw(owned) });
                return Err(error);
            }
        };
        let len = mapping.len();
        let ptr = if len == 0 {
            std::ptr::NonNull::<u8>::dangling().as_ptr()
        } else {
            // SAFETY: only the address is kept; every access through it is the Python side's,
            // which orders them with device work as a mapping's user must.
            unsafe { mapping.as_mut_slice() }.as_mut_ptr()
        };
        Ok(MappedView { mapping: ManuallyDrop::new(mapping), buffer: owned, ptr, len })
    }

    /// The first mapped byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Mapped bytes.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for MappedView {
    fn drop(&mut self) {
        // SAFETY: dropped once, here, before the buffer it borrows.
        unsafe { ManuallyDrop::drop(&mut self.mapping) };
        // SAFETY: from `Box::into_raw` in `new`; the mapping that borrowed it is gone.
        drop(unsafe { Box::from_raw(self.buffer) });
    }
}

/// A `HostView` instance: the object header, then the mapping it exports (NULL only while it is
/// being made or after it was freed).
#[repr(C)]
struct HostViewObject {
    header: PyObject,
    view: *mut MappedView,
}

/// `HostView`'s `bf_getbuffer`: the mapped bytes, writable, one dimension of unsigned bytes.
unsafe extern "C" fn host_view_getbuffer(exporter: *mut PyObject, view: *mut PyBufferView, flags: c_int) -> c_int {
    // SAFETY: CPython calls this with an instance of the type whose slot it is.
    let mapped = unsafe { (*exporter.cast::<HostViewObject>()).view };
    if mapped.is_null() {
        // SAFETY: the GIL is held in a type slot.
        let py = unsafe { Python::assume_attached() };
        PyBufferError::new_err("this HostView maps nothing").restore(py);
        return -1;
    }
    // SAFETY: `mapped` lives as long as the exporter, which the filled view keeps a reference to.
    unsafe { PyBuffer_FillInfo(view, exporter, (*mapped).ptr.cast::<c_void>(), (*mapped).len as Py_ssize_t, 0, flags) }
}

/// `HostView`'s `sq_length`: the mapped bytes.
unsafe extern "C" fn host_view_length(object: *mut PyObject) -> Py_ssize_t {
    // SAFETY: CPython calls this with an instance of the type.
    let mapped = unsafe { (*object.cast::<HostViewObject>()).view };
    // SAFETY: as long as the object lives.
    if mapped.is_null() { 0 } else { unsafe { (*mapped).len as Py_ssize_t } }
}

/// `HostView`'s `tp_new`: instances come only from `Buffer.map()`.
unsafe extern "C" fn host_view_new(_: *mut ffi::PyTypeObject, _: *mut PyObject, _: *mut PyObject) -> *mut PyObject {
    // SAFETY: the GIL is held in a type slot.
    let py = unsafe { Python::assume_attached() };
    PyTypeError::new_err("HostView objects come from Buffer.map()").restore(py);
    std::ptr::null_mut()
}

/// `HostView`'s `tp_dealloc`: drops the mapping (the GIL released), frees the object and drops the
/// reference every instance of a heap type holds to its type.
unsafe extern "C" fn host_view_dealloc(object: *mut PyObject) {
    // SAFETY: CPython calls this once, with an instance of the type, the GIL held.
    unsafe {
        let this = object.cast::<HostViewObject>();
        let mapped = std::mem::replace(&mut (*this).view, std::ptr::null_mut());
        if !mapped.is_null() {
            drop_detached(Box::from_raw(mapped));
        }
        let ty = ffi::Py_TYPE(object);
        let free = ffi::PyType_GetSlot(ty, ffi::Py_tp_free);
        if !free.is_null() {
            let free: ffi::freefunc = std::mem::transmute::<*mut c_void, ffi::freefunc>(free);
            free(object.cast::<c_void>());
        }
        ffi::Py_DECREF(ty.cast::<PyObject>());
    }
}

/// The `HostView` type, made once.
static HOST_VIEW_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The `HostView` type: an exporter of a mapping's bytes through the buffer protocol.
pub fn host_view_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    let ty = HOST_VIEW_TYPE.get_or_try_init(py, || {
        let mut slots = [
            ffi::PyType_Slot { slot: ffi::Py_bf_getbuffer, pfunc: host_view_getbuffer as *mut c_void },
            ffi::PyType_Slot { slot: ffi::Py_sq_length, pfunc: host_view_length as *mut c_void },
            ffi::PyType_Slot { slot: ffi::Py_tp_new, pfunc: host_view_new as *mut c_void },
            ffi::PyType_Slot { slot: ffi::Py_tp_dealloc, pfunc: host_view_dealloc as *mut c_void },
            ffi::PyType_Slot {
                slot: ffi::Py_tp_doc,
                pfunc: c"The mapped bytes of a host-visible Buffer, exported through the buffer protocol \
                         (what the memoryview from Buffer.map() views)."
                    .as_ptr() as *mut c_void,
            },
            ffi::PyType_Slot { slot: 0, pfunc: std::ptr::null_mut() },
        ];
        let mut spec = ffi::PyType_Spec {
            // CPython keeps this pointer: a static string.
            name: c"timeline_hal.HostView".as_ptr(),
            basicsize: std::mem::size_of::<HostViewObject>() as c_int,
            itemsize: 0,
            flags: ffi::Py_TPFLAGS_DEFAULT as std::ffi::c_uint,
            slots: slots.as_mut_ptr(),
        };
        // SAFETY: the spec and its slots are valid for the call (CPython copies what it keeps but
        // the name, which is static); each slot function has its slot's signature.
        let made = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(&mut spec)) }?;
        Ok::<_, PyErr>(made.cast_into::<PyType>()?.unbind())
    })?;
    Ok(ty.bind(py))
}

/// A `memoryview` of `mapped`'s bytes that keeps it alive.
fn memoryview_of(py: Python<'_>, mapped: MappedView) -> PyResult<Bound<'_, PyAny>> {
    let ty = host_view_type(py)?;
    // SAFETY: a heap type made by `PyType_FromSpec` has `tp_alloc` (object's, inherited).
    let object = unsafe {
        let alloc = ffi::PyType_GetSlot(ty.as_type_ptr(), ffi::Py_tp_alloc);
        if alloc.is_null() {
            return Err(PyTypeError::new_err("HostView has no tp_alloc"));
        }
        let alloc: ffi::allocfunc = std::mem::transmute::<*mut c_void, ffi::allocfunc>(alloc);
        Bound::from_owned_ptr_or_err(py, alloc(ty.as_type_ptr(), 0))?
    };
    // SAFETY: a fresh, zeroed instance of the type: its `view` field is ours to set.
    unsafe { (*object.as_ptr().cast::<HostViewObject>()).view = Box::into_raw(Box::new(mapped)) };
    // SAFETY: `object` exports the buffer protocol; the memoryview holds a reference to it.
    unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyMemoryView_FromObject(object.as_ptr())) }
}

/// Runs `f` on the bytes of `data`: `bytes`, or any object with the buffer protocol whose memory
/// is one contiguous run (bytearray, memoryview, array.array, a C-contiguous NumPy array).
pub fn with_bytes<R>(data: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(bytes) = data.cast::<PyBytes>() {
        return Ok(f(bytes.as_bytes()));
    }
    let mut view = PyBufferView::empty();
    // SAFETY: `view` is a valid `Py_buffer` to fill; the GIL is held.
    if unsafe { PyObject_GetBuffer(data.as_ptr(), &mut view, PYBUF_SIMPLE) } != 0 {
        let fetched = PyErr::fetch(data.py());
        return Err(PyTypeError::new_err(format!("expected bytes or a contiguous buffer: {fetched}")));
    }
    let bytes: &[u8] = if view.len <= 0 || view.buf.is_null() {
        &[]
    } else {
        // SAFETY: a filled simple view is `len` contiguous readable bytes at `buf` until released.
        unsafe { std::slice::from_raw_parts(view.buf.cast::<u8>(), view.len as usize) }
    };
    let result = f(bytes);
    // SAFETY: filled above, released once.
    unsafe { PyBuffer_Release(&mut view) };
    Ok(result)
}

#[pymethods]
impl Buffer {
    /// Size in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.buffer.size()
    }

    fn __len__(&self) -> usize {
        self.buffer.size() as usize
    }

    /// `"host"` for host-visible, mappable memory, else `"device"`.
    #[getter]
    fn memory(&self) -> &'static str {
        if self.mappable() { "host" } else { "device" }
    }

    /// A writable `memoryview` of `length` bytes (to the end when None) from `offset`, without a
    /// copy: `numpy.frombuffer(buffer.map(), numpy.float32)`. Host-visible buffers only
    /// (`PermissionDeniedError` otherwise). The view, its slices and arrays over it keep the
    /// mapping alive. Order its reads and writes with device work through semaphores.
    #[pyo3(signature = (offset = 0, length = None))]
    fn map<'py>(&self, py: Python<'py>, offset: u64, length: Option<u64>) -> PyResult<Bound<'py, PyAny>> {
        let length = length.unwrap_or_else(|| self.buffer.size().saturating_sub(offset));
        let mapped = MappedView::new(&self.buffer, offset, length).or_raise()?;
        memoryview_of(py, mapped)
    }

    /// Copies `length` bytes (to the end when None) from `offset` out through a mapping
    /// (host-visible buffers; a device buffer is read with `queue.read`).
    #[pyo3(signature = (offset = 0, length = None))]
    fn read<'py>(&self, py: Python<'py>, offset: u64, length: Option<u64>) -> PyResult<Bound<'py, PyBytes>> {
        let length = length.unwrap_or_else(|| self.buffer.size().saturating_sub(offset));
        self.buffer.check_range(offset, length).or_raise()?;
        let mut out = vec![0u8; length as usize];
        self.buffer.read(offset, &mut out).or_raise()?;
        Ok(PyBytes::new(py, &out))
    }

    /// Copies `data` (bytes-like) in at `offset` through a mapping (host-visible buffers).
    #[pyo3(signature = (data, offset = 0))]
    fn write(&self, data: &Bound<'_, PyAny>, offset: u64) -> PyResult<()> {
        with_bytes(data, |bytes| self.buffer.write(offset, bytes))?.or_raise()
    }

    /// A buffer over `length` bytes of this one from `offset` (it keeps this one alive).
    fn subspan(&self, offset: u64, length: u64) -> PyResult<Buffer> {
        let span = self.buffer.subspan(offset, length).or_raise()?;
        Ok(Buffer {
            buffer: Detached::new(span),
            driver: self.driver.clone(),
            ordinal: self.ordinal,
            device: self.device.clone(),
        })
    }

    /// DLPack: a capsule of a one-dimensional `uint8` tensor over the whole buffer, without a copy:
    /// the CPU for host-visible memory, CUDA for CUDA device memory; DLPack 1.x (writable) when
    /// `max_version` is 1.0 or later. `numpy.from_dlpack(buffer)`, `torch.from_dlpack(buffer)`.
    ///
    /// For CUDA memory, `stream` is the consumer's CUDA stream (an int; 1 is the legacy default
    /// stream, 2 the per-thread one, as the DLPack protocol says; None or -1 asks for no order):
    /// work the consumer enqueues on it after this call runs after everything submitted to the
    /// device's queues so far, ordered on the device (PyTorch passes its current stream). For host
    /// memory, and without a stream, the consumer orders its use itself (waits on the semaphores
    /// first).
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyTuple>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if copy == Some(true) {
            return Err(PyBufferError::new_err(
                "Buffer.__dlpack__: copy=True is not supported (the export is never a copy)",
            ));
        }
        let (device_type, device_id) = crate::dlpack::device_of(self)?;
        if let Some(wanted) = dl_device
            && wanted != (device_type, device_id)
        {
            return Err(PyBufferError::new_err(format!(
                "Buffer.__dlpack__: dl_device={wanted:?}, but the buffer's memory is on {:?}",
                (device_type, device_id)
            )));
        }
        if device_type == crate::ffi::KDL_CUDA
            && let Some(stream) = stream
            && !stream.is_none()
        {
            let stream: i64 = stream.extract().map_err(|_| {
                PyTypeError::new_err("Buffer.__dlpack__: stream is an int (a CUDA stream handle), -1 or None")
            })?;
            if stream != -1 {
                self.order_consumer_stream(py, stream)?;
            }
        }
        let versioned = match max_version {
            Some(version) => version.get_item(0)?.extract::<u32>()? >= 1,
            None => false,
        };
        crate::dlpack::export(py, self, versioned)
    }

    /// DLPack: `(device_type, device_id)`: `(1, 0)` (kDLCPU) for host-visible memory, `(2, n)`
    /// (kDLCUDA) for device memory of CUDA device n.
    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        crate::dlpack::device_of(self)
    }

    fn __repr__(&self) -> String {
        format!("<timeline_hal.Buffer {} size={} memory={}>", self.buffer.id(), self.buffer.size(), self.memory())
    }
}
