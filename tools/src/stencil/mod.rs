//! The main job of `hal run`: an iterative 2-D Jacobi (heat) stencil on an `N` x `N` f32 grid,
//! split into two halves of rows, one per queue, with halo exchanges ordered by timeline semaphores.
//! On one device the halves run on its queues 0 and 1; on two devices (`hal run --devices 2`) each
//! half runs on queue 0 of its own device, and the halo copies cross devices (peer copies between
//! GPUs, waits on the other device's events).
//!
//! Each half lives in two ping-pong buffers of `rows + 2` rows (a halo row above and below its own
//! rows). Each queue has a timeline semaphore, and every submission of a queue waits on the value of
//! the one before it, so a queue's work runs in order. Step `k` of a half is:
//! 1. `stencil`: a dispatch of [`kernels::ENTRY_POINT`] over the half (`ceil(N/256) x rows`
//!    workgroups) from buffer `k % 2` into buffer `(k + 1) % 2`;
//! 2. `halo`: a `queue_copy` of the other half's freshly computed edge row into this half's halo row.
//!    It waits on the other queue's timeline for the other half's stencil of step `k`: the only
//!    cross-queue dependency. (The copy reads the other half's output buffer, which that half next
//!    overwrites at step `k + 2`, after its own halo of step `k + 1`, which waits on this half's
//!    stencil of step `k + 1`, which waits on this copy: the semaphores cover that hazard too.)
//!
//! Every step is submitted without the host waiting for it: half 0's halo copy of step `k` is
//! submitted before half 1's stencil of step `k` exists (wait-before-signal, held in the pending
//! queue until the signal is enqueued). The host only keeps at most `window` steps in flight,
//! waiting for step `k - window` once every `window / 4` steps. At the end each half is read back
//! and compared with [`reference::solve`].

pub mod kernels;
pub mod reference;
pub mod timeline;

use std::fmt::Write as _;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hal::{
    Buffer, BufferBinding, BufferParams, CommandBuffer, CommandBufferMode, Device, Error, Executable, ProfileOptions,
    Queue, Readback, Result, Semaphore, SemaphoreValue as SV, StatusCode, Timeout, WaitMode, wait_semaphores,
};

use crate::trace::TraceRecorder;
use timeline::Ledger;

/// The largest max abs error (against the CPU reference) that passes. The kernels compute the same
/// f32 operations in the same order, so the error is 0 in practice.
pub const TOLERANCE: f32 = 1e-4;

/// How long the run may make no progress before it stops with the hang report.
pub const STALL_LIMIT: Duration = Duration::from_secs(30);

/// Submissions of each half before its first step: the two ping-pong buffers' uploads.
const UPLOADS: u64 = 2;

/// The grid sides a run accepts. At the largest, the grid is 1 GiB of f32 and the host holds a few
/// copies of it (the initial grid, the CPU reference's two, the readback).
pub const SIZES: RangeInclusive<u32> = 4..=16384;

/// The most steps a run takes: 4 submissions each, so 40 million submissions, minutes on a GPU and
/// hours on cpu-sim (a longer run is a soak test, which this job is not).
pub const MAX_STEPS: u32 = 10_000_000;

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Grid side `N` (cells per row and rows).
    pub size: u32,
    /// Steps.
    pub steps: u32,
    /// Most steps in flight before the host waits.
    pub window: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config { size: 512, steps: 1000, window: 64 }
    }
}

impl Config {
    /// Checks the sizes: `size` in [`SIZES`], `steps <= MAX_STEPS`, `window >= 1`.
    pub fn validate(&self) -> Result<()> {
        if !SIZES.contains(&self.size) {
            return Err(Error::invalid_argument(format!(
                "grid size {} must be between {} and {}",
                self.size,
                SIZES.start(),
                SIZES.end()
            )));
        }
        if self.steps > MAX_STEPS {
            return Err(Error::invalid_argument(format!(
                "{} steps are more than the {MAX_STEPS} a run takes",
                self.steps
            )));
        }
        if self.window == 0 {
            return Err(Error::invalid_argument("window must be at least 1 step"));
        }
        Ok(())
    }
}

/// One queue's share of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueUsage {
    /// The queue's index on its device.
    pub queue: usize,
    /// Its device's index among the run's devices.
    pub device: usize,
    /// Grid rows it computed.
    pub rows: u32,
    /// Submissions on it.
    pub submissions: usize,
    /// Busy time (see [`timeline`]).
    pub busy: Duration,
}

