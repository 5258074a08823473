//! Randomized DAG stress of the scheduler on cpu-sim: random fills, updates and copies over a few
//! buffers, spread over 3 queues, ordered only by per-buffer timeline semaphores, submitted in a
//! random order (wait-before-signal everywhere) with some gated on host signals that arrive while
//! submitting, while host threads wait on random values with short deadlines. The buffers must end
//! equal to a sequential oracle that ran the ops in program order, and a wait may return `Ok` only
//! once its value is reached.
//!
//! The seed is printed; replay one with `HAL_DAG_SEED=<seed> cargo test -p timeline-hal-cpu-sim --test dag_stress`.

use std::time::Duration;

use hal::{BufferParams, Semaphore, SemaphoreValue as SV, Timeout};

const BUFFERS: usize = 4;
const WORDS: usize = 32;
const OPS: usize = 150;
const ROUNDS: u64 = 40;

#[path = "../../hal/tests/support/splitmix.rs"]
mod splitmix;
use splitmix::Rng;

#[derive(Clone, Debug)]
enum Op {
    Fill { buf: usize, word: usize, words: usize, value: u32 },
    Update { buf: usize, word: usize, data: Vec<u32> },
    Copy { src: usize, src_word: usize, dst: usize, dst_word: usize, words: usize },
}

impl Op {
    fn touches(&self) -> Vec<usize> {
        match self {
            Op::Fill { buf, .. } | Op::Update { buf, .. } => vec![*buf],
            Op::Copy { src, dst, .. } if src == dst => vec![*src],
            Op::Copy { src, dst, .. } => vec![*src, *dst],
        }
    }

    fn apply(&self, oracle: &mut [[u32; WORDS]; BUFFERS]) {
        match self {
            Op::Fill { buf, word, words, value } => oracle[*buf][*word..word + words].fill(*value),
            Op::Update { buf, word, data } => oracle[*buf][*word..word + data.len()].copy_from_slice(data),
            Op::Copy { src, src_word, dst, dst_word, words } => {
                let tmp: Vec<u32> = oracle[*src][*src_word..src_word + words].to_vec();
                oracle[*dst][*dst_word..dst_word + words].copy_from_slice(&tmp);
            }
        }
    }
}

fn random_op(rng: &mut Rng) -> Op {
    let words = 1 + rng.below(8) as usize;
    let word = rng.below((WORDS - words + 1) as u64) as usize;
    match rng.below(3) {
        0 => Op::Fill { buf: rng.below(BUFFERS as u64) as usize, word, words, value: rng.next() as u32 },
        1 => Op::Update {
            buf: rng.below(BUFFERS as u64) as usize,
            word,
            data: (0..words).map(|_| rng.next() as u32).collect(),
        },
        _ => {
            let src = rng.below(BUFFERS as u64) as usize;
            let mut dst = rng.below(BUFFERS as u64) as usize;
            let mut dst_word = rng.below((WORDS - words + 1) as u64) as usize;
            if src == dst && word.abs_diff(dst_word) < words {
                // Same-buffer copies must not overlap: move to the next buffer instead.
                dst = (dst + 1) % BUFFERS;
                dst_word = word;
            }
            Op::Copy { src, src_word: word, dst, dst_word, words }
        }
    }
}

