//! Executables: kernels in a driver's format (PTX, cubin, fatbin for CUDA; native functions for
//! cpu-sim) with named entry points, each declaring its workgroup size and its ABI (how many buffer
//! bindings and 32-bit constants a dispatch passes).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::device::DeviceId;
use crate::driver::ExecutableBackend;
use crate::error::{Error, Result};

/// The format of an executable's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutableFormat {
    /// NVIDIA PTX text (JIT-compiled by the CUDA driver).
    Ptx,
    /// A CUDA cubin for one architecture.
    Cubin,
    /// A CUDA fatbin (several architectures and/or PTX).
    Fatbin,
}

/// What an entry point is and how to call it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryPointInfo {
    /// The symbol name.
    pub name: String,
    /// Threads per workgroup (x, y, z); on CUDA the block size.
    pub workgroup_size: [u32; 3],
    /// Buffer bindings a dispatch passes, in order.
    pub binding_count: usize,
    /// 32-bit constants a dispatch passes, in order, after the bindings.
    pub constant_count: usize,
}

impl EntryPointInfo {
    /// An entry point `name` with `bindings` buffers, `constants` constants, and a 1-D workgroup of
    /// `workgroup_x` threads.
    pub fn new(name: impl Into<String>, workgroup_x: u32, bindings: usize, constants: usize) -> Self {
        EntryPointInfo {
            name: name.into(),
            workgroup_size: [workgroup_x, 1, 1],
            binding_count: bindings,
            constant_count: constants,
        }
    }
}

/// What one invocation of a native kernel sees: one workgroup of a dispatch.
pub struct NativeInvocation<'a> {
    /// This workgroup's id in the grid.
    pub workgroup_id: [u32; 3],
    /// The grid size.
    pub workgroup_count: [u32; 3],
    /// The declared workgroup size.
    pub workgroup_size: [u32; 3],
    /// The dispatch's constants.
    pub constants: &'a [u32],
    /// The dispatch's bindings (address + binding offset, and the bound length).
    pub bindings: &'a [NativeBinding],
}

/// A buffer range bound to a native kernel. Workgroups run in parallel over the same bindings, so
/// access goes through raw loads and stores rather than slices.
///
/// Only a driver builds one, through the `unsafe` [`NativeBinding::new`]: its loads and stores are
/// safe because that constructor's contract makes the range valid for as long as the binding lives.
/// Safe code cannot forge one:
///
/// ```compile_fail,E0133
/// #![forbid(unsafe_code)]
/// // Finding 8b: this compiled (as a struct literal) and wrote to a dangling address.
/// let forged = hal::NativeBinding::new(std::ptr::dangling_mut::<u8>(), 4);
/// forged.store_u32(0, 1);
/// ```
///
/// ```compile_fail,E0451
/// let forged = hal::NativeBinding { ptr: std::ptr::dangling_mut::<u8>(), len: 4 };
/// ```
///
/// and a kernel cannot keep one past its call (it is neither `Copy` nor `Clone`):
///
/// ```compile_fail,E0507
/// fn keep(invocation: &hal::NativeInvocation<'_>) -> hal::NativeBinding {
///     invocation.bindings[0]
/// }
/// ```
#[derive(Debug)]
pub struct NativeBinding {
    /// Address of the first bound byte.
    ptr: *mut u8,
    /// Bound length in bytes.
    len: usize,
}

// SAFETY: `new`'s caller keeps the memory valid on every thread the binding reaches; kernels
// coordinate their own accesses, as GPU kernels do.
unsafe impl Send for NativeBinding {}
// SAFETY: see `Send`.
unsafe impl Sync for NativeBinding {}

