//! Randomized stress of the semaphore: signallers advance (and now and then fail) the semaphores they
//! own while waiters mix blocking waits with finite timeouts, polls, any/all list waits and async
//! waits. Every outcome is checked against what the signallers did.
//!
//! The seed picks every random choice (not the thread schedule); a failure prints it, and
//! `HAL_STRESS_SEED=N cargo test -p timeline-hal --test semaphore_stress` replays those choices.
//! `HAL_STRESS_MILLIS` lengthens the run (default 1500 ms of random traffic).
#![cfg(not(loom))]

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hal::driver::SemaphoreExt;
use hal::{Error, Result, Semaphore, SemaphoreValue, StatusCode, Timeout, WaitMode, wait_semaphores};

const SEMAPHORES: usize = 16;
/// Each signaller owns the semaphores whose index is its own modulo `SIGNALLERS`, so values only grow.
const SIGNALLERS: usize = 4;
const WAITERS: usize = 4;
/// Every semaphore that did not fail is signalled to this at the end, above any value a waiter wants.
const FINAL: u64 = 1 << 40;
/// How far above the current value a "far" wait aims: never reached before `FINAL`.
const FAR: u64 = 1 << 32;
/// The timeout of a "long" wait, which must never expire: signallers keep going until every waiter
/// is done, so every value is reached soon or its semaphore fails.
const GENEROUS: Duration = Duration::from_secs(15);
/// How long a long wait may take before it counts as a lost wake-up (a wake-up lost in a timed wait
/// surfaces only when the timeout expires, which is `GENEROUS`).
const LONG_WAIT_LIMIT: Duration = Duration::from_secs(5);
/// A semaphore planned to fail stops advancing this long before, like a hung device, so waiters park
/// on it and the failure has to wake them.
const STALL_BEFORE_FAILURE: Duration = Duration::from_millis(50);

#[path = "support/splitmix.rs"]
mod splitmix;
use splitmix::Rng;

/// What happened to one semaphore's failure, recorded by its owner before it calls `fail`.
#[derive(Clone)]
struct Failure {
    /// The last value signalled before the failure: a wait for at most this may have returned `Ok`.
    value: u64,
    status: Error,
}

/// Counts of outcomes, printed at the end so a run shows what it exercised.
#[derive(Default)]
struct Stats {
    signals: AtomicU64,
    refused_signals: AtomicU64,
    failures: AtomicU64,
    ok: AtomicU64,
    ok_after_blocking: AtomicU64,
    timed_out: AtomicU64,
    failed: AtomicU64,
    failed_after_blocking: AtomicU64,
    polls: AtomicU64,
    list_waits: AtomicU64,
    async_waits: AtomicU64,
    long_waits: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

struct World {
    seed: u64,
    run_for: Duration,
    start: Instant,
    sems: Vec<Semaphore>,
    /// When each semaphore's owner fails it, if ever (planned from the seed).
    planned_failures: Vec<Option<(Duration, Error)>>,
    failures: Mutex<Vec<Option<Failure>>>,
    /// Set once every waiter is done; signallers then signal `FINAL` and stop.
    stop_signalling: AtomicBool,
    stats: Stats,
}

impl World {
    fn failure(&self, index: usize) -> Option<Failure> {
        self.failures.lock().unwrap()[index].clone()
    }

    /// Whether waiters should start another operation.
    fn running(&self) -> bool {
        self.start.elapsed() < self.run_for
    }

    /// Whether `index` is in the quiet spell before its planned failure (or failed).
    fn stalled(&self, index: usize) -> bool {
        self.planned_failures[index].as_ref().is_some_and(|(at, _)| self.start.elapsed() + STALL_BEFORE_FAILURE >= *at)
    }

    /// A long wait on `what` returned after `elapsed`: later than a signaller's pace explains means a
    /// wake-up was lost and only the timeout ended the wait.
    fn check_long_wait(&self, elapsed: Duration, what: &str) {
        let seed = self.seed;
        assert!(elapsed < LONG_WAIT_LIMIT, "seed {seed}: {what} took {elapsed:?}: lost wake-up");
        bump(&self.stats.long_waits);
    }