fn words_to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn run_round(seed: u64) {
    let mut rng = Rng(seed);
    let device = driver_cpu_sim::create_device().expect("cpu-sim device");
    let queues: Vec<_> = (0..3).map(|i| device.queue(i).expect("queue")).collect();
    let buffers: Vec<_> = (0..BUFFERS)
        .map(|_| device.allocate_buffer(BufferParams::host_visible(), (WORDS * 4) as u64).unwrap())
        .collect();
    let timelines: Vec<Semaphore> = (0..BUFFERS).map(|_| device.create_semaphore(0).unwrap()).collect();
    let gate = Semaphore::new(0);

    // Program order: op i waits for every earlier op on the buffers it touches.
    let mut oracle = [[0u32; WORDS]; BUFFERS];
    let mut counts = [0u64; BUFFERS];
    let mut planned = Vec::with_capacity(OPS);
    for _ in 0..OPS {
        let op = random_op(&mut rng);
        op.apply(&mut oracle);
        let touched = op.touches();
        let waits: Vec<(usize, u64)> = touched.iter().map(|&b| (b, counts[b])).collect();
        for &b in &touched {
            counts[b] += 1;
        }
        let signals: Vec<(usize, u64)> = touched.iter().map(|&b| (b, counts[b])).collect();
        let gated = rng.below(5) == 0;
        planned.push((op, waits, signals, gated, rng.below(3) as usize));
    }

    // Host waiters with short random deadlines race the completion threads for the same work (a
    // waiter whose value's work is enqueued waits on its event and retires it on its own thread).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let waiters: Vec<_> = (0..2u64)
        .map(|w| {
            let (timelines, stop) = (timelines.clone(), stop.clone());
            let mut rng = Rng(seed ^ (0x9e37_79b9 + w));
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let b = rng.below(BUFFERS as u64) as usize;
                    let Some(value) = counts[b].checked_sub(rng.below(counts[b].max(1))) else { continue };
                    let timeout = Timeout::After(Duration::from_micros(rng.below(300)));
                    match timelines[b].wait(value, timeout) {
                        Ok(()) => {
                            let now = timelines[b].query().unwrap_or_else(|e| panic!("seed {seed}: query: {e}"));
                            assert!(now >= value, "seed {seed}: wait for {value} returned Ok at {now}");
                        }
                        Err(e) if e.code() == hal::StatusCode::DeadlineExceeded => {}
                        Err(e) => panic!("seed {seed}: a wait with a deadline failed: {e}"),
                    }
                }
            })
        })
        .collect();

    // Submit in a random order; gated ops also wait on host signals that arrive as we go.
    let mut order: Vec<usize> = (0..OPS).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut gate_value = 0;
    for (n, &i) in order.iter().enumerate() {
        let (op, waits, signals, gated, queue) = &planned[i];
        let mut wait_list: Vec<SV> = waits.iter().map(|&(b, v)| SV::new(&timelines[b], v)).collect();
        if *gated {
            wait_list.push(SV::new(&gate, 1 + (n as u64) / 10));
        }
        let signal_list: Vec<SV> = signals.iter().map(|&(b, v)| SV::new(&timelines[b], v)).collect();
        let q = &queues[*queue];
        let submitted = match op {
            Op::Fill { buf, word, words, value } => {
                q.fill(&wait_list, &buffers[*buf], (*word * 4) as u64, (*words * 4) as u64, *value, &signal_list)
            }
            Op::Update { buf, word, data } => {
                q.update(&wait_list, &buffers[*buf], (*word * 4) as u64, &words_to_bytes(data), &signal_list)
            }
            Op::Copy { src, src_word, dst, dst_word, words } => q.copy(
                &wait_list,
                &buffers[*src],
                (*src_word * 4) as u64,
                &buffers[*dst],
                (*dst_word * 4) as u64,
                (*words * 4) as u64,
                &signal_list,
            ),
        };
        submitted.unwrap_or_else(|e| panic!("seed {seed}: submit of op {i} ({op:?}) failed: {e}"));
        if n % 10 == 9 && rng.below(2) == 0 {
            gate_value = 1 + (n as u64) / 10;
            gate.signal(gate_value).unwrap_or_else(|e| panic!("seed {seed}: gate signal: {e}"));
        }
    }
    gate.signal(gate_value.max(1 + OPS as u64 / 10) + 1).unwrap();

    let finals: Vec<SV> = (0..BUFFERS).map(|b| SV::new(&timelines[b], counts[b])).collect();
    if let Err(e) = hal::wait_semaphores(hal::WaitMode::All, &finals, Timeout::After(Duration::from_secs(20))) {
        panic!("seed {seed}: DAG did not finish: {e}\n{}", device.report());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for waiter in waiters {
        waiter.join().unwrap_or_else(|_| panic!("seed {seed}: a host waiter panicked"));
    }
    for b in 0..BUFFERS {
        let bytes = buffers[b].read_to_vec().unwrap();
        assert_eq!(bytes, words_to_bytes(&oracle[b]), "seed {seed}: buffer {b} differs from the sequential oracle");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !device.resource_usage().is_idle() {
        assert!(std::time::Instant::now() < deadline, "seed {seed}: not idle: {}", device.report());
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn random_dags_match_sequential_oracle() {
    let base = match std::env::var("HAL_DAG_SEED") {
        Ok(seed) => seed.parse().expect("HAL_DAG_SEED must be a u64"),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64,
    };
    println!("seed = {base} (replay: HAL_DAG_SEED={base} cargo test -p timeline-hal-cpu-sim --test dag_stress)");
    let rounds = if std::env::var("HAL_DAG_SEED").is_ok() { 1 } else { ROUNDS };
    for round in 0..rounds {
        run_round(base.wrapping_add(round));
    }
}
