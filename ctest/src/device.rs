//! Driver and device: the registry, device creation, properties and queues.

use std::path::PathBuf;
use std::sync::Arc;

use hal::{
    DEFAULT_DRIVER, EntryPointInfo, ExecutableKind, ExecutableSource, MemoryType, NativeEntryPoint, NativeInvocation,
    StatusCode,
};

use crate::check::{CaseResult, Context, expect_code};
use crate::context::Cx;
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

fn registry(cx: &Cx) -> Result<&hal::Registry, crate::CaseError> {
    cx.fixture().registry().ok_or_else(|| crate::CaseError::Skip("the fixture has no registry".into()))
}

/// The registry lists the driver under test with at least one device.
pub(crate) fn registry_lists_drivers(cx: &Cx) -> CaseResult {
    let registry = registry(cx)?;
    let name = cx.fixture().driver();
    ensure!(registry.names().iter().any(|n| n == name), "names() {:?} lacks '{name}'", registry.names());
    let listing = registry.list();
    ensure_eq!(listing.len(), registry.names().len(), "one listing per registered driver");
    let entry = listing.iter().find(|l| l.name == name).ok_or(format!("list() lacks '{name}'"))?;
    let devices = entry.devices.clone().ctx(format!("listing of '{name}'"))?;
    ensure!(!devices.is_empty(), "driver '{name}' lists no devices");
    for (ordinal, info) in devices.iter().enumerate() {
        ensure_eq!(info.ordinal, ordinal, "listed device ordinal");
        ensure_eq!(info.driver.as_str(), name, "listed device's driver name");
    }
    Ok(())
}

/// What the registry lists for device 0 is what the created device reports.
pub(crate) fn listing_matches_device(cx: &Cx) -> CaseResult {
    let registry = registry(cx)?;
    let listing = registry.list();
    let entry = listing.iter().find(|l| l.name == cx.fixture().driver()).ok_or("driver not listed")?;
    let devices = entry.devices.clone().ctx("listing")?;
    let info = cx.device().info();
    ensure_eq!(devices[0].queue_count, info.queue_count, "queue count listed vs created");
    ensure_eq!(devices[0].memory_types, info.memory_types, "memory types listed vs created");
    ensure_eq!(devices[0].max_allocation_size, info.max_allocation_size, "largest allocation listed vs created");
    Ok(())
}

/// The default device is device 0 of the default driver when that driver is registered, and
/// `Unavailable` when it is not.
pub(crate) fn default_device(cx: &Cx) -> CaseResult {
    let registry = registry(cx)?;
    if registry.names().iter().any(|n| n == DEFAULT_DRIVER) {
        let device = registry.create_default_device().ctx("create_default_device")?;
        ensure_eq!(device.info().driver.as_str(), DEFAULT_DRIVER, "default device's driver");
        ensure_eq!(device.info().ordinal, 0, "default device's ordinal");
    } else {
        expect_code(registry.create_default_device(), StatusCode::Unavailable, "default device of a missing driver")?;
    }
    Ok(())
}

/// `create_device(name, 0)` gives a device of that driver.
pub(crate) fn create_device_by_name(cx: &Cx) -> CaseResult {
    let registry = registry(cx)?;
    let device = registry.create_device(cx.fixture().driver(), 0).ctx("create_device")?;
    ensure_eq!(device.info().driver.as_str(), cx.fixture().driver(), "driver of the created device");
    ensure!(device.id() != cx.device().id(), "two created devices share id {}", device.id());
    Ok(())
}

