//! Interop, on every driver: external memory and external timepoints of the kinds a driver does not
//! take are refused with `Unimplemented` naming the kind and the driver, and touch nothing; an empty
//! import of any kind is refused by `hal` before a driver sees it; and semaphores signalled by
//! threads that are not the HAL's (another library's callbacks) release queue work, or, when the
//! signal never comes, end host waits at their timeouts and are cancelled by the device's drop.
//!
//! The kinds a driver takes (its fixture declares them, [`Fixture::with_external_memory_kinds`]
//! and [`Fixture::with_external_timepoint_kinds`]) are never given a made-up handle here: the
//! driver would use it. The driver's own tests check them with real objects
//! (`driver-cuda/tests/cuda_interop.rs`, `driver-vulkan/tests/vulkan_interop.rs`). Host memory is
//! the area `imported_memory`.
//!
//! [`Fixture::with_external_memory_kinds`]: crate::Fixture::with_external_memory_kinds
//! [`Fixture::with_external_timepoint_kinds`]: crate::Fixture::with_external_timepoint_kinds

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hal::{BufferParams, ExternalMemory, ExternalTimepoint, ExternalUse, Semaphore, StatusCode, Timeout};

use crate::check::{CaseError, CaseResult, Context, expect_code, expect_same_status};
use crate::context::{Cx, LONG, SHORT, drop_in_time, sv};
use crate::{ensure, ensure_eq};

/// The handle given to kinds the driver does not take: made up, never used by a driver.
const MADE_UP_HANDLE: u64 = 0x7e57_0000_0bad_f00d;

/// How long after its drop begins a device has to fail the signals of work still waiting for a
/// foreign signal.
const CANCEL_LIMIT: Duration = Duration::from_secs(3);

/// One value of every kind of [`ExternalMemory`] `hal` has: `handle` as its handle, `length` bytes.
/// The one list of kinds the cases and the fixture's checks use; a unit test fails when `hal` has
/// a kind it lacks.
/// An [`ExternalMemory::OpaqueFd`] takes `fd` (a descriptor the import takes over and closes: see
/// [`open_descriptor`]; -1 where the values are only listed).
fn memory_of_every_kind(handle: u64, length: u64, fd: i32) -> [ExternalMemory; 3] {
    [
        ExternalMemory::CudaDevicePointer { address: handle, length },
        ExternalMemory::VulkanBuffer { buffer: handle, offset: 0, length },
        ExternalMemory::OpaqueFd { fd, length, dedicated: false },
    ]
}

/// A descriptor of this process's own (of `/dev/null`) to hand to an import of an
/// [`ExternalMemory::OpaqueFd`], which takes it over and closes it: never a made-up number, which
/// would close a descriptor someone else in the process holds. -1 where there is none.
fn open_descriptor() -> i32 {
    #[cfg(unix)]
    {
        use std::os::fd::IntoRawFd;
        std::fs::File::open("/dev/null").map_or(-1, IntoRawFd::into_raw_fd)
    }
    #[cfg(not(unix))]
    {
        -1
    }
}

/// Closes the descriptor of an [`ExternalMemory::OpaqueFd`] that is not handed to an import.
fn discard(memory: ExternalMemory) {
    #[cfg(unix)]
    if let ExternalMemory::OpaqueFd { fd, .. } = memory
        && fd >= 0
    {
        use std::os::fd::FromRawFd;
        // SAFETY: `fd` came from `open_descriptor` and was handed to nothing: this is its only owner.
        drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
    }
    #[cfg(not(unix))]
    let _ = memory;
}

/// One value of every kind of [`ExternalTimepoint`] `hal` has, `handle` as its handle (as
/// [`memory_of_every_kind`] for memory).
fn timepoints_of_every_kind(handle: u64) -> [ExternalTimepoint; 3] {
    [
        ExternalTimepoint::CudaStream(handle),
        ExternalTimepoint::VulkanTimeline { semaphore: handle, value: 1 },
        ExternalTimepoint::CudaExternalSemaphore { semaphore: handle, value: 1 },
    ]
}

