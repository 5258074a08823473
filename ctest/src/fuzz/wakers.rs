//! Wakers for the waker families: hostile ones (user code that panics when woken, cloned or
//! dropped, which the HAL must contain) and a counting one, the witness that the waiters polled
//! beside a hostile waker are still woken.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{RawWaker, RawWakerVTable, Wake, Waker};

use super::program::PanicsWhen;

/// What the threads that run programs are named, followed by the seed.
pub(crate) const PROGRAM_THREAD: &str = "fuzz-";

/// What a hostile waker's panic says, so a failure report shows it was the waker's.
pub(crate) const HOSTILE_PANIC: &str = "fuzz: a hostile waker panics (by design)";

/// Panics of hostile wakers on threads other than the program's (the HAL's and the driver's), so far.
static PANICS_ELSEWHERE: AtomicUsize = AtomicUsize::new(0);

/// How many hostile wakers panicked on the HAL's or the driver's threads so far (in this process).
pub(crate) fn panics_elsewhere() -> usize {
    PANICS_ELSEWHERE.load(Ordering::Relaxed)
}

/// Keeps the panics of hostile wakers (by design) out of the output, counting those on other
/// threads than the program's ([`panics_elsewhere`]); the panic hook in place is called for every
/// other panic. Installed once per process.
pub(crate) fn quiet_hostile_panics() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied());
            if !message.is_some_and(|m| m.starts_with(HOSTILE_PANIC)) {
                return previous(info);
            }
            if !std::thread::current().name().is_some_and(|name| name.starts_with(PROGRAM_THREAD)) {
                PANICS_ELSEWHERE.fetch_add(1, Ordering::Relaxed);
            }
        }));
    });
}

/// A waker that panics when `mode` says.
pub(crate) fn hostile(mode: PanicsWhen) -> Waker {
    match mode {
        PanicsWhen::Woken => Waker::from(Arc::new(PanicOnWake)),
        PanicsWhen::Dropped => Waker::from(Arc::new(PanicOnDrop)),
        PanicsWhen::Cloned => panic_on_clone(),
    }
}

/// A waker that panics when woken.
pub(crate) struct PanicOnWake;

impl Wake for PanicOnWake {
    fn wake(self: Arc<Self>) {
        panic!("{HOSTILE_PANIC}: woken");
    }
}

/// A waker that wakes quietly and panics when its last clone is dropped (never while the thread
/// is already unwinding, which would abort the process).
struct PanicOnDrop;

impl Wake for PanicOnDrop {
    fn wake(self: Arc<Self>) {}
}

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("{HOSTILE_PANIC}: dropped");
        }
    }
}

/// A waker whose `clone` panics; waking and dropping it do nothing. It carries no data.
fn panic_on_clone() -> Waker {
    fn clone(_: *const ()) -> RawWaker {
        panic!("{HOSTILE_PANIC}: cloned");
    }
    fn ignore(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, ignore, ignore, ignore);
    // SAFETY: no function of VTABLE reads the data pointer (null here), and none has anything to
    // release, so every call the `RawWaker` contract allows is sound; `clone` never returns.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) }
}

/// A waker that counts its wake-ups.
#[derive(Default)]
pub(crate) struct Counter(AtomicUsize);

impl Counter {
    /// Wake-ups so far.
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
