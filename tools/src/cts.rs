//! `hal cts`: the conformance suite (the `ctest` crate) on a driver's device, each case in a child
//! process (`hal cts --device DRIVER:N --child AREA::CASE`) so a case that crashes fails alone, or
//! all in this process.
//!
//! Each driver crate supplies its fixture (ctest depends on no driver), behind its `cts` feature:
//! `driver_cpu_sim::cts::fixture()`, `driver_vulkan::cts::fixture(ordinal)` and
//! `driver_cuda::cts::fixture(options)` (the `vulkan` and `cuda` features of `tools` enable the
//! latter two). A driver that cannot run here (no Vulkan device, no CUDA driver library, GPU or
//! NVRTC) has a fixture that is not available: [`run`] then says why, once, and runs no case.

use std::io::Write;
use std::process::Command;

use ctest::runner::{cases, run_case};
use ctest::{CaseReport, Fixture, Summary, isolate, run_suite_with};

use crate::counts::count;
use crate::device_spec::DeviceSpec;

/// The device the suite runs on, as `hal cts --device DRIVER[:N] [--spread]` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The driver's name (`cpu-sim`, `vulkan`, `cuda`).
    pub driver: String,
    /// The device the fixture makes its devices on (CUDA with `spread`: where each case starts).
    pub ordinal: usize,
    /// CUDA only: each case's devices go round every GPU (`driver_cuda::cts::CtsOptions::spread`).
    pub spread: bool,
}

impl Target {
    /// The target `spec` names (`--device`), with `spread`; an error names a driver this `hal` was
    /// built without, or a device path that leads nowhere.
    ///
    /// ```
    /// let spec = "cpu-sim".parse().unwrap();
    /// let target = tools::cts::Target::locate(&spec, false).unwrap();
    /// assert_eq!(target.args(), ["--device", "cpu-sim:0"]);
    /// ```
    pub fn locate(spec: &DeviceSpec, spread: bool) -> Result<Target, String> {
        if let Some(error) = not_built_in(spec.driver()) {
            return Err(error);
        }
        let (driver, ordinal) = crate::registry().locate(spec.path()).map_err(|e| format!("device '{spec}': {e}"))?;
        Ok(Target { driver, ordinal, spread })
    }

    /// The suite's fixture for this target (see [`fixture`]).
    pub fn fixture(&self) -> Result<Fixture, String> {
        fixture(&self.driver, self.ordinal, self.spread)
    }

    /// The arguments that name this target to a child `hal cts`: `--device DRIVER:N`, and
    /// `--spread` when it spreads.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["--device".to_string(), format!("{}:{}", self.driver, self.ordinal)];
        if self.spread {
            args.push("--spread".to_string());
        }
        args
    }
}

/// Why `driver` cannot be asked for here: `Some` when this build of `hal` left it out.
fn not_built_in(driver: &str) -> Option<String> {
    crate::drivers_not_built_in()
        .iter()
        .any(|(name, _)| *name == driver)
        .then(|| format!("driver '{driver}' is not built into this hal: rebuild with the `{driver}` feature"))
}

/// The suite's fixture for device `ordinal` of `driver`: its devices and its kernels in the
/// driver's format. `spread` (CUDA only) spreads each case's devices over every GPU. A fixture that
/// is not available (the driver cannot run here) is `Ok`: see [`Fixture::unavailable`].
///
/// ```
/// let fixture = tools::cts::fixture("cpu-sim", 0, false).unwrap();
/// assert_eq!(fixture.driver(), "cpu-sim");
/// assert!(tools::cts::fixture("cpu-sim", 1, false).unwrap_err().contains("device 1"));
/// assert!(tools::cts::fixture("cpu-sim", 0, true).unwrap_err().contains("--spread"));
/// ```
pub fn fixture(driver: &str, ordinal: usize, spread: bool) -> Result<Fixture, String> {
    if spread && driver != crate::CUDA_DRIVER {
        return Err(format!(
            "--spread puts a case's devices on every GPU of the {} driver; driver '{driver}' does not take it",
            crate::CUDA_DRIVER
        ));
    }
    if let Some(error) = not_built_in(driver) {
        return Err(error);
    }
    match driver {
        driver_cpu_sim::DRIVER_NAME if ordinal == 0 => Ok(driver_cpu_sim::cts::fixture()),
        driver_cpu_sim::DRIVER_NAME => Err(format!(
            "driver 'cpu-sim' has only device 0, not device {ordinal} (the suite makes the devices it needs)"
        )),
        #[cfg(feature = "vulkan")]
        driver_vulkan::DRIVER_NAME => Ok(driver_vulkan::cts::fixture(ordinal)),
        #[cfg(feature = "cuda")]
        driver_cuda::DRIVER_NAME => Ok(driver_cuda::cts::fixture(driver_cuda::cts::CtsOptions { ordinal, spread })),
        other => Err(format!(
            "no conformance fixture for driver '{other}' (known: {}, {}, {})",
            driver_cpu_sim::DRIVER_NAME,
            crate::VULKAN_DRIVER,
            crate::CUDA_DRIVER
        )),
    }
}

