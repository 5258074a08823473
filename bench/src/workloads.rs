//! The workloads, each run on a HAL device, with the baseline it is judged against: on CUDA the same
//! pattern through cudarc's `sys` layer ([`crate::cuda_baseline`]), elsewhere (and for the
//! semaphore-only workloads) the same hand-off between host threads ([`crate::baseline`]).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hal::{
    Buffer, BufferBinding, BufferParams, CommandBuffer, CommandBufferMode, Device, DeviceInfo, EntryPointInfo, Error,
    Executable, ExecutableFormat, ExecutableKind, ExecutableSource, NativeEntryPoint, NativeInvocation, Result,
    Semaphore, SemaphoreValue as SV, Timeout, WaitMode,
};

use crate::baseline;
use crate::cuda_baseline::RawCuda;
use crate::stats::Samples;
use crate::vulkan_baseline::RawVulkan;

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
    /// The most the ratio may be (the CUDA driver's targets), where one is set.
    pub target: Option<f64>,
    /// The least and the most SM clock of the GPU, in MHz, while the row's trials ran (see
    /// [`crate::gpu_clock`]), where it was read.
    pub sm_clock_mhz: Option<(u32, u32)>,
}

impl Row {
    /// A row without a target.
    pub fn new(
        name: impl Into<String>,
        unit: &'static str,
        hal: Samples,
        baseline: Option<(&'static str, Samples)>,
    ) -> Self {
        Row { name: name.into(), unit, hal, baseline, target: None, sm_clock_mhz: None }
    }

    /// The same row with `target` as the most its ratio may be.
    pub fn with_target(mut self, target: Option<f64>) -> Self {
        self.target = target;
        self
    }

    /// From the first of the row's timed trials (HAL or baseline) to the last one's end.
    pub fn timed(&self) -> Option<(Instant, Instant)> {
        let spans = [self.hal.timed, self.baseline.as_ref().and_then(|(_, b)| b.timed)];
        spans.into_iter().flatten().reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
    }

    /// HAL median over baseline median.
    pub fn ratio(&self) -> Option<f64> {
        self.baseline.as_ref().map(|(_, b)| self.hal.median() / b.median())
    }

    /// Whether the ratio is within the target (`None` without a target or a baseline).
    pub fn meets_target(&self) -> Option<bool> {
        Some(self.ratio()? <= self.target?)
    }
}

/// The CUDA driver's targets: the most each HAL workload may cost as a multiple of its
/// raw-CUDA baseline measured in the same run.
pub mod targets {
    /// Dependent chain of single-dispatch executes vs launch + `cuEventRecord`.
    pub const CHAIN: f64 = 1.25;
    /// Cross-queue ping-pong hop vs launch, record, other stream waits.
    pub const PING_PONG: f64 = 1.3;
    /// Host wait round trip vs launch + `cuStreamSynchronize`.
    pub const ROUND_TRIP: f64 = 1.5;
    /// Ten-dispatch command buffer vs a raw ten-kernel graph launch.
    pub const TEN_DISPATCH_GRAPH: f64 = 1.2;
    /// `queue_alloca` + `queue_dealloca` vs `cuMemAllocAsync` + `cuMemFreeAsync`.
    pub const ALLOCA: f64 = 1.3;
}

/// PTX of the `touch` kernel (one binding, one constant): writes the constant to word 0. The HAL
/// workloads on CUDA and the raw-CUDA baselines ([`crate::cuda_baseline`]) load this same text, so
/// both sides launch the identical kernel (one block of one thread).
pub const TOUCH_PTX: &str = include_str!("touch.ptx");

/// The name of the CUDA driver (`driver_cuda::DRIVER_NAME`, also in builds without it). It picks
/// the raw-CUDA baselines, which need a CUDA device; kernels are chosen by format ([`touch_source`]).
pub const CUDA_DRIVER: &str = "cuda";

/// The device and the objects every workload reuses.
#[derive(Clone)]
pub struct Env {
    /// The device.
    pub device: Device,
    buffer: Buffer,
    executable: Executable,
    /// A reusable command buffer with no commands.
    pub empty: CommandBuffer,
    /// A second device of the same driver, for the cross-device rows (see [`Env::with_peer`]).
    pub peer: Option<Box<Env>>,
}

/// The forms the `touch` kernel comes in, preferred first: native kernels, then PTX, then SPIR-V.
pub const TOUCH_KINDS: [ExecutableKind; 3] = [ExecutableKind::Native, ExecutableKind::Ptx, ExecutableKind::Spirv];

/// The `touch` kernel in WGSL (binding 0, one `u32` constant as a push constant): the Vulkan rows
/// and the raw-Vulkan baselines ([`crate::vulkan_baseline`]) load the same SPIR-V compiled from it.
pub const TOUCH_WGSL: &str = "@group(0) @binding(0) var<storage, read_write> out: array<u32>;
struct Constants { value: u32 }
var<immediate> c: Constants;
@compute @workgroup_size(1)
fn touch() { out[0] = c.value; }
";

/// [`TOUCH_WGSL`] compiled to SPIR-V (naga, in-process).
#[cfg(feature = "vulkan")]
pub fn touch_spirv() -> Result<Vec<u8>> {
    driver_vulkan::wgsl::compile(TOUCH_WGSL, "touch")
}

/// `Unavailable`: this build (without the `vulkan` feature) has no WGSL compiler.
#[cfg(not(feature = "vulkan"))]
pub fn touch_spirv() -> Result<Vec<u8>> {
    Err(hal::Error::unavailable("the bench was built without its `vulkan` feature: no WGSL compiler"))
}

/// The name of the Vulkan driver (`driver_vulkan::DRIVER_NAME`, also in builds without it): it
/// picks the raw-Vulkan baselines.
pub const VULKAN_DRIVER: &str = "vulkan";

/// The `touch` kernel in the first of [`TOUCH_KINDS`] the device `info` describes loads;
/// `Unimplemented`, naming the kinds it loads, when it loads none.
pub fn touch_source(info: &DeviceInfo) -> Result<ExecutableSource> {
    let entry = EntryPointInfo::new("touch", 1, 1, 1);
    Ok(match info.choose_executable_kind(&TOUCH_KINDS)? {
        ExecutableKind::Ptx => ExecutableSource::Bytes {
            format: ExecutableFormat::Ptx,
            data: Arc::from(TOUCH_PTX.as_bytes()),
            entry_points: vec![entry],
        },
        ExecutableKind::Spirv => ExecutableSource::Bytes {
            format: ExecutableFormat::Spirv,
            data: Arc::from(touch_spirv()?),
            entry_points: vec![entry],
        },
        _ => ExecutableSource::Native(vec![NativeEntryPoint::new(
            entry,
            Arc::new(|inv: &NativeInvocation<'_>| {
                if inv.bindings[0].store_u32(0, inv.constants[0]) {
                    Ok(())
                } else {
                    Err("store outside the binding".into())
                }
            }),
        )]),
    })
}