/// What a run did and measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// The run's sizes.
    pub config: Config,
    /// "driver 'name'" of the device, or of both devices.
    pub device: String,
    /// Devices the halves ran on (1 or 2).
    pub devices: usize,
    /// Threads per workgroup of the loaded form of the kernel.
    pub workgroup_size: [u32; 3],
    /// Workgroups per dispatch of the first half.
    pub workgroups: [u32; 3],
    /// Max abs error of the device's grid against the CPU reference.
    pub max_abs_error: f32,
    /// From the first submission to the last readback reached.
    pub wall: Duration,
    /// Time the CPU reference took.
    pub reference_time: Duration,
    /// Queue operations submitted.
    pub submissions: usize,
    /// Times the host waited on the device before the end (window throttling).
    pub host_waits: usize,
    /// Per queue.
    pub queues: Vec<QueueUsage>,
}

impl Report {
    /// Whether the device's grid matches the reference within [`TOLERANCE`].
    pub fn passed(&self) -> bool {
        self.max_abs_error < TOLERANCE
    }

    /// The text `hal run` prints.
    pub fn render(&self) -> String {
        let c = &self.config;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "hal run: 2-D Jacobi heat stencil, {n} x {n} f32, {} steps, halves on {} of {}",
            c.steps,
            if self.devices == 1 {
                format!("queues {} and {}", self.queues[0].queue, self.queues[1].queue)
            } else {
                format!("queue {} of device 0 and queue {} of device 1", self.queues[0].queue, self.queues[1].queue)
            },
            self.device,
            n = c.size
        );
        let wg = self.workgroups;
        let _ = writeln!(
            out,
            "  kernel:       {} ({}x{}x{} threads), {}x{}x{} workgroups per half per step",
            kernels::ENTRY_POINT,
            self.workgroup_size[0],
            self.workgroup_size[1],
            self.workgroup_size[2],
            wg[0],
            wg[1],
            wg[2]
        );
        let verdict = if self.passed() { "PASS" } else { "FAIL" };
        let exact = if self.max_abs_error == 0.0 { ", bit-exact" } else { "" };
        let _ = writeln!(
            out,
            "  check:        {verdict} (max abs error {:e} vs the single-threaded CPU reference, tolerance {TOLERANCE:e}{exact})",
            self.max_abs_error
        );
        let _ = writeln!(
            out,
            "  wall time:    {:.3} s on the device (first submission to last readback); CPU reference {:.3} s",
            self.wall.as_secs_f64(),
            self.reference_time.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "  submissions:  {} ({} stencil dispatches, {} halo copies, {} uploads, {} readbacks); host waited {} \
             time(s) (window of {} steps)",
            self.submissions,
            2 * u64::from(c.steps),
            2 * u64::from(c.steps),
            2 * UPLOADS,
            2,
            self.host_waits,
            c.window
        );
        for usage in &self.queues {
            let share = if self.wall.is_zero() { 0.0 } else { usage.busy.as_secs_f64() / self.wall.as_secs_f64() };
            let name =
                if self.devices == 1 { format!("queue {}:", usage.queue) } else { format!("device {}:", usage.device) };
            let _ = writeln!(
                out,
                "  {name:<13} busy {:.3} s of {:.3} s ({:.0}%), {} submissions, {} rows",
                usage.busy.as_secs_f64(),
                self.wall.as_secs_f64(),
                share * 100.0,
                usage.submissions,
                usage.rows
            );
        }
        let _ = writeln!(
            out,
            "  (busy: per submission, from when it could start (submitted and all its waits reached) to when its\n   \
             signal was reached, both stamped on the host by timepoints on the queue timelines; summed per queue)"
        );
        out
    }
}

/// One half of the grid and the objects its queue uses.
struct Half {
    queue: Queue,
    /// The global row of its first row.
    offset: u32,
    rows: u32,
    buffers: [Buffer; 2],
    /// `steps[p]` reads `buffers[p]` and writes `buffers[1 - p]`.
    steps: [CommandBuffer; 2],
    timeline: Semaphore,
}

/// Bytes in one grid row.
fn row_bytes(width: u32) -> u64 {
    u64::from(width) * 4
}

/// The timeline value of a half's stencil of step `k`.
fn stencil_value(k: u32) -> u64 {
    UPLOADS + 2 * u64::from(k) + 1
}

/// The timeline value of a half's halo copy of step `k`.
fn halo_value(k: u32) -> u64 {
    UPLOADS + 2 * u64::from(k) + 2
}

