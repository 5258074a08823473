//! Device work that stays in flight until the host lets it go, for the scenarios that act while
//! work is issued. On a device that loads native kernels the dispatch blocks until the host
//! releases it; elsewhere it is busy work that lasts a fixed time ([`BusyWork`]), and a scenario
//! whose host action came too late to be sure the work was still running, or that finds the work's
//! signal applied already, skips its check instead of failing it (counted as not exercised,
//! [`super::InFlightProbes`]).
//!
//! Busy work is the catalogue's `sleep_us` (one workgroup waiting on the device's clock) where the
//! catalogue has it, else `spin` over as many workgroups as the device runs in the time asked: a
//! SPIR-V kernel cannot read a clock, and lavapipe ends any shader loop after 65535 iterations
//! (a millisecond or two), so the length comes from the workgroup count, measured once per driver
//! with the device idle.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hal::{
    BufferBinding, BufferParams, CommandBuffer, CommandBufferMode, Device, EntryPointInfo, ExecutableKind,
    ExecutableSource, NativeEntryPoint, NativeKernel, SemaphoreValue as SV, Timeout,
};

use super::run::HANG;
use crate::Fixture;
use crate::kernels::{Kernel, SPIN_MAX_ROUNDS};

/// How long a latched dispatch blocks at most (a native latch) or sleeps (a timed one).
const HOLD: Duration = Duration::from_millis(50);
/// A timed latch counts as held until this much of [`HOLD`] has passed since its submission.
const SURELY_HELD: Duration = Duration::from_millis(35);

/// The host's end of a latched dispatch.
pub(crate) struct Latch {
    released: Mutex<bool>,
    changed: Condvar,
    /// `Some(submitted)` for a timed latch, once its work was submitted.
    timed: Mutex<Option<Option<Instant>>>,
}

impl Latch {
    /// Says the latched work is about to be submitted: a timed latch counts from now. Its dispatch
    /// cannot start before the submission does, so the count holds however long the submitting
    /// call takes (a driver call that waits for the device can hold it back for the whole sleep,
    /// after the kernel was launched).
    pub(crate) fn submitting(&self) {
        if let Some(at) = &mut *lock(&self.timed) {
            *at = Some(Instant::now());
        }
    }

    /// Whether the latched work is surely still running: a native latch until it is released, a
    /// timed one until [`SURELY_HELD`] after its submission began.
    pub(crate) fn surely_held(&self) -> bool {
        match *lock(&self.timed) {
            None => !*lock(&self.released),
            Some(submitted) => submitted.is_some_and(|at| at.elapsed() < SURELY_HELD),
        }
    }

    /// Lets a native latch's dispatch return (a timed one ends by itself).
    pub(crate) fn release(&self) {
        *lock(&self.released) = true;
        self.changed.notify_all();
    }

    fn wait(&self) -> Result<(), String> {
        let released = lock(&self.released);
        let (released, _) =
            self.changed.wait_timeout_while(released, HOLD * 200, |r| !*r).unwrap_or_else(|p| p.into_inner());
        if *released { Ok(()) } else { Err("fuzz: latch never released".to_string()) }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Releases a latch however its scenario ends, so no stream stays blocked.
pub(crate) struct ReleaseOnDrop(pub(crate) Arc<Latch>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// A one-shot command buffer of `device` whose only dispatch holds until its latch lets it go.
pub(crate) fn latched_command_buffer(fixture: &Fixture, device: &Device) -> hal::Result<(CommandBuffer, Arc<Latch>)> {
    let native = device.info().executable_kinds.contains(&ExecutableKind::Native);
    let latch = Arc::new(Latch {
        released: Mutex::new(false),
        changed: Condvar::new(),
        timed: Mutex::new((!native).then_some(None)),
    });
    let cb = device.create_command_buffer(CommandBufferMode::OneShot)?;
    if native {
        let held = latch.clone();
        let kernel: NativeKernel = Arc::new(move |_| held.wait());
        let source =
            ExecutableSource::Native(vec![NativeEntryPoint::new(EntryPointInfo::new("latch", 1, 0, 0), kernel)]);
        cb.dispatch(&device.load_executable(&source)?, 0, [1, 1, 1], &[], &[])?;
    } else {
        record_busy(fixture, device, &cb, HOLD)?;
    }
    cb.end()?;
    Ok((cb, latch))
}

/// A one-shot command buffer of `device` that keeps it busy for `sleep_us` ([`BusyWork`]).
pub(crate) fn sleeping_command_buffer(fixture: &Fixture, device: &Device, sleep_us: u32) -> hal::Result<CommandBuffer> {
    let cb = device.create_command_buffer(CommandBufferMode::OneShot)?;
    record_busy(fixture, device, &cb, Duration::from_micros(u64::from(sleep_us)))?;
    cb.end()?;
    Ok(cb)
}

/// Rounds each workgroup of a busy `spin` runs, below [`SPIN_MAX_ROUNDS`].
const SPIN_ROUNDS: u32 = 50_000;
const _: () = assert!(SPIN_ROUNDS <= SPIN_MAX_ROUNDS);
/// How long the dispatch that measures a device's spin rate lasts at least.
const MEASURE_FOR: Duration = Duration::from_millis(25);
/// How many more workgroups busy work gets than the measured rate says, so it lasts at least the
/// time asked although the rate was measured at its best (the least of a few runs).
const SPIN_MARGIN: f64 = 2.0;
/// The most workgroups the measurement tries: a device faster than this is not held by a spin.
const MAX_SPIN_WORKGROUPS: u64 = 1 << 30;

/// How a driver's devices are kept busy for a given time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum BusyWork {
    /// The catalogue's `sleep_us`, one workgroup that waits on the device's clock.
    Sleep,
    /// The catalogue's `spin` of [`SPIN_ROUNDS`] rounds a workgroup, [`SPIN_MARGIN`] times as many
    /// workgroups as an idle device runs in the time asked.
    Spin {
        /// Workgroups an idle device ran a second (the best of the measured runs).
        workgroups_per_second: f64,
    },
}

impl std::fmt::Display for BusyWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BusyWork::Sleep => f.write_str("the catalogue's sleep_us"),
            BusyWork::Spin { workgroups_per_second } => write!(
                f,
                "the catalogue's spin ({SPIN_ROUNDS} rounds a workgroup; {workgroups_per_second:.0} workgroups/s \
                 measured on an idle device, dispatched x{SPIN_MARGIN})"
            ),
        }
    }
}

