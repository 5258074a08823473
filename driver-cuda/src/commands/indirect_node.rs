//! Indirect dispatches as graph nodes whose grid is set on the device, with no host round trip.
//!
//! CUDA has no indirect launch: a grid is a launch argument. Since CUDA 12.4 a graph's kernel node
//! can be made *device-updatable*, and a kernel running earlier in the same graph launch can set
//! its grid and enable or disable it (`cudaGraphKernelNodeSetGridDim`, `...SetEnabled`, from CUDA's
//! device runtime). So an indirect dispatch in a command buffer's graph becomes two nodes:
//!
//! - an *updater* node (one thread, [`NodeUpdater`]) on the dispatch's dependencies, which reads the
//!   count, checks it against the device's grid limits, and sets the kernel node's grid (or disables
//!   the node for a count with a zero, or past the limits);
//! - the kernel node, made device-updatable, after the updater.
//!
//! The updater is hand-written PTX linked once per device with CUDA's device runtime library
//! (`libcudadevrt.a`, part of the CUDA toolkit: found through `HAL_CUDA_DEVRT`, `CUDA_HOME`,
//! `CUDA_PATH` or the usual install paths). The user's kernels are not relinked, so cubins and PTX
//! from any compiler work. Where the library is missing, the driver is older than 12.4 or the link
//! fails, a command buffer with an indirect dispatch replays directly and the host launcher
//! (`crate::indirect_launcher`) reads the count instead.
//!
//! **Faults.** A count past the limits is the submission's fault (`OutOfRange`), as on the host
//! path. The updater cannot fail a submission itself, so it writes a fault entry into pinned memory
//! the host reads when the submission completes ([`IndirectRun::check`]). Launches of one graph
//! instance run one after another, so each updater counts its runs in device memory and the host
//! counts the same launches: an entry names its run. Entries sit in a ring of [`RING`] per node, so
//! a fault is read correctly unless the same node faulted again [`RING`] launches later before the
//! host saw the first one complete.

use std::ffi::CString;
use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::sys::{CUdeviceptr, CUfunction, CUmodule};
use hal::{Error, Result};

use crate::pinned_cache;
use crate::sys::context::{Bound, Context, PinnedBlock};
use crate::sys::result;

/// The environment variable naming CUDA's device runtime library (`libcudadevrt.a`) to link the
/// updater with, where it is not in a usual place.
pub const ENV_DEVRT: &str = "HAL_CUDA_DEVRT";

/// The driver version that has device-updatable kernel nodes (CUDA 12.4).
const FIRST_DRIVER: i32 = 12040;

/// Fault entries per indirect node (a power of two: the updater takes a run's entry with a mask).
pub(crate) const RING: u64 = 64;
/// Bytes of one fault entry: the run (8), then the fault kind, the count's three words and CUDA's
/// error code (4 each), padded.
const ENTRY_BYTES: u64 = 32;

/// Fault kinds an entry holds.
const PAST_LIMITS: u32 = 1;
const GRID_REFUSED: u32 = 2;
const ENABLE_REFUSED: u32 = 3;

/// The name of the updater's entry point.
const ENTRY: &str = "hal_indirect_update";

