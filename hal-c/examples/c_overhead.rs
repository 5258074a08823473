//! What the C layer adds: the bench's dependent-chain and round-trip rows, once through the Rust API
//! and once through the C entry points (`thal_*`, called as a C program calls them), interleaved
//! trials in one process, on one driver.
//!
//! ```sh
//! cargo run --release -p timeline-hal-c --example c_overhead -- [--driver cuda] [--ops 20000] [--trials 15]
//! ```
//!
//! Each path opens its own device (ordinal 0 of the driver) and submits an empty reusable command
//! buffer on queue 0. Rows print the median microseconds per operation of each path and their
//! difference, the C layer's cost per call.

use std::ffi::CString;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use hal::{CommandBuffer, CommandBufferMode, Queue, SemaphoreValue as SV, Timeout};
use thal::*;

/// Panics with the status's message when a C call failed (a bench has no recovery to offer).
fn ok(status: thal_status_t, what: &str) {
    if status.is_null() {
        return;
    }
    // SAFETY: a non-NULL status from the library, read and freed once.
    let message = unsafe {
        let text = std::ffi::CStr::from_ptr(thal_status_message(status)).to_string_lossy().into_owned();
        thal_status_free(status);
        text
    };
    panic!("{what}: {message}");
}

/// The C side's objects: device, queue 0 and an ended empty command buffer.
struct CSide {
    device: *mut thal_device_t,
    queue: *mut thal_queue_t,
    empty: *mut thal_command_buffer_t,
}

impl CSide {
    fn open(driver: &str) -> CSide {
        let name = CString::new(driver).expect("a driver name without NUL");
        let mut side = CSide { device: null_mut(), queue: null_mut(), empty: null_mut() };
        // SAFETY: valid strings and out-pointers; the handles are released in `drop`.
        unsafe {
            ok(thal_device_create(name.as_ptr(), 0, &mut side.device), "thal_device_create");
            ok(thal_device_queue(side.device, 0, &mut side.queue), "thal_device_queue");
            ok(
                thal_command_buffer_create(side.device, THAL_COMMAND_BUFFER_MODE_REUSABLE, &mut side.empty),
                "thal_command_buffer_create",
            );
            ok(thal_command_buffer_end(side.empty), "thal_command_buffer_end");
        }
        side
    }

    fn semaphore(&self) -> *mut thal_semaphore_t {
        let mut semaphore = null_mut();
        // SAFETY: a live device handle and a valid out-pointer.
        ok(unsafe { thal_semaphore_create(self.device, 0, &mut semaphore) }, "thal_semaphore_create");
        semaphore
    }

    /// `ops` executes, each waiting on value i and signalling i + 1, then one wait for the last.
    fn chain(&self, ops: u64) -> Duration {
        let mut s = self.semaphore();
        let start = Instant::now();
        for i in 0..ops {
            let (wait_value, signal_value) = (i, i + 1);
            let waits = thal_semaphore_list_t { count: 1, semaphores: &mut s, values: &wait_value };
            let signals = thal_semaphore_list_t { count: 1, semaphores: &mut s, values: &signal_value };
            // SAFETY: live handles; the lists point at locals that outlive the call.
            ok(unsafe { thal_queue_execute(self.queue, &waits, self.empty, &signals) }, "thal_queue_execute");
        }
        // SAFETY: a live semaphore handle, released after the wait.
        unsafe {
            ok(thal_semaphore_wait(s, ops, THAL_TIME_INFINITE_FUTURE), "thal_semaphore_wait");
            ok(thal_semaphore_release(s), "thal_semaphore_release");
        }
        start.elapsed()
    }

    /// `ops` times: an execute, then a host wait for it with `deadline` (a function of now).
    fn round_trip(&self, ops: u64, deadline: impl Fn() -> thal_time_t) -> Duration {
        let mut s = self.semaphore();
        let start = Instant::now();
        for i in 0..ops {
            let value = i + 1;
            let signals = thal_semaphore_list_t { count: 1, semaphores: &mut s, values: &value };
            // SAFETY: live handles; the list points at locals that outlive the call.
            unsafe {
                ok(thal_queue_execute(self.queue, null_mut(), self.empty, &signals), "thal_queue_execute");
                ok(thal_semaphore_wait(s, value, deadline()), "thal_semaphore_wait");
            }
        }
        // SAFETY: a live semaphore handle.
        ok(unsafe { thal_semaphore_release(s) }, "thal_semaphore_release");
        start.elapsed()
    }
}

