//! Executables: kernels in a driver's format (PTX, cubin, fatbin for CUDA; native functions for
//! cpu-sim) with named entry points, each declaring its workgroup size and its ABI (how many buffer
//! bindings and 32-bit constants a dispatch passes).

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use crate::device::DeviceId;
use crate::driver::ExecutableBackend;
use crate::error::{Error, Result};
use crate::label::{Label, Unlabelled};

/// The format of an executable's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExecutableFormat {
    /// NVIDIA PTX text (JIT-compiled by the CUDA driver).
    Ptx,
    /// A CUDA cubin for one architecture.
    Cubin,
    /// A CUDA fatbin (several architectures and/or PTX).
    Fatbin,
    /// A SPIR-V module (Vulkan) following IREE's Vulkan ABI: binding `i` is the storage buffer at
    /// descriptor set 0, binding `i`; the constants are one push-constant block of 32-bit words;
    /// each entry point is the export of that name.
    Spirv,
}

/// What an entry point is and how to call it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EntryPointInfo {
    /// The symbol name.
    pub name: String,
    /// Threads per workgroup (x, y, z); on CUDA the block size.
    pub workgroup_size: [u32; 3],
    /// Buffer bindings a dispatch passes, in order.
    pub binding_count: usize,
    /// 32-bit constants a dispatch passes, in order.
    pub constant_count: usize,
    /// The kernel's parameters, in order, when they are not IREE's layout (every binding's
    /// pointer, then every constant as 32 bits): see [`with_params`](Self::with_params).
    pub params: Option<Arc<[KernelParam]>>,
    /// Bytes of dynamic workgroup (CUDA: shared) memory every launch gets.
    pub dynamic_workgroup_memory: u32,
}

/// One kernel parameter of an entry point's declared layout ([`EntryPointInfo::with_params`]).
/// Pointers and 64-bit constants take 8 bytes, 32-bit constants 4, as the kernel declares them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KernelParam {
    /// The device address of dispatch binding `n` (its offset applied).
    Binding(u32),
    /// A null pointer (Triton's trailing scratch pointers when a kernel needs no scratch).
    NullPointer,
    /// Dispatch constant `n`, as a 32-bit value.
    Constant32(u32),
    /// Dispatch constants `n` (low word) and `n + 1` (high word), as one 64-bit value.
    Constant64(u32),
}

impl KernelParam {
    /// Its size in the kernel's parameter buffer: 8 bytes, or 4 for a 32-bit constant.
    pub fn size(self) -> usize {
        match self {
            KernelParam::Constant32(_) => 4,
            _ => 8,
        }
    }
}

