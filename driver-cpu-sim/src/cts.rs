//! The conformance suite's fixture for cpu-sim (feature `cts`): what `ctest`'s own tests and
//! `hal cts --device cpu-sim` run the suite on. ctest depends on no driver; each driver crate
//! supplies its fixture, so the suite publishes before the drivers.

use std::sync::Arc;

use ctest::Fixture;
use ctest::kernels::native::NativeCatalogue;
use hal::Registry;

use crate::{CpuSimDriver, CpuSimOptions, DRIVER_NAME};

/// The memory limit (and largest allocation) of the devices of [`fixture`]: 64 MiB.
pub const MEMORY_LIMIT: u64 = 64 << 20;

/// The cpu-sim driver, through a registry holding it, with ctest's native catalogue. Its devices
/// have a memory limit and a largest allocation of [`MEMORY_LIMIT`] (instead of cpu-sim's default
/// 8 GiB and 4 GiB), small enough for `queue_ops::alloca_waits_for_dealloca_under_pressure` to
/// fill quickly (cpu-sim zeroes every allocation).
///
/// ```
/// let fixture = driver_cpu_sim::cts::fixture();
/// assert_eq!(fixture.create_device().unwrap().info().driver, "cpu-sim");
/// ```
pub fn fixture() -> Fixture {
    fixture_with(cts_options())
}

/// [`fixture`] with light work run on the submitting thread
/// (`CpuSimOptions::with_light_work_at_issue`), as IREE's devices on cpu-sim run it.
///
/// ```
/// let fixture = driver_cpu_sim::cts::fixture_with_light_work_at_issue();
/// assert_eq!(fixture.create_device().unwrap().info().driver, "cpu-sim");
/// ```
pub fn fixture_with_light_work_at_issue() -> Fixture {
    fixture_with(cts_options().with_light_work_at_issue(true))
}

/// The options of the suite's devices: the memory limits of [`fixture`].
fn cts_options() -> CpuSimOptions {
    CpuSimOptions::default().with_memory_limit(MEMORY_LIMIT).with_max_allocation_size(MEMORY_LIMIT)
}

fn fixture_with(options: CpuSimOptions) -> Fixture {
    let mut registry = Registry::new();
    registry.register(Arc::new(CpuSimDriver::with_options(options)));
    Fixture::from_registry(registry, DRIVER_NAME, NativeCatalogue)
}