    /// The value to base a wanted value on: the current one, or the value at failure.
    fn current(&self, index: usize) -> u64 {
        match self.sems[index].query() {
            Ok(value) => value,
            Err(_) => self.failure(index).map_or(0, |f| f.value),
        }
    }

    /// A wait on `index` for `wanted` returned `Ok`: the value must really be reached.
    fn check_reached(&self, index: usize, wanted: u64, what: &str) {
        let seed = self.seed;
        match self.sems[index].query() {
            Ok(value) => assert!(value >= wanted, "seed {seed}: {what} returned Ok at value {value}, wanted {wanted}"),
            Err(status) => {
                let failure = self.failure(index).unwrap_or_else(|| {
                    panic!("seed {seed}: {what}: semaphore {index} reports {status} but nobody failed it")
                });
                assert!(
                    failure.value >= wanted,
                    "seed {seed}: {what} returned Ok, but the semaphore failed at {} below {wanted}",
                    failure.value
                );
            }
        }
    }

    /// A wait on `members` returned `error`: a timeout, or exactly the first failure of one member.
    fn check_error(&self, members: &[usize], error: &Error, what: &str) {
        if error.code() == StatusCode::DeadlineExceeded {
            bump(&self.stats.timed_out);
            return;
        }
        bump(&self.stats.failed);
        let seed = self.seed;
        let matches = members.iter().any(|&index| self.failure(index).is_some_and(|f| &f.status == error));
        assert!(matches, "seed {seed}: {what} returned {error}, which is not the first failure of any of {members:?}");
    }

    fn check_outcome(&self, mode: WaitMode, members: &[(usize, u64)], outcome: &Result<()>, what: &str) {
        let indices: Vec<usize> = members.iter().map(|&(index, _)| index).collect();
        match outcome {
            Ok(()) => {
                bump(&self.stats.ok);
                match mode {
                    WaitMode::All => {
                        members.iter().for_each(|&(index, wanted)| self.check_reached(index, wanted, what))
                    }
                    WaitMode::Any => {
                        let seed = self.seed;
                        let reached = members.iter().any(|&(index, wanted)| {
                            self.sems[index].query().map_or_else(
                                |_| self.failure(index).is_some_and(|f| f.value >= wanted),
                                |value| value >= wanted,
                            )
                        });
                        assert!(reached, "seed {seed}: {what} returned Ok but no member reached its value");
                    }
                }
            }
            Err(error) => self.check_error(&indices, error, what),
        }
    }
}

/// Wakes a thread parked in `block_on_until`.
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on this thread until it is ready, or `None` once `deadline` passed without a
/// wake-up making it ready (the future is then dropped, which cancels its timepoint). A future that
/// only turns out ready after the deadline counts as not woken: that is how a lost wake-up shows.
fn block_on_until<F: Future>(future: F, deadline: Instant) -> Option<F::Output> {
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return Some(output);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::park_timeout(deadline - now);
        if Instant::now() >= deadline {
            return None;
        }
    }
}

