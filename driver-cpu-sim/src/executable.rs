//! cpu-sim executables: tables of native kernels, given in-process (`ExecutableSource::Native`) or
//! loaded from a shared library (`ExecutableSource::SharedLibrary`) with libloading.
//!
//! # Shared library ABI
//!
//! The library exports `hal_cpu_sim_kernel_table`, an `extern "C" fn() -> *const KernelTable`.
//! The `#[repr(C)]` types live in the `cpu-sim-kernel-abi` crate, which a Rust kernel library
//! depends on too (a C library declares the same layout):
//!
//! ```text
//! KernelTable { abi_version: u32 (1 or 2), count: u32, entries: *const KernelEntry }
//! KernelEntry { name: *const c_char (NUL-terminated UTF-8), workgroup_size: [u32; 3],
//!               binding_count: u32, constant_count: u32,
//!               function: Option<unsafe extern "C" fn(*const KernelArgs) -> i32> }
//! KernelArgs  { workgroup_id: [u32; 3], workgroup_count: [u32; 3], workgroup_size: [u32; 3],
//!               constants: *const u32, constant_count: u32,
//!               bindings: *const *mut u8, binding_lengths: *const u64, binding_count: u32 }
//! KernelCall  { args: KernelArgs, set_error: fn(*const KernelArgs, *const c_char), error_context }
//! ```
//!
//! `function` runs one workgroup, possibly concurrently with others of the same dispatch; it returns 0
//! for success, anything else fails the dispatch. It must not unwind. Its argument always points to a
//! `KernelCall` (a version-1 function reads only the `KernelArgs` at its start): a version-2 function
//! may call `set_error` before it returns nonzero, and the dispatch's error carries that message. The table is read once, at
//! load: names and sizes are copied out, and the library stays loaded as long as the executable
//! (and every kernel closure taken from it) lives.
//!
//! Entry points of either source are checked: at least one, names non-empty and unique, each
//! workgroup dimension nonzero and within [`MAX_WORKGROUP_SIZE`], and at most
//! [`MAX_WORKGROUP_THREADS`] threads in all.

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::{CStr, c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use cpu_sim_kernel_abi::{
    ABI_VERSION, KERNEL_TABLE_SYMBOL, KernelArgs, KernelCall, KernelFn, KernelTable, KernelTableFn, MAX_ERROR_MESSAGE,
    MIN_ABI_VERSION,
};
use hal::driver::ExecutableBackend;
use hal::{
    EntryPointInfo, Error, ExecutableFormat, ExecutableSource, NativeEntryPoint, NativeInvocation, NativeKernel,
};

/// The largest workgroup (x*y*z threads) an entry point may declare.
pub const MAX_WORKGROUP_THREADS: u32 = 1024;

/// The most dynamic workgroup memory an entry point may declare: the most shared memory a current
/// CUDA GPU gives one block, so kernels written against cpu-sim fit a GPU too.
pub const MAX_WORKGROUP_MEMORY: u32 = 227 * 1024;

/// The largest workgroup size per axis an entry point may declare (CUDA's block limits, so what
/// loads here also fits a GPU).
pub const MAX_WORKGROUP_SIZE: [u32; 3] = [1024, 1024, 64];

/// The largest workgroup count per axis of a dispatch (CUDA's grid limits: the device info reports
/// them and `CommandBuffer::dispatch` refuses more).
pub const MAX_WORKGROUP_COUNT: [u32; 3] = [(1 << 31) - 1, 65535, 65535];

/// The most entries a library's table may declare (a sanity bound against garbage counts).
const MAX_TABLE_ENTRIES: u32 = 1 << 16;

/// Bindings passed to a library kernel without a heap allocation.
const INLINE_BINDINGS: usize = 8;

/// A loaded cpu-sim executable: entry points and their kernels, in ordinal order.
pub struct NativeExecutable {
    entry_points: Vec<EntryPointInfo>,
    kernels: Vec<NativeKernel>,
    /// Per entry point, what one workgroup took the last time one was timed, in nanoseconds (0:
    /// never timed): how a small grid of it is placed without timing one first (`commands.rs`).
    workgroup_ns: Vec<AtomicU64>,
    /// The library the kernels live in, when loaded from one (kept loaded while `self` lives).
    library: Option<Arc<LoadedLibrary>>,
}

/// A shared library kept loaded, and where it came from.
struct LoadedLibrary {
    path: PathBuf,
    _library: libloading::Library,
}

impl NativeExecutable {
    /// Loads `source`: native kernels or a kernel library. Driver bytes (PTX, cubin, fatbin) are
    /// `Unimplemented`: cpu-sim has no GPU to run them on.
    pub fn load(source: &ExecutableSource) -> hal::Result<Self> {
        match source {
            ExecutableSource::Native(entries) => Self::from_native(entries),
            ExecutableSource::SharedLibrary(path) => Self::from_shared_library(path),
            ExecutableSource::Bytes { format, .. } => {
                let name = match format {
                    ExecutableFormat::Ptx => "PTX",
                    ExecutableFormat::Cubin => "cubin",
                    ExecutableFormat::Fatbin => "fatbin",
                    ExecutableFormat::Spirv => "SPIR-V",
                    _ => "this format",
                };
                Err(Error::unimplemented(format!(
                    "cpu-sim cannot load {name}; it runs native kernels (ExecutableSource::Native) or a shared \
                     library exporting `{KERNEL_TABLE_SYMBOL}` (ExecutableSource::SharedLibrary)"
                )))
            }
            other => Err(Error::unimplemented(format!(
                "cpu-sim cannot load an executable of kind {}",
                hal::ExecutableKind::of(other)
            ))),
        }
    }

    /// An executable of in-process kernels.
    pub fn from_native(entries: &[NativeEntryPoint]) -> hal::Result<Self> {
        let entry_points: Vec<EntryPointInfo> = entries.iter().map(|e| e.info.clone()).collect();
        validate_entry_points(&entry_points, "native executable")?;
        Ok(NativeExecutable {
            workgroup_ns: entry_points.iter().map(|_| AtomicU64::new(0)).collect(),
            entry_points,
            kernels: entries.iter().map(|e| e.kernel.clone()).collect(),
            library: None,
        })
    }

    /// Loads the kernel library at `path` (see the module docs for its ABI).
    ///
    /// `Unavailable` when the library cannot be loaded, `NotFound` when it lacks the table symbol,
    /// `InvalidArgument` for a table of another ABI version or with bad entries; each names the path.
    pub fn from_shared_library(path: &Path) -> hal::Result<Self> {
        let shown = path.display();
        // SAFETY: loading runs the library's initialisers. The caller chose this library as a kernel
        // library, which the ABI requires to be safe to load; we trust it as we trust its kernels.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| {
            Error::unavailable(format!("kernel library {shown}: cannot be loaded: {}", loader_text(&e)))
        })?;
        let table_fn: KernelTableFn = {
            // SAFETY: the ABI defines the symbol's type as `KernelTableFn`; the symbol is copied out as
            // a plain function pointer, which stays valid because `library` is kept with it below.
            let symbol = unsafe { library.get::<KernelTableFn>(KERNEL_TABLE_SYMBOL) }.map_err(|e| {
                Error::not_found(format!(
                    "kernel library {shown}: no symbol `{KERNEL_TABLE_SYMBOL}`: {}",
                    loader_text(&e)
                ))
            })?;
            *symbol
        };
        // SAFETY: a function of the library with the ABI's signature; it takes no arguments.
        let table = unsafe { table_fn() };
        let origin = format!("kernel library {shown}");
        // SAFETY: the ABI promises the returned table (when not null) and what it points to stay valid
        // while the library is loaded, and `library` is alive for this whole call.
        let entries = unsafe { read_table(table, &origin) }?;
        let library = Arc::new(LoadedLibrary { path: path.to_path_buf(), _library: library });
        let entry_points: Vec<EntryPointInfo> = entries.iter().map(|(info, _)| info.clone()).collect();
        let kernels =
            entries.into_iter().map(|(info, function)| library_kernel(library.clone(), info.name, function)).collect();
        let workgroup_ns = entry_points.iter().map(|_| AtomicU64::new(0)).collect();
        Ok(NativeExecutable { entry_points, kernels, workgroup_ns, library: Some(library) })
    }

    /// The entry point and kernel at `ordinal`, with its last timed workgroup's nanoseconds (see
    /// `workgroup_ns`), or `None` when out of range.
    pub fn entry(&self, ordinal: u32) -> Option<(&EntryPointInfo, &NativeKernel, &AtomicU64)> {
        let at = ordinal as usize;
        Some((self.entry_points.get(at)?, self.kernels.get(at)?, self.workgroup_ns.get(at)?))
    }

    /// The kernel at `ordinal`, or `None` when out of range.
    #[cfg(test)]
    pub fn kernel(&self, ordinal: u32) -> Option<&NativeKernel> {
        self.kernels.get(ordinal as usize)
    }

    /// The library the kernels came from, if any.
    pub fn library_path(&self) -> Option<&Path> {
        self.library.as_ref().map(|l| l.path.as_path())
    }
}