/// Runs the job on `devices` (one: its queues 0 and 1; two: queue 0 of each), calling `progress`
/// with the steps completed now and then; adds one slice per submission to `trace` when given.
/// `Err` when a device fails or hangs; a wrong result is `Ok` with a failing [`Report::passed`].
pub fn run(
    devices: &[Device],
    config: &Config,
    trace: Option<&TraceRecorder>,
    progress: &mut dyn FnMut(u64),
) -> Result<Report> {
    config.validate()?;
    let device = match devices {
        [device] | [device, _] => device,
        _ => {
            return Err(Error::invalid_argument(format!(
                "the stencil splits over 1 or 2 devices, not {}",
                devices.len()
            )));
        }
    };
    // Half h runs on (device, queue) places[h].
    let places: [(&Device, usize); 2] = match devices {
        [one] => [(one, 0), (one, 1)],
        [a, b, ..] => [(a, 0), (b, 0)],
        [] => unreachable!("checked above"),
    };
    if devices.len() == 1 && device.queue_count() < 2 {
        return Err(Error::failed_precondition(format!(
            "the stencil needs two queues; driver '{}' device '{}' has {}",
            device.info().driver,
            device.info().name,
            device.queue_count()
        )));
    }
    let n = config.size;
    let half_buffer = half_buffer_bytes(n, n - n / 2);
    for (d, _) in places {
        if half_buffer > d.info().max_allocation_size {
            return Err(Error::resource_exhausted(format!(
                "grid size {n} needs buffers of {half_buffer} bytes, more than the {} bytes driver '{}' device '{}' \
                 allocates at once",
                d.info().max_allocation_size,
                d.info().driver,
                d.info().name
            )));
        }
    }
    let load = |d: &Device| -> Result<Executable> {
        let executable = kernels::source_for(d.info())
            .and_then(|source| d.load_executable(&source))
            .map_err(|e| e.context("loading the stencil kernel"))?;
        executable.set_label("jacobi stencil")?;
        Ok(executable)
    };
    let executable = &load(places[0].0)?;
    let other = if devices.len() == 1 { None } else { Some(load(places[1].0)?) };
    let second = other.as_ref().unwrap_or(executable);
    let workgroup_size = executable.entry_point_info(executable.entry_point(kernels::ENTRY_POINT)?)?.workgroup_size;
    let grid = reference::initial_grid(n);
    let split = n / 2;
    let halves = [
        make_half(places[0].0, executable, places[0].1, 0, n, 0, split)?,
        make_half(places[1].0, second, places[1].1, 1, n, split, n - split)?,
    ];
    let final_value = UPLOADS + 2 * u64::from(config.steps) + 1;
    let epoch = trace.map_or_else(Instant::now, TraceRecorder::epoch);
    // Device timestamps of the first device's queues (on two devices, its half's).
    let profiled = trace.map(|trace| DeviceTimestamps::begin(device, trace));
    let mut ledger = Ledger::new(
        epoch,
        [halves[0].timeline.clone(), halves[1].timeline.clone()],
        [halves[0].queue.index(), halves[1].queue.index()],
        trace,
    );
    let started = epoch.elapsed();

    // Uploads: both ping-pong buffers of each half start as the half's rows with their halo rows.
    for (index, half) in halves.iter().enumerate() {
        let bytes: Arc<[u8]> = Arc::from(half_bytes(&grid, n, half.offset, half.rows));
        ledger.submit(index, ("upload", None), &[], 1, |w, s| {
            half.queue.write(w, bytes.clone(), &half.buffers[0], 0, s)
        })?;
        let waits = [SV::new(&half.timeline, 1)];
        ledger.submit(index, ("upload", None), &waits, 2, |w, s| half.queue.write(w, bytes, &half.buffers[1], 0, s))?;
    }

    let chunk = (config.window / 4).max(1);
    let mut host_waits = 0;
    for k in 0..config.steps {
        let (input, output) = ((k % 2) as usize, ((k + 1) % 2) as usize);
        for (index, half) in halves.iter().enumerate() {
            let other = &halves[1 - index];
            let waits = [SV::new(&half.timeline, stencil_value(k) - 1)];
            ledger.submit(index, ("stencil", Some(k)), &waits, stencil_value(k), |w, s| {
                half.queue.execute(w, &half.steps[input], s)
            })?;
            // Half 0 pulls half 1's first row into its bottom halo row; half 1 pulls half 0's last row
            // into its top halo row. Both read the other half's output of step k.
            let (source_row, target_row) =
                if index == 0 { (1, u64::from(half.rows) + 1) } else { (u64::from(other.rows), 0) };
            let row = row_bytes(n);
            let waits = [SV::new(&half.timeline, stencil_value(k)), SV::new(&other.timeline, stencil_value(k))];
            ledger.submit(index, ("halo", Some(k)), &waits, halo_value(k), |w, s| {
                half.queue.copy(
                    w,
                    &other.buffers[output],
                    source_row * row,
                    &half.buffers[output],
                    target_row * row,
                    row,
                    s,
                )
            })?;
        }
        let submitted = k + 1;
        if submitted % chunk == 0 && submitted > config.window {
            let behind = halo_value(submitted - config.window - 1);
            let list = [SV::new(&halves[0].timeline, behind), SV::new(&halves[1].timeline, behind)];
            wait_with_progress(devices, &halves, &list, config.steps, progress)?;
            host_waits += 1;
            if let Some(profiled) = &profiled {
                profiled.drain();
            }
            // Later submissions wait on this step's values or later ones.
            let next = stencil_value(submitted) - 1;
            ledger.fold_completed([next, next]);
        }
    }

    // Readbacks of each half's own rows from the buffer the last step wrote.
    let last = (config.steps % 2) as usize;
    let mut readbacks: Vec<Readback> = Vec::with_capacity(2);
    for (index, half) in halves.iter().enumerate() {
        let waits = [SV::new(&half.timeline, final_value - 1)];
        let (offset, length) = (row_bytes(n), u64::from(half.rows) * row_bytes(n));
        readbacks.push(ledger.submit(index, ("readback", None), &waits, final_value, |w, s| {
            half.queue.read(w, &half.buffers[last], offset, length, s)
        })?);
    }
    let list = [SV::new(&halves[0].timeline, final_value), SV::new(&halves[1].timeline, final_value)];
    wait_with_progress(devices, &halves, &list, config.steps, progress)?;
    let finished =
        (0..2).filter_map(|half| ledger.reached_at(half, final_value)).max().unwrap_or_else(|| epoch.elapsed());
    let wall = finished.saturating_sub(started);
    progress(u64::from(config.steps));
    let (busy, submissions) = ledger.finish();
    drop(profiled);

    let mut result = Vec::with_capacity(cells(n));
    for (index, readback) in readbacks.iter().enumerate() {
        let bytes = readback
            .take()
            .ok_or_else(|| Error::internal(format!("queue {index}: readback signalled but holds no bytes")))?;
        result.extend(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
    }

    let reference_started = Instant::now();
    let expected = reference::solve(n, config.steps);
    let reference_time = reference_started.elapsed();

    let described = match devices {
        [one] => format!("driver '{}' device '{}'", one.info().driver, one.info().name),
        _ => format!(
            "driver '{}' devices '{}' (ordinal {}) and '{}' (ordinal {})",
            device.info().driver,
            places[0].0.info().name,
            places[0].0.info().ordinal,
            places[1].0.info().name,
            places[1].0.info().ordinal
        ),
    };
    Ok(Report {
        config: *config,
        device: described,
        devices: devices.len(),
        workgroup_size,
        workgroups: kernels::workgroups(n, halves[0].rows, workgroup_size),
        max_abs_error: reference::max_abs_error(&result, &expected),
        wall,
        reference_time,
        submissions,
        host_waits,
        queues: halves
            .iter()
            .zip(busy)
            .enumerate()
            .map(|(i, (h, (busy, submissions)))| QueueUsage {
                queue: h.queue.index(),
                device: if devices.len() == 1 { 0 } else { i },
                rows: h.rows,
                submissions,
                busy,
            })
            .collect(),
    })
}

/// A traced run's device timestamps: the device profiles while the run lasts, and its records
/// become slices of the trace's "device timestamps" process, drained at each host wait so memory
/// stays bounded.
struct DeviceTimestamps<'a> {
    device: &'a Device,
    trace: &'a TraceRecorder,
    on: bool,
}