/// The updater kernel: parameters `(count, node, state, ring)`: the count's address, the kernel
/// node's device handle, the node's run counter (device memory) and its fault ring (mapped pinned
/// memory). One thread.
fn updater_ptx(limits: [u32; 3]) -> String {
    let [max_x, max_y, max_z] = limits;
    let mask = RING - 1;
    format!(
        r#".version 8.0
.target sm_70
.address_size 64
.extern .func (.param .b32 func_retval0) cudaGraphKernelNodeSetEnabled (.param .b64 node, .param .b32 enable);
.extern .func (.param .b32 func_retval0) cudaGraphKernelNodeSetGridDim (.param .b64 node, .param .align 4 .b8 grid[12]);
.visible .entry {ENTRY}(.param .u64 count, .param .u64 node, .param .u64 state, .param .u64 ring)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [count];
    ld.param.u64 %rd2, [node];
    ld.param.u64 %rd3, [state];
    ld.param.u64 %rd4, [ring];
    ld.u32 %r1, [%rd1];
    ld.u32 %r2, [%rd1+4];
    ld.u32 %r3, [%rd1+8];
    ld.u64 %rd5, [%rd3];
    add.u64 %rd5, %rd5, 1;
    st.u64 [%rd3], %rd5;
    mov.u32 %r9, 0;
    mov.u32 %r10, 0;
    mov.u32 %r11, 0;
    min.u32 %r4, %r1, %r2;
    min.u32 %r4, %r4, %r3;
    setp.eq.u32 %p1, %r4, 0;
    @%p1 bra ENABLE;
    setp.gt.u32 %p1, %r1, {max_x};
    setp.gt.u32 %p2, %r2, {max_y};
    or.pred %p1, %p1, %p2;
    setp.gt.u32 %p2, %r3, {max_z};
    or.pred %p1, %p1, %p2;
    mov.u32 %r9, {PAST_LIMITS};
    @%p1 bra ENABLE;
    mov.u32 %r9, 0;
    {{
        .param .b64 q0;
        st.param.b64 [q0+0], %rd2;
        .param .align 4 .b8 q1[12];
        st.param.b32 [q1+0], %r1;
        st.param.b32 [q1+4], %r2;
        st.param.b32 [q1+8], %r3;
        .param .b32 rv;
        call.uni (rv), cudaGraphKernelNodeSetGridDim, (q0, q1);
        ld.param.b32 %r11, [rv+0];
    }}
    setp.ne.u32 %p1, %r11, 0;
    @%p1 bra REFUSED;
    mov.u32 %r10, 1;
    bra.uni ENABLE;
REFUSED:
    mov.u32 %r9, {GRID_REFUSED};
ENABLE:
    {{
        .param .b64 q0;
        st.param.b64 [q0+0], %rd2;
        .param .b32 q1;
        st.param.b32 [q1+0], %r10;
        .param .b32 rv;
        call.uni (rv), cudaGraphKernelNodeSetEnabled, (q0, q1);
        ld.param.b32 %r5, [rv+0];
    }}
    setp.eq.u32 %p1, %r5, 0;
    @%p1 bra REPORT;
    mov.u32 %r9, {ENABLE_REFUSED};
    mov.u32 %r11, %r5;
REPORT:
    setp.eq.u32 %p1, %r9, 0;
    @%p1 bra DONE;
    and.b64 %rd6, %rd5, {mask};
    mul.lo.u64 %rd6, %rd6, {ENTRY_BYTES};
    add.u64 %rd7, %rd4, %rd6;
    st.u32 [%rd7+8], %r9;
    st.u32 [%rd7+12], %r1;
    st.u32 [%rd7+16], %r2;
    st.u32 [%rd7+20], %r3;
    st.u32 [%rd7+24], %r11;
    membar.sys;
    st.u64 [%rd7], %rd5;
    membar.sys;
DONE:
    ret;
}}
"#
    )
}

/// Where CUDA's device runtime library may be: `HAL_CUDA_DEVRT` if set (and only it), else the
/// toolkit named by `CUDA_HOME` or `CUDA_PATH`, else the usual install paths.
fn device_runtime_library() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(ENV_DEVRT) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Error::not_found(format!("{ENV_DEVRT}={}: no such file", path.display())))
        };
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    for variable in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(variable) {
            let root = PathBuf::from(root);
            candidates.push(root.join("lib64/libcudadevrt.a"));
            candidates.push(root.join("lib/libcudadevrt.a"));
        }
    }
    for path in [
        "/usr/local/cuda/lib64/libcudadevrt.a",
        "/usr/local/cuda/targets/x86_64-linux/lib/libcudadevrt.a",
        "/usr/local/cuda/targets/sbsa-linux/lib/libcudadevrt.a",
        "/usr/lib/x86_64-linux-gnu/libcudadevrt.a",
        "/usr/lib/aarch64-linux-gnu/libcudadevrt.a",
        "/usr/lib/cuda/lib64/libcudadevrt.a",
    ] {
        candidates.push(PathBuf::from(path));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        Error::not_found(format!(
            "CUDA's device runtime library (libcudadevrt.a) is not in CUDA_HOME, CUDA_PATH or /usr/local/cuda; \
             set {ENV_DEVRT} to its path"
        ))
    })
}

