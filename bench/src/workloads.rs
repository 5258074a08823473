//! The workloads, each run on a HAL device, with the host baseline it is judged against.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hal::{
    Buffer, BufferBinding, BufferParams, CommandBuffer, CommandBufferMode, Device, EntryPointInfo, Executable,
    ExecutableFormat, ExecutableSource, NativeEntryPoint, NativeInvocation, Result, Semaphore, SemaphoreValue as SV,
    Timeout, WaitMode,
};

use crate::baseline;
use crate::stats::{Samples, time};

/// How much work each workload does.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Untimed trials first.
    pub warmup: usize,
    /// Timed trials.
    pub trials: usize,
    /// Operations per trial for the fast workloads.
    pub ops: u64,
    /// Operations per trial for round-trip (latency) workloads.
    pub round_trips: u64,
}

impl Sizes {
    /// A run of well under a minute.
    pub fn quick() -> Self {
        Sizes { warmup: 1, trials: 5, ops: 2_000, round_trips: 300 }
    }

    /// The full run.
    pub fn full() -> Self {
        Sizes { warmup: 2, trials: 15, ops: 20_000, round_trips: 3_000 }
    }
}

/// One row of the report.
#[derive(Clone, Debug)]
pub struct Row {
    /// Workload name.
    pub name: String,
    /// What one operation is.
    pub unit: &'static str,
    /// The HAL's times.
    pub hal: Samples,
    /// The baseline's name and times.
    pub baseline: Option<(&'static str, Samples)>,
}

impl Row {
    /// HAL median over baseline median.
    pub fn ratio(&self) -> Option<f64> {
        self.baseline.as_ref().map(|(_, b)| self.hal.median() / b.median())
    }
}

/// PTX of the `touch` kernel (one binding, one constant): writes the constant to word 0.
pub const TOUCH_PTX: &str = r#".version 7.0
.target sm_80
.address_size 64
.visible .entry touch(.param .u64 out, .param .u32 value)
{
    .reg .b64 %rd<3>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [value];
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r1;
    ret;
}
"#;

/// The device and the objects every workload reuses.
pub struct Env {
    /// The device.
    pub device: Device,
    buffer: Buffer,
    executable: Executable,
    empty: CommandBuffer,
}

/// The `touch` kernel in the device's format.
fn touch_source(driver: &str) -> ExecutableSource {
    let info = EntryPointInfo::new("touch", 1, 1, 1);
    match driver {
        "cuda" => ExecutableSource::Bytes {
            format: ExecutableFormat::Ptx,
            data: Arc::from(TOUCH_PTX.as_bytes()),
            entry_points: vec![info],
        },
        _ => ExecutableSource::Native(vec![NativeEntryPoint {
            info,
            kernel: Arc::new(|inv: &NativeInvocation<'_>| {
                inv.bindings[0].store_u32(0, inv.constants[0]);
                Ok(())
            }),
        }]),
    }
}

impl Env {
    /// Prepares the shared objects on `device`.
    pub fn new(device: Device) -> Result<Env> {
        let buffer = device.allocate_buffer(BufferParams::device_local(), 4096)?;
        let executable = device.load_executable(&touch_source(&device.info().driver))?;
        let empty = device.create_command_buffer(CommandBufferMode::Reusable)?;
        empty.end()?;
        Ok(Env { device, buffer, executable, empty })
    }

    /// A reusable command buffer of `dispatches` dependent `touch` dispatches.
    pub fn dispatches(&self, dispatches: usize) -> Result<CommandBuffer> {
        let cb = self.device.create_command_buffer(CommandBufferMode::Reusable)?;
        for i in 0..dispatches {
            if i > 0 {
                cb.barrier()?;
            }
            cb.dispatch(&self.executable, 0, [1, 1, 1], &[i as u32], &[BufferBinding::range(&self.buffer, 0, 4)])?;
        }
        cb.end()?;
        Ok(cb)
    }

    fn semaphore(&self) -> Semaphore {
        self.device.create_semaphore(0).expect("semaphore")
    }
}

const LONG: Timeout = Timeout::After(Duration::from_secs(60));

/// N executes of `cb` on queue 0, each waiting on value i and signalling i+1.
pub fn chain(env: &Env, cb: &CommandBuffer, ops: u64) -> Duration {
    let q = env.device.queue(0).expect("queue 0");
    let s = env.semaphore();
    time(|| {
        for i in 0..ops {
            q.execute(&[SV::new(&s, i)], cb, &[SV::new(&s, i + 1)]).expect("execute");
        }
        s.wait(ops, LONG).expect("chain wait");
    })
}