/// The kinds of [`ExternalMemory`], as its `kind()` names them.
pub(crate) fn memory_kinds() -> Vec<&'static str> {
    memory_of_every_kind(0, 0, -1).iter().map(ExternalMemory::kind).collect()
}

/// The kinds of [`ExternalTimepoint`], as its `kind()` names them.
pub(crate) fn timepoint_kinds() -> Vec<&'static str> {
    timepoints_of_every_kind(0).iter().map(ExternalTimepoint::kind).collect()
}

/// A release that counts its runs.
fn counted_release() -> (impl FnOnce() + Send + 'static, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let release = move || {
        counted.fetch_add(1, Ordering::SeqCst);
    };
    (release, runs)
}

/// Buffer params every device of the suite offers: device-local where offered (what imported
/// device memory is), else the device's first memory type.
fn import_params(cx: &Cx) -> BufferParams {
    match cx.offers(hal::MemoryType::DEVICE_LOCAL) {
        true => BufferParams::device_local(),
        false => BufferParams::new(cx.device().info().memory_types[0], hal::BufferUsage::DEFAULT),
    }
}

/// Checks `error`'s message names `kind` and the driver under test.
fn names_kind_and_driver(cx: &Cx, error: &hal::Error, kind: &str, what: &str) -> CaseResult {
    let driver = &cx.device().info().driver;
    ensure!(error.message().contains(kind), "{what}: the message does not name the kind '{kind}': {error}");
    ensure!(
        error.message().contains(driver.as_str()),
        "{what}: the message does not name the driver '{driver}': {error}"
    );
    Ok(())
}

/// Ends a case that checked the kinds of `checked` and left out those the driver takes: a note
/// naming the kinds left out, or a skip when none was checked.
fn left_out(cx: &Cx, what: &str, taken: &[&str], checked: &[&str]) -> CaseResult {
    let taken = taken.join(", ");
    if checked.is_empty() {
        return Err(CaseError::Skip(format!(
            "the driver takes every kind of {what} ({taken}): they are checked with real objects by the driver's \
             own tests"
        )));
    }
    if !taken.is_empty() {
        cx.note(format!("the kinds of {what} the driver takes ({taken}) are left to its own tests, with real objects"));
    }
    Ok(())
}

/// Each kind of external memory the driver does not take is `Unimplemented`, the message naming the
/// kind and the driver, and its release has run exactly once when the call returns (and never again).
pub(crate) fn unaccepted_external_memory_is_unimplemented_and_released_at_once(cx: &Cx) -> CaseResult {
    let taken = cx.fixture().external_memory_kinds();
    let params = import_params(cx);
    let mut checked = Vec::new();
    for memory in memory_of_every_kind(MADE_UP_HANDLE, 4096, open_descriptor()) {
        let kind = memory.kind();
        if taken.contains(&kind) {
            discard(memory);
            continue;
        }
        let what = format!("import of a {kind}");
        let (release, runs) = counted_release();
        // SAFETY: the driver does not take this kind (its fixture says so), so it refuses it without
        // using the handle; the release owns nothing.
        let result = unsafe { cx.device().import_external_memory(memory, params, release) };
        let error = expect_code(result, StatusCode::Unimplemented, &what)?;
        names_kind_and_driver(cx, &error, kind, &what)?;
        ensure_eq!(runs.load(Ordering::SeqCst), 1, "{what}: releases run when the call returned");
        checked.push((kind, runs));
    }
    std::thread::sleep(SHORT);
    for (kind, runs) in &checked {
        ensure_eq!(runs.load(Ordering::SeqCst), 1, "import of a {kind}: releases run after {SHORT:?} more");
    }
    let checked: Vec<&str> = checked.iter().map(|(kind, _)| *kind).collect();
    left_out(cx, "external memory", taken, &checked)
}

