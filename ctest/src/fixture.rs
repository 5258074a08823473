//! What a driver supplies to run the suite: how to create its devices and its kernel catalogue.

use std::fmt;
use std::sync::{Arc, OnceLock};

use hal::{Device, Error, ExecutableKind, ExecutableSource, Registry, Result};

use crate::kernels::{Kernel, KernelCatalogue};

/// Creates a device of the driver under test.
type DeviceFactory = Arc<dyn Fn() -> Result<Device> + Send + Sync>;

/// A driver under test: where its devices come from and the kernels it supplies. Cheap to clone.
///
/// ctest depends on no driver: each driver crate builds its own fixture, behind its `cts` feature
/// (`driver_cpu_sim::cts::fixture()`, `driver_vulkan::cts::fixture(ordinal)`,
/// `driver_cuda::cts::fixture(options)`).
///
/// ```
/// let fixture = driver_cpu_sim::cts::fixture();
/// let device = fixture.create_device().unwrap();
/// assert_eq!(device.info().driver, "cpu-sim");
/// ```
#[derive(Clone)]
pub struct Fixture {
    driver: String,
    registry: Option<Registry>,
    factory: DeviceFactory,
    catalogue: Arc<dyn KernelCatalogue>,
    /// `Some` when every case shares one device (created on first use).
    shared: Option<Arc<OnceLock<Device>>>,
    /// Whether a device fault poisons the device for good (see [`Fixture::with_sticky_faults`]).
    sticky_faults: bool,
    /// Text every fault status must contain (see [`Fixture::with_fault_marker`]).
    fault_marker: Option<String>,
    /// `Some(notice)` when the driver cannot run here (see [`Fixture::not_available`]).
    unavailable: Option<String>,
    /// How many ranks of one channel its devices can be (see [`Fixture::with_max_ranks`]).
    max_ranks: usize,
    /// Whether a channel is dead once one of its collectives was abandoned (NCCL aborts it).
    channel_dies_on_abandon: bool,
    /// Why a rank's abandoned collective leaves the other ranks waiting, where the embedder's
    /// configuration makes it so.
    abandon_blocks_peers: Option<String>,
    /// The kinds of `hal::ExternalMemory` the driver imports (see
    /// [`Fixture::with_external_memory_kinds`]).
    external_memory_kinds: Vec<&'static str>,
    /// The kinds of `hal::ExternalTimepoint` the driver orders with (see
    /// [`Fixture::with_external_timepoint_kinds`]).
    external_timepoint_kinds: Vec<&'static str>,
}

impl Fixture {
    /// Devices come from `registry` (device 0 of driver `driver`); the registry cases (listing,
    /// default device, unknown names) run against it.
    pub fn from_registry(registry: Registry, driver: &str, catalogue: impl KernelCatalogue + 'static) -> Self {
        let factory = {
            let registry = registry.clone();
            let driver = driver.to_string();
            Arc::new(move || registry.create_device(&driver, 0)) as DeviceFactory
        };
        Fixture {
            driver: driver.to_string(),
            registry: Some(registry),
            factory,
            catalogue: Arc::new(catalogue),
            shared: None,
            sticky_faults: false,
            fault_marker: None,
            unavailable: None,
            max_ranks: usize::MAX,
            channel_dies_on_abandon: false,
            abandon_blocks_peers: None,
            external_memory_kinds: Vec::new(),
            external_timepoint_kinds: Vec::new(),
        }
    }

    /// Devices come from `create` (for drivers built with options); the registry cases are skipped.
    pub fn from_fn(
        driver: &str,
        create: impl Fn() -> Result<Device> + Send + Sync + 'static,
        catalogue: impl KernelCatalogue + 'static,
    ) -> Self {
        Fixture {
            driver: driver.to_string(),
            registry: None,
            factory: Arc::new(create),
            catalogue: Arc::new(catalogue),
            shared: None,
            sticky_faults: false,
            fault_marker: None,
            unavailable: None,
            max_ranks: usize::MAX,
            channel_dies_on_abandon: false,
            abandon_blocks_peers: None,
            external_memory_kinds: Vec::new(),
            external_timepoint_kinds: Vec::new(),
        }
    }