/// The updater kernel, linked and loaded once per device.
pub struct NodeUpdater {
    context: Arc<Context>,
    module: CUmodule,
    function: CUfunction,
    limits: [u32; 3],
}

// SAFETY: the module and function are immutable driver objects used with the context bound; the
// module is unloaded once, on drop, after every graph naming the function was destroyed (graphs
// hold the updater through an `Arc`).
unsafe impl Send for NodeUpdater {}
// SAFETY: see `Send`.
unsafe impl Sync for NodeUpdater {}

impl NodeUpdater {
    /// Links the updater for a device whose grids may be at most `limits`. `Unavailable` or
    /// `NotFound` when the driver is older than 12.4 or the device runtime library is missing; the
    /// linker's log in the message when the link fails.
    pub(crate) fn load(context: &Arc<Context>, limits: [u32; 3]) -> Result<Self> {
        let probe = crate::sys::loader::probe()?;
        if probe.driver_version < FIRST_DRIVER {
            return Err(Error::unavailable(format!(
                "device-updated graph nodes need CUDA 12.4; the driver is {}.{}",
                probe.driver_version / 1000,
                (probe.driver_version % 1000) / 10
            )));
        }
        let library = device_runtime_library()?;
        let path = CString::new(library.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::invalid_argument(format!("{}: path contains a NUL byte", library.display())))?;
        let ptx = CString::new(updater_ptx(limits)).map_err(|_| Error::internal("updater PTX contains a NUL"))?;
        let bound = context.bind()?;
        let mut log = vec![0u8; 4096];
        let image = result::link_with_library(&bound, &ptx, &path, &mut log).map_err(|e| {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let log = String::from_utf8_lossy(&log[..end]);
            Error::new(
                e.code(),
                format!("linking the indirect-dispatch updater with {}: {e} {}", library.display(), log.trim()),
            )
        })?;
        let mut load_log = vec![0u8; 1024];
        // SAFETY: `image` is the whole cubin the linker produced.
        let module = unsafe { result::module_load_data_ex(&bound, &image, &mut load_log) }?;
        let name = CString::new(ENTRY).map_err(|_| Error::internal("updater entry name"))?;
        let function = match result::module_get_function(&bound, module, &name) {
            Ok(Some(function)) => function,
            other => {
                // SAFETY: loaded above; no function of it was launched.
                let _ = unsafe { result::module_unload(&bound, module) };
                return Err(match other {
                    Err(e) => e,
                    _ => Error::internal("the linked updater has no entry point"),
                });
            }
        };
        tracing::info!(library = %library.display(), "cuda: indirect dispatches set their graph nodes' grids on the device");
        Ok(NodeUpdater { context: context.clone(), module, function, limits })
    }

    /// The updater kernel.
    pub(crate) fn function(&self) -> CUfunction {
        self.function
    }

    /// The grid limits its counts are checked against.
    pub(crate) fn limits(&self) -> [u32; 3] {
        self.limits
    }
}

impl Drop for NodeUpdater {
    fn drop(&mut self) {
        let Ok(bound) = self.context.bind() else { return };
        // SAFETY: unloaded once, here; every graph naming the function held this updater and is gone.
        if let Err(e) = unsafe { result::module_unload(&bound, self.module) } {
            tracing::debug!(%e, "unloading the indirect-dispatch updater failed");
        }
    }
}

/// The run counters (device memory) and fault rings (mapped pinned memory) of one graph
/// instance's indirect nodes, and what each node dispatches (for messages).
pub(crate) struct FaultRings {
    context: Arc<Context>,
    /// One 8-byte run counter per node.
    state: CUdeviceptr,
    /// [`RING`] entries per node, node after node, in pinned host memory the device writes.
    ring: PinnedBlock,
    who: Vec<String>,
    limits: [u32; 3],
}

// SAFETY: the memory is owned here and freed once on drop; the host reads entries the device wrote
// before the submission that wrote them completed (the completion thread observed it).
unsafe impl Send for FaultRings {}
// SAFETY: see `Send`; nothing is written through a shared reference on the host.
unsafe impl Sync for FaultRings {}