/// Every listed device has a stable id of its own, and a device path reaches it by ordinal, by
/// driver and id, and by id alone (any case); a bare driver name is its device 0, an empty path
/// the default device. Paths that lead nowhere are `NotFound` naming the path.
pub(crate) fn device_paths_select_devices(cx: &Cx) -> CaseResult {
    let registry = registry(cx)?;
    let name = cx.fixture().driver();
    let listing = registry.list();
    let devices = listing
        .iter()
        .find(|l| l.name == name)
        .and_then(|l| l.devices.as_ref().ok())
        .ok_or_else(|| crate::CaseError::Fail(format!("'{name}' lists no devices")))?;
    for info in devices {
        let id = &info.stable_id;
        ensure!(!id.is_empty(), "{name}:{} has no stable id", info.ordinal);
        ensure_eq!(devices.iter().filter(|d| &d.stable_id == id).count(), 1, "devices with id {id}");
        let paths = [format!("{name}:{}", info.ordinal), format!("{name}:{id}"), id.clone(), id.to_ascii_uppercase()];
        for path in paths {
            ensure_eq!(registry.locate(&path).ctx(&path)?, (name.to_owned(), info.ordinal), "locate('{path}')");
        }
        let device = registry.create_device_at(&format!("{name}:{id}")).ctx("create_device_at by id")?;
        ensure_eq!(device.info().stable_id, *id, "id of the device created by id");
    }
    ensure_eq!(registry.locate(name).ctx("bare driver")?, (name.to_owned(), 0), "a bare driver name");
    ensure_eq!(registry.locate("").ctx("empty path")?, (hal::DEFAULT_DRIVER.to_owned(), 0), "the empty path");
    for path in [format!("{name}:no-such-id"), "no-such-id".to_owned(), "no-such-driver:0".to_owned()] {
        let e = expect_code(registry.create_device_at(&path), StatusCode::NotFound, &path)?;
        ensure!(e.message().contains(&format!("'{path}'")), "the error does not name the path: {e}");
    }
    let huge = format!("{name}:99999999999999999999999");
    expect_code(registry.locate(&huge), StatusCode::InvalidArgument, "an ordinal past usize")?;
    Ok(())
}

/// An unknown driver name is `Unavailable`, naming it.
pub(crate) fn unknown_driver_unavailable(cx: &Cx) -> CaseResult {
    let registry = registry(cx)?;
    let e = expect_code(registry.create_device("no-such-driver", 0), StatusCode::Unavailable, "create_device")?;
    ensure!(e.message().contains("no-such-driver"), "the error does not name the driver: {e}");
    expect_code(registry.driver("no-such-driver").map(|_| ()), StatusCode::Unavailable, "driver()")?;
    Ok(())
}

/// A device ordinal past the listed devices is `OutOfRange`.
pub(crate) fn unknown_ordinal_out_of_range(cx: &Cx) -> CaseResult {
    let registry = registry(cx)?;
    let name = cx.fixture().driver();
    let listing = registry.list();
    let count = listing.iter().find(|l| l.name == name).and_then(|l| l.devices.as_ref().ok()).map_or(0, |d| d.len());
    expect_code(registry.create_device(name, count), StatusCode::OutOfRange, "create_device past the last device")?;
    Ok(())
}

/// The properties are usable: a name, queues, memory types (one host-visible and coherent), a
/// largest allocation, and workgroups big enough for the catalogue.
pub(crate) fn properties(cx: &Cx) -> CaseResult {
    let info = cx.device().info();
    ensure_eq!(info.driver.as_str(), cx.fixture().driver(), "info().driver");
    ensure!(!info.name.is_empty(), "the device has no name");
    ensure!(info.queue_count >= 1, "queue_count is 0");
    ensure!(!info.memory_types.is_empty(), "no memory types");
    ensure!(info.memory_types.iter().all(|t| !t.is_empty()), "an empty memory type: {:?}", info.memory_types);
    ensure!(cx.offers(MemoryType::HOST_LOCAL), "no HOST_VISIBLE | HOST_COHERENT memory type: {:?}", info.memory_types);
    ensure!(info.max_allocation_size >= 1 << 20, "largest allocation {} is under 1 MiB", info.max_allocation_size);
    ensure!(info.max_workgroup_threads >= 64, "max_workgroup_threads {} < 64", info.max_workgroup_threads);
    // The catalogue's grids (sides up to 4096) and workgroups (up to 64 in x) must fit.
    ensure!(
        info.max_workgroup_count.iter().all(|&n| n >= 4096),
        "max_workgroup_count {:?} has an axis under 4096",
        info.max_workgroup_count
    );
    ensure!(info.max_workgroup_size[0] >= 64, "max_workgroup_size {:?}: x under 64", info.max_workgroup_size);
    ensure!(info.max_workgroup_size.iter().all(|&n| n >= 1), "max_workgroup_size {:?}", info.max_workgroup_size);
    for (name, _) in &info.properties {
        ensure!(!name.is_empty(), "a property without a name: {:?}", info.properties);
    }
    ensure_eq!(cx.device().queue_count(), info.queue_count, "queue_count() vs info");
    Ok(())
}