    /// A driver that cannot run on this machine (no hardware, no driver library): every case is
    /// skipped with `notice`, and each test [`instantiate_cts!`](crate::instantiate_cts) generates
    /// prints `not run: <test>: <notice>` on stderr and passes without running its case. `notice`
    /// says why, e.g. `"CUDA not available: <reason>"`. So that such a pass is rare, mark the tests
    /// ignored where the hardware cannot be present (an attribute given to `instantiate_cts!`).
    ///
    /// ```
    /// let fixture = ctest::Fixture::not_available("gpu", "GPU not available: no driver");
    /// assert!(fixture.unavailable().is_some());
    /// assert!(fixture.create_device().is_err());
    /// ```
    pub fn not_available(driver: &str, notice: impl Into<String>) -> Self {
        let notice = notice.into();
        let reason = notice.clone();
        let mut fixture =
            Fixture::from_fn(driver, move || Err(Error::unavailable(reason.clone())), Unavailable(notice.clone()));
        fixture.unavailable = Some(notice);
        fixture
    }

    /// Declares that a device fault (the catalogue's `Fault` kernel) poisons the device for good, as
    /// on CUDA, where a trapping kernel leaves the context unusable until the process exits. The
    /// fault cases whose non-sticky contract needs the device to keep working after a fault then
    /// check the sticky contract instead (see `docs/conformance.md`): the faulting submission's
    /// signals fail with a fault status, every later device submission on every queue fails with a
    /// status within a bounded time, nothing hangs or aborts, and the pools return to idle. Each of
    /// those cases says that its sticky variant ran (in its failure message, or in a note when it
    /// passes).
    pub fn with_sticky_faults(mut self) -> Self {
        self.sticky_faults = true;
        self
    }

    /// Whether faults are sticky for this driver (default `false`).
    pub fn faults_are_sticky(&self) -> bool {
        self.sticky_faults
    }

    /// Text every fault status (of the `Fault` kernel and of work failed by it) must contain, so the
    /// cases check that the driver names the device error (CUDA: `"CUDA_ERROR_"`).
    pub fn with_fault_marker(mut self, marker: impl Into<String>) -> Self {
        self.fault_marker = Some(marker.into());
        self
    }

    /// The text fault statuses must contain, if the driver declared one.
    pub fn fault_marker(&self) -> Option<&str> {
        self.fault_marker.as_deref()
    }

    /// `Some(notice)` when the driver cannot run here (see [`Fixture::not_available`]).
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// Devices come from `create` from now on (the registry, if any, stays for the registry cases):
    /// e.g. a factory that spreads devices over several GPUs.
    pub fn with_factory(mut self, create: impl Fn() -> Result<Device> + Send + Sync + 'static) -> Self {
        self.factory = Arc::new(create);
        self
    }

    /// The devices this fixture makes can be at most `ranks` ranks of one channel (CUDA: NCCL takes
    /// one rank per GPU). Collective cases with more ranks are skipped, with a note saying so, and
    /// the ranks of one channel are given devices on distinct places (name and ordinal).
    pub fn with_max_ranks(mut self, ranks: usize) -> Self {
        self.max_ranks = ranks;
        self
    }

    /// Says that when one rank's collective does not run, the driver as the embedder configured it
    /// cannot release the other ranks (`reason` says why): the cases that abandon a collective
    /// report themselves as not run, with the reason.
    pub fn with_abandon_blocking_peers(mut self, reason: impl Into<String>) -> Self {
        self.abandon_blocks_peers = Some(reason.into());
        self
    }

    /// Why an abandoned collective leaves the other ranks waiting, if the driver was configured so.
    pub fn abandon_blocks_peers(&self) -> Option<&str> {
        self.abandon_blocks_peers.as_deref()
    }

    /// Says that a channel is dead once one of its collectives was abandoned (every later
    /// collective on it fails; make a new channel), as NCCL's aborted communicators are.
    pub fn with_channels_dying_on_abandon(mut self) -> Self {
        self.channel_dies_on_abandon = true;
        self
    }

    /// Whether a channel is dead once one of its collectives was abandoned.
    pub fn channel_dies_on_abandon(&self) -> bool {
        self.channel_dies_on_abandon
    }

    /// How many ranks of one channel its devices can be.
    pub fn max_ranks(&self) -> usize {
        self.max_ranks
    }