/// N executes of `cb` with no waits (throughput).
pub fn independent(env: &Env, cb: &CommandBuffer, ops: u64) -> Duration {
    let q = env.device.queue(0).expect("queue 0");
    let s = env.semaphore();
    time(|| {
        for i in 0..ops {
            q.execute(&[], cb, &[SV::new(&s, i + 1)]).expect("execute");
        }
        s.wait(ops, LONG).expect("independent wait");
    })
}

/// A dependent chain alternating between queues 0 and 1: every hop crosses queues.
pub fn ping_pong(env: &Env, ops: u64) -> Duration {
    let queues = [env.device.queue(0).expect("queue 0"), env.device.queue(1).expect("queue 1")];
    let s = env.semaphore();
    time(|| {
        for i in 0..ops {
            queues[(i % 2) as usize].execute(&[SV::new(&s, i)], &env.empty, &[SV::new(&s, i + 1)]).expect("execute");
        }
        s.wait(ops, LONG).expect("ping-pong wait");
    })
}

/// Submit, then wait on the host, N times; also returns the CPU time the host thread burned.
pub fn round_trip(env: &Env, cb: &CommandBuffer, ops: u64) -> (Duration, Option<Duration>) {
    let q = env.device.queue(0).expect("queue 0");
    let s = env.semaphore();
    let cpu_before = thread_cpu_time();
    let wall = time(|| {
        for i in 0..ops {
            q.execute(&[], cb, &[SV::new(&s, i + 1)]).expect("execute");
            s.wait(i + 1, LONG).expect("round-trip wait");
        }
    });
    let cpu = cpu_before.and_then(|before| thread_cpu_time().map(|after| after.saturating_sub(before)));
    (wall, cpu)
}

/// Work submitted against a value the host signals later: time from the host's signal to the
/// work's completion being visible, averaged per release.
pub fn deferred_release(env: &Env, ops: u64) -> Duration {
    let q = env.device.queue(0).expect("queue 0");
    let gate = Semaphore::new(0);
    let done = env.semaphore();
    let mut total = Duration::ZERO;
    for i in 1..=ops {
        q.execute(&[SV::new(&gate, i)], &env.empty, &[SV::new(&done, i)]).expect("execute");
        let start = Instant::now();
        gate.signal(i).expect("gate signal");
        done.wait(i, LONG).expect("release wait");
        total += start.elapsed();
    }
    total
}

/// `queue_alloca` + `queue_dealloca` pairs, chained on one semaphore.
pub fn alloca_dealloca(env: &Env, ops: u64) -> Duration {
    let q = env.device.queue(0).expect("queue 0");
    let s = env.semaphore();
    time(|| {
        for i in 0..ops {
            let b = q
                .alloca(&[SV::new(&s, 2 * i)], BufferParams::device_local(), 4096, &[SV::new(&s, 2 * i + 1)])
                .expect("alloca");
            q.dealloca(&[SV::new(&s, 2 * i + 1)], &b, &[SV::new(&s, 2 * i + 2)]).expect("dealloca");
        }
        s.wait(2 * ops, LONG).expect("alloca wait");
    })
}

/// Host signal/wait ping-pong between two threads on two semaphores.
pub fn semaphore_ping_pong(ops: u64) -> Duration {
    let a = Semaphore::new(0);
    let b = Semaphore::new(0);
    let other = {
        let (a, b) = (a.clone(), b.clone());
        thread::spawn(move || {
            for i in 1..=ops {
                a.wait(i, LONG).expect("ping");
                b.signal(i).expect("pong");
            }
        })
    };
    let elapsed = time(|| {
        for i in 1..=ops {
            a.signal(i).expect("ping");
            b.wait(i, LONG).expect("pong");
        }
    });
    let _ = other.join();
    elapsed / 2
}

/// Wait-any over 64 semaphores, one of which another thread signals each round.
pub fn wait_any_64(ops: u64) -> Duration {
    let sems: Vec<Semaphore> = (0..64).map(|_| Semaphore::new(0)).collect();
    let ack = Semaphore::new(0);
    let signaller = {
        let (sems, ack) = (sems.clone(), ack.clone());
        thread::spawn(move || {
            for i in 1..=ops {
                sems[(i as usize * 7) % 64].signal(i).expect("signal");
                ack.wait(i, LONG).expect("ack");
            }
        })
    };
    let elapsed = time(|| {
        for i in 1..=ops {
            let list: Vec<SV> = sems.iter().map(|s| SV::new(s, i)).collect();
            hal::wait_semaphores(WaitMode::Any, &list, LONG).expect("wait-any");
            ack.signal(i).expect("ack");
        }
    });
    let _ = signaller.join();
    elapsed
}