impl Drop for CSide {
    fn drop(&mut self) {
        // SAFETY: handles this side owns, released once.
        unsafe {
            thal_status_free(thal_command_buffer_release(self.empty));
            thal_status_free(thal_queue_release(self.queue));
            thal_status_free(thal_device_release(self.device));
        }
    }
}

/// The Rust side's objects.
struct RustSide {
    queue: Queue,
    empty: CommandBuffer,
}

impl RustSide {
    fn open(driver: &str) -> RustSide {
        let mut registry = hal::Registry::new();
        driver_cpu_sim::register(&mut registry);
        driver_cuda::register(&mut registry);
        let device = registry.create_device(driver, 0).expect("the Rust side opens the device");
        let empty = device.create_command_buffer(CommandBufferMode::Reusable).expect("a command buffer");
        empty.end().expect("an empty command buffer ends");
        RustSide { queue: device.queue(0).expect("queue 0"), empty }
    }

    fn chain(&self, ops: u64) -> Duration {
        let s = self.queue.device().create_semaphore(0).expect("a semaphore");
        let start = Instant::now();
        for i in 0..ops {
            self.queue.execute(&[SV::new(&s, i)], &self.empty, &[SV::new(&s, i + 1)]).expect("execute");
        }
        s.wait(ops, Timeout::Infinite).expect("the chain completes");
        start.elapsed()
    }

    fn round_trip(&self, ops: u64, timeout: impl Fn() -> Timeout) -> Duration {
        let s = self.queue.device().create_semaphore(0).expect("a semaphore");
        let start = Instant::now();
        for i in 0..ops {
            self.queue.execute(&[], &self.empty, &[SV::new(&s, i + 1)]).expect("execute");
            s.wait(i + 1, timeout()).expect("the execute completes");
        }
        start.elapsed()
    }
}

/// Median of `samples` microseconds per operation.
fn median_us(mut samples: Vec<Duration>, ops: u64) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e6 / ops as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value_of = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let driver = value_of("--driver").unwrap_or_else(|| "cpu-sim".to_owned());
    let ops: u64 = value_of("--ops").map(|v| v.parse().expect("--ops takes a number")).unwrap_or(20_000);
    let trials: usize = value_of("--trials").map(|v| v.parse().expect("--trials takes a number")).unwrap_or(15);
    let round_trips = (ops / 10).max(1);

    let c = CSide::open(&driver);
    let rust = RustSide::open(&driver);
    let minute_ns = 60_000_000_000;
    type Row<'a> = (&'a str, u64, Box<dyn Fn() -> Duration + 'a>, Box<dyn Fn() -> Duration + 'a>);
    let rows: Vec<Row<'_>> = vec![
        ("dependent chain, empty execute", ops, Box::new(|| rust.chain(ops)), Box::new(|| c.chain(ops))),
        (
            "round trip, empty execute, wait with no deadline",
            round_trips,
            Box::new(|| rust.round_trip(round_trips, || Timeout::Infinite)),
            Box::new(|| c.round_trip(round_trips, || THAL_TIME_INFINITE_FUTURE)),
        ),
        (
            "round trip, empty execute, wait with a deadline",
            round_trips,
            Box::new(|| rust.round_trip(round_trips, || Timeout::After(Duration::from_secs(60)))),
            Box::new(|| c.round_trip(round_trips, || thal_now_ns() + minute_ns)),
        ),
    ];
    println!("C layer overhead on driver '{driver}': {trials} interleaved trials, medians (us/op)");
    println!("{:<52} {:>10} {:>10} {:>10}", "row", "Rust API", "C API", "C - Rust");
    for (name, n, rust_trial, c_trial) in rows {
        rust_trial(); // warm-up
        c_trial();
        let (mut rust_samples, mut c_samples) = (Vec::new(), Vec::new());
        for trial in 0..trials {
            // Alternate which path goes first, so drift and warm caches favour neither.
            if trial % 2 == 0 {
                rust_samples.push(rust_trial());
                c_samples.push(c_trial());
            } else {
                c_samples.push(c_trial());
                rust_samples.push(rust_trial());
            }
        }
        let (r, cc) = (median_us(rust_samples, n), median_us(c_samples, n));
        println!("{name:<52} {r:>10.3} {cc:>10.3} {:>+10.3}", cc - r);
    }
}