impl fmt::Display for KernelParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelParam::Binding(n) => write!(f, "binding {n} (8-byte pointer)"),
            KernelParam::NullPointer => write!(f, "a null pointer (8 bytes)"),
            KernelParam::Constant32(n) => write!(f, "constant {n} (4 bytes)"),
            KernelParam::Constant64(n) => write!(f, "constants {n} and {} as one 8-byte value", n + 1),
        }
    }
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
            params: None,
            dynamic_workgroup_memory: 0,
        }
    }

    /// The same entry point with a workgroup of `size` threads (x, y, z).
    pub fn with_workgroup_size(mut self, size: [u32; 3]) -> Self {
        self.workgroup_size = size;
        self
    }

    /// The same entry point with its kernel's parameters laid out as `params`, for kernels from
    /// compilers other than IREE's (Triton passes scalars between pointers and trailing scratch
    /// pointers). Each binding and constant may appear anywhere, more than once or not at all;
    /// [`check`](Self::check) refuses indices past the counts. Drivers that load a format with
    /// parameter sizes (CUDA) compare the layout with the kernel's at load.
    ///
    /// ```
    /// use hal::{EntryPointInfo, KernelParam as P};
    ///
    /// // Triton's add_kernel(x_ptr, y_ptr, out_ptr, n_elements, global_scratch, profile_scratch):
    /// let add = EntryPointInfo::new("add_kernel", 128, 3, 1).with_params([
    ///     P::Binding(0), P::Binding(1), P::Binding(2), P::Constant32(0), P::NullPointer, P::NullPointer,
    /// ]);
    /// assert!(add.check().is_ok());
    /// assert_eq!(add.param_layout().iter().map(|p| p.size()).sum::<usize>(), 44);
    /// ```
    pub fn with_params(mut self, params: impl IntoIterator<Item = KernelParam>) -> Self {
        self.params = Some(params.into_iter().collect());
        self
    }

    /// The same entry point with `bytes` of dynamic workgroup memory per launch (CUDA: dynamic
    /// shared memory, as Triton and IREE executables declare it).
    pub fn with_dynamic_workgroup_memory(mut self, bytes: u32) -> Self {
        self.dynamic_workgroup_memory = bytes;
        self
    }

    /// The kernel's parameters in order: the declared layout, or IREE's (the bindings' pointers,
    /// then the constants as 32-bit values).
    pub fn param_layout(&self) -> Vec<KernelParam> {
        match &self.params {
            Some(params) => params.to_vec(),
            None => (0..self.binding_count as u32)
                .map(KernelParam::Binding)
                .chain((0..self.constant_count as u32).map(KernelParam::Constant32))
                .collect(),
        }
    }

    /// Checks the declared layout against the counts: `InvalidArgument` naming the entry point and
    /// the parameter for a binding or constant past them.
    pub fn check(&self) -> Result<()> {
        let Some(params) = &self.params else { return Ok(()) };
        let (bindings, constants) = (self.binding_count as u64, self.constant_count as u64);
        for (index, param) in params.iter().enumerate() {
            let fits = match *param {
                KernelParam::Binding(n) => u64::from(n) < bindings,
                KernelParam::NullPointer => true,
                KernelParam::Constant32(n) => u64::from(n) < constants,
                KernelParam::Constant64(n) => u64::from(n) + 1 < constants,
            };
            if !fits {
                return Err(Error::invalid_argument(format!(
                    "entry point '{}': parameter {index} is {param}, but dispatches pass {bindings} bindings \
                     and {constants} constants",
                    self.name
                )));
            }
        }
        Ok(())
    }
}

/// What one invocation of a native kernel sees: one workgroup of a dispatch.
#[non_exhaustive]
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
    /// This workgroup's dynamic workgroup memory: the entry point's
    /// [`dynamic_workgroup_memory`](EntryPointInfo::dynamic_workgroup_memory) bytes as whole
    /// words, zeroed when the workgroup starts and private to it (empty when none is declared).
    pub workgroup_memory: &'a [AtomicU32],
}

impl<'a> NativeInvocation<'a> {
    /// Workgroup `workgroup_id` of a grid of `workgroup_count` workgroups of `workgroup_size`
    /// threads, with the dispatch's `constants` and `bindings` (drivers build these).
    pub fn new(
        workgroup_id: [u32; 3],
        workgroup_count: [u32; 3],
        workgroup_size: [u32; 3],
        constants: &'a [u32],
        bindings: &'a [NativeBinding],
    ) -> Self {
        NativeInvocation { workgroup_id, workgroup_count, workgroup_size, constants, bindings, workgroup_memory: &[] }
    }

    /// The same invocation with `memory` as its workgroup memory.
    pub fn with_workgroup_memory(mut self, memory: &'a [AtomicU32]) -> Self {
        self.workgroup_memory = memory;
        self
    }
}