impl Env {
    /// Prepares the shared objects on `device`.
    pub fn new(device: Device) -> Result<Env> {
        let buffer = device.allocate_buffer(BufferParams::device_local(), 4096)?;
        let executable = device.load_executable(&touch_source(device.info())?)?;
        let empty = device.create_command_buffer(CommandBufferMode::Reusable)?;
        empty.end()?;
        Ok(Env { device, buffer, executable, empty, peer: None })
    }

    /// This environment with its kernels (and, where the peer device is on the same GPU, the
    /// peer's) writing the raw baselines' memory instead of buffers of its own.
    pub fn sharing_raw_data(&self, raw: &RawCuda) -> Result<Env> {
        let mut shared = Env { buffer: raw.share_data(&self.device)?, ..self.clone() };
        if let Some(peer) = &self.peer
            && peer.device.info().ordinal == self.device.info().ordinal
        {
            shared.peer = Some(Box::new(Env { buffer: raw.share_data(&peer.device)?, ..(**peer).clone() }));
        }
        Ok(shared)
    }

    /// Adds `peer`, a second device of the same driver (on CUDA it may be the same GPU): the bench
    /// then also measures hops between the two devices.
    pub fn with_peer(mut self, peer: Device) -> Result<Env> {
        self.peer = Some(Box::new(Env::new(peer)?));
        Ok(self)
    }

    /// A reusable command buffer of `dispatches` dependent `touch` dispatches.
    pub fn dispatches(&self, dispatches: usize) -> Result<CommandBuffer> {
        self.dispatches_on(&BufferBinding::range(&self.buffer, 0, 4), dispatches, CommandBufferMode::Reusable)
    }

    /// A command buffer of `dispatches` dependent `touch` dispatches on `binding`, recorded now.
    pub fn dispatches_on(
        &self,
        binding: &BufferBinding,
        dispatches: usize,
        mode: CommandBufferMode,
    ) -> Result<CommandBuffer> {
        let cb = self.device.create_command_buffer(mode)?;
        for i in 0..dispatches {
            if i > 0 {
                cb.barrier()?;
            }
            cb.dispatch(&self.executable, 0, [1, 1, 1], &[i as u32], std::slice::from_ref(binding))?;
        }
        cb.end()?;
        Ok(cb)
    }

    /// A reusable command buffer of one `touch` dispatch whose workgroup count, `[1, 1, 1]`, is read
    /// from a device buffer when it runs.
    pub fn indirect_dispatch(&self) -> Result<CommandBuffer> {
        let count = self.device.allocate_buffer(BufferParams::device_local(), 12)?;
        let written = self.device.create_semaphore(0)?;
        self.device.queue(0)?.write_values(&[], &count, 0, &[1u32, 1, 1], &[SV::new(&written, 1)])?;
        written.wait(1, LONG)?;
        let cb = self.device.create_command_buffer(CommandBufferMode::Reusable)?;
        cb.dispatch_indirect(&self.executable, 0, &count, 0, &[0], &[BufferBinding::range(&self.buffer, 0, 4)])?;
        cb.end()?;
        Ok(cb)
    }

    /// A reusable command buffer of `dispatches` dependent `touch` dispatches on binding slot 0.
    pub fn dispatches_on_slot(&self, dispatches: usize) -> Result<CommandBuffer> {
        let cb = self.device.create_command_buffer(CommandBufferMode::Reusable)?;
        for i in 0..dispatches {
            if i > 0 {
                cb.barrier()?;
            }
            cb.dispatch_refs(&self.executable, 0, [1, 1, 1], &[i as u32], &[hal::BindingRef::slot(0, 0, 4)])?;
        }
        cb.end()?;
        Ok(cb)
    }

    fn semaphore(&self) -> Result<Semaphore> {
        self.device.create_semaphore(0)
    }
}

/// The deadline of waits that are not themselves measured as "no deadline".
pub(crate) const LONG: Timeout = Timeout::After(Duration::from_secs(60));

/// Kernels per command buffer (and per raw graph) of the command-buffer workloads.
pub const GRAPH_SIZES: [usize; 3] = [1, 10, 100];

/// Binding tables the cycling binding-table row goes through (each a different buffer).
pub const TABLE_CYCLE: usize = 16;

/// Bytes between the words the binding-table rows' tables bind: a cache line each, at Vulkan's
/// largest allowed storage-buffer offset alignment, so the 16 fit in the 4 KiB page the fixed
/// bindings write.
const TABLE_WORD_STRIDE: u64 = 256;

/// Size of each `queue_alloca` (and raw stream-ordered allocation).
pub const ALLOCA_BYTES: u64 = 4096;

/// How long a run of submissions took: until the last one completed, and in the submitting calls
/// alone (the rest is the device, or the host path, catching up).
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// From the first submission until the last one's signal was observed.
    pub total: Duration,
    /// From the first submission until the last submitting call returned.
    pub submit: Duration,
}

/// N executes of `cb` on queue 0, each waiting on value i and signalling i+1.
pub fn chain(env: &Env, cb: &CommandBuffer, ops: u64) -> Result<Timing> {
    let q = env.device.queue(0)?;
    let s = env.semaphore()?;
    let start = Instant::now();
    for i in 0..ops {
        q.execute(&[SV::new(&s, i)], cb, &[SV::new(&s, i + 1)])?;
    }
    let submit = start.elapsed();
    s.wait(ops, LONG)?;
    Ok(Timing { total: start.elapsed(), submit })
}

