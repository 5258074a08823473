//! Finding the CUDA driver library before anything touches cudarc.
//!
//! cudarc loads `libcuda` lazily and panics when it is missing (even in `device_count`), and it panics
//! again when a symbol it was asked for is missing from an older driver. So the probe, run once per
//! process, checks in order: that a `libcuda` opens with libloading (under the names cudarc tries),
//! that cudarc agrees (`is_culib_present`), that every symbol this driver calls is exported, that
//! `cuInit` succeeds and that there is at least one device. Any failure is `Unavailable` with the
//! reason, and no cudarc call is made after it.

use std::sync::OnceLock;

use hal::{Error, Result};

use crate::sys::result;

/// Driver-API symbols this crate calls only when the driver is at least the given version
/// ([`Probe::driver_version`]), each with that version; the probe does not require them.
pub const VERSIONED_SYMBOLS: &[(&str, i32)] = &[("cuFuncGetParamInfo", 12040)];

/// Every driver-API symbol this crate calls through `cudarc::driver::sys` (as cudarc loads them; all
/// in `result.rs`).
pub const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetUuid_v2",
    "cuMemHostRegister_v2",
    "cuMemHostUnregister",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuDeviceGetDefaultMemPool",
    "cuMemPoolSetAttribute",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuStreamQuery",
    "cuStreamGetCtx",
    "cuStreamWaitValue64_v2",
    "cuStreamWriteValue64_v2",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemsetD8_v2",
    "cuMemHostAlloc",
    "cuMemHostGetDevicePointer_v2",
    "cuMemFreeHost",
    "cuMemAllocFromPoolAsync",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    "cuMemcpyHtoD_v2",
    "cuMemcpyAsync",
    "cuModuleLoadDataEx",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuFuncGetAttribute",
    "cuFuncSetAttribute",
    "cuLaunchKernel",
    "cuGraphCreate",
    "cuGraphAddEmptyNode",
    "cuGraphAddKernelNode_v2",
    "cuGraphAddMemsetNode",
    "cuGraphAddMemcpyNode",
    "cuGraphInstantiateWithFlags",
    "cuGraphKernelNodeSetAttribute",
    "cuGraphKernelNodeGetAttribute",
    "cuGraphAddDependencies",
    "cuLinkCreate_v2",
    "cuLinkAddData_v2",
    "cuLinkAddFile_v2",
    "cuLinkComplete",
    "cuLinkDestroy",
    "cuGraphLaunch",
    "cuGraphExecKernelNodeSetParams_v2",
    "cuGraphExecMemcpyNodeSetParams",
    "cuGraphExecMemsetNodeSetParams",
    "cuGraphAddEventRecordNode",
    "cuDeviceCanAccessPeer",
    "cuCtxEnablePeerAccess",
    "cuGraphExecEventRecordNodeSetEvent",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
    "cuLaunchHostFunc",
    "cuEventElapsedTime",
    "cuPointerGetAttribute",
    "cuImportExternalMemory",
    "cuExternalMemoryGetMappedBuffer",
    "cuDestroyExternalMemory",
    "cuImportExternalSemaphore",
    "cuDestroyExternalSemaphore",
    "cuWaitExternalSemaphoresAsync",
    "cuSignalExternalSemaphoresAsync",
];

/// What the probe found: the library's name and the driver version, or why CUDA cannot be used.
#[derive(Clone, Debug)]
pub struct Probe {
    /// The file name that opened (`libcuda.so.1`).
    pub library: String,
    /// `cuDriverGetVersion` (e.g. 13000 for CUDA 13.0).
    pub driver_version: i32,
    /// `cuDeviceGetCount`.
    pub device_count: usize,
}

/// Probes once per process; later calls return the first answer.
pub fn probe() -> Result<&'static Probe> {
    static PROBE: OnceLock<Result<Probe>> = OnceLock::new();
    PROBE.get_or_init(probe_uncached).as_ref().map_err(Clone::clone)
}