/// The device lists the executable kinds it loads (at least one, none twice); every catalogue kernel
/// loads as the first listed kind the catalogue provides, with exactly its ABI; and each kind it does
/// not list is refused with `Unimplemented`. With a catalogue of no kernels (a driver that loads
/// none) only the refusals are checked.
pub(crate) fn executable_formats_listed_and_loadable(cx: &Cx) -> CaseResult {
    let info = cx.device().info();
    let kinds = &info.executable_kinds;
    let catalogue = cx.fixture().catalogue();
    let provided = catalogue.kinds();
    if provided.is_empty() {
        // A driver that loads no kernels: what it refuses is all there is to check.
        return unlisted_kinds_refused(cx);
    }
    ensure!(!kinds.is_empty(), "executable_kinds is empty: the device loads nothing");
    for (i, kind) in kinds.iter().enumerate() {
        ensure!(!kinds[..i].contains(kind), "executable_kinds lists {kind} twice: {kinds:?}");
    }
    let Some(kind) = kinds.iter().copied().find(|k| provided.contains(k)) else {
        return Err(crate::CaseError::Fail(format!(
            "the device loads [{}], the catalogue provides [{}]",
            ExecutableKind::list(kinds),
            ExecutableKind::list(&provided)
        )));
    };
    for kernel in Kernel::ALL {
        if let Some(reason) = catalogue.lacks(kernel) {
            cx.note(format!("the catalogue has no {kernel:?} kernel: {reason}"));
            continue;
        }
        let source = catalogue.source(kernel, kind).ctx(format!("catalogue source of {kernel:?} as {kind}"))?;
        ensure_eq!(ExecutableKind::of(&source), kind, "kind of the catalogue's {kernel:?}");
        let executable = cx.device().load_executable(&source).ctx(format!("loading {kernel:?} as {kind}"))?;
        ensure_eq!(executable.entry_points().to_vec(), kernel.entry_points(), "entry points of {kernel:?}");
    }
    unlisted_kinds_refused(cx)
}

/// Every kind the device does not list is refused at load with `Unimplemented`.
fn unlisted_kinds_refused(cx: &Cx) -> CaseResult {
    let info = cx.device().info();
    for unlisted in ExecutableKind::ALL.into_iter().filter(|&k| !info.loads(k)) {
        let what = format!(
            "loading {unlisted}, which the device does not list ([{}])",
            ExecutableKind::list(&info.executable_kinds)
        );
        expect_code(cx.device().load_executable(&source_of_kind(unlisted)), StatusCode::Unimplemented, &what)?;
    }
    Ok(())
}