impl ExecutableBackend for NativeExecutable {
    fn entry_points(&self) -> &[EntryPointInfo] {
        &self.entry_points
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl std::fmt::Debug for NativeExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeExecutable")
            .field("entry_points", &self.entry_points)
            .field("library", &self.library_path())
            .finish()
    }
}

/// A loader error with its causes: libloading's own text is only "dlopen failed" or "dlsym
/// failed"; the system loader's explanation is the error's source.
fn loader_text(error: &libloading::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// Checks the rules of the module docs; `origin` names the executable in messages.
fn validate_entry_points(entry_points: &[EntryPointInfo], origin: &str) -> hal::Result<()> {
    if entry_points.is_empty() {
        return Err(Error::invalid_argument(format!("{origin}: has no entry points")));
    }
    let mut names = HashSet::new();
    for (ordinal, info) in entry_points.iter().enumerate() {
        if info.name.is_empty() {
            return Err(Error::invalid_argument(format!("{origin}: entry point {ordinal} has an empty name")));
        }
        if !names.insert(info.name.as_str()) {
            return Err(Error::invalid_argument(format!(
                "{origin}: entry point name '{}' appears more than once",
                info.name
            )));
        }
        let size = info.workgroup_size;
        for (axis, (&n, &limit)) in ["x", "y", "z"].iter().zip(size.iter().zip(&MAX_WORKGROUP_SIZE)) {
            if n == 0 || n > limit {
                return Err(Error::invalid_argument(format!(
                    "{origin}: entry point '{}' has workgroup size {size:?}; {axis} = {n} must be 1 to {limit}",
                    info.name
                )));
            }
        }
        if info.dynamic_workgroup_memory > MAX_WORKGROUP_MEMORY {
            return Err(Error::resource_exhausted(format!(
                "{origin}: entry point '{}' declares {} bytes of dynamic workgroup memory; the device \
                 gives a workgroup at most {MAX_WORKGROUP_MEMORY}",
                info.name, info.dynamic_workgroup_memory
            )));
        }
        let threads = size.iter().try_fold(1u32, |acc, &n| acc.checked_mul(n));
        if threads.is_none_or(|t| t > MAX_WORKGROUP_THREADS) {
            return Err(Error::invalid_argument(format!(
                "{origin}: entry point '{}' has workgroup size {size:?}; x*y*z must be at most \
                 {MAX_WORKGROUP_THREADS}",
                info.name
            )));
        }
    }
    Ok(())
}

/// Copies the entries out of a library's table and checks them.
///
/// # Safety
/// `table` is null or points to a `KernelTable` that, with its entries and names, is valid for the call.
unsafe fn read_table(table: *const KernelTable, origin: &str) -> hal::Result<Vec<(EntryPointInfo, KernelFn)>> {
    // SAFETY: null or valid, per the caller.
    let Some(table) = (unsafe { table.as_ref() }) else {
        return Err(Error::invalid_argument(format!("{origin}: `{KERNEL_TABLE_SYMBOL}` returned null")));
    };
    if !(MIN_ABI_VERSION..=ABI_VERSION).contains(&table.abi_version) {
        return Err(Error::invalid_argument(format!(
            "{origin}: kernel table has ABI version {}, cpu-sim loads {MIN_ABI_VERSION} to {ABI_VERSION}",
            table.abi_version
        )));
    }
    if table.count > MAX_TABLE_ENTRIES || (table.count > 0 && table.entries.is_null()) {
        return Err(Error::invalid_argument(format!(
            "{origin}: kernel table declares {} entries at {:p}",
            table.count, table.entries
        )));
    }
    let raw_entries = if table.count == 0 {
        &[][..]
    } else {
        // SAFETY: non-null (checked) and, per the caller, `count` valid entries.
        unsafe { std::slice::from_raw_parts(table.entries, table.count as usize) }
    };
    let mut entries = Vec::with_capacity(raw_entries.len());
    for (ordinal, raw) in raw_entries.iter().enumerate() {
        if raw.name.is_null() {
            return Err(Error::invalid_argument(format!("{origin}: entry {ordinal} has a null name")));
        }
        // SAFETY: non-null (checked); the ABI requires a NUL-terminated string valid while loaded.
        let name = unsafe { CStr::from_ptr(raw.name) }
            .to_str()
            .map_err(|e| Error::invalid_argument(format!("{origin}: entry {ordinal} name is not UTF-8: {e}")))?;
        let Some(function) = raw.function else {
            return Err(Error::invalid_argument(format!("{origin}: entry '{name}' has a null function")));
        };
        let info = EntryPointInfo::new(name, 1, raw.binding_count as usize, raw.constant_count as usize)
            .with_workgroup_size(raw.workgroup_size);
        entries.push((info, function));
    }
    let infos: Vec<EntryPointInfo> = entries.iter().map(|(info, _)| info.clone()).collect();
    validate_entry_points(&infos, origin)?;
    Ok(entries)
}

/// A `NativeKernel` that calls `function` of `library` through the C ABI.
fn library_kernel(library: Arc<LoadedLibrary>, name: String, function: KernelFn) -> NativeKernel {
    Arc::new(move |invocation: &NativeInvocation<'_>| {
        // Keeps the library loaded as long as any closure can call into it.
        let _library = &library;
        match call_library_kernel(function, invocation)? {
            (0, _) => Ok(()),
            (status, None) => Err(format!("kernel '{name}' returned status {status}")),
            (status, Some(message)) => Err(format!("kernel '{name}' failed (status {status}): {message}")),
        }
    })
}

