//! The main job of `hal run`: an iterative 2-D Jacobi (heat) stencil on an `N` x `N` f32 grid,
//! split into parts of rows, one per queue, with halo exchanges ordered by timeline semaphores.
//! On one device the grid is split in two halves on its queues 0 and 1; on `D` devices
//! (`hal run --devices D`) in `D` parts, each on queue 0 of its own device, and the halo copies
//! cross devices (peer copies between GPUs, waits on the other device's events).
//!
//! Each part lives in two ping-pong buffers of `rows + 2` rows (a halo row above and below its own
//! rows). Each queue has a timeline semaphore, and every submission of a queue waits on the value of
//! the one before it, so a queue's work runs in order. Step `k` of a part is:
//! 1. `stencil`: a dispatch of [`kernels::ENTRY_POINT`] over the part (`ceil(N/256) x rows`
//!    workgroups) from buffer `k % 2` into buffer `(k + 1) % 2`;
//! 2. `halo`: per neighbour (the part above, then the part below, where they exist), a `queue_copy`
//!    of the neighbour's freshly computed edge row into this part's halo row. It waits on the
//!    neighbour's timeline for its stencil of step `k`: the only cross-queue dependency. (The copy
//!    reads the neighbour's output buffer, which the neighbour next overwrites at step `k + 2`, after
//!    its own halos of step `k + 1`, which wait on this part's stencil of step `k + 1`, which waits
//!    on this copy: the semaphores cover that hazard too.)
//!
//! Every step is submitted without the host waiting for it: part 0's halo copy of step `k` is
//! submitted before part 1's stencil of step `k` exists (wait-before-signal, held in the pending
//! queue until the signal is enqueued). The host only keeps at most `window` steps in flight,
//! waiting for step `k - window` once every `window / 4` steps. At the end each part is read back
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

use crate::counts::count;
use crate::trace::TraceRecorder;
use timeline::Ledger;

/// The largest max abs error (against the CPU reference) that passes. The kernels compute the same
/// f32 operations in the same order, so the error is 0 in practice.
pub const TOLERANCE: f32 = 1e-4;

/// How long the run may make no progress before it stops with the hang report.
pub const STALL_LIMIT: Duration = Duration::from_secs(30);

/// Submissions of each part before its first step: the two ping-pong buffers' uploads.
const UPLOADS: u64 = 2;

/// The most devices a run splits the grid over.
pub const MAX_DEVICES: usize = 16;

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
    /// Whether the result is compared with the CPU reference (most of a large run's time).
    pub check: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config { size: 512, steps: 1000, window: 64, check: true }
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
    /// "driver 'name'" of the device, or of the devices.
    pub device: String,
    /// Devices the parts ran on.
    pub devices: usize,
    /// Threads per workgroup of the loaded form of the kernel.
    pub workgroup_size: [u32; 3],
    /// Workgroups per dispatch of the first part.
    pub workgroups: [u32; 3],
    /// Max abs error of the device's grid against the CPU reference; `None` when the check was
    /// skipped ([`Config::check`]).
    pub max_abs_error: Option<f32>,
    /// From the first submission to the last readback reached.
    pub wall: Duration,
    /// From every part's uploads reached to every part's last step reached: the steps alone.
    pub steps_wall: Duration,
    /// Time the CPU reference took (zero when skipped).
    pub reference_time: Duration,
    /// Queue operations submitted.
    pub submissions: usize,
    /// Times the host waited on the device before the end (window throttling).
    pub host_waits: usize,
    /// Per queue (per part).
    pub queues: Vec<QueueUsage>,
}

impl Report {
    /// Whether the device's grid matches the reference within [`TOLERANCE`] (a skipped check does
    /// not fail).
    pub fn passed(&self) -> bool {
        self.max_abs_error.is_none_or(|error| error < TOLERANCE)
    }

    /// Halo copies a run of these parts submits.
    fn halo_copies(&self) -> u64 {
        2 * (self.queues.len() as u64).saturating_sub(1) * u64::from(self.config.steps)
    }