/// A well-formed source of `kind` with `FillU32`'s ABI (its kernel or bytes do nothing useful: the
/// device is to refuse the kind before looking).
fn source_of_kind(kind: ExecutableKind) -> ExecutableSource {
    let entry_points: Vec<EntryPointInfo> = Kernel::FillU32.entry_points();
    match kind.format() {
        Some(format) => ExecutableSource::Bytes { format, data: Arc::from(&b"not an executable"[..]), entry_points },
        None if kind == ExecutableKind::SharedLibrary => {
            ExecutableSource::SharedLibrary(PathBuf::from("/nonexistent/ctest/libkernels.so"))
        }
        None => ExecutableSource::Native(
            entry_points
                .into_iter()
                .map(|info| NativeEntryPoint::new(info, Arc::new(|_: &NativeInvocation<'_>| Ok(()))))
                .collect(),
        ),
    }
}

/// Every queue index below the count gives that queue; the next one is `OutOfRange`.
pub(crate) fn queues_by_index(cx: &Cx) -> CaseResult {
    let device = cx.device();
    for index in 0..device.queue_count() {
        let queue = device.queue(index).ctx(format!("queue({index})"))?;
        ensure_eq!(queue.index(), index, "queue index");
        ensure_eq!(queue.device().id(), device.id(), "queue's device");
        queue.flush().ctx(format!("flush of queue {index}"))?;
    }
    let e = expect_code(device.queue(device.queue_count()), StatusCode::OutOfRange, "queue(queue_count)")?;
    ensure!(e.message().contains(&device.queue_count().to_string()), "error does not name the index: {e}");
    expect_code(device.queue(usize::MAX), StatusCode::OutOfRange, "queue(usize::MAX)")?;
    Ok(())
}

/// Devices have distinct ids; clones of a device are the same device.
pub(crate) fn device_identity(cx: &Cx) -> CaseResult {
    let other = cx.other_device()?;
    ensure!(other.id() != cx.device().id(), "two devices share id {}", other.id());
    let clone = cx.device().clone();
    ensure_eq!(clone.id(), cx.device().id(), "a clone's id");
    fn send_sync<T: Send + Sync>(_: &T) {}
    send_sync(&clone);
    Ok(())
}

/// A new device has nothing in use and a report without waits.
pub(crate) fn idle_when_created(cx: &Cx) -> CaseResult {
    let usage = cx.device().resource_usage();
    for pool in usage.pools.iter().filter(|p| crate::runner::is_checked_pool(p.name)) {
        ensure_eq!(pool.in_use, 0, "pool '{}' of a new device", pool.name);
    }
    ensure!(!cx.device().report().contains(">="), "a new device reports waits:\n{}", cx.device().report());
    Ok(())
}

/// Semaphores are created at the initial value asked for, and belong to no other device.
pub(crate) fn create_semaphore_initial_values(cx: &Cx) -> CaseResult {
    for initial in [0, 1, 7, u64::MAX - 1] {
        let s = cx.sem(initial)?;
        cx.expect_value(&s, initial, "a new semaphore")?;
        ensure!(s.owner().is_none_or(|o| o == cx.device().id()), "owner {:?} is another device", s.owner());
    }
    Ok(())
}

/// Two devices of the driver work side by side.
pub(crate) fn two_devices_work_independently(cx: &Cx) -> CaseResult {
    let other = cx.other_device()?;
    let a = cx.host_buffer(64)?;
    let b = other.allocate_buffer(hal::BufferParams::host_visible(), 64).ctx("allocate on the second device")?;
    let sa = cx.sem(0)?;
    let sb = other.create_semaphore(0).ctx("semaphore on the second device")?;
    cx.queue(0).fill(&[], &a, 0, 64, 0x11u8, &[crate::sv(&sa, 1)]).ctx("fill on device 1")?;
    other.queue(0).ctx("queue 0")?.fill(&[], &b, 0, 64, 0x22u8, &[crate::sv(&sb, 1)]).ctx("fill on device 2")?;
    cx.wait(&sa, 1)?;
    cx.wait(&sb, 1)?;
    ensure_eq!(cx.bytes(&a)?, vec![0x11; 64], "first device's buffer");
    ensure_eq!(cx.bytes(&b)?, vec![0x22; 64], "second device's buffer");
    Ok(())
}