fn signaller(world: &World, me: usize) {
    let mut rng = Rng::fork(world.seed, me as u64);
    let seed = world.seed;
    let own: Vec<usize> = (me..SEMAPHORES).step_by(SIGNALLERS).collect();
    let mut values = [0u64; SEMAPHORES];
    let mut failed = [false; SEMAPHORES];
    while !world.stop_signalling.load(Ordering::SeqCst) {
        for &index in &own {
            if let Some((at, status)) = &world.planned_failures[index]
                && !failed[index]
                && world.start.elapsed() >= *at
            {
                world.failures.lock().unwrap()[index] = Some(Failure { value: values[index], status: status.clone() });
                world.sems[index].fail(status.clone());
                // The first failure is kept: waiters must never see this one.
                world.sems[index].fail(Error::internal(format!("seed {seed}: second failure, must be ignored")));
                failed[index] = true;
                bump(&world.stats.failures);
            }
        }
        let index = own[rng.index(own.len())];
        let sem = &world.sems[index];
        match rng.below(100) {
            _ if failed[index] => {
                let error = sem.signal(values[index] + 1).unwrap_err();
                assert_eq!(Some(error), world.failure(index).map(|f| f.status), "seed {seed}: signal after fail");
            }
            _ if world.stalled(index) => {}
            0..80 => {
                let next = values[index] + 1 + rng.below(3);
                sem.signal(next).unwrap_or_else(|e| panic!("seed {seed}: signal {index} to {next}: {e}"));
                values[index] = next;
                bump(&world.stats.signals);
            }
            80..85 => {
                let stale = values[index].saturating_sub(rng.below(3));
                let error = sem.signal(stale).unwrap_err();
                assert_eq!(error.code(), StatusCode::FailedPrecondition, "seed {seed}: signal {index} to {stale}");
                assert_eq!(sem.query().unwrap(), values[index], "seed {seed}: a refused signal changed the value");
                bump(&world.stats.refused_signals);
            }
            _ => poll(world, &mut rng),
        }
        // Pace the signals so waiters find values unreached and really park.
        if rng.below(4) == 0 {
            thread::sleep(Duration::from_micros(rng.below(200)));
        } else {
            thread::yield_now();
        }
    }
    for &index in &own {
        if !failed[index] {
            world.sems[index].signal(FINAL).unwrap_or_else(|e| panic!("seed {seed}: final signal of {index}: {e}"));
        }
    }
}

/// A `Timeout::Immediate` poll: never blocks, and never times out on a value seen reached before.
fn poll(world: &World, rng: &mut Rng) {
    let index = rng.index(SEMAPHORES);
    let before = world.current(index);
    let wanted = before.saturating_sub(2) + rng.below(5);
    let seen_reached = world.sems[index].query().is_ok_and(|value| value >= wanted);
    let start = Instant::now();
    let outcome = world.sems[index].wait(wanted, Timeout::Immediate);
    let seed = world.seed;
    assert!(start.elapsed() < Duration::from_secs(1), "seed {seed}: a poll blocked for {:?}", start.elapsed());
    if seen_reached {
        assert!(
            outcome.as_ref().is_ok() || outcome.as_ref().unwrap_err().code() != StatusCode::DeadlineExceeded,
            "seed {seed}: poll of {index} for {wanted} timed out after the value was seen reached"
        );
    }
    world.check_outcome(WaitMode::All, &[(index, wanted)], &outcome, "poll");
    bump(&world.stats.polls);
}

/// A wanted value a little above the current one, so it is usually reached soon but not yet; or, when
/// `far_allowed`, now and then one no signaller reaches before `FINAL`, so the wait must time out and
/// any timepoint it leaves behind is still there when the waiters are done.
fn pick_target(world: &World, rng: &mut Rng, far_allowed: bool) -> (usize, u64) {
    let index = rng.index(SEMAPHORES);
    let ahead = if far_allowed && rng.below(4) == 0 { FAR } else { rng.below(5) };
    (index, world.current(index) + ahead)
}

/// A short timeout most of the time; `None` (a long wait that must not time out) one time in `long_one_in`.
fn pick_timeout(rng: &mut Rng, long_one_in: u64) -> Option<Duration> {
    (rng.below(long_one_in) != 0).then(|| Duration::from_micros(rng.below(3_000)))
}