    /// The text `hal run` prints.
    pub fn render(&self) -> String {
        let c = &self.config;
        let parts = self.queues.len() as u64;
        let mut out = String::new();
        let placement = if self.devices == 1 {
            format!("halves on queues {} and {}", self.queues[0].queue, self.queues[1].queue)
        } else {
            format!("{parts} parts on queue {} of each of {} devices", self.queues[0].queue, self.devices)
        };
        let _ = writeln!(
            out,
            "hal run: 2-D Jacobi heat stencil, {n} x {n} f32, {}, {placement} of {}",
            count(c.steps.into(), "step", "steps"),
            self.device,
            n = c.size
        );
        let wg = self.workgroups;
        let _ = writeln!(
            out,
            "  kernel:       {} ({}x{}x{} threads), {}x{}x{} workgroups per {} per step",
            kernels::ENTRY_POINT,
            self.workgroup_size[0],
            self.workgroup_size[1],
            self.workgroup_size[2],
            wg[0],
            wg[1],
            wg[2],
            if self.devices == 1 { "half" } else { "part" }
        );
        let reference = match self.max_abs_error {
            Some(error) => {
                let verdict = if self.passed() { "PASS" } else { "FAIL" };
                let exact = if error == 0.0 { ", bit-exact" } else { "" };
                let _ = writeln!(
                    out,
                    "  check:        {verdict} (max abs error {error:e} vs the single-threaded CPU reference, tolerance {TOLERANCE:e}{exact})"
                );
                format!("CPU reference {:.3} s", self.reference_time.as_secs_f64())
            }
            None => {
                let _ = writeln!(
                    out,
                    "  check:        skipped (--no-check): the result was not compared with the CPU reference"
                );
                "no CPU reference".to_string()
            }
        };
        let _ = writeln!(
            out,
            "  wall time:    {:.3} s on the device (first submission to last readback); {reference}",
            self.wall.as_secs_f64()
        );
        let per_step = if c.steps == 0 { 0.0 } else { self.steps_wall.as_secs_f64() * 1e6 / f64::from(c.steps) };
        let _ = writeln!(
            out,
            "  steps:        {:.3} s ({per_step:.1} us a step), from the uploads reached to the last step reached",
            self.steps_wall.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "  submissions:  {} ({}, {}, {}, {}); host waited {} (window of {})",
            self.submissions,
            count(parts * u64::from(c.steps), "stencil dispatch", "stencil dispatches"),
            count(self.halo_copies(), "halo copy", "halo copies"),
            count(parts * UPLOADS, "upload", "uploads"),
            count(parts, "readback", "readbacks"),
            count(self.host_waits as u64, "time", "times"),
            count(c.window.into(), "step", "steps")
        );
        for usage in &self.queues {
            let share = if self.wall.is_zero() { 0.0 } else { usage.busy.as_secs_f64() / self.wall.as_secs_f64() };
            let name =
                if self.devices == 1 { format!("queue {}:", usage.queue) } else { format!("device {}:", usage.device) };
            let _ = writeln!(
                out,
                "  {name:<13} busy {:.3} s of {:.3} s ({:.0}%), {}, {}",
                usage.busy.as_secs_f64(),
                self.wall.as_secs_f64(),
                share * 100.0,
                count(usage.submissions as u64, "submission", "submissions"),
                count(usage.rows.into(), "row", "rows")
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

/// "driver 'D' 'NAME': device 0 = ordinal 0, device 1 = ordinal 1": the run's devices as the report's
/// per-device rows number them. A driver with fewer devices than the run opens an ordinal again as
/// a separate device, which the text says rather than listing the same ordinal twice.
fn describe_devices(devices: &[Device]) -> String {
    let names: Vec<String> = devices.iter().map(|d| format!("'{}'", d.info().name)).collect();
    let names = if names.iter().all(|n| *n == names[0]) { names[0].clone() } else { names.join(", ") };
    let mut seen = Vec::new();
    let mut placed = Vec::new();
    for (index, device) in devices.iter().enumerate() {
        let ordinal = device.info().ordinal;
        let again = if seen.contains(&ordinal) { " opened again" } else { "" };
        seen.push(ordinal);
        placed.push(format!("device {index} = ordinal {ordinal}{again}"));
    }
    let note = if placed.iter().any(|p| p.ends_with(" again")) { " (each opening a separate device)" } else { "" };
    format!("driver '{}' {names}: {}{note}", devices[0].info().driver, placed.join(", "))
}

/// One part of the grid and the objects its queue uses.
struct Part {
    queue: Queue,
    /// The global row of its first row.
    offset: u32,
    rows: u32,
    buffers: [Buffer; 2],
    /// `steps[p]` reads `buffers[p]` and writes `buffers[1 - p]`.
    steps: [CommandBuffer; 2],
    timeline: Semaphore,
    /// The parts whose edge rows it copies into its halo rows each step: above, then below.
    neighbours: Vec<usize>,
}

impl Part {
    /// Submissions per step: the stencil and one halo copy per neighbour.
    fn per_step(&self) -> u64 {
        1 + self.neighbours.len() as u64
    }

    /// The timeline value of its stencil of step `k`.
    fn stencil_value(&self, k: u32) -> u64 {
        UPLOADS + self.per_step() * u64::from(k) + 1
    }

    /// The timeline value of its last submission of its first `steps` steps (of the uploads for 0).
    fn steps_end(&self, steps: u32) -> u64 {
        UPLOADS + self.per_step() * u64::from(steps)
    }

    /// Steps it has completed.
    fn steps_done(&self) -> u64 {
        self.timeline.query().unwrap_or(0).saturating_sub(UPLOADS) / self.per_step()
    }
}

/// Bytes in one grid row.
fn row_bytes(width: u32) -> u64 {
    u64::from(width) * 4
}

/// Runs the job on `devices` (one: its queues 0 and 1; `D`, up to [`MAX_DEVICES`]: queue 0 of
/// each), calling `progress` with the steps completed now and then; adds one slice per submission
/// to `trace` when given. `Err` when a device fails or hangs; a wrong result is `Ok` with a failing
/// [`Report::passed`].
pub fn run(
    devices: &[Device],
    config: &Config,
    trace: Option<&TraceRecorder>,
    progress: &mut dyn FnMut(u64),
) -> Result<Report> {
    config.validate()?;
    let Some(device) = devices.first().filter(|_| devices.len() <= MAX_DEVICES) else {
        return Err(Error::invalid_argument(format!(
            "the stencil splits over 1 to {MAX_DEVICES} devices, not {}",
            devices.len()
        )));
    };
    // Part p runs on (device, queue) places[p].
    let places: Vec<(&Device, usize)> = match devices {
        [one] => vec![(one, 0), (one, 1)],
        many => many.iter().map(|d| (d, 0)).collect(),
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
    let parts = places.len() as u32;
    if n < parts {
        return Err(Error::invalid_argument(format!("grid size {n} has fewer rows than the {parts} parts")));
    }
    let offsets: Vec<u32> = (0..=parts).map(|p| (u64::from(p) * u64::from(n) / u64::from(parts)) as u32).collect();
    let largest = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(n);
    let part_buffer = part_buffer_bytes(n, largest);
    for (d, _) in &places {
        if part_buffer > d.info().max_allocation_size {
            return Err(Error::resource_exhausted(format!(
                "grid size {n} needs buffers of {part_buffer} bytes, more than the {} bytes driver '{}' device '{}' \
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
    let executables = devices.iter().map(load).collect::<Result<Vec<_>>>()?;
    let executable_of = |d: &Device| devices.iter().position(|x| std::ptr::eq(x, d)).map_or(0, |i| i);
    let workgroup_size =
        executables[0].entry_point_info(executables[0].entry_point(kernels::ENTRY_POINT)?)?.workgroup_size;
    let grid = reference::initial_grid(n);
    let mut all = Vec::with_capacity(places.len());
    for (index, &(d, queue)) in places.iter().enumerate() {
        let (offset, rows) = (offsets[index], offsets[index + 1] - offsets[index]);
        let neighbours = [index.checked_sub(1), Some(index + 1).filter(|&b| b < places.len())];
        let neighbours = neighbours.into_iter().flatten().collect();
        all.push(make_part(d, &executables[executable_of(d)], queue, index, n, offset, rows, neighbours)?);
    }
    let parts = all;
    // Each part's readback, after its last step.
    let final_value = |part: &Part| part.steps_end(config.steps) + 1;
    let epoch = trace.map_or_else(Instant::now, TraceRecorder::epoch);
    // Device timestamps of the first device's queues (on several devices, its part's).
    let profiled = trace.map(|trace| DeviceTimestamps::begin(device, trace));
    let tracks = places
        .iter()
        .map(|(d, queue)| crate::trace::queue_track(if devices.len() == 1 { 0 } else { executable_of(d) }, *queue))
        .collect();
    let mut ledger = Ledger::new(epoch, parts.iter().map(|p| p.timeline.clone()).collect(), tracks, trace);
    let started = epoch.elapsed();

    // Uploads: both ping-pong buffers of each part start as the part's rows with their halo rows.
    for (index, part) in parts.iter().enumerate() {
        let bytes: Arc<[u8]> = Arc::from(part_bytes(&grid, n, part.offset, part.rows));
        ledger.submit(index, ("upload", None), &[], 1, |w, s| {
            part.queue.write(w, &part.buffers[0], 0, bytes.clone(), s)
        })?;
        let waits = [SV::new(&part.timeline, 1)];
        ledger.submit(index, ("upload", None), &waits, 2, |w, s| part.queue.write(w, &part.buffers[1], 0, bytes, s))?;
    }
    // When every part's uploads were reached (read before the ledger forgets the stamps).
    let mut uploaded: Option<Duration> = None;
    let uploads_reached = |ledger: &Ledger| -> Option<Duration> {
        (0..parts.len()).map(|p| ledger.reached_at(p, UPLOADS)).collect::<Option<Vec<_>>>()?.into_iter().max()
    };

    let chunk = (config.window / 4).max(1);
    let mut host_waits = 0;
    let row = row_bytes(n);
    for k in 0..config.steps {
        let (input, output) = ((k % 2) as usize, ((k + 1) % 2) as usize);
        for (index, part) in parts.iter().enumerate() {
            let mut value = part.stencil_value(k);
            let waits = [SV::new(&part.timeline, value - 1)];
            ledger.submit(index, ("stencil", Some(k)), &waits, value, |w, s| {
                part.queue.execute(w, &part.steps[input], s)
            })?;
            // The part above gives its last row for this part's top halo row; the part below its first
            // row for the bottom halo row. Both read the neighbour's output of step k.
            for &neighbour in &part.neighbours {
                let other = &parts[neighbour];
                let (source_row, target_row) =
                    if neighbour < index { (u64::from(other.rows), 0) } else { (1, u64::from(part.rows) + 1) };
                let waits = [SV::new(&part.timeline, value), SV::new(&other.timeline, other.stencil_value(k))];
                value += 1;
                ledger.submit(index, ("halo", Some(k)), &waits, value, |w, s| {
                    part.queue.copy(
                        w,
                        &other.buffers[output],
                        source_row * row,
                        &part.buffers[output],
                        target_row * row,
                        row,
                        s,
                    )
                })?;
            }
        }
        let submitted = k + 1;
        if submitted % chunk == 0 && submitted > config.window {
            let behind = submitted - config.window - 1;
            let list: Vec<SV> = parts.iter().map(|p| SV::new(&p.timeline, p.steps_end(behind + 1))).collect();
            wait_with_progress(devices, &parts, &list, config.steps, progress)?;
            host_waits += 1;
            if let Some(profiled) = &profiled {
                profiled.drain();
            }
            if uploaded.is_none() {
                uploaded = uploads_reached(&ledger);
            }
            // Later submissions wait on this step's values or later ones.
            ledger.fold_completed(parts.iter().map(|p| p.stencil_value(submitted) - 1).collect());
        }
    }

    // Readbacks of each part's own rows from the buffer the last step wrote.
    let last = (config.steps % 2) as usize;
    let mut readbacks: Vec<Readback> = Vec::with_capacity(parts.len());
    for (index, part) in parts.iter().enumerate() {
        let waits = [SV::new(&part.timeline, final_value(part) - 1)];
        let (offset, length) = (row, u64::from(part.rows) * row);
        readbacks.push(ledger.submit(index, ("readback", None), &waits, final_value(part), |w, s| {
            part.queue.read(w, &part.buffers[last], offset, length, s)
        })?);
    }
    let list: Vec<SV> = parts.iter().map(|p| SV::new(&p.timeline, final_value(p))).collect();
    wait_with_progress(devices, &parts, &list, config.steps, progress)?;
    let reached = |values: &dyn Fn(&Part) -> u64| {
        parts.iter().enumerate().filter_map(|(i, p)| ledger.reached_at(i, values(p))).max()
    };
    let finished = reached(&final_value).unwrap_or_else(|| epoch.elapsed());
    let uploaded = uploaded.or_else(|| uploads_reached(&ledger)).unwrap_or(started);
    let steps_done = reached(&|p: &Part| final_value(p) - 1).unwrap_or(finished);
    let steps_wall = if config.steps == 0 { Duration::ZERO } else { steps_done.saturating_sub(uploaded) };
    let wall = finished.saturating_sub(started);
    progress(u64::from(config.steps));
    let (busy, submissions) = ledger.finish();
    drop(profiled);

    let mut result = Vec::with_capacity(cells(n));
    for (index, readback) in readbacks.iter().enumerate() {
        let bytes = readback
            .take()
            .ok_or_else(|| Error::internal(format!("part {index}: readback signalled but holds no bytes")))?;
        result.extend(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
    }

    let reference_started = Instant::now();
    let max_abs_error = config.check.then(|| reference::max_abs_error(&result, &reference::solve(n, config.steps)));
    let reference_time = reference_started.elapsed();

    let described = match devices {
        [one] => format!("driver '{}' device '{}'", one.info().driver, one.info().name),
        many => describe_devices(many),
    };
    Ok(Report {
        config: *config,
        device: described,
        devices: devices.len(),
        workgroup_size,
        workgroups: kernels::workgroups(n, parts[0].rows, workgroup_size),
        max_abs_error,
        wall,
        steps_wall,
        reference_time,
        submissions,
        host_waits,
        queues: parts
            .iter()
            .zip(busy)
            .zip(&places)
            .map(|((p, (busy, submissions)), (d, _))| QueueUsage {
                queue: p.queue.index(),
                device: if devices.len() == 1 { 0 } else { executable_of(d) },
                rows: p.rows,
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

/// Bytes of one of a part's buffers: its `rows` and two halo rows of an `n`-wide grid.
fn part_buffer_bytes(n: u32, rows: u32) -> u64 {
    (u64::from(rows) + 2) * row_bytes(n)
}

/// A part's buffer contents: rows `offset - 1 ..= offset + rows` of `grid` (zeros outside it).
fn part_bytes(grid: &[f32], n: u32, offset: u32, rows: u32) -> Vec<u8> {
    let w = n as usize;
    let mut bytes = Vec::with_capacity(part_buffer_bytes(n, rows) as usize);
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

/// Allocates part `index`'s buffers on `device` and records its two reusable step command buffers
/// for queue `queue`.
#[allow(clippy::too_many_arguments)]
fn make_part(
    device: &Device,
    executable: &Executable,
    queue: usize,
    index: usize,
    n: u32,
    offset: u32,
    rows: u32,
    neighbours: Vec<usize>,
) -> Result<Part> {
    let bytes = part_buffer_bytes(n, rows);
    let buffers = [
        device.allocate_buffer(BufferParams::device_local(), bytes)?,
        device.allocate_buffer(BufferParams::device_local(), bytes)?,
    ];
    // Labels name the part's objects in errors, `Device::report` and the trace.
    for (parity, buffer) in buffers.iter().enumerate() {
        buffer.set_label(format!("part {index} grid {parity}"))?;
    }
    let entry = executable.entry_point(kernels::ENTRY_POINT)?;
    // The grid follows the loaded form's workgroup (one row on a GPU, several natively).
    let workgroup_size = executable.entry_point_info(entry)?.workgroup_size;
    let record = |parity: usize| -> Result<CommandBuffer> {
        let cb = device.create_command_buffer(CommandBufferMode::Reusable)?;
        cb.set_label(format!("part {index} step from grid {parity}"))?;
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
    timeline.set_label(format!("part {index} timeline"))?;
    Ok(Part { queue: device.queue(queue)?, offset, rows, buffers, steps, timeline, neighbours })
}

/// Steps every part has completed.
fn steps_done(parts: &[Part]) -> u64 {
    parts.iter().map(Part::steps_done).min().unwrap_or(0)
}

/// Waits for every entry of `list`, reporting progress every 100 ms; a failure is returned as is, and
/// no progress for [`STALL_LIMIT`] is `DeadlineExceeded` with the device's hang report.
fn wait_with_progress(
    devices: &[Device],
    parts: &[Part],
    list: &[SV],
    steps: u32,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    let mut last = (steps_done(parts), Instant::now());
    loop {
        match wait_semaphores(WaitMode::All, list, Timeout::After(Duration::from_millis(100))) {
            Ok(()) => return Ok(()),
            Err(e) if e.code() == StatusCode::DeadlineExceeded => {
                let done = steps_done(parts).min(u64::from(steps));
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
            let report = run_on_cpu_sim(Config { size, steps, window: 4, check: true });
            assert_eq!(report.max_abs_error, Some(0.0), "size {size} steps {steps}");
            assert!(report.passed());
            assert_eq!(report.submissions, 4 * steps as usize + 6);
            assert_eq!(report.queues.iter().map(|q| q.rows).sum::<u32>(), size);
        }
    }

    #[test]
    fn several_devices_match_the_reference_exactly() {
        let devices: Vec<Device> = (0..4).map(|_| driver_cpu_sim::create_device().unwrap()).collect();
        for count in [2, 3, 4] {
            for (size, steps) in [(4, 3), (64, 20), (513, 3)] {
                let config = Config { size, steps, window: 4, check: true };
                let report = run(&devices[..count], &config, None, &mut |_| {}).unwrap();
                assert_eq!(report.max_abs_error, Some(0.0), "{count} devices, size {size} steps {steps}");
                assert_eq!(report.devices, count);
                let on: Vec<usize> = report.queues.iter().map(|q| q.device).collect();
                assert_eq!(on, (0..count).collect::<Vec<_>>());
                assert_eq!(report.queues.iter().map(|q| q.rows).sum::<u32>(), size);
                // Per part: 2 uploads, a stencil and a halo per neighbour each step, a readback.
                let halos = 2 * (count - 1) * steps as usize;
                assert_eq!(report.submissions, count * (3 + steps as usize) + halos);
                let text = report.render();
                assert!(text.contains(&format!("{count} parts on queue 0 of each of {count} devices")), "{text}");
                assert!(text.contains(&format!("{halos} halo copies")), "{text}");
            }
        }
        let error = run(&[], &Config::default(), None, &mut |_| {}).unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        let too_many: Vec<Device> = (0..=MAX_DEVICES).map(|i| devices[i % 4].clone()).collect();
        let error = run(&too_many, &Config::default(), None, &mut |_| {}).unwrap_err();
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        let error = run(&devices, &Config { size: 4, ..Config::default() }, None, &mut |_| {});
        assert!(error.is_ok(), "4 rows over 4 devices: one row each");
    }

    #[test]
    fn the_same_device_twice_is_two_parts() {
        let device = driver_cpu_sim::create_device().unwrap();
        let report =
            run(&[device.clone(), device], &Config { size: 32, steps: 9, window: 4, check: true }, None, &mut |_| {});
        assert_eq!(report.unwrap().max_abs_error, Some(0.0));
    }

    #[test]
    fn zero_steps_reads_back_the_initial_grid() {
        let report = run_on_cpu_sim(Config { size: 8, steps: 0, window: 4, check: true });
        assert!(report.passed());
        assert_eq!(report.submissions, 6);
    }

    #[test]
    fn window_throttles_and_utilisation_is_bounded() {
        let report = run_on_cpu_sim(Config { size: 32, steps: 40, window: 4, check: true });
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
    fn part_bytes_pads_outside_the_grid() {
        let grid: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let bytes = part_bytes(&grid, 4, 0, 2);
        let floats: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        assert_eq!(&floats[..4], &[0.0; 4], "no row above the grid");
        assert_eq!(&floats[4..], &grid[..12]);
        let second: Vec<f32> =
            part_bytes(&grid, 4, 2, 2).chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
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
        let options = driver_cpu_sim::CpuSimOptions::default().with_max_allocation_size(1 << 10);
        let device =
            hal::driver::Driver::create_device(&driver_cpu_sim::CpuSimDriver::with_options(options), 0).unwrap();
        let error =
            run(&[device], &Config { size: 64, steps: 1, window: 4, check: true }, None, &mut |_| {}).unwrap_err();
        assert_eq!(error.code(), StatusCode::ResourceExhausted);
        assert!(error.message().contains("grid size 64 needs buffers of 8704 bytes"), "{error}");
    }
}