/// A buffer range bound to a native kernel.
///
/// # Concurrency
/// The workgroups of a dispatch run in parallel on several threads over the same bindings, and a
/// kernel may legally (if racily) have two workgroups touch the same element, as on a GPU. So every
/// access a binding makes is a relaxed atomic: a racing access gives one of the written values, never
/// undefined behaviour. The rule, shared with [`Mapping`](crate::Mapping) and the cpu-sim driver's
/// transfers (`hal::driver::shared_memory`, for driver authors): in a binding whose address is 4-byte aligned, each `u32`
/// element is one `AtomicU32` access (no torn values); in a misaligned binding (an unaligned binding
/// offset) each element is four `AtomicU8` accesses, so a racing store can tear it byte-wise.
/// On x86-64 and AArch64 a relaxed load or store compiles to a plain move, so aligned access costs
/// nothing over a raw read.
///
/// What stays outside the rule: Rust's memory model also forbids *racing atomic accesses of
/// different sizes* to the same bytes (one side `AtomicU8`, the other `AtomicU32`). That happens only
/// when a misaligned binding or a mapping's unaligned edge races with an aligned access of the same
/// word (two bindings aliasing one buffer at offsets of different alignment, written concurrently
/// without a barrier). Keep racing accesses of one word at one alignment; with aligned binding
/// offsets (what every suite and tool here uses) it cannot arise.
///
/// # Fast access
/// [`load_u32`](Self::load_u32) and friends check one element per call. For whole rows use the slice
/// operations: [`as_atomic_u32`](Self::as_atomic_u32) (the binding as `&[AtomicU32]`, `None` when
/// misaligned) or the bulk copies [`load_u32s`](Self::load_u32s), [`store_u32s`](Self::store_u32s),
/// [`load_f32s`](Self::load_f32s), [`store_f32s`](Self::store_f32s), which check the range once and
/// copy in a tight loop (and work on misaligned bindings too).
///
/// # Out of range
/// An access outside the binding does nothing and says so (`None` or `false`, which must be used),
/// and the binding keeps the first such access ([`first_out_of_range`](Self::first_out_of_range)):
/// cpu-sim fails the dispatch with it, naming the binding, the index and the binding's size, even
/// when the kernel ignored the result and returned `Ok`.
///
/// # Construction
/// Only a driver builds one, through the `unsafe` [`NativeBinding::new`]: its loads and stores are
/// safe because that constructor's contract makes the range valid for as long as the binding lives.
/// Safe code cannot forge one:
///
/// ```compile_fail,E0133
/// #![forbid(unsafe_code)]
/// // Were this to compile, it would write to a dangling address.
/// let forged = hal::NativeBinding::new(std::ptr::dangling_mut::<u8>(), 4);
/// let _ = forged.store_u32(0, 1);
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
    /// Whether `ptr` is 4-byte aligned, worked out once: the element methods run per element, and
    /// an unoptimized build (an embedder's debug build) pays a chain of calls for each step.
    aligned: bool,
    /// The first load or store past the end, kept so that the driver fails the dispatch even when
    /// the kernel ignored the `false` or `None` it got.
    out_of_range: OnceLock<OutOfRangeAccess>,
}

/// A load or store past a [`NativeBinding`]'s end, as the binding records the first one
/// ([`NativeBinding::first_out_of_range`]). Its `Display` is one line: "out-of-range store of
/// element 64 in a binding of 64 bytes (16 u32 elements)".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutOfRangeAccess {
    /// A store (else a load).
    pub store: bool,
    /// The first `u32` element it addressed.
    pub first: usize,
    /// How many elements it addressed.
    pub count: usize,
    /// The binding's length in bytes.
    pub binding_bytes: usize,
}

impl fmt::Display for OutOfRangeAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.store { "store" } else { "load" };
        write!(f, "out-of-range {kind} of ")?;
        match self.count {
            1 => write!(f, "element {}", self.first)?,
            count => write!(f, "{count} elements from element {}", self.first)?,
        }
        write!(f, " in a binding of {} bytes ({} u32 elements)", self.binding_bytes, self.binding_bytes / 4)
    }
}

// SAFETY: `new`'s caller keeps the memory valid on every thread the binding reaches, and every
// access through a binding is atomic, so sharing it across workgroup threads cannot cause a data race.
unsafe impl Send for NativeBinding {}
// SAFETY: see `Send`.
unsafe impl Sync for NativeBinding {}

