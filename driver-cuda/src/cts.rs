//! The conformance suite's fixture for CUDA (feature `cts`): what the driver's own CTS tests and
//! `hal cts --device cuda[:N]` run the suite on. ctest depends on no driver; each driver crate
//! supplies its fixture, so the suite publishes before the drivers.
//!
//! The kernels are ctest's CUDA catalogue (`ctest::kernels::cuda`): CUDA C compiled to PTX with
//! NVRTC (through cudarc, whose `nvrtc` feature this feature enables; the driver itself loads PTX
//! and cubins and needs no NVRTC), each kernel once per process. cudarc opens NVRTC at run time as
//! `libnvrtc.so`.
//!
//! The fixture declares CUDA's faults sticky (a trapping kernel poisons the GPU's context for the
//! rest of the process, so the fault cases check the sticky contract, see ctest's
//! `Fixture::with_sticky_faults`) and that every fault status names the CUDA error
//! ([`FAULT_MARKER`]), and the external kinds the driver takes (CUDA device pointers, CUDA
//! streams), which ctest's `interop` cases leave to `tests/cuda_interop.rs`. Run each case in its
//! own process (the generated tests and `hal cts` do).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use ctest::kernels::cuda::CudaCatalogue;
use ctest::{Fixture, Kernel, KernelCatalogue};
use hal::driver::Driver;
use hal::{Error, ExecutableKind, ExecutableSource, Registry, Result};

use crate::{Context, CudaDriver, DRIVER_NAME};

/// The text every fault status of the CUDA driver contains (`CUDA_ERROR_ILLEGAL_INSTRUCTION`, ...).
pub const FAULT_MARKER: &str = "CUDA_ERROR_";

/// Where the devices of a [`fixture`] are made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtsOptions {
    /// The GPU (CUDA ordinal) the devices are made on; with [`spread`](Self::spread), the GPU
    /// each case's first device is made on. Default 0.
    pub ordinal: usize,
    /// Each case's devices go round every GPU (from [`ordinal`](Self::ordinal), wrapping around),
    /// so the multi-device and collective cases cross GPUs, and a collective channel has one rank
    /// per GPU. Without it (or with one GPU) every device is on [`ordinal`](Self::ordinal) and a
    /// channel has one rank: NCCL takes one rank per GPU.
    pub spread: bool,
}

/// ctest's fixture on CUDA, its devices made as `options` say (with the driver's options from the
/// environment, [`crate::CudaOptions::from_env`]), its kernels [`catalogue`]; the registry cases
/// run against a registry holding the driver.
///
/// Where CUDA is not usable here (no driver library, no GPU, a bad `HAL_CUDA_*` variable) or NVRTC
/// is missing, the fixture is [not available](Fixture::not_available), its notice `CUDA not
/// available: <reason>`. An ordinal with no GPU is not a panic: each device the fixture makes is an
/// `OutOfRange` error naming the ordinal and how many devices there are.
///
/// In a process that runs cases (one device made, then the next), the fixture keeps the GPU's
/// primary context of `options.ordinal` retained for the process from its first device on, so
/// the devices of consecutive cases do not each create and destroy it. Devices still get their own
/// streams, events, pools and threads. A process that only looks at the fixture (a parent that runs
/// each case in a child) makes no device and retains nothing.
///
/// ```
/// use driver_cuda::cts::{CtsOptions, fixture};
///
/// let fixture = fixture(CtsOptions::default());
/// assert_eq!(fixture.driver(), "cuda");
/// if let Some(notice) = fixture.unavailable() {
///     assert!(notice.starts_with("CUDA not available: "));
/// } else {
///     assert!(fixture.faults_are_sticky());
///     assert_eq!(fixture.fault_marker(), Some("CUDA_ERROR_"));
///     assert_eq!(fixture.external_timepoint_kinds(), ["CUDA stream", "CUDA external semaphore"]);
/// }
/// // No machine has 1000 GPUs: an error, with or without CUDA.
/// assert!(driver_cuda::cts::fixture(CtsOptions { ordinal: 1000, spread: false }).create_device().is_err());
/// ```
pub fn fixture(options: CtsOptions) -> Fixture {
    if let Err(reason) = CudaDriver::default().probe() {
        return Fixture::not_available(DRIVER_NAME, format!("CUDA not available: {reason}"));
    }
    if !nvrtc_present() {
        return Fixture::not_available(
            DRIVER_NAME,
            "CUDA not available: NVRTC (libnvrtc.so) not found: ctest's CUDA kernels cannot be compiled",
        );
    }
    let mut registry = Registry::new();
    crate::register(&mut registry);
    let fixture = Fixture::from_registry(registry.clone(), DRIVER_NAME, catalogue())
        .with_sticky_faults()
        .with_fault_marker(FAULT_MARKER)
        .with_external_memory_kinds(&["CUDA device pointer", "opaque file descriptor"])
        .with_external_timepoint_kinds(&["CUDA stream", "CUDA external semaphore"]);
    let CtsOptions { ordinal, spread } = options;
    let gpus = crate::loader::probe().map_or(1, |p| p.device_count);
    if spread && gpus > 1 {
        // A case's devices go round the GPUs (its first on `ordinal` in a fresh process), so the
        // multi-device and collective cases cross GPUs; NCCL takes one rank per GPU.
        let next = Arc::new(AtomicUsize::new(ordinal));
        let fixture = fixture
            .with_factory(move || {
                keep_primary_context(ordinal);
                registry.create_device(DRIVER_NAME, next.fetch_add(1, Ordering::Relaxed) % gpus)
            })
            .with_max_ranks(gpus)
            .with_channels_dying_on_abandon();
        // The embedder's choice of lazy connection (see `crate::collective::connects_lazily`)
        // blocks the peers of an abandoned first collective inside NCCL, where no abort reaches them.
        if crate::collective::connects_lazily() {
            fixture.with_abandon_blocking_peers(
                "the process set NCCL_RUNTIME_CONNECT to other than 0, so NCCL connects ranks at their first \
                 collective and the peers of an abandoned one stay blocked inside NCCL",
            )
        } else {
            fixture
        }
    } else {
        // Every device of this fixture is on one GPU, and NCCL takes one rank per GPU.
        fixture
            .with_factory(move || {
                keep_primary_context(ordinal);
                registry.create_device(DRIVER_NAME, ordinal)
            })
            .with_max_ranks(1)
    }
}