/// Each kind of external timepoint the driver does not take, as a wait (`wait_external`) and as a
/// signal (`signal_external`), is `Unimplemented` at the call (even behind a wait no one has
/// signalled), naming the kind and the driver; the semaphore it was to signal keeps its value,
/// unfailed, and the queue's next work (a barrier, then a fill behind it) completes.
pub(crate) fn unaccepted_external_timepoints_are_unimplemented_and_signal_nothing(cx: &Cx) -> CaseResult {
    let taken = cx.fixture().external_timepoint_kinds();
    let mut checked = Vec::new();
    let mut round = 0;
    for timepoint in timepoints_of_every_kind(MADE_UP_HANDLE) {
        let kind = timepoint.kind();
        if taken.contains(&kind) {
            continue;
        }
        for use_ in [ExternalUse::Wait, ExternalUse::Signal] {
            let what = format!("{use_:?} of a {kind} on queue {round}");
            let queue = cx.queue(round);
            round += 1;
            let (gate, s) = (cx.sem(0)?, cx.sem(3)?);
            let (waits, signals) = ([sv(&gate, 1)], [sv(&s, 4)]);
            // SAFETY: the driver does not take this kind (its fixture says so), so it refuses it
            // without using the handle.
            let result = unsafe {
                match use_ {
                    ExternalUse::Wait => queue.wait_external(&waits, timepoint, &signals),
                    ExternalUse::Signal => queue.signal_external(&waits, timepoint, &signals),
                }
            };
            let error = expect_code(result, StatusCode::Unimplemented, &what)?;
            names_kind_and_driver(cx, &error, kind, &what)?;
            gate.signal(1).ctx("signal the refused call's wait")?;
            cx.expect_value(&s, 3, &format!("{what}: its signal semaphore"))?;
            let buffer = cx.host_buffer(64)?;
            queue.barrier(&[sv(&gate, 1)], &[sv(&s, 4)]).ctx(format!("{what}: a barrier after it"))?;
            queue.fill(&[sv(&s, 4)], &buffer, 0, 64, 0x5au8, &[sv(&s, 5)]).ctx(format!("{what}: a fill after it"))?;
            cx.wait(&s, 5)?;
            ensure_eq!(cx.bytes(&buffer)?, vec![0x5a; 64], "{what}: the fill after it");
        }
        checked.push(kind);
    }
    left_out(cx, "external timepoints", taken, &checked)
}

/// An import of 0 bytes of every kind of external memory, whether the driver takes the kind or not,
/// is `InvalidArgument` naming the kind (`hal` refuses it before a driver sees it), and its release
/// has run exactly once when the call returns.
pub(crate) fn empty_external_memory_of_every_kind_is_refused_before_the_driver(cx: &Cx) -> CaseResult {
    let params = import_params(cx);
    let mut all_runs = Vec::new();
    for memory in memory_of_every_kind(0, 0, open_descriptor()) {
        let kind = memory.kind();
        let what = format!("import of 0 bytes of a {kind}");
        let (release, runs) = counted_release();
        // SAFETY: `hal` refuses an empty range before any driver sees it; even so the handle is null,
        // which a driver that takes the kind refuses too. The release owns nothing.
        let result = unsafe { cx.device().import_external_memory(memory, params, release) };
        let error = expect_code(result, StatusCode::InvalidArgument, &what)?;
        ensure!(error.message().contains(kind), "{what}: the message does not name the kind: {error}");
        ensure_eq!(runs.load(Ordering::SeqCst), 1, "{what}: releases run when the call returned");
        all_runs.push((what, runs));
    }
    std::thread::sleep(SHORT);
    for (what, runs) in &all_runs {
        ensure_eq!(runs.load(Ordering::SeqCst), 1, "{what}: releases run after {SHORT:?} more");
    }
    Ok(())
}