impl FaultRings {
    /// Counters and rings for nodes dispatching `who` (one name per indirect node, in node order).
    pub(crate) fn new(context: &Arc<Context>, bound: &Bound<'_>, who: Vec<String>, limits: [u32; 3]) -> Result<Self> {
        let nodes = who.len().max(1) as u64;
        let state = result::mem_alloc(bound, (nodes * 8) as usize)?;
        let bytes = nodes * RING * ENTRY_BYTES;
        let made = result::memset_d8(bound, state, 0, (nodes * 8) as usize)
            .and_then(|()| pinned_cache::allocate(context, bytes));
        match made {
            Ok(ring) => Ok(FaultRings { context: context.clone(), state, ring, who, limits }),
            Err(e) => {
                // SAFETY: allocated above, used by nothing yet.
                let _ = unsafe { result::mem_free(bound, state) };
                Err(e)
            }
        }
    }

    /// The updater's `state` and `ring` parameters for indirect node `index`.
    pub(crate) fn params(&self, index: usize) -> (u64, u64) {
        (self.state + 8 * index as u64, self.ring.address + index as u64 * RING * ENTRY_BYTES)
    }

    /// The fault of launch `run` (counted from 1), if one of its indirect nodes wrote one.
    fn fault(&self, run: u64) -> Option<Error> {
        self.who.iter().enumerate().find_map(|(index, who)| {
            let at = (index as u64 * RING + (run & (RING - 1))) * ENTRY_BYTES;
            let mut entry = [0u8; ENTRY_BYTES as usize];
            // SAFETY: the entry lies inside the pinned area (`index` < nodes, masked run < RING); the
            // device wrote it (if at all) before the launch completed, which the caller observed.
            unsafe {
                let at = self.ring.host.cast::<u8>().add(at as usize);
                for (i, byte) in entry.iter_mut().enumerate() {
                    *byte = std::ptr::read_volatile(at.add(i));
                }
            }
            entry_fault(&entry, run, who, self.limits)
        })
    }
}

/// The fault a ring entry holds for launch `run` of the node dispatching `who`: `None` unless the
/// entry was written by that run. The layout is the updater's (`updater_ptx`): the run (8 bytes),
/// then the fault kind, the count's three words and CUDA's error code (4 bytes each), little-endian.
fn entry_fault(entry: &[u8; ENTRY_BYTES as usize], run: u64, who: &str, limits: [u32; 3]) -> Option<Error> {
    let word = |at: usize| u32::from_le_bytes([entry[at], entry[at + 1], entry[at + 2], entry[at + 3]]);
    let written = u64::from(word(0)) | (u64::from(word(4)) << 32);
    if written != run {
        return None;
    }
    let (kind, count, code) = (word(8), [word(12), word(16), word(20)], word(24));
    Some(match kind {
        PAST_LIMITS => Error::out_of_range(format!(
            "{who}: the workgroup count read from the device, {count:?}, exceeds the device's limits {limits:?}"
        )),
        GRID_REFUSED => Error::internal(format!(
            "{who}: CUDA refused the grid {count:?} for the dispatch's graph node (cudaError {code})"
        )),
        _ => Error::internal(format!(
            "{who}: CUDA refused to enable or disable the dispatch's graph node (cudaError {code})"
        )),
    })
}

impl Drop for FaultRings {
    fn drop(&mut self) {
        let Ok(bound) = self.context.bind() else { return };
        // SAFETY: freed once, here; the graph instance that used them was destroyed first (its owner
        // drops this after the instance) and no launch of it is in flight.
        let state = unsafe { result::mem_free(&bound, self.state) };
        let ring = std::mem::replace(&mut self.ring, PinnedBlock::empty());
        // SAFETY: as above; from `pinned_cache::allocate` with this context, released once.
        let ring = unsafe { pinned_cache::release(&bound, ring) };
        if let Err(e) = state.and(ring) {
            tracing::debug!(%e, "freeing an indirect node's fault ring failed");
        }
    }
}

/// One launch of a graph with indirect nodes: checked when its submission completes.
pub(crate) struct IndirectRun {
    pub(crate) rings: Arc<FaultRings>,
    pub(crate) run: u64,
}