fn probe_uncached() -> Result<Probe> {
    let mut candidates: Vec<String> = Vec::new();
    for name in ["cuda", "nvcuda"].iter().flat_map(|l| cudarc::get_lib_name_candidates(l)) {
        if !candidates.contains(&name) {
            candidates.push(name);
        }
    }
    let mut first_error: Option<String> = None;
    let mut opened = None;
    for name in &candidates {
        // SAFETY: loading the CUDA driver library runs its initialisers, which have no preconditions
        // beyond being loaded once per process; the handle is only used to look symbols up.
        match unsafe { libloading::Library::new(name) } {
            Ok(library) => {
                opened = Some((name.clone(), library));
                break;
            }
            Err(e) => {
                first_error.get_or_insert_with(|| match std::error::Error::source(&e) {
                    Some(source) => format!("{e}: {source}"),
                    None => e.to_string(),
                });
            }
        }
    }
    let Some((library_name, library)) = opened else {
        return Err(Error::unavailable(format!(
            "cuda: the CUDA driver library was not found ({}; tried {})",
            first_error.unwrap_or_else(|| "no candidate names".to_string()),
            some_names(&candidates)
        )));
    };
    let missing: Vec<&str> = REQUIRED_SYMBOLS
        .iter()
        .copied()
        // SAFETY: only the symbol's presence is checked; the pointer is never called through here.
        .filter(|symbol| unsafe { library.get::<*const ()>(symbol.as_bytes()) }.is_err())
        .collect();
    if !missing.is_empty() {
        return Err(Error::unavailable(format!(
            "cuda: {library_name} is too old: it lacks {} (a CUDA 12 or newer driver is needed)",
            missing.join(", ")
        )));
    }
    if !result::is_driver_library_present() {
        return Err(Error::unavailable(format!("cuda: {library_name} opened but cudarc could not load it")));
    }
    // The library and every symbol we call are present (checked above), so cudarc will not panic.
    if let Err(error) = result::init() {
        return Err(Error::unavailable(format!("cuda: the driver did not initialise: {}", error.message())));
    }
    let version = result::driver_get_version()?;
    let count = result::device_get_count()?;
    if count <= 0 {
        return Err(Error::unavailable(format!(
            "cuda: {library_name} (driver {}.{}) found no CUDA devices",
            version / 1000,
            (version % 1000) / 10
        )));
    }
    // Keep the library loaded for the process: cudarc resolves symbols in its own handle to the same
    // file, and the driver does not support being unloaded.
    std::mem::forget(library);
    Ok(Probe { library: library_name, driver_version: version, device_count: count as usize })
}

/// The first few `names` and how many more: the reason stays one short line (cudarc has ~30).
fn some_names(names: &[String]) -> String {
    const SHOWN: usize = 3;
    match names.len().checked_sub(SHOWN) {
        Some(more) if more > 0 => format!("{} and {more} more", names[..SHOWN].join(", ")),
        _ => names.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::REQUIRED_SYMBOLS;

    #[test]
    fn library_names_tried_are_cut_short() {
        let names: Vec<String> = (0..30).map(|i| format!("lib{i}.so")).collect();
        assert_eq!(super::some_names(&names), "lib0.so, lib1.so, lib2.so and 27 more");
        assert_eq!(super::some_names(&names[..3]), "lib0.so, lib1.so, lib2.so");
    }

    /// Every driver function this crate calls is checked by the probe: cudarc panics on a missing one.
    #[test]
    fn every_driver_call_in_the_crate_is_probed() {
        let mut called = std::collections::BTreeSet::new();
        for path in crate::sys::source_files() {
            let text = std::fs::read_to_string(&path).expect("a readable source");
            for piece in text.split("sys::").skip(1) {
                let name: String = piece.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if name.starts_with("cu") && piece[name.len()..].starts_with('(') {
                    called.insert(name);
                }
            }
        }
        assert!(called.contains("cuLaunchKernel") && called.len() > 30, "the scan found the calls: {called:?}");
        let versioned = |name: &str| super::VERSIONED_SYMBOLS.iter().any(|(symbol, _)| *symbol == name);
        let missing: Vec<_> =
            called.iter().filter(|name| !REQUIRED_SYMBOLS.contains(&name.as_str()) && !versioned(name)).collect();
        assert!(missing.is_empty(), "called but not probed: {missing:?}");
    }
}