/// Threads that are not the HAL's, standing in for another library's callbacks, signal a device
/// semaphore and a host semaphore that a fill waits on: the fill stays held until both are
/// signalled, then runs and its signal is reached. Such a thread failing a semaphore that a fill on
/// another queue waits on fails that fill's signal with its status, and the fill does not run.
pub(crate) fn a_foreign_threads_signal_releases_queue_work(cx: &Cx) -> CaseResult {
    let (theirs, their_host, done) = (cx.sem(0)?, Semaphore::new(0), cx.sem(0)?);
    let buffer = cx.host_buffer(256)?;
    let queue = cx.queue(0);
    queue.fill(&[sv(&theirs, 1), sv(&their_host, 1)], &buffer, 0, 128, 6u8, &[sv(&done, 1)]).ctx("held fill")?;
    let failed = cx.sem(0)?;
    let other = cx.queue(1);
    other.fill(&[sv(&theirs, 2)], &buffer, 128, 128, 7u8, &[sv(&failed, 1)]).ctx("fill behind the failure")?;
    let foreign = |name: &str, work: Box<dyn FnOnce() -> hal::Result<()> + Send>| {
        std::thread::Builder::new().name(name.to_string()).spawn(work).map_err(|e| format!("start {name}: {e}"))
    };
    let signaller = {
        let theirs = theirs.clone();
        foreign("another library's callback", Box::new(move || theirs.signal(1)))?
    };
    signaller.join().map_err(|_| "the foreign signaller panicked")?.ctx("a foreign signal of the device semaphore")?;
    cx.still_pending(&done, 1, "the fill, one of its two waits signalled")?;
    let signaller = {
        let their_host = their_host.clone();
        foreign("another library's callback", Box::new(move || their_host.signal(1)))?
    };
    signaller.join().map_err(|_| "the foreign signaller panicked")?.ctx("a foreign signal of the host semaphore")?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.bytes(&buffer)?[..128], [6u8; 128], "the fill released by foreign signals");
    let status = hal::Error::aborted("another library's work failed (ctest)");
    let failer = {
        let (theirs, status) = (theirs.clone(), status.clone());
        foreign(
            "another library's callback",
            Box::new(move || {
                theirs.fail(status);
                Ok(())
            }),
        )?
    };
    failer.join().map_err(|_| "the foreign failer panicked")?.ctx("a foreign failure")?;
    let seen = cx.wait_any_failure(&failed, 1)?;
    expect_same_status(&seen, &status, "the fill behind the foreign failure")?;
    ensure_eq!(cx.bytes(&buffer)?[128..], [0u8; 128], "bytes of the fill behind the foreign failure");
    Ok(())
}