/// The `set_error` of every `KernelCall`: keeps `message` in the call's `error_context`, a
/// `RefCell<Option<String>>` of `call_library_kernel`.
///
/// # Safety
/// `args` is the start of a `KernelCall` built by `call_library_kernel` whose call is running;
/// `message` is null or a NUL-terminated string.
unsafe extern "C" fn set_error(args: *const KernelArgs, message: *const c_char) {
    if args.is_null() || message.is_null() {
        return;
    }
    // SAFETY: per the caller, `args` starts a live `KernelCall` whose context is the call's cell.
    let slot = unsafe { &*(*args.cast::<KernelCall>()).error_context.cast::<RefCell<Option<String>>>() };
    // SAFETY: non-null, NUL-terminated per the caller.
    let bytes = unsafe { CStr::from_ptr(message) }.to_bytes();
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_ERROR_MESSAGE)]).into_owned();
    // A kernel that calls back from inside a `set_error` (it cannot) would find the cell borrowed.
    if let Ok(mut slot) = slot.try_borrow_mut() {
        *slot = Some(text);
    }
}

/// Builds the `KernelCall` for `invocation` and calls `function`: its status, and the message it set.
fn call_library_kernel(function: KernelFn, invocation: &NativeInvocation<'_>) -> Result<(i32, Option<String>), String> {
    let count = invocation.bindings.len();
    let too_many = |what: &str| format!("{count} {what} do not fit the kernel ABI's u32 count");
    let binding_count = u32::try_from(count).map_err(|_| too_many("bindings"))?;
    let constant_count = u32::try_from(invocation.constants.len()).map_err(|_| too_many("constants"))?;
    let mut inline_ptrs = [std::ptr::null_mut::<u8>(); INLINE_BINDINGS];
    let mut inline_lens = [0u64; INLINE_BINDINGS];
    let (mut heap_ptrs, mut heap_lens) = (Vec::new(), Vec::new());
    let (ptrs, lens): (&mut [*mut u8], &mut [u64]) = if count <= INLINE_BINDINGS {
        (&mut inline_ptrs[..count], &mut inline_lens[..count])
    } else {
        heap_ptrs.resize(count, std::ptr::null_mut());
        heap_lens.resize(count, 0);
        (&mut heap_ptrs, &mut heap_lens)
    };
    for ((ptr, len), binding) in ptrs.iter_mut().zip(lens.iter_mut()).zip(invocation.bindings) {
        *ptr = binding.ptr();
        *len = binding.len() as u64;
    }
    let message = RefCell::new(None::<String>);
    let args = KernelArgs {
        workgroup_id: invocation.workgroup_id,
        workgroup_count: invocation.workgroup_count,
        workgroup_size: invocation.workgroup_size,
        constants: invocation.constants.as_ptr(),
        constant_count,
        bindings: ptrs.as_ptr(),
        binding_lengths: lens.as_ptr(),
        binding_count,
    };
    let call = KernelCall { args, set_error, error_context: std::ptr::from_ref(&message).cast_mut().cast::<c_void>() };
    // SAFETY: `call` and the arrays it points to live until the call returns and hold the counts they
    // state; the bindings address live buffer memory the dispatch keeps alive; the function comes
    // from a library that the calling closure keeps loaded; `set_error` writes only through the
    // `RefCell` behind `error_context`.
    let status = unsafe { function(std::ptr::from_ref(&call).cast::<KernelArgs>()) };
    Ok((status, message.into_inner()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cpu_sim_kernel_abi::KernelEntry;
    use hal::{ExecutableKind, StatusCode};

    /// The example kernel library built by cargo for the dev-dependency, beside this test binary.
    pub(crate) fn example_library_path() -> PathBuf {
        let name = format!("{}cpu_sim_example_kernels{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
        let exe = std::env::current_exe().expect("test executable path");
        let deps = exe.parent().expect("test executable has a directory");
        let candidates = [deps.join(&name), deps.join("..").join(&name)];
        candidates
            .iter()
            .find(|p| p.exists())
            .cloned()
            .unwrap_or_else(|| panic!("{name} not built; looked in {candidates:?}"))
    }

    fn ok_kernel() -> NativeKernel {
        Arc::new(|_: &NativeInvocation<'_>| Ok(()))
    }

    fn native(name: &str, size: [u32; 3]) -> NativeEntryPoint {
        let mut info = EntryPointInfo::new(name, 1, 0, 0);
        info.workgroup_size = size;
        NativeEntryPoint::new(info, ok_kernel())
    }

    #[test]
    fn native_entry_points_are_validated() {
        let exe = NativeExecutable::load(&ExecutableSource::Native(vec![native("a", [8, 8, 16]), native("b", [1; 3])]))
            .unwrap();
        assert_eq!(exe.entry_points().len(), 2);
        assert_eq!(exe.entry(1).unwrap().0.name, "b");
        assert!(exe.entry(2).is_none() && exe.library_path().is_none());

        let cases: [(Vec<NativeEntryPoint>, &str); 7] = [
            (vec![], "no entry points"),
            (vec![native("", [1; 3])], "empty name"),
            (vec![native("a", [1; 3]), native("a", [2, 1, 1])], "more than once"),
            (vec![native("a", [4, 0, 1])], "y = 0 must be 1 to 1024"),
            (vec![native("a", [1024, 2, 1])], "at most 1024"),
            // Per axis, CUDA's block limits, even when x*y*z fits.
            (vec![native("a", [1, 1, 65])], "z = 65 must be 1 to 64"),
            (vec![native("a", [u32::MAX, u32::MAX, u32::MAX])], "x = 4294967295 must be 1 to 1024"),
        ];
        for (entries, expected) in cases {
            let err = NativeExecutable::from_native(&entries).unwrap_err();
            assert_eq!(err.code(), StatusCode::InvalidArgument);
            assert!(err.message().contains(expected), "{err} should mention {expected:?}");
        }
        // x*y*z overflowing u32 is refused, not wrapped.
        let err = NativeExecutable::from_native(&[native("a", [1 << 16, 1 << 16, 2])]).unwrap_err();
        assert_eq!(err.code(), StatusCode::InvalidArgument);
    }

    #[test]
    fn driver_bytes_are_unimplemented() {
        let source = ExecutableSource::Bytes {
            format: ExecutableFormat::Ptx,
            data: Arc::from(&b".version 8.0"[..]),
            entry_points: vec![EntryPointInfo::new("k", 32, 0, 0)],
        };
        let err = NativeExecutable::load(&source).unwrap_err();
        assert_eq!(err.code(), StatusCode::Unimplemented);
        assert!(err.message().starts_with("cpu-sim cannot load PTX;"), "{err}");
    }

    #[test]
    fn device_info_lists_the_kinds_load_accepts() {
        let info = crate::device::device_info(&crate::CpuSimOptions::default());
        assert_eq!(info.executable_kinds, [ExecutableKind::Native, ExecutableKind::SharedLibrary]);
        assert!(NativeExecutable::load(&ExecutableSource::Native(vec![native("a", [1; 3])])).is_ok());
        let library = ExecutableSource::SharedLibrary(example_library_path());
        assert!(NativeExecutable::load(&library).is_ok(), "the listed shared-library kind loads");
        // Every kind it does not list is refused as unimplemented.
        for kind in ExecutableKind::ALL.into_iter().filter(|&k| !info.loads(k)) {
            let format = kind.format().expect("unlisted kinds are driver bytes");
            let source = ExecutableSource::Bytes { format, data: Arc::from(&b"x"[..]), entry_points: vec![] };
            let err = NativeExecutable::load(&source).unwrap_err();
            assert_eq!(err.code(), StatusCode::Unimplemented, "{kind}: {err}");
        }
    }

    #[test]
    fn missing_library_is_unavailable_naming_the_path() {
        let path = PathBuf::from("/nonexistent/dir/libno_such_kernels.so");
        let err = NativeExecutable::load(&ExecutableSource::SharedLibrary(path)).unwrap_err();
        assert_eq!(err.code(), StatusCode::Unavailable);
        assert!(err.message().contains("/nonexistent/dir/libno_such_kernels.so"), "{err}");
        assert!(!err.message().contains('\n'), "{err}");
        // The system loader's reason, not only libloading's "dlopen failed".
        #[cfg(target_os = "linux")]
        assert!(err.message().contains("No such file or directory"), "{err}");
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn library_without_table_is_not_found() {
        // The C library is always loadable and has no kernel table.
        let err = NativeExecutable::from_shared_library(Path::new("libc.so.6")).unwrap_err();
        assert_eq!(err.code(), StatusCode::NotFound);
        assert!(err.message().contains("libc.so.6") && err.message().contains(KERNEL_TABLE_SYMBOL), "{err}");
        assert!(!err.message().contains('\n'), "{err}");
        // The system loader's reason, not only libloading's "dlsym failed".
        assert!(err.message().contains("undefined symbol"), "{err}");
    }

    unsafe extern "C" fn returns_three(_: *const KernelArgs) -> i32 {
        3
    }

    fn entry(name: &'static CStr, function: Option<KernelFn>) -> KernelEntry {
        KernelEntry { name: name.as_ptr(), workgroup_size: [4, 1, 1], binding_count: 0, constant_count: 0, function }
    }

    fn read(table: &KernelTable) -> hal::Result<Vec<(EntryPointInfo, KernelFn)>> {
        // SAFETY: `table` and what it points to live on this stack frame for the call.
        unsafe { read_table(table, "test table") }
    }

    #[test]
    fn bad_tables_are_invalid_arguments() {
        let good = [entry(c"k", Some(returns_three))];
        let table = |abi_version, count, entries: *const KernelEntry| KernelTable { abi_version, count, entries };
        assert_eq!(read(&table(ABI_VERSION, 1, good.as_ptr())).unwrap()[0].0.name, "k");

        // Version-1 tables (functions that know no `set_error`) still load; 0 and newer ones do not.
        assert_eq!(read(&table(MIN_ABI_VERSION, 1, good.as_ptr())).unwrap()[0].0.name, "k");
        for version in [0, ABI_VERSION + 1] {
            let err = read(&table(version, 1, good.as_ptr())).unwrap_err();
            assert_eq!(err.code(), StatusCode::InvalidArgument);
            assert!(err.message().contains(&format!("ABI version {version},")), "{err}");
        }

        let null_name = [KernelEntry { name: std::ptr::null(), ..entry(c"k", Some(returns_three)) }];
        let null_function = [entry(c"k", None)];
        let duplicate = [entry(c"k", Some(returns_three)), entry(c"k", Some(returns_three))];
        let cases: [(KernelTable, &str); 5] = [
            (table(ABI_VERSION, 1, std::ptr::null()), "declares 1 entries"),
            (table(ABI_VERSION, 0, std::ptr::null()), "no entry points"),
            (table(ABI_VERSION, 1, null_name.as_ptr()), "null name"),
            (table(ABI_VERSION, 1, null_function.as_ptr()), "null function"),
            (table(ABI_VERSION, 2, duplicate.as_ptr()), "more than once"),
        ];
        for (table, expected) in cases {
            let err = read(&table).unwrap_err();
            assert_eq!(err.code(), StatusCode::InvalidArgument);
            assert!(err.message().contains(expected), "{err} should mention {expected:?}");
        }
        // SAFETY: a null table is allowed by `read_table`'s contract.
        let err = unsafe { read_table(std::ptr::null(), "test table") }.unwrap_err();
        assert!(err.message().contains("returned null"), "{err}");
    }

    #[test]
    fn abi_adapter_returns_the_kernel_status() {
        let kernel = |inv: &NativeInvocation<'_>| call_library_kernel(returns_three, inv);
        let invocation = NativeInvocation::new([0; 3], [1; 3], [4, 1, 1], &[], &[]);
        assert_eq!(kernel(&invocation), Ok((3, None)));
    }

    /// Sets a message (twice: the last counts) and fails.
    unsafe extern "C" fn fails_with_a_message(args: *const KernelArgs) -> i32 {
        // SAFETY: the driver's pointer, during the call.
        unsafe {
            cpu_sim_kernel_abi::set_error(args, c"first");
            cpu_sim_kernel_abi::set_error(args, c"binding 0 is too short: 12 < 16 bytes");
        }
        5
    }

    /// Sets a message longer than the driver keeps, with invalid UTF-8, and succeeds.
    unsafe extern "C" fn succeeds_with_a_long_message(args: *const KernelArgs) -> i32 {
        let mut long = vec![b'x'; MAX_ERROR_MESSAGE + 100];
        long[0] = 0xff;
        long.push(0);
        let message = CStr::from_bytes_with_nul(&long).unwrap();
        // SAFETY: the driver's pointer, during the call.
        unsafe { cpu_sim_kernel_abi::set_error(args, message) };
        0
    }

    #[test]
    fn abi_adapter_returns_the_message_a_kernel_set() {
        let invocation = NativeInvocation::new([0; 3], [1; 3], [4, 1, 1], &[], &[]);
        let (status, message) = call_library_kernel(fails_with_a_message, &invocation).unwrap();
        assert_eq!((status, message.as_deref()), (5, Some("binding 0 is too short: 12 < 16 bytes")));
        let (status, message) = call_library_kernel(succeeds_with_a_long_message, &invocation).unwrap();
        let message = message.unwrap();
        assert_eq!(status, 0);
        assert!(message.starts_with('\u{fffd}') && message.len() == MAX_ERROR_MESSAGE - 1 + 3, "{}", message.len());
        // The closure turns a failure with a message into an error naming the kernel and the message.
        let exe = NativeExecutable::load(&ExecutableSource::SharedLibrary(example_library_path())).unwrap();
        let library = exe.library.clone().expect("loaded from a library");
        let kernel = library_kernel(library, "checked".into(), fails_with_a_message);
        assert_eq!(
            kernel(&invocation).unwrap_err(),
            "kernel 'checked' failed (status 5): binding 0 is too short: 12 < 16 bytes"
        );
    }

    #[test]
    fn example_library_loads() {
        let path = example_library_path();
        let exe = NativeExecutable::load(&ExecutableSource::SharedLibrary(path.clone())).unwrap();
        let names: Vec<&str> = exe.entry_points().iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["fill_u32", "add_f32", "scale_offset_f32", "fail_on_purpose"]);
        assert_eq!(exe.entry_points()[0].workgroup_size, [64, 1, 1]);
        assert_eq!((exe.entry_points()[2].binding_count, exe.entry_points()[2].constant_count), (2, 2));
        assert_eq!(exe.library_path(), Some(path.as_path()));
        let invocation = NativeInvocation::new([0; 3], [1; 3], [1; 3], &[], &[]);
        let err = (exe.kernel(3).unwrap())(&invocation).unwrap_err();
        assert_eq!(err, "kernel 'fail_on_purpose' returned status 42");
        // The kernel closure keeps the library loaded after the executable is gone.
        let kernel = exe.kernel(3).unwrap().clone();
        drop(exe);
        assert!(kernel(&invocation).is_err());
    }
}