/// The busy work of `fixture`'s driver: `sleep_us` where its catalogue has it, else `spin` at the
/// rate measured on a device of its own the first time this process asks (so ask first with the
/// driver's devices idle, as the fuzzer does before its first program).
pub(crate) fn busy_work(fixture: &Fixture) -> hal::Result<BusyWork> {
    if fixture.catalogue().lacks(Kernel::Sleep).is_none() {
        return Ok(BusyWork::Sleep);
    }
    static MEASURED: OnceLock<Mutex<HashMap<String, BusyWork>>> = OnceLock::new();
    let mut measured = lock(MEASURED.get_or_init(Mutex::default));
    if let Some(busy) = measured.get(fixture.driver()) {
        return Ok(*busy);
    }
    let busy = BusyWork::Spin { workgroups_per_second: measure_spin_rate(fixture)? };
    measured.insert(fixture.driver().to_string(), busy);
    Ok(busy)
}

/// Records into `cb` device work that keeps `device` busy for `duration` ([`busy_work`]).
fn record_busy(fixture: &Fixture, device: &Device, cb: &CommandBuffer, duration: Duration) -> hal::Result<()> {
    match busy_work(fixture)? {
        BusyWork::Sleep => {
            let sleep = crate::kernels::load(fixture.catalogue(), device, Kernel::Sleep)?;
            cb.dispatch(&sleep, 0, [1, 1, 1], &[duration.as_micros() as u32], &[])
        }
        BusyWork::Spin { workgroups_per_second } => {
            let workgroups = (duration.as_secs_f64() * workgroups_per_second * SPIN_MARGIN).ceil() as u64;
            record_spin(fixture, device, cb, workgroups)
        }
    }
}

/// Records a `spin` of `workgroups` workgroups (at least 1; in x, then y past the device's limit).
fn record_spin(fixture: &Fixture, device: &Device, cb: &CommandBuffer, workgroups: u64) -> hal::Result<()> {
    let spin = crate::kernels::load(fixture.catalogue(), device, Kernel::Spin)?;
    let out = device.allocate_buffer(BufferParams::device_local(), 4)?;
    let [max_x, max_y, _] = device.info().max_workgroup_count.map(u64::from);
    let x = workgroups.clamp(1, max_x);
    let y = workgroups.div_ceil(x).clamp(1, max_y);
    cb.dispatch(&spin, 0, [x as u32, y as u32, 1], &[SPIN_ROUNDS], &[BufferBinding::whole(&out)])
}

/// Workgroups of `spin` a second on an idle device of `fixture`: the workgroup count grows until a
/// dispatch lasts [`MEASURE_FOR`], then the best of three dispatches of that count.
fn measure_spin_rate(fixture: &Fixture) -> hal::Result<f64> {
    let device = fixture.create_device()?;
    let queue = device.queue(0)?;
    let time = |workgroups: u64| -> hal::Result<Duration> {
        let cb = device.create_command_buffer(CommandBufferMode::OneShot)?;
        record_spin(fixture, &device, &cb, workgroups)?;
        cb.end()?;
        let done = device.create_semaphore(0)?;
        let started = Instant::now();
        queue.execute(&[], &cb, &[SV::new(&done, 1)])?;
        done.wait(1, Timeout::After(HANG))?;
        Ok(started.elapsed())
    };
    let mut workgroups = 1u64;
    loop {
        let took = time(workgroups)?;
        if took >= MEASURE_FOR || workgroups >= MAX_SPIN_WORKGROUPS {
            break;
        }
        // A device runs many workgroups at once, so the count that fills MEASURE_FOR is at least
        // this estimate; at most 64 times more a step.
        let estimate = workgroups as f64 * MEASURE_FOR.as_secs_f64() / took.as_secs_f64().max(1e-6);
        workgroups = (estimate.ceil() as u64).clamp(workgroups * 2, workgroups * 64).min(MAX_SPIN_WORKGROUPS);
    }
    let mut best = Duration::MAX;
    for _ in 0..3 {
        best = best.min(time(workgroups)?);
    }
    Ok(workgroups as f64 / best.as_secs_f64().max(1e-6))
}