/// A fill waiting for a foreign signal that never comes: a host wait on its signal ends with
/// `DeadlineExceeded` at its timeout; another queue of the device keeps working meanwhile; dropping
/// the device returns and fails the fill's signal with `Cancelled` within [`CANCEL_LIMIT`] of the
/// drop's start (the note says how long it took); a foreign signal after that runs nothing.
pub(crate) fn a_foreign_signal_that_never_comes_times_out_then_the_drop_cancels(cx: &Cx) -> CaseResult {
    let device = cx.fixture().create_device().ctx("create a device to drop")?;
    let theirs = Semaphore::new(0);
    let (held, other) = (device.queue(0).ctx("queue 0")?, device.queue(1 % device.queue_count()).ctx("queue 1")?);
    let (done, other_done) =
        (device.create_semaphore(0).ctx("semaphore")?, device.create_semaphore(0).ctx("semaphore")?);
    let buffer = device.allocate_buffer(BufferParams::host_visible(), 64).ctx("buffer")?;
    held.fill(&[sv(&theirs, 1)], &buffer, 0, 64, 1u8, &[sv(&done, 1)]).ctx("fill waiting for a foreign signal")?;
    let timeout = Duration::from_millis(100);
    let start = Instant::now();
    expect_code(done.wait(1, Timeout::After(timeout)), StatusCode::DeadlineExceeded, "a host wait on the fill")?;
    let took = start.elapsed();
    ensure!(took >= timeout, "the host wait returned after {took:?}, before its {timeout:?} timeout");
    ensure!(took < timeout + Duration::from_secs(2), "the host wait returned {took:?} after its {timeout:?} timeout");
    let other_buffer = device.allocate_buffer(BufferParams::host_visible(), 64).ctx("buffer")?;
    other
        .fill(&[], &other_buffer, 0, 64, 2u8, &[sv(&other_done, 1)])
        .ctx(format!("a fill on queue {}", other.index()))?;
    other_done.wait(1, Timeout::After(LONG)).ctx(format!("the fill on queue {} meanwhile", other.index()))?;
    ensure_eq!(other_buffer.read_to_vec().ctx("read")?, vec![2u8; 64], "the fill on the other queue");
    ensure_eq!(buffer.read_to_vec().ctx("read")?, vec![0u8; 64], "bytes of the fill still waiting");
    cx.expect_value(&done, 0, "the fill still waiting")?;
    if device.queue_count() == 1 {
        cx.note("one queue: the other work ran on the waiting fill's queue");
    }
    drop((held, other, buffer, other_buffer));
    let start = Instant::now();
    drop_in_time(device, "with a fill waiting for a foreign signal")?;
    let result = done.wait(1, Timeout::After(CANCEL_LIMIT));
    let took = start.elapsed();
    expect_code(result, StatusCode::Cancelled, "the fill of the dropped device")?;
    ensure!(took < CANCEL_LIMIT, "the fill's signal failed {took:?} after the drop began (limit {CANCEL_LIMIT:?})");
    cx.note(format!("cancelled {:.1} ms after the drop began", took.as_secs_f64() * 1e3));
    theirs.signal(1).ctx("the foreign signal, late")?;
    std::thread::sleep(SHORT);
    expect_code(done.query(), StatusCode::Cancelled, "the fill's signal after the late foreign signal")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variants of `pub enum <name>` in `hal`'s source of its external objects.
    fn variants_in_hal(name: &str) -> Vec<String> {
        let source = include_str!("../../hal/src/external.rs");
        let head = format!("pub enum {name} {{");
        let body = source.split_once(&head).unwrap_or_else(|| panic!("hal/src/external.rs has no {head}")).1;
        let body = body.split_once("\n}").expect("the enum's end").0;
        body.lines()
            .filter_map(|line| line.strip_prefix("    "))
            .filter(|line| line.starts_with(|c: char| c.is_ascii_uppercase()))
            .map(|line| line.chars().take_while(char::is_ascii_alphanumeric).collect())
            .collect()
    }

    /// Checks that `values` are one of each variant of `hal::<name>`, in its order, and that
    /// `kinds` (their `kind()` names) are distinct.
    fn one_of_each(values: &[impl std::fmt::Debug], name: &str, kinds: &[&str]) {
        // A value's `Debug` text starts with its variant's name.
        let listed: Vec<String> =
            values.iter().map(|v| format!("{v:?}").chars().take_while(char::is_ascii_alphanumeric).collect()).collect();
        let in_hal = variants_in_hal(name);
        assert!(!in_hal.is_empty(), "no variants of hal::{name} found");
        assert_eq!(listed, in_hal, "the list of every kind of hal::{name} lacks one (or has one twice)");
        let mut distinct = kinds.to_vec();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), listed.len(), "two kinds of hal::{name} with one name: {kinds:?}");
    }

    #[test]
    fn every_kind_of_external_memory_is_listed() {
        one_of_each(&memory_of_every_kind(1, 1, -1), "ExternalMemory", &memory_kinds());
    }

    #[test]
    fn every_kind_of_external_timepoint_is_listed() {
        one_of_each(&timepoints_of_every_kind(1), "ExternalTimepoint", &timepoint_kinds());
    }

    #[test]
    #[should_panic(expected = "'Vulkan buffers' is no kind of hal::ExternalMemory")]
    fn a_misspelt_memory_kind_is_refused() {
        let _ = crate::Fixture::not_available("x", "none").with_external_memory_kinds(&["Vulkan buffers"]);
    }

    #[test]
    #[should_panic(expected = "'CUDA streams' is no kind of hal::ExternalTimepoint")]
    fn a_misspelt_timepoint_kind_is_refused() {
        let _ = crate::Fixture::not_available("x", "none").with_external_timepoint_kinds(&["CUDA streams"]);
    }

    #[test]
    fn declared_kinds_are_kept() {
        let fixture = crate::Fixture::not_available("x", "none")
            .with_external_memory_kinds(&["CUDA device pointer"])
            .with_external_timepoint_kinds(&["CUDA stream"]);
        assert_eq!(fixture.external_memory_kinds(), ["CUDA device pointer"]);
        assert_eq!(fixture.external_timepoint_kinds(), ["CUDA stream"]);
        assert!(crate::Fixture::not_available("x", "none").external_memory_kinds().is_empty());
    }
}