/// N executes of `cb` on queue 0 as in [`chain`], each with the next of `tables` as its binding
/// table (a new table every time, as a runtime calling one function with new buffers).
pub fn chain_with_tables(env: &Env, cb: &CommandBuffer, tables: &[[BufferBinding; 1]], ops: u64) -> Result<Timing> {
    let q = env.device.queue(0)?;
    let s = env.semaphore()?;
    let start = Instant::now();
    for i in 0..ops {
        let table = &tables[i as usize % tables.len()];
        q.execute_with_bindings(&[SV::new(&s, i)], cb, table, &[SV::new(&s, i + 1)])?;
    }
    let submit = start.elapsed();
    s.wait(ops, LONG)?;
    Ok(Timing { total: start.elapsed(), submit })
}

/// N calls as a runtime without binding tables makes them: each records the 10-dispatch function
/// anew for the next of `bindings` (a reusable buffer: prepared, on CUDA a graph instantiated, as a
/// function recorded once would be) and executes it once, chained as in [`chain`].
pub fn chain_rerecorded(env: &Env, bindings: &[BufferBinding], ops: u64) -> Result<Timing> {
    let q = env.device.queue(0)?;
    let s = env.semaphore()?;
    let start = Instant::now();
    for i in 0..ops {
        let cb = env.dispatches_on(&bindings[i as usize % bindings.len()], 10, CommandBufferMode::Reusable)?;
        q.execute(&[SV::new(&s, i)], &cb, &[SV::new(&s, i + 1)])?;
    }
    let submit = start.elapsed();
    s.wait(ops, LONG)?;
    Ok(Timing { total: start.elapsed(), submit })
}

/// N executes of `cb` with no waits (throughput).
pub fn independent(env: &Env, cb: &CommandBuffer, ops: u64) -> Result<Timing> {
    let q = env.device.queue(0)?;
    let s = env.semaphore()?;
    let start = Instant::now();
    for i in 0..ops {
        q.execute(&[], cb, &[SV::new(&s, i + 1)])?;
    }
    let submit = start.elapsed();
    s.wait(ops, LONG)?;
    Ok(Timing { total: start.elapsed(), submit })
}

/// A dependent chain of executes of `cb` alternating between queues 0 and 1: every hop crosses
/// queues.
pub fn ping_pong(env: &Env, cb: &CommandBuffer, ops: u64) -> Result<Timing> {
    let queues = [env.device.queue(0)?, env.device.queue(1)?];
    let s = env.semaphore()?;
    let start = Instant::now();
    for i in 0..ops {
        queues[(i % 2) as usize].execute(&[SV::new(&s, i)], cb, &[SV::new(&s, i + 1)])?;
    }
    let submit = start.elapsed();
    s.wait(ops, LONG)?;
    Ok(Timing { total: start.elapsed(), submit })
}

/// A dependent chain alternating between queue 0 of `a` and queue 0 of `b`, each hop an execute of
/// that device's `cb`, chained through `semaphore` (one of `a`'s: both devices wait on the other's
/// events on the device; a host semaphore: every hop goes through the host).
pub fn cross_device_ping_pong(
    a: &Env,
    b: &Env,
    cbs: [&CommandBuffer; 2],
    semaphore: &hal::Semaphore,
    ops: u64,
) -> Result<Timing> {
    let queues = [a.device.queue(0)?, b.device.queue(0)?];
    let base = semaphore.query()?;
    let start = Instant::now();
    for i in 0..ops {
        let d = (i % 2) as usize;
        queues[d].execute(&[SV::new(semaphore, base + i)], cbs[d], &[SV::new(semaphore, base + i + 1)])?;
    }
    let submit = start.elapsed();
    semaphore.wait(base + ops, LONG)?;
    Ok(Timing { total: start.elapsed(), submit })
}

/// `rounds` of fan-out/fan-in: a producer execute on queue 0, one consumer execute on each of
/// queues 1..=`consumers` waiting on it, and a joiner on queue 0 waiting on every consumer; the
/// next round's producer waits on the joiner.
pub fn fan_out_in(env: &Env, cb: &CommandBuffer, consumers: usize, rounds: u64) -> Result<Timing> {
    let q0 = env.device.queue(0)?;
    let queues = (1..=consumers).map(|k| env.device.queue(k)).collect::<Result<Vec<_>>>()?;
    let (produced, joined) = (env.semaphore()?, env.semaphore()?);
    let consumed = (0..consumers).map(|_| env.semaphore()).collect::<Result<Vec<_>>>()?;
    let mut joins: Vec<SV> = Vec::with_capacity(consumers);
    let start = Instant::now();
    for r in 1..=rounds {
        q0.execute(&[SV::new(&joined, r - 1)], cb, &[SV::new(&produced, r)])?;
        for (q, c) in queues.iter().zip(&consumed) {
            q.execute(&[SV::new(&produced, r)], cb, &[SV::new(c, r)])?;
        }
        joins.clear();
        joins.extend(consumed.iter().map(|c| SV::new(c, r)));
        q0.execute(&joins, cb, &[SV::new(&joined, r)])?;
    }
    let submit = start.elapsed();
    joined.wait(rounds, LONG)?;
    Ok(Timing { total: start.elapsed(), submit })
}

/// Submissions a burst in [`Bursts`]: the host waits for each burst, so the backlog (and with it
/// the pools) is the same from one burst to the next.
pub const BURST: u64 = 20;

/// Steady-state workloads for counting allocations: each call submits about `submissions` in
/// bursts of [`BURST`] and waits for each burst on the host, reusing its semaphores across calls.
pub struct Bursts {
    shape: Shape,
    env_cb: CommandBuffer,
    queues: Vec<hal::Queue>,
    semaphores: Vec<Semaphore>,
    /// The fan-in's waits, rebuilt each round in the same vector.
    joins: Vec<SV>,
    value: u64,
}

impl Bursts {
    /// Host round trips on queue 0 (submit, wait, repeat).
    pub fn round_trips(env: &Env) -> Result<Bursts> {
        Bursts::new(env, Shape::RoundTrips, 1, 1)
    }

    /// The same workload executing `cb` instead of a one-dispatch command buffer.
    pub fn executing(mut self, cb: CommandBuffer) -> Bursts {
        self.env_cb = cb;
        self
    }

    /// A chain alternating between queues 0 and 1; `None` with fewer queues.
    pub fn hops(env: &Env) -> Result<Option<Bursts>> {
        if env.device.info().queue_count < 2 { Ok(None) } else { Bursts::new(env, Shape::Hops, 2, 1).map(Some) }
    }