impl IndirectRun {
    /// The launch's fault, if an indirect node of it had a count past the limits (or CUDA refused
    /// an update). Call once the launch completed.
    pub(crate) fn check(&self) -> Result<()> {
        match self.rings.fault(self.run) {
            Some(fault) => Err(fault),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updater_ptx_names_the_limits_and_the_ring_mask() {
        let ptx = updater_ptx([2147483647, 65535, 65534]);
        assert!(ptx.contains(&format!(".visible .entry {ENTRY}(")));
        assert!(ptx.contains("setp.gt.u32 %p1, %r1, 2147483647;"));
        assert!(ptx.contains("setp.gt.u32 %p2, %r3, 65534;"));
        assert!(ptx.contains(&format!("and.b64 %rd6, %rd5, {};", RING - 1)));
        assert_eq!(ptx.matches('{').count(), ptx.matches('}').count());
    }

    /// An entry as the updater writes it (`st.u64 [e]`, `st.u32 [e+8]` ... `[e+24]`).
    fn entry(run: u64, kind: u32, count: [u32; 3], code: u32) -> [u8; ENTRY_BYTES as usize] {
        let mut bytes = [0u8; ENTRY_BYTES as usize];
        bytes[..8].copy_from_slice(&run.to_le_bytes());
        for (i, value) in [kind, count[0], count[1], count[2], code].into_iter().enumerate() {
            bytes[8 + 4 * i..12 + 4 * i].copy_from_slice(&value.to_le_bytes());
        }
        bytes
    }

    #[test]
    fn the_updater_writes_the_layout_the_host_reads() {
        let ptx = updater_ptx([10, 20, 30]);
        for store in ["[%rd7+8], %r9", "[%rd7+12], %r1", "[%rd7+16], %r2", "[%rd7+20], %r3", "[%rd7+24], %r11"] {
            assert!(ptx.contains(&format!("st.u32 {store};")), "{store}");
        }
        assert!(ptx.contains("st.u64 [%rd7], %rd5;"), "the run is stored last");
        assert!(ptx.contains(&format!("mul.lo.u64 %rd6, %rd6, {ENTRY_BYTES};")));
    }

    #[test]
    fn an_entry_names_its_own_run_only() {
        let limits = [100, 200, 300];
        let fault = entry_fault(&entry(7, PAST_LIMITS, [1, 201, 1], 0), 7, "indirect dispatch x", limits)
            .expect("run 7 faulted");
        assert_eq!(fault.code(), hal::StatusCode::OutOfRange);
        assert!(fault.message().contains("[1, 201, 1]") && fault.message().contains("[100, 200, 300]"), "{fault}");
        assert!(fault.message().starts_with("indirect dispatch x"), "{fault}");
        // An entry of another run (RING launches later, in the same slot), or never written, is not
        // this run's.
        assert!(entry_fault(&entry(7 + RING, PAST_LIMITS, [1, 201, 1], 0), 7, "x", limits).is_none());
        assert!(entry_fault(&[0; ENTRY_BYTES as usize], 7, "x", limits).is_none());
        let refused = entry_fault(&entry(1 << 40, GRID_REFUSED, [5, 5, 5], 1), 1 << 40, "x", limits).expect("refused");
        assert_eq!(refused.code(), hal::StatusCode::Internal);
        assert!(refused.message().contains("cudaError 1"), "{refused}");
        let enable = entry_fault(&entry(3, ENABLE_REFUSED, [0, 1, 1], 9), 3, "x", limits).expect("enable refused");
        assert!(enable.message().contains("enable or disable") && enable.message().contains("cudaError 9"));
    }

    #[test]
    fn a_missing_device_runtime_named_by_the_variable_is_not_found() {
        // Only this test sets the variable, and it reads it back at once.
        // SAFETY: no other thread of this test binary reads HAL_CUDA_DEVRT.
        unsafe { std::env::set_var(ENV_DEVRT, "/nonexistent/libcudadevrt.a") };
        let found = device_runtime_library();
        // SAFETY: as above.
        unsafe { std::env::remove_var(ENV_DEVRT) };
        let error = found.expect_err("a missing file is not found");
        assert_eq!(error.code(), hal::StatusCode::NotFound);
        assert!(error.message().contains("/nonexistent/libcudadevrt.a"), "{}", error.message());
    }
}