/// CPU time of the calling thread, from `/proc/thread-self/schedstat` (Linux); `None` elsewhere.
fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Runs every workload on `env` and returns the rows.
pub fn run_all(env: &Env, sizes: Sizes, mut progress: impl FnMut(&str)) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let one = env.dispatches(1)?;
    let (w, t, n, rt) = (sizes.warmup, sizes.trials, sizes.ops, sizes.round_trips);

    progress("dependent chain");
    rows.push(Row {
        name: "dependent chain, empty execute".into(),
        unit: "us/submission",
        hal: Samples::collect(w, t, n, |ops| chain(env, &env.empty, ops)),
        baseline: Some(("mutex+condvar worker FIFO", Samples::collect(w, t, n, baseline::chain))),
    });
    rows.push(Row {
        name: "dependent chain, 1 dispatch".into(),
        unit: "us/submission",
        hal: Samples::collect(w, t, n, |ops| chain(env, &one, ops)),
        baseline: Some(("mutex+condvar worker FIFO", Samples::collect(w, t, n, baseline::chain))),
    });
    progress("independent stream");
    rows.push(Row {
        name: "independent submissions, 1 dispatch".into(),
        unit: "us/submission",
        hal: Samples::collect(w, t, n, |ops| independent(env, &one, ops)),
        baseline: Some(("mutex+condvar worker FIFO", Samples::collect(w, t, n, baseline::chain))),
    });
    progress("cross-queue ping-pong");
    rows.push(Row {
        name: "cross-queue ping-pong hop".into(),
        unit: "us/hop",
        hal: Samples::collect(w, t, n, |ops| ping_pong(env, ops)),
        baseline: Some(("mutex+condvar two threads", Samples::collect(w, t, n, baseline::ping_pong))),
    });
    progress("host round trip");
    let mut cpu_share = Vec::new();
    let hal_rt = Samples::collect(w, t, rt, |ops| {
        let (wall, cpu) = round_trip(env, &one, ops);
        if let Some(cpu) = cpu {
            cpu_share.push(cpu.as_secs_f64() / wall.as_secs_f64());
        }
        wall
    });
    let cpu_note = if cpu_share.is_empty() {
        String::new()
    } else {
        cpu_share.sort_by(|a, b| a.total_cmp(b));
        format!(" (waiter CPU {:.0}%)", cpu_share[cpu_share.len() / 2] * 100.0)
    };
    rows.push(Row {
        name: format!("host round trip, 1 dispatch{cpu_note}"),
        unit: "us/round trip",
        hal: hal_rt,
        baseline: Some(("mutex+condvar round trip", Samples::collect(w, t, rt, baseline::round_trip))),
    });
    rows.push(Row {
        name: "host round trip, mpsc baseline".into(),
        unit: "us/round trip",
        hal: Samples::collect(w, t, rt, |ops| round_trip(env, &one, ops).0),
        baseline: Some(("std mpsc round trip", Samples::collect(w, t, rt, baseline::round_trip_mpsc))),
    });
    progress("deferred release");
    rows.push(Row {
        name: "host signal -> released work done".into(),
        unit: "us/release",
        hal: Samples::collect(w, t, rt, |ops| deferred_release(env, ops)),
        baseline: Some(("mutex+condvar round trip", Samples::collect(w, t, rt, baseline::round_trip))),
    });
    progress("command buffers");
    for dispatches in [1usize, 10, 100] {
        let cb = env.dispatches(dispatches)?;
        let ops = (n / dispatches as u64).max(50);
        rows.push(Row {
            name: format!("{dispatches}-dispatch command buffer, chained"),
            unit: "us/execute",
            hal: Samples::collect(w, t, ops, |ops| chain(env, &cb, ops)),
            baseline: None,
        });
    }
    progress("alloca/dealloca");
    rows.push(Row {
        name: "queue_alloca + queue_dealloca (4 KiB)".into(),
        unit: "us/pair",
        hal: Samples::collect(w, t, n, |ops| alloca_dealloca(env, ops)),
        baseline: Some((
            "global allocator alloc+free",
            Samples::collect(w, t, n, |ops| baseline::alloc_free(ops, 4096)),
        )),
    });
    progress("semaphores");
    rows.push(Row {
        name: "semaphore ping-pong (host threads)".into(),
        unit: "us/hop",
        hal: Samples::collect(w, t, n, semaphore_ping_pong),
        baseline: Some(("mutex+condvar two threads", Samples::collect(w, t, n, baseline::ping_pong))),
    });
    rows.push(Row {
        name: "wait-any over 64 semaphores".into(),
        unit: "us/wake",
        hal: Samples::collect(w, t, rt, wait_any_64),
        baseline: Some(("mutex+condvar flag array", Samples::collect(w, t, rt, baseline::wait_any_64))),
    });
    Ok(rows)
}
