//! Device work that stays in flight until the host lets it go, for the scenarios that act while
//! work is issued. On a device that loads native kernels the dispatch blocks until the host
//! releases it; elsewhere (CUDA) it is the catalogue's sleep kernel, which holds for a fixed time,
//! and a scenario whose host action came too late to be sure the work was still running skips its
//! check instead of failing it.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hal::{
    CommandBuffer, CommandBufferMode, Device, EntryPointInfo, ExecutableKind, ExecutableSource, NativeEntryPoint,
    NativeKernel,
};

use crate::Fixture;
use crate::kernels::Kernel;

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
        let sleep = crate::kernels::load(fixture.catalogue(), device, Kernel::Sleep)?;
        cb.dispatch(&sleep, 0, [1, 1, 1], &[HOLD.as_micros() as u32], &[])?;
    }
    cb.end()?;
    Ok((cb, latch))
}

/// A one-shot command buffer of `device` that keeps it busy for `sleep_us` (the catalogue's sleep
/// kernel).
pub(crate) fn sleeping_command_buffer(fixture: &Fixture, device: &Device, sleep_us: u32) -> hal::Result<CommandBuffer> {
    let sleep = crate::kernels::load(fixture.catalogue(), device, Kernel::Sleep)?;
    let cb = device.create_command_buffer(CommandBufferMode::OneShot)?;
    cb.dispatch(&sleep, 0, [1, 1, 1], &[sleep_us], &[])?;
    cb.end()?;
    Ok(cb)
}
