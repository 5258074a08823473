//! The C declarations the stable ABI of CPython 3.9 lacks, and the DLPack structs.
//!
//! The buffer protocol (`Py_buffer`, `PyObject_GetBuffer`, `PyBuffer_FillInfo`, the
//! `Py_bf_getbuffer` type slot) entered the limited API in 3.11, but it is older than 3.9: every
//! CPython from 3.3 on exports these functions with this struct layout, and `PyType_FromSpec` takes
//! the buffer slots from 3.9 on. So the wheel stays one `abi3` build for 3.9 and later.

use std::ffi::{c_char, c_int, c_void};

use pyo3::ffi::{Py_ssize_t, PyObject};

/// CPython's `Py_buffer`, field for field (`Include/pybuffer.h`, unchanged since 3.3).
#[repr(C)]
pub struct PyBufferView {
    /// Start of the memory.
    pub buf: *mut c_void,
    /// The exporter, owned by the view.
    pub obj: *mut PyObject,
    /// Bytes.
    pub len: Py_ssize_t,
    /// Bytes per item.
    pub itemsize: Py_ssize_t,
    /// Nonzero when read-only.
    pub readonly: c_int,
    /// Dimensions.
    pub ndim: c_int,
    /// struct-module format of an item, or NULL for unsigned bytes.
    pub format: *mut c_char,
    /// Items per dimension.
    pub shape: *mut Py_ssize_t,
    /// Bytes between items per dimension.
    pub strides: *mut Py_ssize_t,
    /// PIL-style indirection.
    pub suboffsets: *mut Py_ssize_t,
    /// The exporter's own.
    pub internal: *mut c_void,
}

impl PyBufferView {
    /// An empty view for `PyObject_GetBuffer` to fill.
    pub fn empty() -> Self {
        PyBufferView {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        }
    }
}

/// `PyBUF_SIMPLE`: a contiguous run of bytes, any format.
pub const PYBUF_SIMPLE: c_int = 0;
/// `PyBUF_WRITE`: a memoryview made from memory may be written.
pub const PYBUF_WRITE: c_int = 0x200;

unsafe extern "C" {
    /// Fills `view` for `obj` (`0`), or sets an exception (`-1`).
    pub fn PyObject_GetBuffer(obj: *mut PyObject, view: *mut PyBufferView, flags: c_int) -> c_int;
    /// Releases a view `PyObject_GetBuffer` filled.
    pub fn PyBuffer_Release(view: *mut PyBufferView);
    /// Fills `view` for an exporter of one contiguous run of bytes (taking a reference to `obj`).
    pub fn PyBuffer_FillInfo(
        view: *mut PyBufferView,
        obj: *mut PyObject,
        buf: *mut c_void,
        len: Py_ssize_t,
        readonly: c_int,
        flags: c_int,
    ) -> c_int;
    /// Whether this thread holds the GIL.
    pub fn PyGILState_Check() -> c_int;
}

/// DLPack's `DLDevice`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLDevice {
    /// `kDLCPU` (1), `kDLCUDA` (2), `kDLCUDAHost` (3), ...
    pub device_type: i32,
    /// The device's ordinal.
    pub device_id: i32,
}

/// DLPack's `DLDataType`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLDataType {
    /// `kDLInt` (0), `kDLUInt` (1), `kDLFloat` (2), `kDLBfloat` (4), `kDLBool` (6), ...
    pub code: u8,
    /// Bits of one lane.
    pub bits: u8,
    /// Lanes of one element.
    pub lanes: u16,
}

/// DLPack's `DLTensor`.
#[repr(C)]
pub struct DLTensor {
    /// The base address (for CUDA, a device pointer).
    pub data: *mut c_void,
    /// Where the memory is.
    pub device: DLDevice,
    /// Dimensions.
    pub ndim: i32,
    /// The element type.
    pub dtype: DLDataType,
    /// Elements per dimension.
    pub shape: *mut i64,
    /// Elements between neighbours per dimension, or NULL for compact row-major.
    pub strides: *mut i64,
    /// Bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// DLPack's `DLManagedTensor`: a tensor, its producer's context and the deleter that ends the loan.
#[repr(C)]
pub struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// The producer's context.
    pub manager_ctx: *mut c_void,
    /// Called once by the consumer when it is done with the memory.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// DLPack's `DLPackVersion`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLPackVersion {
    /// Major version (1 for DLPack 1.x).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

/// DLPack 1.x's `DLManagedTensorVersioned`: the tensor with its version and flags (read-only,
/// copied).
#[repr(C)]
pub struct DLManagedTensorVersioned {
    /// The DLPack version the producer wrote.
    pub version: DLPackVersion,
    /// The producer's context.
    pub manager_ctx: *mut c_void,
    /// Called once by the consumer when it is done with the memory.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// `DLPACK_FLAG_BITMASK_*` bits.
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the consumer must not write the memory.
pub const DLPACK_FLAG_READ_ONLY: u64 = 1 << 0;

/// `kDLCPU`.
pub const KDL_CPU: i32 = 1;
/// `kDLCUDA`.
pub const KDL_CUDA: i32 = 2;
/// `kDLCUDAHost`: pinned host memory.
pub const KDL_CUDA_HOST: i32 = 3;
/// `kDLUInt`.
pub const KDL_UINT: u8 = 1;
/// The name of a capsule holding an unconsumed `DLManagedTensor`.
pub const DLTENSOR: &std::ffi::CStr = c"dltensor";
/// The name a consumer gives the capsule once it owns the tensor.
pub const USED_DLTENSOR: &std::ffi::CStr = c"used_dltensor";
/// The name of a capsule holding an unconsumed `DLManagedTensorVersioned`.
pub const DLTENSOR_VERSIONED: &std::ffi::CStr = c"dltensor_versioned";
/// The name a consumer gives a versioned capsule once it owns the tensor.
pub const USED_DLTENSOR_VERSIONED: &std::ffi::CStr = c"used_dltensor_versioned";