impl NativeBinding {
    /// A binding of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes (allocated, initialized, not reached
    /// through a Rust reference) whenever the binding's loads and stores run, on every thread it is
    /// shared with. A driver keeps this by holding the bound buffer's memory until the dispatch has
    /// finished and by giving kernels only `&NativeBinding`s, which they cannot keep past their call
    /// (a binding is neither `Copy` nor `Clone`).
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        NativeBinding { ptr, len }
    }

    /// Address of the first bound byte (for handing to foreign code; dereferencing it is `unsafe`).
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Bound length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the binding is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of whole `u32` elements in the binding.
    pub fn len_u32(&self) -> usize {
        self.len / 4
    }

    /// Loads element `index` as a `u32`, or `None` when out of range.
    pub fn load_u32(&self, index: usize) -> Option<u32> {
        if index >= self.len_u32() {
            return None;
        }
        // SAFETY: in range (checked), and `new`'s contract keeps the range valid while loads run;
        // unaligned reads are fine for any byte offset.
        Some(unsafe { self.ptr.add(index * 4).cast::<u32>().read_unaligned() })
    }

    /// Stores `value` at element `index`; `false` when out of range.
    pub fn store_u32(&self, index: usize, value: u32) -> bool {
        if index >= self.len_u32() {
            return false;
        }
        // SAFETY: as in `load_u32`; unaligned writes are fine for any byte offset.
        unsafe { self.ptr.add(index * 4).cast::<u32>().write_unaligned(value) };
        true
    }

    /// Loads element `index` as an `f32`.
    pub fn load_f32(&self, index: usize) -> Option<f32> {
        self.load_u32(index).map(f32::from_bits)
    }

    /// Stores `value` at element `index` as an `f32`; `false` when out of range.
    pub fn store_f32(&self, index: usize, value: f32) -> bool {
        self.store_u32(index, value.to_bits())
    }
}

/// A native kernel: runs one workgroup; an `Err` (or a panic) fails the dispatch's signals.
pub type NativeKernel = Arc<dyn Fn(&NativeInvocation<'_>) -> std::result::Result<(), String> + Send + Sync>;

/// A native entry point: its ABI and its function.
#[derive(Clone)]
pub struct NativeEntryPoint {
    /// The ABI.
    pub info: EntryPointInfo,
    /// The function run per workgroup.
    pub kernel: NativeKernel,
}

impl fmt::Debug for NativeEntryPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.info.fmt(f)
    }
}

/// What to load an executable from.
#[derive(Clone, Debug)]
pub enum ExecutableSource {
    /// Driver-format bytes (PTX, cubin, fatbin) and the entry points to take from them.
    Bytes {
        /// The format.
        format: ExecutableFormat,
        /// The bytes.
        data: Arc<[u8]>,
        /// Entry points, in the ordinal order dispatches use.
        entry_points: Vec<EntryPointInfo>,
    },
    /// In-process native kernels (cpu-sim).
    Native(Vec<NativeEntryPoint>),
    /// A shared library exporting a native kernel table (cpu-sim, through libloading).
    SharedLibrary(PathBuf),
}

/// A loaded executable. Cheap to clone.
#[derive(Clone)]
pub struct Executable {
    shared: Arc<Shared>,
}

struct Shared {
    id: u64,
    device: DeviceId,
    backend: Arc<dyn ExecutableBackend>,
}

static NEXT_EXECUTABLE_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Executable {
    /// Wraps a driver's executable. Drivers' `load_executable` results pass through here.
    pub fn from_backend(device: DeviceId, backend: Arc<dyn ExecutableBackend>) -> Self {
        let id = NEXT_EXECUTABLE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Executable { shared: Arc::new(Shared { id, device, backend }) }
    }

    /// The id used in messages.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The device it was loaded on.
    pub fn device(&self) -> DeviceId {
        self.shared.device
    }

    /// The driver's object.
    pub fn backend(&self) -> &Arc<dyn ExecutableBackend> {
        &self.shared.backend
    }

    /// Its entry points in ordinal order.
    pub fn entry_points(&self) -> &[EntryPointInfo] {
        self.shared.backend.entry_points()
    }

    /// The ordinal of the entry point called `name` (`NotFound` listing the names otherwise).
    pub fn entry_point(&self, name: &str) -> Result<u32> {
        match self.entry_points().iter().position(|e| e.name == name) {
            Some(at) => Ok(at as u32),
            None => {
                let names: Vec<&str> = self.entry_points().iter().map(|e| e.name.as_str()).collect();
                Err(Error::not_found(format!(
                    "executable {}: no entry point '{name}' (it has: {})",
                    self.shared.id,
                    names.join(", ")
                )))
            }
        }
    }

    /// The entry point at `ordinal` (`OutOfRange` otherwise).
    pub fn entry_point_info(&self, ordinal: u32) -> Result<&EntryPointInfo> {
        self.entry_points().get(ordinal as usize).ok_or_else(|| {
            Error::out_of_range(format!(
                "executable {}: entry point {ordinal} does not exist (it has {})",
                self.shared.id,
                self.entry_points().len()
            ))
        })
    }
}

impl fmt::Debug for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executable").field("id", &self.shared.id).field("entry_points", &self.entry_points()).finish()
    }
}
