//! Host semaphore throughput: how many signal/wait hand-offs per second two threads get.
//!
//! ```text
//! cargo run -p timeline-hal --release --example semaphore_throughput [seconds per case, default 1.5]
//! ```
//!
//! - ping-pong: thread A signals `ping` and waits on `pong`, thread B waits on `ping` and signals
//!   `pong`; every hand-off wakes the other thread (a blocking wait each way).
//! - one signaller, one waiter: the signaller raises the value as fast as it can; the waiter waits for
//!   the value after the last one it saw (mostly the lock-free fast path, sometimes a park).
//! - uncontended: one thread signals and polls with nobody waiting (the floor of a signal's cost).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use hal::{Semaphore, Timeout};

/// A wait that fails loudly instead of hanging if a hand-off is ever lost.
const GENEROUS: Timeout = Timeout::After(Duration::from_secs(10));

fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|arg| arg.parse().ok()).unwrap_or(1.5);
    let run_for = Duration::from_secs_f64(seconds);
    println!(
        "semaphore throughput, {seconds} s per case, {} CPUs",
        thread::available_parallelism().map_or(0, |n| n.get())
    );
    ping_pong(run_for);
    one_signaller_one_waiter(run_for);
    uncontended(run_for);
}

fn ping_pong(run_for: Duration) {
    let ping = Semaphore::new(0);
    let pong = Semaphore::new(0);
    let stop = Arc::new(AtomicBool::new(false));
    let partner = {
        let (ping, pong, stop) = (ping.clone(), pong.clone(), stop.clone());
        thread::spawn(move || {
            let mut round = 1;
            loop {
                ping.wait(round, GENEROUS).expect("ping lost");
                if stop.load(Ordering::Acquire) {
                    return;
                }
                pong.signal(round).expect("pong signal");
                round += 1;
            }
        })
    };
    let start = Instant::now();
    let mut round = 1;
    while start.elapsed() < run_for {
        ping.signal(round).expect("ping signal");
        pong.wait(round, GENEROUS).expect("pong lost");
        round += 1;
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Release);
    ping.signal(round).expect("final ping");
    partner.join().expect("partner thread");
    let rounds = (round - 1) as f64;
    println!(
        "ping-pong (2 threads, 2 semaphores): {:.0} round trips/s, {:.0} signals/s, {:.2} us per hand-off",
        rounds / elapsed.as_secs_f64(),
        2.0 * rounds / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / (2.0 * rounds),
    );
}

fn one_signaller_one_waiter(run_for: Duration) {
    let sem = Semaphore::new(0);
    let waiter = {
        let sem = sem.clone();
        thread::spawn(move || {
            let (mut seen, mut waits) = (0u64, 0u64);
            loop {
                sem.wait(seen + 1, GENEROUS).expect("waiter lost a signal");
                waits += 1;
                seen = sem.query().expect("query");
                if seen == u64::MAX {
                    return waits;
                }
            }
        })
    };
    let start = Instant::now();
    let mut value = 0;
    while start.elapsed() < run_for {
        // Check the clock once per batch: reading it costs about as much as a signal.
        for _ in 0..64 {
            value += 1;
            sem.signal(value).expect("signal");
        }
    }
    let elapsed = start.elapsed();
    sem.signal(u64::MAX).expect("final signal");
    let waits = waiter.join().expect("waiter thread");
    println!(
        "one signaller, one waiter: {:.0} signals/s, {:.0} completed waits/s ({:.1} signals per wait)",
        value as f64 / elapsed.as_secs_f64(),
        waits as f64 / elapsed.as_secs_f64(),
        value as f64 / waits as f64,
    );
}

fn uncontended(run_for: Duration) {
    let sem = Semaphore::new(0);
    let start = Instant::now();
    let mut value = 0;
    while start.elapsed() < run_for {
        for _ in 0..256 {
            value += 1;
            sem.signal(value).expect("signal");
            sem.wait(value, Timeout::Immediate).expect("reached value");
        }
    }
    let elapsed = start.elapsed();
    println!(
        "uncontended (1 thread): {:.0} signal+poll pairs/s, {:.0} ns per pair",
        value as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e9 / value as f64,
    );
}
