//! Randomized stress of `Readback`: reads held behind host semaphores that other threads signal or
//! fail at random moments, devices dropped with reads still held, and several threads waiting on,
//! awaiting and taking clones of each readback at once. Every readback must be decided within the
//! timeout (never hang), hand its bytes to exactly one taker, and fail with its wait's status or a
//! cancellation when its read could not run. The seed is printed on failure; replay it with
//! `HAL_STRESS_SEED=<seed> cargo test -p timeline-hal-cpu-sim --test readback_stress`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use hal::{BufferParams, Error, Readback, Semaphore, SemaphoreValue as SV, StatusCode, Timeout};

const ROUNDS: usize = 40;
const READS: usize = 6;
const LIMIT: Duration = Duration::from_secs(10);

/// xorshift64*: small, seedable, good enough to shuffle timings.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// One taker of a readback: waits, awaits (polling with a parking waker), or polls `take`.
fn take_one(readback: Readback, how: u64) -> hal::Result<Vec<u8>> {
    let deadline = Instant::now() + LIMIT;
    match how {
        0 => readback.wait(Timeout::After(LIMIT)),
        1 => {
            let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
            let mut future = std::pin::pin!(std::future::IntoFuture::into_future(readback));
            loop {
                if let Poll::Ready(outcome) = future.as_mut().poll(&mut Context::from_waker(&waker)) {
                    return outcome;
                }
                if Instant::now() > deadline {
                    return Err(Error::deadline_exceeded("awaiting the readback"));
                }
                std::thread::park_timeout(Duration::from_millis(5));
            }
        }
        _ => loop {
            if let Some(bytes) = readback.take() {
                return Ok(bytes);
            }
            if readback.is_ready() {
                return readback.wait(Timeout::Immediate);
            }
            if Instant::now() > deadline {
                return Err(Error::deadline_exceeded("polling the readback"));
            }
            std::thread::sleep(Duration::from_micros(200));
        },
    }
}

fn round(rng: &mut Rng) -> Result<(), String> {
    let device = driver_cpu_sim::create_device().map_err(|e| e.to_string())?;
    let queue = device.queue(rng.below(2) as usize).map_err(|e| e.to_string())?;
    let buffer = device.allocate_buffer(BufferParams::host_visible(), 64).map_err(|e| e.to_string())?;
    buffer.write(0, &[7; 64]).map_err(|e| e.to_string())?;
    let gates: Vec<Semaphore> = (0..READS).map(|_| Semaphore::new(0)).collect();
    let mut readbacks = Vec::new();
    for gate in &gates {
        let length = 1 + rng.below(64);
        let readback = queue.read(&[SV::new(gate, 1)], &buffer, 0, length, &[]).map_err(|e| e.to_string())?;
        readbacks.push((readback, length));
    }
    // 0: signal, 1: fail, 2: leave for the device drop.
    let fates: Vec<u64> = (0..READS).map(|_| rng.below(3)).collect();
    let drop_device = fates.contains(&2);
    let delays: Vec<u64> = (0..READS).map(|_| rng.below(300)).collect();
    let driver = {
        let gates = gates.clone();
        let fates = fates.clone();
        std::thread::spawn(move || {
            for ((gate, fate), delay) in gates.iter().zip(&fates).zip(&delays) {
                std::thread::sleep(Duration::from_micros(*delay));
                match fate {
                    0 => gate.signal(1).expect("signal a gate"),
                    1 => gate.fail(Error::data_loss("gate failed by the stress")),
                    _ => {}
                }
            }
        })
    };
    let mut takers = Vec::new();
    for (index, (readback, _)) in readbacks.iter().enumerate() {
        for _ in 0..1 + rng.below(3) {
            let (readback, how) = (readback.clone(), rng.below(3));
            takers.push((index, std::thread::spawn(move || take_one(readback, how))));
        }
    }
    driver.join().map_err(|_| "the driving thread panicked".to_string())?;
    if drop_device {
        std::thread::sleep(Duration::from_micros(rng.below(500)));
        drop((queue, buffer, device));
    }
    let handed = (0..READS).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>();
    for (index, taker) in takers {
        let outcome = taker.join().map_err(|_| format!("a taker of read {index} panicked"))?;
        let (fate, length) = (fates[index], readbacks[index].1);
        match (fate, outcome) {
            (0, Ok(bytes)) => {
                if bytes != vec![7; length as usize] {
                    return Err(format!("read {index}: wrong bytes {bytes:?}"));
                }
                handed[index].fetch_add(1, Ordering::Relaxed);
            }
            (0, Err(e)) if e.code() == StatusCode::FailedPrecondition => {}
            // A device dropped right after a signal may cancel the read before it ran.
            (0, Err(e)) if drop_device && matches!(e.code(), StatusCode::Cancelled | StatusCode::Aborted) => {}
            (1, Err(e)) if matches!(e.code(), StatusCode::DataLoss | StatusCode::FailedPrecondition) => {}
            (2, Err(e)) if matches!(e.code(), StatusCode::Cancelled | StatusCode::Aborted) => {}
            (fate, outcome) => return Err(format!("read {index} (fate {fate}): unexpected {outcome:?}")),
        }
    }
    for (index, count) in handed.iter().enumerate() {
        if count.load(Ordering::Relaxed) > 1 {
            return Err(format!("read {index}: its bytes were handed to {} takers", count.load(Ordering::Relaxed)));
        }
    }
    Ok(())
}

#[test]
fn readbacks_are_always_decided_and_handed_over_once() {
    let seed = std::env::var("HAL_STRESS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
    });
    let mut rng = Rng(seed);
    for index in 0..ROUNDS {
        if let Err(failure) = round(&mut rng) {
            panic!("seed {seed}, round {index}: {failure}");
        }
    }
}