impl<'a> DeviceTimestamps<'a> {
    /// Begins profiling `device` (queue operations and every dispatch); a driver that cannot is
    /// traced without device timestamps, with a warning in the trace.
    fn begin(device: &'a Device, trace: &'a TraceRecorder) -> Self {
        let on = match device.begin_profiling(ProfileOptions::everything()) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(%e, "no device timestamps in this trace");
                false
            }
        };
        DeviceTimestamps { device, trace, on }
    }

    /// Moves the records of completed submissions into the trace.
    fn drain(&self) {
        if self.on
            && let Ok(profile) = self.device.collect_profile()
        {
            self.trace.add_profile(&profile);
        }
    }
}

impl Drop for DeviceTimestamps<'_> {
    /// Ends profiling, moving the last records into the trace (also when the run failed).
    fn drop(&mut self) {
        if self.on
            && let Ok(profile) = self.device.end_profiling()
        {
            self.trace.add_profile(&profile);
        }
    }
}

/// Cells in an `n` x `n` grid (`n` in [`SIZES`], so at most 2^28).
fn cells(n: u32) -> usize {
    n as usize * n as usize
}

/// Bytes of one of a half's buffers: its `rows` and two halo rows of an `n`-wide grid.
fn half_buffer_bytes(n: u32, rows: u32) -> u64 {
    (u64::from(rows) + 2) * row_bytes(n)
}