impl NativeBinding {
    /// A binding of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr` must be non-null and valid for reads and writes of `len` bytes (allocated, initialized)
    /// whenever the binding's loads and stores run, on every thread it is shared with, and every
    /// access to those bytes that may race with the binding's own (other workgroups, other bindings,
    /// host mappings, transfers) must be atomic: no `&`/`&mut [u8]` to them and no plain copy may
    /// overlap the binding's life unless ordered before or after it. A driver keeps this by holding
    /// the bound buffer's memory until the dispatch has finished, by doing its own transfers through
    /// `hal::driver::shared_memory`, and by giving kernels only `&NativeBinding`s, which they cannot
    /// keep past their call (a binding is neither `Copy` nor `Clone`).
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        NativeBinding { ptr, len, aligned: ptr.cast::<u32>().is_aligned(), out_of_range: OnceLock::new() }
    }

    /// The first load or store (of the element methods and the bulk copies) that fell outside the
    /// binding, if any. cpu-sim fails the dispatch with it even when the kernel returned `Ok`.
    pub fn first_out_of_range(&self) -> Option<OutOfRangeAccess> {
        self.out_of_range.get().copied()
    }

    /// Keeps `first .. first + count` as the binding's first out-of-range access (if it is).
    #[cold]
    fn record_out_of_range(&self, store: bool, first: usize, count: usize) {
        let _ = self.out_of_range.set(OutOfRangeAccess { store, first, count, binding_bytes: self.len });
    }

    /// Address of the first bound byte (for handing to foreign code; dereferencing it is `unsafe`,
    /// and racing accesses through it must be atomic).
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

    /// Whether the binding starts at a 4-byte-aligned address (then [`as_atomic_u32`](Self::as_atomic_u32)
    /// is `Some` and element accesses cannot tear).
    pub fn is_aligned_u32(&self) -> bool {
        self.ptr.cast::<u32>().is_aligned()
    }

    /// The binding's whole `u32` elements as atomics, or `None` when the binding is not 4-byte
    /// aligned. Use relaxed loads and stores: they compile to plain moves.
    pub fn as_atomic_u32(&self) -> Option<&[AtomicU32]> {
        if !self.is_aligned_u32() {
            return None;
        }
        // SAFETY: aligned (checked), non-null and valid for `len >= 4 * len_u32` bytes for as long
        // as `self` lives (`new`'s contract), and every racing access is atomic (same contract);
        // `AtomicU32` has the size and alignment of `u32`.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.cast::<AtomicU32>(), self.len_u32()) })
    }

    /// The binding's bytes as atomics (always available; mixing them with `u32` accesses of the
    /// same word while they race is outside the rule in the type's docs).
    pub fn as_atomic_u8(&self) -> &[AtomicU8] {
        // SAFETY: non-null and valid for `len` bytes while `self` lives, racing accesses atomic
        // (`new`'s contract); `AtomicU8` has the layout of `u8`.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<AtomicU8>(), self.len) }
    }

    /// Element `index` of a misaligned binding, byte by byte.
    fn load_bytes(&self, index: usize) -> u32 {
        let bytes = &self.as_atomic_u8()[index * 4..index * 4 + 4];
        u32::from_ne_bytes(std::array::from_fn(|at| bytes[at].load(Ordering::Relaxed)))
    }

    /// Stores element `index` of a misaligned binding, byte by byte.
    fn store_bytes(&self, index: usize, value: u32) {
        let bytes = &self.as_atomic_u8()[index * 4..index * 4 + 4];
        for (atom, byte) in bytes.iter().zip(value.to_ne_bytes()) {
            atom.store(byte, Ordering::Relaxed);
        }
    }

    /// Loads element `index` as a `u32`, or `None` when out of range (which also fails the dispatch
    /// on cpu-sim: see [`first_out_of_range`](Self::first_out_of_range)).
    #[inline]
    #[must_use = "`None` means the index is outside the binding"]
    pub fn load_u32(&self, index: usize) -> Option<u32> {
        if index >= self.len / 4 {
            self.record_out_of_range(false, index, 1);
            return None;
        }
        if !self.aligned {
            return Some(self.load_bytes(index));
        }
        // SAFETY: the word is 4-aligned and inside the binding (both checked), valid while `self`
        // lives and raced only atomically (`new`'s contract); `AtomicU32` has `u32`'s layout.
        Some(unsafe { &*self.ptr.cast::<AtomicU32>().add(index) }.load(Ordering::Relaxed))
    }

    /// Stores `value` at element `index`; `false` when out of range (which also fails the dispatch
    /// on cpu-sim: see [`first_out_of_range`](Self::first_out_of_range)).
    #[inline]
    #[must_use = "`false` means the index is outside the binding and nothing was stored"]
    pub fn store_u32(&self, index: usize, value: u32) -> bool {
        if index >= self.len / 4 {
            self.record_out_of_range(true, index, 1);
            return false;
        }
        if !self.aligned {
            self.store_bytes(index, value);
            return true;
        }
        // SAFETY: as in `load_u32`.
        unsafe { &*self.ptr.cast::<AtomicU32>().add(index) }.store(value, Ordering::Relaxed);
        true
    }

    /// Loads element `index` as an `f32`.
    #[inline]
    #[must_use = "`None` means the index is outside the binding"]
    pub fn load_f32(&self, index: usize) -> Option<f32> {
        self.load_u32(index).map(f32::from_bits)
    }

    /// Stores `value` at element `index` as an `f32`; `false` when out of range.
    #[inline]
    #[must_use = "`false` means the index is outside the binding and nothing was stored"]
    pub fn store_f32(&self, index: usize, value: f32) -> bool {
        self.store_u32(index, value.to_bits())
    }

    /// Whether elements `first .. first + count` are inside the binding.
    fn in_range(&self, first: usize, count: usize) -> bool {
        first.checked_add(count).is_some_and(|end| end <= self.len_u32())
    }

    /// Loads elements `first .. first + out.len()` into `out`; `false` (and `out` untouched) when
    /// the range is not inside the binding.
    #[inline]
    #[must_use = "`false` means the range is outside the binding and nothing was loaded"]
    pub fn load_u32s(&self, first: usize, out: &mut [u32]) -> bool {
        self.load_with(first, out, |bits| bits)
    }

    /// Stores `values` at elements `first ..`; `false` (and nothing stored) when the range is not
    /// inside the binding.
    #[inline]
    #[must_use = "`false` means the range is outside the binding and nothing was stored"]
    pub fn store_u32s(&self, first: usize, values: &[u32]) -> bool {
        self.store_with(first, values, |&value| value)
    }

    /// Loads elements `first .. first + out.len()` as `f32`s; `false` when out of range.
    #[inline]
    #[must_use = "`false` means the range is outside the binding and nothing was loaded"]
    pub fn load_f32s(&self, first: usize, out: &mut [f32]) -> bool {
        self.load_with(first, out, f32::from_bits)
    }

    /// Stores `values` as `f32` bits at elements `first ..`; `false` when out of range.
    #[inline]
    #[must_use = "`false` means the range is outside the binding and nothing was stored"]
    pub fn store_f32s(&self, first: usize, values: &[f32]) -> bool {
        self.store_with(first, values, |value| value.to_bits())
    }

    #[inline]
    fn load_with<T>(&self, first: usize, out: &mut [T], convert: impl Fn(u32) -> T) -> bool {
        if !self.in_range(first, out.len()) {
            self.record_out_of_range(false, first, out.len());
            return false;
        }
        match self.as_atomic_u32() {
            Some(words) => {
                let words = &words[first..first + out.len()];
                for (slot, word) in out.iter_mut().zip(words) {
                    *slot = convert(word.load(Ordering::Relaxed));
                }
            }
            None => {
                for (at, slot) in out.iter_mut().enumerate() {
                    *slot = convert(self.load_bytes(first + at));
                }
            }
        }
        true
    }

    #[inline]
    fn store_with<T>(&self, first: usize, values: &[T], convert: impl Fn(&T) -> u32) -> bool {
        if !self.in_range(first, values.len()) {
            self.record_out_of_range(true, first, values.len());
            return false;
        }
        match self.as_atomic_u32() {
            Some(words) => {
                for (value, word) in values.iter().zip(&words[first..first + values.len()]) {
                    word.store(convert(value), Ordering::Relaxed);
                }
            }
            None => {
                for (at, value) in values.iter().enumerate() {
                    self.store_bytes(first + at, convert(value));
                }
            }
        }
        true
    }
}