    /// Rounds of fan-out from queue 0 to queues 1-3 and fan-in back on queue 0 (five submissions
    /// a round, the join waiting on three semaphores); `None` with fewer than four queues.
    pub fn fan_out_in(env: &Env) -> Result<Option<Bursts>> {
        if env.device.info().queue_count < 4 { Ok(None) } else { Bursts::new(env, Shape::FanOutIn, 4, 5).map(Some) }
    }

    fn new(env: &Env, shape: Shape, queues: usize, semaphores: usize) -> Result<Bursts> {
        Ok(Bursts {
            shape,
            env_cb: env.dispatches(1)?,
            queues: (0..queues).map(|k| env.device.queue(k)).collect::<Result<_>>()?,
            semaphores: (0..semaphores).map(|_| env.semaphore()).collect::<Result<_>>()?,
            joins: Vec::with_capacity(semaphores),
            value: 0,
        })
    }

    /// Submits about `submissions` (whole bursts) and waits for them.
    pub fn run(&mut self, submissions: u64) -> Result<()> {
        let cb = &self.env_cb;
        match (self.shape, self.semaphores.as_slice()) {
            (Shape::RoundTrips, [s]) => {
                for _ in 0..submissions {
                    self.queues[0].execute(&[SV::new(s, self.value)], cb, &[SV::new(s, self.value + 1)])?;
                    self.value += 1;
                    s.wait(self.value, LONG)?;
                }
            }
            (Shape::Hops, [s]) => {
                for _ in 0..submissions / BURST {
                    for _ in 0..BURST {
                        let queue = &self.queues[(self.value % 2) as usize];
                        queue.execute(&[SV::new(s, self.value)], cb, &[SV::new(s, self.value + 1)])?;
                        self.value += 1;
                    }
                    s.wait(self.value, LONG)?;
                }
            }
            (Shape::FanOutIn, [produced, joined, consumed @ ..]) => {
                let joins = &mut self.joins;
                for _ in 0..submissions / 5 / BURST {
                    for _ in 0..BURST {
                        let r = self.value + 1;
                        self.queues[0].execute(&[SV::new(joined, r - 1)], cb, &[SV::new(produced, r)])?;
                        for (q, c) in self.queues[1..].iter().zip(consumed) {
                            q.execute(&[SV::new(produced, r)], cb, &[SV::new(c, r)])?;
                        }
                        joins.clear();
                        joins.extend(consumed.iter().map(|c| SV::new(c, r)));
                        self.queues[0].execute(joins, cb, &[SV::new(joined, r)])?;
                        self.value = r;
                    }
                    joined.wait(self.value, LONG)?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// What a [`Bursts`] submits.
#[derive(Clone, Copy)]
enum Shape {
    RoundTrips,
    Hops,
    FanOutIn,
}

/// Submit `cb`, then wait on the host with `timeout`, N times; also returns the CPU time the host
/// thread burned. (`Timeout::Infinite` lets a driver wait on its device event on the waiting
/// thread; a finite deadline waits for the driver's completion path.)
pub fn round_trip(env: &Env, cb: &CommandBuffer, timeout: Timeout, ops: u64) -> Result<(Duration, Option<Duration>)> {
    let q = env.device.queue(0)?;
    let s = env.semaphore()?;
    let cpu_before = thread_cpu_time();
    let start = Instant::now();
    for i in 0..ops {
        q.execute(&[], cb, &[SV::new(&s, i + 1)])?;
        s.wait(i + 1, timeout)?;
    }
    let wall = start.elapsed();
    let cpu = cpu_before.and_then(|before| thread_cpu_time().map(|after| after.saturating_sub(before)));
    Ok((wall, cpu))
}

/// Work (`cb`) submitted against a value the host signals later: time from the host's signal to
/// the work's completion being visible (a wait with no deadline), summed over the releases. The
/// gate is a host semaphore.
pub fn deferred_release(env: &Env, cb: &CommandBuffer, ops: u64) -> Result<Duration> {
    let q = env.device.queue(0)?;
    let gate = Semaphore::new(0);
    let done = env.semaphore()?;
    let mut total = Duration::ZERO;
    for i in 1..=ops {
        q.execute(&[SV::new(&gate, i)], cb, &[SV::new(&done, i)])?;
        let start = Instant::now();
        gate.signal(i)?;
        done.wait(i, Timeout::Infinite)?;
        total += start.elapsed();
    }
    Ok(total)
}

/// `queue_alloca` + `queue_dealloca` pairs of `size` bytes, chained on one semaphore.
pub fn alloca_dealloca(env: &Env, size: u64, ops: u64) -> Result<Timing> {
    let q = env.device.queue(0)?;
    let s = env.semaphore()?;
    let start = Instant::now();
    for i in 0..ops {
        let b = q.alloca(&[SV::new(&s, 2 * i)], BufferParams::device_local(), size, &[SV::new(&s, 2 * i + 1)])?;
        q.dealloca(&[SV::new(&s, 2 * i + 1)], &b, &[SV::new(&s, 2 * i + 2)])?;
    }
    let submit = start.elapsed();
    s.wait(2 * ops, LONG)?;
    Ok(Timing { total: start.elapsed(), submit })
}

/// Joins a helper thread, turning its panic into an error.
fn join(handle: thread::JoinHandle<Result<()>>) -> Result<()> {
    handle.join().unwrap_or_else(|_| Err(Error::internal("bench helper thread panicked")))
}

/// Host signal/wait ping-pong between two threads on two semaphores.
pub fn semaphore_ping_pong(ops: u64) -> Result<Duration> {
    let a = Semaphore::new(0);
    let b = Semaphore::new(0);
    let other = {
        let (a, b) = (a.clone(), b.clone());
        thread::spawn(move || -> Result<()> {
            for i in 1..=ops {
                a.wait(i, LONG)?;
                b.signal(i)?;
            }
            Ok(())
        })
    };
    let start = Instant::now();
    let mine = (1..=ops).try_for_each(|i| {
        a.signal(i)?;
        b.wait(i, LONG)
    });
    let elapsed = start.elapsed();
    if let Err(e) = &mine {
        // Wake the other thread at once instead of letting it time out.
        a.fail(e.clone());
    }
    let theirs = join(other);
    mine?;
    theirs?;
    Ok(elapsed / 2)
}

/// Wait-any over 64 semaphores, one of which another thread signals each round.
pub fn wait_any_64(ops: u64) -> Result<Duration> {
    let sems: Vec<Semaphore> = (0..64).map(|_| Semaphore::new(0)).collect();
    let ack = Semaphore::new(0);
    let signaller = {
        let (sems, ack) = (sems.clone(), ack.clone());
        thread::spawn(move || -> Result<()> {
            for i in 1..=ops {
                sems[(i as usize * 7) % 64].signal(i)?;
                ack.wait(i, LONG)?;
            }
            Ok(())
        })
    };
    let start = Instant::now();
    let mine = (1..=ops).try_for_each(|i| {
        let list: Vec<SV> = sems.iter().map(|s| SV::new(s, i)).collect();
        hal::wait_semaphores(WaitMode::Any, &list, LONG)?;
        ack.signal(i)
    });
    let elapsed = start.elapsed();
    if let Err(e) = &mine {
        ack.fail(e.clone());
    }
    let theirs = join(signaller);
    mine?;
    theirs?;
    Ok(elapsed)
}

/// CPU time of the calling thread, from `/proc/thread-self/schedstat` (Linux); `None` elsewhere.
fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Which baselines a run pairs the HAL rows with.
enum Baselines {
    /// Host hand-offs (`Mutex` + `Condvar`, `mpsc`, the global allocator): cpu-sim.
    Host,
    /// The same patterns through cudarc's `sys` layer (semaphore-only rows keep host baselines).
    Cuda(RawCuda),
    /// The same patterns on `ash` (rows Vulkan has no counterpart for keep host baselines).
    Vulkan(Box<RawVulkan>),
}

/// Warm-up and trial counts, shared by every row.
#[derive(Clone, Copy)]
struct Trials {
    warmup: usize,
    trials: usize,
}

impl Trials {
    fn hal(self, ops: u64, trial: impl FnMut(u64) -> Result<Duration>) -> Result<Samples> {
        Samples::try_collect(self.warmup, self.trials, ops, trial)
    }

    /// Like `hal` for a workload that also reports its submitting time: the samples of the total,
    /// and a note with the median submitting time per operation.
    fn hal_split(self, ops: u64, mut trial: impl FnMut(u64) -> Result<Timing>) -> Result<(Samples, String)> {
        let mut submit = Vec::new();
        let samples = Samples::try_collect(self.warmup, self.trials, ops, |ops| {
            let timing = trial(ops)?;
            submit.push(timing.submit.as_secs_f64() * 1e6 / ops as f64);
            Ok(timing.total)
        })?;
        let submit = Samples::from_values(submit.split_off(self.warmup.min(submit.len())));
        Ok((samples, format!(" (submit {:.2})", submit.median())))
    }

    fn host(self, name: &'static str, ops: u64, trial: impl FnMut(u64) -> Duration) -> Option<(&'static str, Samples)> {
        Some((name, Samples::collect(self.warmup, self.trials, ops, trial)))
    }

    fn cuda(
        self,
        name: &'static str,
        ops: u64,
        trial: impl FnMut(u64) -> Result<Duration>,
    ) -> Result<Option<(&'static str, Samples)>> {
        Ok(Some((name, Samples::try_collect(self.warmup, self.trials, ops, trial)?)))
    }
}

/// Consumer queues of the fan-out/fan-in row on a device of `info`: none on a one-queue device.
fn fan_out_consumers(info: &hal::DeviceInfo) -> usize {
    info.queue_count.saturating_sub(1).min(7)
}

/// How many names [`run_all`] tells its `progress` on a device of `info`, with a peer device (the
/// cross-device rows) or without.
pub fn progress_steps(info: &hal::DeviceInfo, peer: bool) -> usize {
    // Dependent chain, independent stream, cross-queue ping-pong, host round trip, deferred
    // release, command buffers, alloca/dealloca, semaphores; then the rows that need a peer or queues.
    8 + usize::from(peer) + usize::from(fan_out_consumers(info) > 0)
}

/// Runs every workload on `env` and returns the rows. On the CUDA driver each HAL row is paired
/// with its raw-CUDA baseline ([`crate::cuda_baseline`]) and carries its target (see [`targets`]);
/// on other drivers, and for the semaphore-only rows, with a host hand-off ([`baseline`]).
pub fn run_all(env: &Env, sizes: Sizes, mut progress: impl FnMut(&str)) -> Result<Vec<Row>> {
    let info = env.device.info();
    let baselines = if info.driver == CUDA_DRIVER {
        Baselines::Cuda(RawCuda::new(info.ordinal, info.queue_count.max(2), &GRAPH_SIZES)?)
    } else if info.driver == VULKAN_DRIVER {
        Baselines::Vulkan(Box::new(RawVulkan::new(info.ordinal, &touch_spirv()?, &GRAPH_SIZES)?))
    } else {
        Baselines::Host
    };
    // On CUDA the HAL's kernels write the word the raw side's write (see `RawCuda::share_data`).
    // Declared after `baselines`, so dropped first: the raw side frees that memory.
    let shared;
    let env = match &baselines {
        Baselines::Cuda(raw) => {
            shared = env.sharing_raw_data(raw)?;
            &shared
        }
        Baselines::Host | Baselines::Vulkan(_) => env,
    };
    let cuda = |target: f64| match baselines {
        Baselines::Cuda(_) => Some(target),
        Baselines::Host | Baselines::Vulkan(_) => None,
    };
    let mut rows = Vec::new();
    let one = env.dispatches(1)?;
    let tr = Trials { warmup: sizes.warmup, trials: sizes.trials };
    let (n, rt) = (sizes.ops, sizes.round_trips);

    progress("dependent chain");
    let base = match &baselines {
        Baselines::Cuda(raw) => tr.cuda("cuEventRecord per op, one stream", n, |ops| raw.record_chain(ops))?,
        Baselines::Vulkan(raw) => tr.cuda("empty vkQueueSubmit, timeline wait+signal", n, |ops| raw.chain(0, ops))?,
        Baselines::Host => tr.host("mutex+condvar worker FIFO", n, baseline::chain),
    };
    let (hal, note) = tr.hal_split(n, |ops| chain(env, &env.empty, ops))?;
    rows.push(Row::new(format!("dependent chain, empty execute{note}"), "us/submission", hal, base));
    let base = match &baselines {
        Baselines::Cuda(raw) => tr.cuda("launch + cuEventRecord, one stream", n, |ops| raw.launch_record_chain(ops))?,
        Baselines::Vulkan(raw) => {
            tr.cuda("vkQueueSubmit recorded cb, timeline wait+signal", n, |ops| raw.chain(1, ops))?
        }
        Baselines::Host => tr.host("mutex+condvar worker FIFO", n, baseline::chain),
    };
    let (hal, note) = tr.hal_split(n, |ops| chain(env, &one, ops))?;
    rows.push(
        Row::new(format!("dependent chain, 1 dispatch{note}"), "us/submission", hal.clone(), base)
            .with_target(cuda(targets::CHAIN)),
    );
    if let Baselines::Cuda(raw) = &baselines {
        // The HAL replays a reusable one-dispatch buffer as a one-node graph: the same figures against
        // the raw pattern that does the same.
        let graph = tr.cuda("cuGraphLaunch 1-kernel graph + cuEventRecord", n, |ops| raw.graph_record_chain(1, ops))?;
        rows.push(Row::new("dependent chain, 1 dispatch vs graph + record", "us/submission", hal, graph));
    }

    progress("independent stream");
    let base = match &baselines {
        Baselines::Cuda(raw) => tr.cuda("cuLaunchKernel per op, one stream", n, |ops| raw.launches(ops))?,
        Baselines::Vulkan(raw) => tr.cuda("vkQueueSubmit recorded cb, signal only", n, |ops| raw.independent(ops))?,
        Baselines::Host => tr.host("mutex+condvar worker FIFO", n, baseline::chain),
    };
    let (hal, note) = tr.hal_split(n, |ops| independent(env, &one, ops))?;
    rows.push(Row::new(format!("independent submissions, 1 dispatch{note}"), "us/submission", hal, base));

    progress("cross-queue ping-pong");
    let base = match &baselines {
        Baselines::Cuda(raw) => tr.cuda("launch, record, other stream waits", n, |ops| raw.ping_pong(ops))?,
        Baselines::Vulkan(raw) => {
            tr.cuda("vkQueueSubmit alternating 2 queues, timeline", n, |ops| raw.ping_pong(ops))?
        }
        Baselines::Host => tr.host("mutex+condvar two threads", n, baseline::ping_pong),
    };
    let (hal, note) = tr.hal_split(n, |ops| ping_pong(env, &one, ops))?;
    rows.push(
        Row::new(format!("cross-queue ping-pong hop, 1 dispatch{note}"), "us/hop", hal.clone(), base)
            .with_target(cuda(targets::PING_PONG)),
    );
    if let Baselines::Vulkan(raw) = &baselines {
        // The HAL's stream also waits on its own previous submission: the same raw hop with it.
        let ordered = tr.cuda("vkQueueSubmit alternating 2 queues, also waiting on its own queue", n, |ops| {
            raw.ping_pong_ordered(ops)
        })?;
        rows.push(Row::new("cross-queue ping-pong hop vs raw ordering each queue", "us/hop", hal, ordered));
    }

    if let Some(peer) = &env.peer {
        progress("cross-device ping-pong");
        let peer_ordinal = peer.device.info().ordinal;
        let base = match &baselines {
            Baselines::Cuda(raw) if peer_ordinal != info.ordinal => {
                let other = RawCuda::new(peer_ordinal, 2, &[])?;
                tr.cuda("launch, record, the other GPU's stream waits", n, |ops| raw.cross_ping_pong(&other, ops))?
            }
            Baselines::Cuda(raw) => tr.cuda("launch, record, other stream waits", n, |ops| raw.ping_pong(ops))?,
            Baselines::Vulkan(raw) => {
                tr.cuda("vkQueueSubmit alternating 2 queues, timeline", n, |ops| raw.ping_pong(ops))?
            }
            Baselines::Host => tr.host("mutex+condvar two threads", n, baseline::ping_pong),
        };
        let theirs = peer.dispatches(1)?;
        let device_side = env.device.create_semaphore(0)?;
        let (hal, note) =
            tr.hal_split(n, |ops| cross_device_ping_pong(env, peer, [&one, &theirs], &device_side, ops))?;
        rows.push(
            Row::new(
                format!("cross-device ping-pong hop (ordinals {} and {peer_ordinal}), 1 dispatch{note}", info.ordinal),
                "us/hop",
                hal.clone(),
                base,
            )
            .with_target(cuda(targets::PING_PONG)),
        );
        let host = hal::Semaphore::new(0);
        let (through_host, note) =
            tr.hal_split(n, |ops| cross_device_ping_pong(env, peer, [&one, &theirs], &host, ops))?;
        rows.push(Row::new(
            format!("cross-device hop through the host (host semaphore){note}"),
            "us/hop",
            through_host,
            Some(("the same hop waited on the device (HAL, row above)", hal)),
        ));
    }

    let consumers = fan_out_consumers(info);
    if consumers > 0 {
        progress("fan-out/fan-in");
        let rounds = (n / 4).max(50);
        let base = match &baselines {
            Baselines::Cuda(raw) => {
                tr.cuda("record; streams wait, launch, record; join", rounds, |r| raw.fan_out_in(consumers, r))?
            }
            Baselines::Vulkan(raw) => {
                tr.cuda("vkQueueSubmit: producer, consumers on their queues, joiner; timelines", rounds, |r| {
                    raw.fan_out_in(consumers, r)
                })?
            }
            Baselines::Host => {
                tr.host("mutex+condvar threads, lockstep", rounds, |r| baseline::fan_out_in(consumers, r))
            }
        };
        let (hal, note) = tr.hal_split(rounds, |r| fan_out_in(env, &one, consumers, r))?;
        rows.push(Row::new(format!("fan-out/fan-in 1->{consumers}->1, 1 dispatch each{note}"), "us/round", hal, base));
    }

    progress("host round trip");
    let mut without_deadline = None;
    for (timeout, label) in [(Timeout::Infinite, "no deadline"), (LONG, "60 s deadline")] {
        let mut cpu_share = Vec::new();
        let hal_rt = tr.hal(rt, |ops| {
            let (wall, cpu) = round_trip(env, &one, timeout, ops)?;
            if let Some(cpu) = cpu {
                cpu_share.push(cpu.as_secs_f64() / wall.as_secs_f64());
            }
            Ok(wall)
        })?;
        let cpu_note = if cpu_share.is_empty() {
            String::new()
        } else {
            cpu_share.sort_by(|a, b| a.total_cmp(b));
            format!(", waiter CPU {:.0}%", cpu_share[cpu_share.len() / 2] * 100.0)
        };
        let base = match &baselines {
            Baselines::Cuda(raw) => tr.cuda("launch + cuStreamSynchronize", rt, |ops| raw.launch_sync(ops))?,
            Baselines::Vulkan(raw) => tr.cuda("vkQueueSubmit + vkWaitSemaphores", rt, |ops| raw.round_trip(1, ops))?,
            Baselines::Host => tr.host("mutex+condvar round trip", rt, baseline::round_trip),
        };
        if timeout == Timeout::Infinite {
            without_deadline = Some(hal_rt.clone());
        }
        rows.push(
            Row::new(format!("host round trip, 1 dispatch ({label}{cpu_note})"), "us/round trip", hal_rt, base)
                .with_target(cuda(targets::ROUND_TRIP)),
        );
    }
    if let (Baselines::Vulkan(raw), Some(hal_rt)) = (&baselines, without_deadline) {
        // `vkWaitSemaphores` wakes its waiter well after the work is done on NVIDIA's driver; a
        // waiter polling the timeline's counter is the faster raw round trip, as the HAL's waiter
        // polls too.
        let polled = tr
            .cuda("vkQueueSubmit + polling vkGetSemaphoreCounterValue", rt, |ops| raw.round_trip_on(0, 1, true, ops))?;
        rows.push(Row::new("host round trip, 1 dispatch vs raw polling", "us/round trip", hal_rt, polled));
    }
    if let Baselines::Vulkan(raw) = &baselines {
        rows.push(Row::new(
            "host round trip, empty execute (no deadline)",
            "us/round trip",
            tr.hal(rt, |ops| Ok(round_trip(env, &env.empty, Timeout::Infinite, ops)?.0))?,
            tr.cuda("empty vkQueueSubmit + vkWaitSemaphores", rt, |ops| raw.round_trip(0, ops))?,
        ));
    }
    if matches!(baselines, Baselines::Host) {
        rows.push(Row::new(
            "host round trip, 1 dispatch (mpsc baseline)",
            "us/round trip",
            tr.hal(rt, |ops| Ok(round_trip(env, &one, Timeout::Infinite, ops)?.0))?,
            tr.host("std mpsc round trip", rt, baseline::round_trip_mpsc),
        ));
    }

    progress("deferred release");
    let base = match &baselines {
        Baselines::Cuda(raw) => tr.cuda("launch + cuStreamSynchronize", rt, |ops| raw.launch_sync(ops))?,
        Baselines::Vulkan(raw) => {
            tr.cuda("vkSignalSemaphore -> waiting submit -> vkWaitSemaphores", rt, |ops| raw.deferred_release(ops))?
        }
        Baselines::Host => tr.host("mutex+condvar round trip", rt, baseline::round_trip),
    };
    let hal_release = tr.hal(rt, |ops| deferred_release(env, &one, ops))?;
    rows.push(Row::new("host signal -> released 1-dispatch work done", "us/release", hal_release.clone(), base));
    if let Baselines::Vulkan(raw) = &baselines {
        // As for the round trip: the raw waiter that polls is the faster one on NVIDIA's driver.
        let polled =
            tr.cuda("vkSignalSemaphore -> waiting submit -> polling vkGetSemaphoreCounterValue", rt, |ops| {
                raw.deferred_release_polled(ops)
            })?;
        rows.push(Row::new(
            "host signal -> released 1-dispatch work done vs raw polling",
            "us/release",
            hal_release,
            polled,
        ));
    }

    progress("command buffers");
    for dispatches in GRAPH_SIZES {
        let cb = env.dispatches(dispatches)?;
        let ops = (n / dispatches as u64).max(50);
        let (base, target) = match &baselines {
            Baselines::Cuda(raw) => {
                let name = match dispatches {
                    1 => "cuGraphLaunch 1-kernel graph, back to back",
                    10 => "cuGraphLaunch 10-kernel graph, back to back",
                    _ => "cuGraphLaunch 100-kernel graph, back to back",
                };
                let target = (dispatches == 10).then_some(targets::TEN_DISPATCH_GRAPH);
                (tr.cuda(name, ops, |ops| raw.graph_chain(dispatches, ops))?, target)
            }
            Baselines::Vulkan(raw) => {
                let name = match dispatches {
                    1 => "vkQueueSubmit 1-dispatch cb, timeline wait+signal",
                    10 => "vkQueueSubmit 10-dispatch cb, timeline wait+signal",
                    _ => "vkQueueSubmit 100-dispatch cb, timeline wait+signal",
                };
                (tr.cuda(name, ops, |ops| raw.chain(dispatches, ops))?, None)
            }
            Baselines::Host => (None, None),
        };
        let (hal, note) = tr.hal_split(ops, |ops| chain(env, &cb, ops))?;
        rows.push(
            Row::new(format!("{dispatches}-dispatch command buffer, chained{note}"), "us/execute", hal.clone(), base)
                .with_target(target),
        );
        if dispatches == 1 {
            // The same dispatch with its workgroup count read from a device buffer when it
            // runs, against the direct one (the HAL's row above).
            let indirect = env.indirect_dispatch()?;
            let ops = ops.min(2000);
            let (timing, note) = tr.hal_split(ops, |ops| chain(env, &indirect, ops))?;
            rows.push(Row::new(
                format!("1 indirect dispatch (count read on the device), chained{note}"),
                "us/execute",
                timing,
                Some(("the same direct dispatch (HAL, row above)", hal.clone())),
            ));
        }
        if dispatches == 10 {
            // The same function with a new binding table every execute, against fixed
            // bindings (the HAL's own row above) as the baseline.
            let slotted = env.dispatches_on_slot(10)?;
            // Each table a word of its own, on a cache line of its own, of the 4 KiB the fixed
            // bindings write: a kernel's time moves with the page it writes (see `Env::new`), so
            // tables over buffers of their own would compare pages, not tables.
            let tables: Vec<[BufferBinding; 1]> = (0..TABLE_CYCLE as u64)
                .map(|table| [BufferBinding::range(&env.buffer, table * TABLE_WORD_STRIDE, 4)])
                .collect();
            let table_row_base = rows.len();
            for (cycle, what) in [
                (2, "new binding table per execute"),
                (TABLE_CYCLE, "binding table cycling over 16 bindings"),
                (1, "the same binding table every execute"),
            ] {
                let tables = &tables[..cycle];
                let (tabled, note) = tr.hal_split(ops, |ops| chain_with_tables(env, &slotted, tables, ops))?;
                rows.push(Row::new(
                    format!("10-dispatch command buffer, {what}{note}"),
                    "us/execute",
                    tabled,
                    Some(("the same with fixed bindings (HAL, row above)", hal.clone())),
                ));
            }
            // What a runtime without tables pays: the function recorded (and, on CUDA, a graph
            // instantiated) for every call, against the first table row.
            let bindings: Vec<BufferBinding> = tables.iter().take(2).map(|[entry]| entry.clone()).collect();
            let rerecord_ops = (ops / 10).max(20);
            let (rerecorded, note) = tr.hal_split(rerecord_ops, |ops| chain_rerecorded(env, &bindings, ops))?;
            let tabled = rows[table_row_base].hal.clone();
            rows.push(Row::new(
                format!("10-dispatch function re-recorded per call, no tables{note}"),
                "us/execute",
                rerecorded,
                Some(("new binding table per execute (HAL, row above)", tabled)),
            ));
        }
        if let (Baselines::Vulkan(raw), 10) = (&baselines, dispatches) {
            rows.push(Row::new(
                "10-dispatch command buffer, host round trip (no deadline)",
                "us/round trip",
                tr.hal(rt, |ops| Ok(round_trip(env, &cb, Timeout::Infinite, ops)?.0))?,
                tr.cuda("vkQueueSubmit 10-dispatch cb + vkWaitSemaphores", rt, |ops| raw.round_trip(10, ops))?,
            ));
        }
        if let (Baselines::Cuda(raw), 10) = (&baselines, dispatches) {
            rows.push(Row::new(
                "10-dispatch command buffer, host round trip (no deadline)",
                "us/round trip",
                tr.hal(rt, |ops| Ok(round_trip(env, &cb, Timeout::Infinite, ops)?.0))?,
                tr.cuda("cuGraphLaunch 10-kernel graph + cuStreamSynchronize", rt, |ops| raw.graph_sync(10, ops))?,
            ));
        }
    }

    progress("alloca/dealloca");
    let base = match &baselines {
        Baselines::Cuda(raw) => tr.cuda("cuMemAllocFromPoolAsync + cuMemFreeAsync", n, |ops| {
            raw.alloc_free_async(ALLOCA_BYTES as usize, ops)
        })?,
        Baselines::Host | Baselines::Vulkan(_) => {
            tr.host("global allocator alloc+free", n, |ops| baseline::alloc_free(ops, ALLOCA_BYTES as usize))
        }
    };
    let (hal, note) = tr.hal_split(n, |ops| alloca_dealloca(env, ALLOCA_BYTES, ops))?;
    rows.push(
        Row::new(format!("queue_alloca + queue_dealloca (4 KiB){note}"), "us/pair", hal.clone(), base)
            .with_target(cuda(targets::ALLOCA)),
    );
    if let Baselines::Cuda(raw) = &baselines {
        // The same HAL figures against the bound of any timeline-semaphore runtime: each of the two
        // operations signals, so each records an event.
        let bound = tr.cuda("alloc, cuEventRecord, free, cuEventRecord", n, |ops| {
            raw.alloc_free_async_recorded(ALLOCA_BYTES as usize, ops)
        })?;
        rows.push(Row::new("queue_alloca + queue_dealloca vs an event per op", "us/pair", hal, bound));
    }

    progress("semaphores");
    rows.push(Row::new(
        "semaphore ping-pong (host threads)",
        "us/hop",
        tr.hal(n, semaphore_ping_pong)?,
        tr.host("mutex+condvar two threads", n, baseline::ping_pong),
    ));
    rows.push(Row::new(
        "wait-any over 64 semaphores",
        "us/wake",
        tr.hal(rt, wait_any_64)?,
        tr.host("mutex+condvar flag array", rt, baseline::wait_any_64),
    ));
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touch_kernel_is_chosen_by_the_kinds_the_device_loads() {
        let cpu_sim = driver_cpu_sim::device_info(&driver_cpu_sim::CpuSimOptions::default());
        let with = |kinds: &[ExecutableKind]| {
            let mut info = cpu_sim.clone();
            info.executable_kinds = kinds.to_vec();
            info
        };
        let kind = |info: &DeviceInfo| touch_source(info).map(|s| ExecutableKind::of(&s));
        assert_eq!(kind(&cpu_sim), Ok(ExecutableKind::Native));
        let cuda = [ExecutableKind::Ptx, ExecutableKind::Cubin, ExecutableKind::Fatbin];
        assert_eq!(kind(&with(&cuda)), Ok(ExecutableKind::Ptx));
        // Not by name: a device called "cuda" that loads only native kernels gets native ones.
        let mut named_cuda = cpu_sim.clone();
        named_cuda.driver = CUDA_DRIVER.to_string();
        assert_eq!(kind(&named_cuda), Ok(ExecutableKind::Native));
        let err = kind(&with(&[ExecutableKind::Fatbin])).unwrap_err();
        assert_eq!(err.code(), hal::StatusCode::Unimplemented);
        assert!(err.message().contains("[fatbin]") && err.message().contains("[native, ptx, spirv]"), "{err}");
        // A Vulkan device gets SPIR-V compiled from the WGSL source (a build without the Vulkan
        // driver has no WGSL compiler, and no Vulkan device to ask).
        let spirv = kind(&with(&[ExecutableKind::Spirv]));
        if cfg!(feature = "vulkan") {
            assert_eq!(spirv, Ok(ExecutableKind::Spirv));
        } else {
            assert_eq!(spirv.unwrap_err().code(), hal::StatusCode::Unavailable);
        }
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn cuda_driver_name_is_the_drivers() {
        assert_eq!(super::CUDA_DRIVER, driver_cuda::DRIVER_NAME);
    }

    #[cfg(feature = "vulkan")]
    #[test]
    fn vulkan_driver_name_is_the_drivers() {
        assert_eq!(super::VULKAN_DRIVER, driver_vulkan::DRIVER_NAME);
    }
}