fn waiter(world: &World, me: usize) {
    let mut rng = Rng::fork(world.seed, (SIGNALLERS + me) as u64);
    let seed = world.seed;
    while world.running() {
        match rng.below(100) {
            0..35 => {
                let short = pick_timeout(&mut rng, 8);
                let (index, wanted) = pick_target(world, &mut rng, short.is_some());
                let start = Instant::now();
                let outcome = world.sems[index].wait(wanted, Timeout::After(short.unwrap_or(GENEROUS)));
                let elapsed = start.elapsed();
                let what = format!("wait on {index} for {wanted} ({short:?})");
                note_blocking(world, &outcome, elapsed);
                match (&outcome, short) {
                    (Err(e), None) => {
                        assert_ne!(e.code(), StatusCode::DeadlineExceeded, "seed {seed}: {what}: lost wake-up: {e}")
                    }
                    (Err(e), Some(timeout)) if e.code() == StatusCode::DeadlineExceeded => {
                        assert!(elapsed >= timeout, "seed {seed}: {what} timed out early, after {elapsed:?}");
                        let prefix =
                            format!("semaphore {}: wait for {wanted} timed out at value ", world.sems[index].id());
                        assert!(e.message().starts_with(&prefix), "seed {seed}: {what}: message {e}");
                    }
                    _ => {}
                }
                if short.is_none() {
                    world.check_long_wait(elapsed, &what);
                }
                world.check_outcome(WaitMode::All, &[(index, wanted)], &outcome, &what);
            }
            35..50 => poll(world, &mut rng),
            50..70 => {
                let mode = if rng.below(2) == 0 { WaitMode::All } else { WaitMode::Any };
                let count = 2 + rng.index(3);
                let short = pick_timeout(&mut rng, 6);
                let mut members: Vec<(usize, u64)> = Vec::with_capacity(count);
                while members.len() < count {
                    let target = pick_target(world, &mut rng, short.is_some());
                    if members.iter().all(|&(index, _)| index != target.0) {
                        members.push(target);
                    }
                }
                let list: Vec<SemaphoreValue> =
                    members.iter().map(|&(index, wanted)| SemaphoreValue::new(&world.sems[index], wanted)).collect();
                let timeout = match short {
                    Some(d) if rng.below(2) == 0 => Timeout::At(Instant::now() + d),
                    Some(d) => Timeout::After(d),
                    None => Timeout::After(GENEROUS),
                };
                let start = Instant::now();
                let outcome = wait_semaphores(mode, &list, timeout);
                let elapsed = start.elapsed();
                note_blocking(world, &outcome, elapsed);
                let what = format!("{mode:?} wait on {members:?} ({timeout:?})");
                if short.is_none() {
                    if let Err(e) = &outcome {
                        assert_ne!(e.code(), StatusCode::DeadlineExceeded, "seed {seed}: {what}: lost wake-up: {e}");
                    }
                    world.check_long_wait(elapsed, &what);
                }
                world.check_outcome(mode, &members, &outcome, &what);
                bump(&world.stats.list_waits);
            }
            _ => {
                let short = pick_timeout(&mut rng, 6);
                let (index, wanted) = pick_target(world, &mut rng, short.is_some());
                let start = Instant::now();
                let deadline = start + short.unwrap_or(GENEROUS);
                let what = format!("async wait on {index} for {wanted} ({short:?})");
                match block_on_until(world.sems[index].wait_async(wanted), deadline) {
                    Some(outcome) => {
                        note_blocking(world, &outcome, start.elapsed());
                        world.check_outcome(WaitMode::All, &[(index, wanted)], &outcome, &what)
                    }
                    None => {
                        assert!(short.is_some(), "seed {seed}: {what}: lost wake-up");
                        bump(&world.stats.timed_out);
                    }
                }
                if short.is_none() {
                    world.check_long_wait(start.elapsed(), &what);
                }
                bump(&world.stats.async_waits);
            }
        }
    }
}

/// Counts waits that returned only after a while: most of them parked and were woken.
fn note_blocking(world: &World, outcome: &Result<()>, elapsed: Duration) {
    if elapsed < Duration::from_micros(100) {
        return;
    }
    match outcome {
        Ok(()) => bump(&world.stats.ok_after_blocking),
        Err(e) if e.code() != StatusCode::DeadlineExceeded => bump(&world.stats.failed_after_blocking),
        Err(_) => {}
    }
}

fn seed_from_env_or_time() -> u64 {
    match std::env::var("HAL_STRESS_SEED") {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("HAL_STRESS_SEED={text:?} is not a u64")),
        Err(_) => SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64),
    }
}