/// A native kernel: runs one workgroup; an `Err` (or a panic) fails the dispatch's signals.
pub type NativeKernel = Arc<dyn Fn(&NativeInvocation<'_>) -> std::result::Result<(), String> + Send + Sync>;

/// A native entry point: its ABI and its function.
#[derive(Clone)]
#[non_exhaustive]
pub struct NativeEntryPoint {
    /// The ABI.
    pub info: EntryPointInfo,
    /// The function run per workgroup.
    pub kernel: NativeKernel,
}

impl NativeEntryPoint {
    /// Entry point `info`, run per workgroup by `kernel`.
    pub fn new(info: EntryPointInfo, kernel: NativeKernel) -> Self {
        NativeEntryPoint { info, kernel }
    }
}

impl fmt::Debug for NativeEntryPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.info.fmt(f)
    }
}

/// What to load an executable from.
#[derive(Clone, Debug)]
#[non_exhaustive]
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

/// A loaded executable: entry points a command buffer dispatches by ordinal. Cheap to clone.
///
/// ```
/// use std::sync::Arc;
/// use hal::{EntryPointInfo, ExecutableSource, NativeEntryPoint, NativeKernel, StatusCode};
///
/// let device = driver_cpu_sim::create_device()?;
/// let noop: NativeKernel = Arc::new(|_| Ok(()));
/// let entries = vec![
///     NativeEntryPoint::new(EntryPointInfo::new("first", 64, 1, 0), noop.clone()),
///     NativeEntryPoint::new(EntryPointInfo::new("second", 32, 2, 1), noop),
/// ];
/// let executable = device.load_executable(&ExecutableSource::Native(entries))?;
/// assert_eq!(executable.entry_point("second")?, 1);
/// assert_eq!(executable.entry_point_info(1)?.constant_count, 1);
/// assert_eq!(executable.entry_point("third").unwrap_err().code(), StatusCode::NotFound);
/// # Ok::<(), hal::Error>(())
/// ```
#[derive(Clone)]
pub struct Executable {
    shared: Arc<Shared>,
}