/// The ids (`area::case`) of every case.
pub fn case_ids() -> Vec<String> {
    cases().iter().map(|c| c.id()).collect()
}

/// Checks, without opening it, that the driver lists device `ordinal`; an error names the ordinal,
/// how many devices the driver has and the devices there are.
fn check_device(driver: &str, ordinal: usize) -> Result<(), String> {
    let registry = crate::registry();
    let listing = registry.list().into_iter().find(|listing| listing.name == driver);
    let devices = match listing.map(|listing| listing.devices) {
        Some(Ok(devices)) => devices,
        Some(Err(e)) => return Err(format!("driver '{driver}' has no devices here: {}", e.message())),
        None => return Err(format!("no driver named '{driver}' in this hal")),
    };
    if devices.iter().any(|info| info.ordinal == ordinal) {
        return Ok(());
    }
    Err(format!(
        "device {ordinal} of driver '{driver}' does not exist (it has {}); {}",
        count(devices.len() as u64, "device", "devices"),
        crate::available_devices(&registry, driver)
    ))
}

/// Runs the cases whose id contains `filter` (all when `None`) on `target`, writing the suite's table
/// to `out`; each case runs in a child process started with `child` (given the case's id) unless
/// `child` is `None`, when they all run in this process (on one device shared by every case when
/// `shared_device`). `on_case` is given each case's report as the case ends, before its row is
/// written. An error, before anything is written: a filter that matches no case, a driver that
/// cannot run here (why, once; no case runs), a device the driver does not have.
pub fn run(
    target: &Target,
    filter: Option<&str>,
    child: Option<&dyn Fn(&str) -> Command>,
    shared_device: bool,
    out: &mut dyn Write,
    on_case: &mut dyn FnMut(&CaseReport),
) -> Result<Summary, String> {
    // Checked first: a filter that matches nothing is an error, without an empty table before it.
    if !cases().iter().any(|case| filter.is_none_or(|f| case.id().contains(f))) {
        return Err(format!("no case matches the filter '{}' (see `hal cts --list`)", filter.unwrap_or("")));
    }
    let mut fixture = target.fixture()?;
    // The runner would report every case as skipped: a run that did nothing must not look passed.
    if let Some(notice) = fixture.unavailable() {
        return Err(format!("the conformance suite cannot run on '{}:{}': {notice}", target.driver, target.ordinal));
    }
    check_device(&target.driver, target.ordinal)?;
    if shared_device {
        fixture = fixture.with_shared_device();
    }
    let mut run_one = |case: &'static ctest::Case| {
        let report = match child {
            Some(child) => isolate::run_in_child(child(&case.id()), case),
            None => run_case(&fixture, case),
        };
        on_case(&report);
        report
    };
    run_suite_with(&target.driver, filter, &mut run_one, out).map_err(|e| format!("writing the report: {e}"))
}

/// Runs case `id` in this process on `target` and prints its outcome for the parent (the child's
/// side of [`run`]).
pub fn run_child(target: &Target, id: &str) -> Result<(), String> {
    let case = cases().iter().find(|c| c.id() == id).ok_or_else(|| format!("no case {id}"))?;
    isolate::print_outcome(&run_case(&target.fixture()?, case));
    Ok(())
}