/// Keeps the primary context of GPU `ordinal` retained for the rest of the process (the first
/// call retains it; a failure is left to the device creation that follows to report).
fn keep_primary_context(ordinal: usize) {
    static CONTEXT: OnceLock<Option<Arc<Context>>> = OnceLock::new();
    CONTEXT.get_or_init(|| Context::retain(ordinal).ok());
}

/// Whether NVRTC's library opens here (cudarc panics on first use of NVRTC when it is missing).
fn nvrtc_present() -> bool {
    crate::sys::result::is_nvrtc_library_present()
}

/// Compiles `source` (CUDA C) named `program` to PTX with NVRTC; `Unavailable` naming libnvrtc
/// where NVRTC is missing.
fn compile_ptx(source: &str, program: &str) -> Result<Vec<u8>> {
    if !nvrtc_present() {
        return Err(Error::unavailable(format!(
            "NVRTC (libnvrtc.so) not found: cannot compile ctest's CUDA kernel '{program}'"
        )));
    }
    let options = cudarc::nvrtc::CompileOptions { name: Some(format!("{program}.cu")), ..Default::default() };
    match cudarc::nvrtc::compile_ptx_with_opts(source, options) {
        Ok(ptx) => Ok(ptx.to_src().into_bytes()),
        Err(e) => Err(Error::invalid_argument(format!("NVRTC could not compile ctest's kernel '{program}': {e}"))),
    }
}

/// ctest's kernel catalogue as PTX, shared by every user in this process, so each kernel is
/// compiled once (see [`catalogue`]).
#[derive(Clone, Copy)]
pub struct SharedCatalogue(&'static CudaCatalogue);

impl KernelCatalogue for SharedCatalogue {
    fn kinds(&self) -> Vec<ExecutableKind> {
        self.0.kinds()
    }

    fn source(&self, kernel: Kernel, kind: ExecutableKind) -> Result<ExecutableSource> {
        self.0.source(kernel, kind)
    }
}

impl std::fmt::Debug for SharedCatalogue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedCatalogue(ctest's CUDA catalogue)")
    }
}

/// ctest's CUDA catalogue (`ctest::kernels::cuda`), each kernel compiled with NVRTC on its first use
/// in this process. Where NVRTC is missing, each kernel's source is an `Unavailable` error naming
/// libnvrtc.
///
/// ```
/// use ctest::{Kernel, KernelCatalogue};
///
/// let catalogue = driver_cuda::cts::catalogue();
/// // Compiled here when NVRTC is present; otherwise an error naming it, never a panic.
/// match catalogue.source(Kernel::FillU32, hal::ExecutableKind::Ptx) {
///     Ok(_) => {}
///     Err(e) => assert!(e.message().contains("NVRTC"), "{e}"),
/// }
/// ```
pub fn catalogue() -> SharedCatalogue {
    static CATALOGUE: OnceLock<CudaCatalogue> = OnceLock::new();
    SharedCatalogue(CATALOGUE.get_or_init(|| CudaCatalogue::new(compile_ptx)))
}