struct Shared {
    id: u64,
    device: DeviceId,
    backend: Arc<dyn ExecutableBackend>,
    label: Label,
}

static NEXT_EXECUTABLE_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Executable {
    /// Wraps a driver's executable. Drivers' `load_executable` results pass through here.
    pub(crate) fn wrap(device: DeviceId, backend: Arc<dyn ExecutableBackend>) -> Self {
        let id = NEXT_EXECUTABLE_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Executable { shared: Arc::new(Shared { id, device, backend, label: Label::default() }) }
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
    pub(crate) fn backend(&self) -> &Arc<dyn ExecutableBackend> {
        &self.shared.backend
    }

    /// Labels the executable for messages, [`Device::report`](crate::Device::report) and traces
    /// ("executable 7 'name'"). Set once: `FailedPrecondition` when it has a label already,
    /// `InvalidArgument` for an empty label, one over [`MAX_LABEL_BYTES`](crate::MAX_LABEL_BYTES) bytes or one with control characters.
    pub fn set_label(&self, label: impl Into<String>) -> Result<()> {
        self.shared.label.set(&Unlabelled("executable", self.shared.id), label.into())
    }

    /// The label, if one was set.
    pub fn label(&self) -> Option<&str> {
        self.shared.label.get()
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
                Err(Error::not_found(format!("{}: no entry point '{name}' (it has: {})", self, names.join(", "))))
            }
        }
    }

    /// The entry point at `ordinal` (`OutOfRange` otherwise).
    pub fn entry_point_info(&self, ordinal: u32) -> Result<&EntryPointInfo> {
        self.entry_points().get(ordinal as usize).ok_or_else(|| {
            Error::out_of_range(format!(
                "{}: entry point {ordinal} does not exist (it has {})",
                self,
                self.entry_points().len()
            ))
        })
    }
}

impl fmt::Display for Executable {
    /// "executable N", or "executable N 'label'" when it has a label.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.label.write_name(f, "executable", self.shared.id)
    }
}

impl fmt::Debug for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executable").field("id", &self.shared.id).field("entry_points", &self.entry_points()).finish()
    }
}