    /// Declares the kinds of external memory the driver imports, as `hal::ExternalMemory::kind`
    /// names them (`"CUDA device pointer"`, `"Vulkan buffer"`). Default: none. The `interop` cases
    /// give every other kind a made-up handle and expect `Unimplemented`; they never give a kind
    /// declared here one, since the driver would use it (undefined behaviour in its API): the
    /// driver's own tests check those kinds with real objects. So a driver declares every kind it
    /// imports.
    ///
    /// ```
    /// let fixture = driver_cpu_sim::cts::fixture().with_external_memory_kinds(&["Vulkan buffer"]);
    /// assert_eq!(fixture.external_memory_kinds(), ["Vulkan buffer"]);
    /// ```
    ///
    /// # Panics
    /// On a name that is no kind of `hal::ExternalMemory`: a misspelt kind would leave the driver's
    /// own kind undeclared, and the cases would give it a made-up handle.
    pub fn with_external_memory_kinds(mut self, kinds: &[&'static str]) -> Self {
        self.external_memory_kinds = checked_kinds(kinds, &crate::interop::memory_kinds(), "ExternalMemory");
        self
    }

    /// The kinds of external memory the driver imports (see
    /// [`with_external_memory_kinds`](Self::with_external_memory_kinds)).
    pub fn external_memory_kinds(&self) -> &[&'static str] {
        &self.external_memory_kinds
    }

    /// Declares the kinds of external timepoints the driver's queues wait on and signal, as
    /// `hal::ExternalTimepoint::kind` names them (`"CUDA stream"`, `"Vulkan timeline semaphore"`).
    /// Default: none. As with [`with_external_memory_kinds`](Self::with_external_memory_kinds), the
    /// `interop` cases give only the other kinds made-up handles, so a driver declares every kind it
    /// takes.
    ///
    /// # Panics
    /// On a name that is no kind of `hal::ExternalTimepoint`.
    pub fn with_external_timepoint_kinds(mut self, kinds: &[&'static str]) -> Self {
        self.external_timepoint_kinds = checked_kinds(kinds, &crate::interop::timepoint_kinds(), "ExternalTimepoint");
        self
    }

    /// The kinds of external timepoints the driver takes (see
    /// [`with_external_timepoint_kinds`](Self::with_external_timepoint_kinds)).
    pub fn external_timepoint_kinds(&self) -> &[&'static str] {
        &self.external_timepoint_kinds
    }

    /// Every case of one run shares a single device instead of a fresh one per case (for drivers
    /// whose devices are slow to create). Leak checks still run after every case.
    pub fn with_shared_device(mut self) -> Self {
        self.shared = Some(Arc::new(OnceLock::new()));
        self
    }

    /// The driver's name.
    pub fn driver(&self) -> &str {
        &self.driver
    }

    /// The registry, when the fixture was built from one.
    pub fn registry(&self) -> Option<&Registry> {
        self.registry.as_ref()
    }

    /// The kernel catalogue.
    pub fn catalogue(&self) -> &dyn KernelCatalogue {
        &*self.catalogue
    }

    /// A new device of the driver (never the shared one).
    pub fn create_device(&self) -> Result<Device> {
        let device = (self.factory)()?;
        if device.info().driver != self.driver {
            return Err(Error::internal(format!(
                "fixture for '{}' created a device of driver '{}'",
                self.driver,
                device.info().driver
            )));
        }
        Ok(device)
    }

    /// The device a case runs on: the shared one, or a new one.
    pub(crate) fn case_device(&self) -> Result<Device> {
        match &self.shared {
            None => self.create_device(),
            Some(cell) => {
                if let Some(device) = cell.get() {
                    return Ok(device.clone());
                }
                let device = self.create_device()?;
                Ok(cell.get_or_init(|| device).clone())
            }
        }
    }
}

impl fmt::Debug for Fixture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fixture")
            .field("driver", &self.driver)
            .field("registry", &self.registry)
            .field("shared_device", &self.shared.is_some())
            .field("sticky_faults", &self.sticky_faults)
            .field("fault_marker", &self.fault_marker)
            .field("unavailable", &self.unavailable)
            .field("external_memory_kinds", &self.external_memory_kinds)
            .field("external_timepoint_kinds", &self.external_timepoint_kinds)
            .finish()
    }
}

/// `kinds`, each checked to be one of `known` (the kinds of `hal::<enum_name>`).
fn checked_kinds(kinds: &[&'static str], known: &[&'static str], enum_name: &str) -> Vec<&'static str> {
    for kind in kinds {
        assert!(known.contains(kind), "'{kind}' is no kind of hal::{enum_name}; its kinds are {known:?}");
    }
    kinds.to_vec()
}

/// The catalogue of a driver that is not available: every kernel is `Unavailable`.
struct Unavailable(String);

impl KernelCatalogue for Unavailable {
    fn kinds(&self) -> Vec<ExecutableKind> {
        Vec::new()
    }

    fn source(&self, kernel: Kernel, _: ExecutableKind) -> Result<ExecutableSource> {
        Err(Error::unavailable(format!("{}: no {kernel:?} kernel", self.0)))
    }
}
