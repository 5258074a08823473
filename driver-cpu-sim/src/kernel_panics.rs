//! Kernel panics, contained: a panic in a native kernel fails its dispatch with the panic's
//! message and location, and prints nothing. The default panic hook would print the message (and a
//! backtrace note) on stderr from a stream or pool thread, as if the process had crashed.
//!
//! The panic hook is process-global, so cpu-sim installs one hook, once, that chains to the hook
//! that was in place: a panic raised while a kernel runs on this thread (inside
//! [`catch_kernel_panic`]) is recorded for the error and not printed; every other panic goes to
//! the previous hook as before. A hook the program sets later replaces this one (and so prints
//! kernel panics again), as `std::panic::set_hook` always does.

use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    /// How many kernel calls are running on this thread (nested: a kernel may run an inline grid).
    static IN_KERNEL: Cell<u32> = const { Cell::new(0) };
    /// Where the latest contained panic of this thread was raised.
    static PANIC_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `kernel`, catching a panic: `Err` with the panic's message and, when known, where it was
/// raised ("message (at src/kernels.rs:12:5)"), without printing anything.
pub(crate) fn catch_kernel_panic<R>(kernel: impl FnOnce() -> R) -> Result<R, String> {
    install_hook();
    IN_KERNEL.with(|depth| depth.set(depth.get() + 1));
    let outcome = catch_unwind(AssertUnwindSafe(kernel));
    IN_KERNEL.with(|depth| depth.set(depth.get() - 1));
    outcome.map_err(|payload| {
        let message = panic_message(payload.as_ref());
        match PANIC_LOCATION.with(|location| location.borrow_mut().take()) {
            Some(location) => format!("{message} (at {location})"),
            None => message,
        }
    })
}

/// Installs the hook that keeps kernel panics quiet, once per process.
fn install_hook() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_KERNEL.with(Cell::get) == 0 {
                return previous(info);
            }
            let location = info.location().map(ToString::to_string);
            PANIC_LOCATION.with(|slot| *slot.borrow_mut() = location);
        }));
    });
}

/// The text of a panic payload (`&str` or `String`, as `panic!` makes them).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "panic with a non-string payload".to_owned()
    }
}
