//! Host baselines: the same hand-offs the workloads make, through a plain `Mutex` + `Condvar` (and
//! `std::sync::mpsc`), with nothing else in the way. A HAL workload is judged by its ratio to these.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// A counter guarded by a mutex, with a condvar to wait for it to reach a value.
#[derive(Default)]
struct Counter {
    value: Mutex<u64>,
    changed: Condvar,
}

impl Counter {
    fn set(&self, value: u64) {
        *self.value.lock().unwrap() = value;
        self.changed.notify_all();
    }

    fn add(&self, amount: u64) {
        *self.value.lock().unwrap() += amount;
        self.changed.notify_all();
    }

    fn wait_for(&self, value: u64) {
        let mut v = self.value.lock().unwrap();
        while *v < value {
            v = self.changed.wait(v).unwrap();
        }
    }
}

/// A FIFO of jobs served by one worker thread.
struct Worker {
    jobs: Arc<(Mutex<VecDeque<Option<u64>>>, Condvar)>,
    done: Arc<Counter>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Worker {
    fn start() -> Worker {
        let jobs: Arc<(Mutex<VecDeque<Option<u64>>>, Condvar)> = Arc::default();
        let done = Arc::new(Counter::default());
        let (j, d) = (jobs.clone(), done.clone());
        let handle = thread::spawn(move || {
            loop {
                let job = {
                    let mut q = j.0.lock().unwrap();
                    loop {
                        if let Some(job) = q.pop_front() {
                            break job;
                        }
                        q = j.1.wait(q).unwrap();
                    }
                };
                match job {
                    Some(value) => d.set(value),
                    None => return,
                }
            }
        });
        Worker { jobs, done, handle: Some(handle) }
    }

    fn push(&self, job: u64) {
        self.jobs.0.lock().unwrap().push_back(Some(job));
        self.jobs.1.notify_one();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.jobs.0.lock().unwrap().push_back(None);
        self.jobs.1.notify_one();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// `ops` jobs handed to a worker thread that completes each in order; the caller waits for the last
/// (the shape of a dependent chain on one queue).
pub fn chain(ops: u64) -> Duration {
    let worker = Worker::start();
    let start = Instant::now();
    for i in 1..=ops {
        worker.push(i);
    }
    worker.done.wait_for(ops);
    start.elapsed()
}

/// A token bounced `ops` times between two threads through mutex+condvar counters (a cross-queue
/// hop).
pub fn ping_pong(ops: u64) -> Duration {
    let counter = Arc::new(Counter::default());
    let other = {
        let counter = counter.clone();
        thread::spawn(move || {
            let mut k = 1;
            while k <= ops {
                counter.wait_for(k);
                counter.set(k + 1);
                k += 2;
            }
        })
    };
    let start = Instant::now();
    let mut k = 0;
    while k < ops {
        counter.set(k + 1);
        counter.wait_for(k + 2);
        k += 2;
    }
    let elapsed = start.elapsed();
    let _ = other.join();
    elapsed
}

/// `rounds` of fan-out/fan-in in lockstep: the calling thread publishes a round, each of
/// `consumers` threads waits for it and reports back, and the calling thread waits for all of them
/// (one producer, K consumers, one joiner, through mutex+condvar counters).
pub fn fan_out_in(consumers: usize, rounds: u64) -> Duration {
    let produced = Arc::new(Counter::default());
    let consumed = Arc::new(Counter::default());
    let threads: Vec<_> = (0..consumers)
        .map(|_| {
            let (produced, consumed) = (produced.clone(), consumed.clone());
            thread::spawn(move || {
                for r in 1..=rounds {
                    produced.wait_for(r);
                    consumed.add(1);
                }
            })
        })
        .collect();
    let start = Instant::now();
    for r in 1..=rounds {
        produced.set(r);
        consumed.wait_for(r * consumers as u64);
    }
    let elapsed = start.elapsed();
    for t in threads {
        let _ = t.join();
    }
    elapsed
}

/// Hand one job to a worker thread and wait for it, `ops` times (a host round trip).
pub fn round_trip(ops: u64) -> Duration {
    let worker = Worker::start();
    let start = Instant::now();
    for i in 1..=ops {
        worker.push(i);
        worker.done.wait_for(i);
    }
    start.elapsed()
}

/// The same round trip through two `std::sync::mpsc` channels.
pub fn round_trip_mpsc(ops: u64) -> Duration {
    let (to_worker, jobs) = mpsc::channel::<u64>();
    let (to_host, replies) = mpsc::channel::<u64>();
    let worker = thread::spawn(move || {
        for job in jobs {
            if to_host.send(job).is_err() {
                return;
            }
        }
    });
    let start = Instant::now();
    for i in 0..ops {
        let _ = to_worker.send(i);
        let _ = replies.recv();
    }
    let elapsed = start.elapsed();
    drop(to_worker);
    let _ = worker.join();
    elapsed
}

/// Wake one of 64 waiters' flags from another thread and wait for "any", `ops` times.
pub fn wait_any_64(ops: u64) -> Duration {
    let flags: Arc<(Mutex<[u64; 64]>, Condvar)> = Arc::new((Mutex::new([0; 64]), Condvar::new()));
    let signaller = {
        let flags = flags.clone();
        thread::spawn(move || {
            for i in 1..=ops {
                let mut f = flags.0.lock().unwrap();
                f[(i as usize * 7) % 64] = i;
                drop(f);
                flags.1.notify_all();
                // Wait for the waiter to consume it before the next round.
                let mut f = flags.0.lock().unwrap();
                while f.contains(&i) {
                    f = flags.1.wait(f).unwrap();
                }
            }
        })
    };
    let start = Instant::now();
    for i in 1..=ops {
        let mut f = flags.0.lock().unwrap();
        while !f.contains(&i) {
            f = flags.1.wait(f).unwrap();
        }
        for v in f.iter_mut() {
            if *v == i {
                *v = 0;
            }
        }
        drop(f);
        flags.1.notify_all();
    }
    let elapsed = start.elapsed();
    let _ = signaller.join();
    elapsed
}

/// `ops` allocate+free pairs of `size` bytes through the global allocator.
pub fn alloc_free(ops: u64, size: usize) -> Duration {
    let start = Instant::now();
    for _ in 0..ops {
        let v: Vec<u8> = Vec::with_capacity(size);
        std::hint::black_box(&v);
    }
    start.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baselines_complete() {
        assert!(chain(100) > Duration::ZERO);
        assert!(ping_pong(100) > Duration::ZERO);
        assert!(round_trip(10) > Duration::ZERO);
        assert!(round_trip_mpsc(10) > Duration::ZERO);
        assert!(wait_any_64(10) > Duration::ZERO);
        assert!(fan_out_in(3, 10) > Duration::ZERO);
    }
}