/// A half's buffer contents: rows `offset - 1 ..= offset + rows` of `grid` (zeros outside it).
fn half_bytes(grid: &[f32], n: u32, offset: u32, rows: u32) -> Vec<u8> {
    let w = n as usize;
    let mut bytes = Vec::with_capacity(half_buffer_bytes(n, rows) as usize);
    for local in 0..rows as i64 + 2 {
        let global = i64::from(offset) + local - 1;
        if (0..i64::from(n)).contains(&global) {
            let start = global as usize * w;
            bytes.extend(grid[start..start + w].iter().flat_map(|v| v.to_le_bytes()));
        } else {
            bytes.extend(std::iter::repeat_n(0u8, w * 4));
        }
    }
    bytes
}

/// Allocates half `index`'s buffers on `device` and records its two reusable step command buffers
/// for queue `queue`.
fn make_half(
    device: &Device,
    executable: &Executable,
    queue: usize,
    index: usize,
    n: u32,
    offset: u32,
    rows: u32,
) -> Result<Half> {
    let bytes = half_buffer_bytes(n, rows);
    let buffers = [
        device.allocate_buffer(BufferParams::device_local(), bytes)?,
        device.allocate_buffer(BufferParams::device_local(), bytes)?,
    ];
    // Labels name the half's objects in errors, `Device::report` and the trace.
    for (parity, buffer) in buffers.iter().enumerate() {
        buffer.set_label(format!("half {index} grid {parity}"))?;
    }
    let entry = executable.entry_point(kernels::ENTRY_POINT)?;
    // The grid follows the loaded form's workgroup (one row on a GPU, several natively).
    let workgroup_size = executable.entry_point_info(entry)?.workgroup_size;
    let record = |parity: usize| -> Result<CommandBuffer> {
        let cb = device.create_command_buffer(CommandBufferMode::Reusable)?;
        cb.set_label(format!("half {index} step from grid {parity}"))?;
        cb.dispatch(
            executable,
            entry,
            kernels::workgroups(n, rows, workgroup_size),
            &[n, rows, offset, n],
            &[BufferBinding::whole(&buffers[parity]), BufferBinding::whole(&buffers[1 - parity])],
        )?;
        cb.end()?;
        Ok(cb)
    };
    let steps = [record(0)?, record(1)?];
    let timeline = device.create_semaphore(0)?;
    timeline.set_label(format!("half {index} timeline"))?;
    Ok(Half { queue: device.queue(queue)?, offset, rows, buffers, steps, timeline })
}

/// Steps both halves have completed.
fn steps_done(halves: &[Half; 2]) -> u64 {
    halves.iter().map(|h| h.timeline.query().unwrap_or(0).saturating_sub(UPLOADS) / 2).min().unwrap_or(0)
}