fn plan_failures(seed: u64, run_for: Duration) -> Vec<Option<(Duration, Error)>> {
    let mut rng = Rng::fork(seed, u64::MAX);
    let mut plan: Vec<Option<(Duration, Error)>> = vec![None; SEMAPHORES];
    let count = 1 + rng.index(3);
    while plan.iter().flatten().count() < count {
        let index = rng.index(SEMAPHORES);
        let at = STALL_BEFORE_FAILURE + run_for.mul_f64(0.1 + 0.8 * (rng.below(1000) as f64 / 1000.0));
        let message = format!("stress: semaphore {index} faulted at {at:?} (seed {seed})");
        let status = match rng.below(3) {
            0 => Error::aborted(message),
            1 => Error::data_loss(message),
            _ => Error::cancelled(message),
        };
        plan[index] = Some((at, status));
    }
    plan
}

#[test]
fn random_signals_waits_and_failures_keep_the_contract() {
    let seed = seed_from_env_or_time();
    println!("seed = {seed}");
    let run_for = std::env::var("HAL_STRESS_MILLIS")
        .ok()
        .and_then(|text| text.parse().ok())
        .map_or(Duration::from_millis(1500), Duration::from_millis);
    let world = Arc::new(World {
        seed,
        run_for,
        start: Instant::now(),
        sems: (0..SEMAPHORES).map(|_| Semaphore::new(0)).collect(),
        planned_failures: plan_failures(seed, run_for),
        failures: Mutex::new(vec![None; SEMAPHORES]),
        stop_signalling: AtomicBool::new(false),
        stats: Stats::default(),
    });
    let spawn = |role: fn(&World, usize), me: usize| {
        let world = world.clone();
        thread::spawn(move || role(&world, me))
    };
    let signallers: Vec<_> = (0..SIGNALLERS).map(|me| spawn(signaller, me)).collect();
    let waiters: Vec<_> = (0..WAITERS).map(|me| spawn(waiter, me)).collect();
    let waiter_panic = waiters.into_iter().filter_map(|t| t.join().err()).next();
    // Nobody waits now and no value is near a "far" target yet: a timepoint still registered was
    // leaked by a wait that returned (a timeout, an any-wait, a dropped future).
    let leaked: Vec<String> = world
        .sems
        .iter()
        .filter(|sem| sem.pending_count() > 0)
        .map(|sem| format!("{} timepoints: {:.200}", sem.pending_count(), sem.report()))
        .collect();
    world.stop_signalling.store(true, Ordering::SeqCst);
    let signaller_panic = signallers.into_iter().filter_map(|t| t.join().err()).next();
    if let Some(panic) = waiter_panic.or(signaller_panic) {
        eprintln!("seed = {seed}: a thread failed; replay with HAL_STRESS_SEED={seed}");
        std::panic::resume_unwind(panic);
    }
    assert!(leaked.is_empty(), "seed {seed}: timepoints left behind after every waiter returned: {leaked:?}");

    for (index, sem) in world.sems.iter().enumerate() {
        assert_eq!(sem.pending_count(), 0, "seed {seed}: semaphore {index} kept timepoints: {}", sem.report());
        match world.failure(index) {
            Some(failure) => assert_eq!(sem.query().unwrap_err(), failure.status, "seed {seed}: first failure kept"),
            None => assert_eq!(sem.query().unwrap(), FINAL, "seed {seed}: semaphore {index}"),
        }
    }
    let s = &world.stats;
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    println!(
        "seed = {seed}: {} signals ({} refused), {} failures; waits: {} ok ({} after blocking), {} timed out, \
         {} failed ({} after blocking); {} polls, {} list waits, {} async waits, {} long waits",
        get(&s.signals),
        get(&s.refused_signals),
        get(&s.failures),
        get(&s.ok),
        get(&s.ok_after_blocking),
        get(&s.timed_out),
        get(&s.failed),
        get(&s.failed_after_blocking),
        get(&s.polls),
        get(&s.list_waits),
        get(&s.async_waits),
        get(&s.long_waits),
    );
    assert!(get(&s.failures) >= 1, "seed {seed}: the plan fails at least one semaphore");
    assert!(get(&s.ok) > 0 && get(&s.timed_out) > 0, "seed {seed}: the mix exercised both outcomes");
}