/// Waits for every entry of `list`, reporting progress every 100 ms; a failure is returned as is, and
/// no progress for [`STALL_LIMIT`] is `DeadlineExceeded` with the device's hang report.
fn wait_with_progress(
    devices: &[Device],
    halves: &[Half; 2],
    list: &[SV],
    steps: u32,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    let mut last = (steps_done(halves), Instant::now());
    loop {
        match wait_semaphores(WaitMode::All, list, Timeout::After(Duration::from_millis(100))) {
            Ok(()) => return Ok(()),
            Err(e) if e.code() == StatusCode::DeadlineExceeded => {
                let done = steps_done(halves).min(u64::from(steps));
                progress(done);
                if done != last.0 {
                    last = (done, Instant::now());
                } else if last.1.elapsed() >= STALL_LIMIT {
                    let reports: Vec<String> = devices.iter().map(Device::report).collect();
                    return Err(Error::deadline_exceeded(format!(
                        "no progress for {} s at step {done} of {steps}; device report:\n{}",
                        STALL_LIMIT.as_secs(),
                        reports.join("\n")
                    )));
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_on_cpu_sim(config: Config) -> Report {
        let device = driver_cpu_sim::create_device().unwrap();
        run(&[device], &config, None, &mut |_| {}).unwrap()
    }

    #[test]
    fn small_grids_match_the_reference_exactly() {
        for (size, steps) in [(4, 3), (17, 9), (64, 20), (300, 5), (513, 3)] {
            let report = run_on_cpu_sim(Config { size, steps, window: 4 });
            assert_eq!(report.max_abs_error, 0.0, "size {size} steps {steps}");
            assert!(report.passed());
            assert_eq!(report.submissions, 4 * steps as usize + 6);
            assert_eq!(report.queues.iter().map(|q| q.rows).sum::<u32>(), size);
        }
    }

    #[test]
    fn two_devices_match_the_reference_exactly() {
        let devices = [driver_cpu_sim::create_device().unwrap(), driver_cpu_sim::create_device().unwrap()];
        for (size, steps) in [(4, 3), (64, 20), (513, 3)] {
            let report = run(&devices, &Config { size, steps, window: 4 }, None, &mut |_| {}).unwrap();
            assert_eq!(report.max_abs_error, 0.0, "size {size} steps {steps}");
            assert_eq!((report.devices, report.queues[1].device), (2, 1));
            assert!(report.render().contains("queue 0 of device 0 and queue 0 of device 1"), "{}", report.render());
        }
        let three = [devices[0].clone(), devices[1].clone(), devices[0].clone()];
        let error = run(&three, &Config::default(), None, &mut |_| {}).unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
    }

    #[test]
    fn zero_steps_reads_back_the_initial_grid() {
        let report = run_on_cpu_sim(Config { size: 8, steps: 0, window: 4 });
        assert!(report.passed());
        assert_eq!(report.submissions, 6);
    }

    #[test]
    fn window_throttles_and_utilisation_is_bounded() {
        let report = run_on_cpu_sim(Config { size: 32, steps: 40, window: 4 });
        assert!(report.passed());
        assert!(report.host_waits >= 8, "waited {} times", report.host_waits);
        for usage in &report.queues {
            assert!(usage.busy <= report.wall, "{usage:?} vs wall {:?}", report.wall);
            assert!(!usage.busy.is_zero());
            assert_eq!(usage.submissions, 2 * 40 + 3);
        }
        let text = report.render();
        assert!(text.contains("check:        PASS"), "{text}");
    }

    #[test]
    fn half_bytes_pads_outside_the_grid() {
        let grid: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let bytes = half_bytes(&grid, 4, 0, 2);
        let floats: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(&floats[..4], &[0.0; 4], "no row above the grid");
        assert_eq!(&floats[4..], &grid[..12]);
        let second: Vec<f32> =
            half_bytes(&grid, 4, 2, 2).chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(&second[..12], &grid[4..16], "halo row 1, then rows 2 and 3");
        assert_eq!(&second[12..], &[0.0; 4], "no row below the grid");
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert_eq!(Config { size: 2, ..Config::default() }.validate().unwrap_err().code(), StatusCode::InvalidArgument);
        assert!(Config { window: 0, ..Config::default() }.validate().is_err());
        assert!(Config { steps: MAX_STEPS, ..Config::default() }.validate().is_ok());
        let error = Config { steps: u32::MAX, ..Config::default() }.validate().unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument);
        assert!(error.message().contains("4294967295 steps"), "{error}");
    }

    #[test]
    fn a_grid_larger_than_the_device_allocates_is_refused() {
        let options = driver_cpu_sim::CpuSimOptions { max_allocation_size: 1 << 10, ..Default::default() };
        let device =
            hal::driver::Driver::create_device(&driver_cpu_sim::CpuSimDriver::with_options(options), 0).unwrap();
        let error = run(&[device], &Config { size: 64, steps: 1, window: 4 }, None, &mut |_| {}).unwrap_err();
        assert_eq!(error.code(), StatusCode::ResourceExhausted);
        assert!(error.message().contains("grid size 64 needs buffers of 8704 bytes"), "{error}");
    }
}
