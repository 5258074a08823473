//! Submission throughput as submitting threads are added: 1, 2, 4, ... threads each run a dependent
//! chain of single-dispatch executes (the dependent-chain row's pattern, one semaphore per thread),
//! either each to its own queue or all to one queue. Each table row is the total submissions per
//! second beside the raw baseline doing the same, measured in the same run: on CUDA with one stream
//! per thread (or one shared stream), on Vulkan with one `VkQueue` per thread (or one shared queue
//! behind a mutex).
//!
//! A thread count the device has too few queues for is reported in its row of the own-queue table,
//! not run with threads sharing queues.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use hal::{CommandBuffer, Error, Result, SemaphoreValue as SV};

use crate::cuda_baseline::RawCuda;
use crate::stats::Samples;
use crate::vulkan_baseline::RawVulkan;
use crate::workloads::{CUDA_DRIVER, Env, LONG, VULKAN_DRIVER, touch_spirv};

/// The least parallel efficiency (speedup over threads) a HAL row must reach, where the machine has
/// a core for every thread and raw CUDA reaches it too.
pub const TARGET_EFFICIENCY: f64 = 0.7;

/// The thread count [`ScalingSizes`] stops at unless told otherwise.
pub const DEFAULT_MAX_THREADS: usize = 16;

/// Where each thread submits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Thread `t` submits to queue `t` (raw: stream `t`).
    OwnQueue,
    /// Every thread submits to queue 0 (raw: stream 0).
    OneQueue,
}

impl Placement {
    /// Both placements, in the order the tables are printed.
    pub const ALL: [Placement; 2] = [Placement::OwnQueue, Placement::OneQueue];

    /// A name for the table title and the JSON file.
    pub fn name(self) -> &'static str {
        match self {
            Placement::OwnQueue => "each thread on its own queue",
            Placement::OneQueue => "all threads on one queue",
        }
    }
}

/// How much work the scaling tables do.
#[derive(Clone, Copy, Debug)]
pub struct ScalingSizes {
    /// Untimed trials per row first.
    pub warmup: usize,
    /// Timed trials per row.
    pub trials: usize,
    /// Chained submissions per thread in one trial.
    pub ops_per_thread: u64,
    /// The most threads a row has (the counts are the powers of two up to it).
    pub max_threads: usize,
}

impl ScalingSizes {
    /// A short run, up to `max_threads`.
    pub fn quick(max_threads: usize) -> Self {
        ScalingSizes { warmup: 1, trials: 3, ops_per_thread: 500, max_threads }
    }

    /// The full run, up to `max_threads`.
    pub fn full(max_threads: usize) -> Self {
        ScalingSizes { warmup: 1, trials: 7, ops_per_thread: 2_000, max_threads }
    }

    /// The thread counts of the rows: 1, 2, 4, ... up to `max_threads` (just 1 for 0).
    pub fn thread_counts(&self) -> Vec<usize> {
        std::iter::successors(Some(1usize), |&t| t.checked_mul(2))
            .take_while(|&t| t <= self.max_threads.max(1))
            .collect()
    }
}

/// One side's figure in a row: its samples (microseconds per submission), or why it was not run.
#[derive(Clone, Debug)]
pub enum Cell {
    /// Measured: one value per trial.
    Measured(Samples),
    /// Not run, and why.
    Skipped(String),
}

impl Cell {
    /// The median submissions per second, where measured.
    pub fn rate(&self) -> Option<f64> {
        match self {
            Cell::Measured(samples) => Some(1e6 / samples.median()),
            Cell::Skipped(_) => None,
        }
    }
}

/// One thread count's figures.
#[derive(Clone, Debug)]
pub struct ScalingRow {
    /// Submitting threads.
    pub threads: usize,
    /// The HAL's.
    pub hal: Cell,
    /// The raw baseline's (`None`: the driver has none).
    pub raw: Option<Cell>,
    /// The raw baseline with each launch a graph launch, one graph per thread (CUDA only): how the
    /// HAL replays its one-dispatch command buffers, so whether the graph launch path scales.
    pub raw_graph: Option<Cell>,
}

/// How a row stands against [`TARGET_EFFICIENCY`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The HAL reached it.
    Met,
    /// The HAL fell short while raw CUDA reached it.
    Missed,
    /// More threads than cores: not judged.
    BeyondCores,
    /// Raw CUDA itself fell short: not judged.
    RawDoesNotScale,
}

impl Verdict {
    /// The table's and the JSON file's word for it.
    pub fn text(self) -> &'static str {
        match self {
            Verdict::Met => "ok",
            Verdict::Missed => "MISSED",
            Verdict::BeyondCores => "more threads than cores",
            Verdict::RawDoesNotScale => "raw does not scale",
        }
    }
}

/// One placement's rows.
#[derive(Clone, Debug)]
pub struct ScalingTable {
    /// Where the threads submit.
    pub placement: Placement,
    /// What the raw column is.
    pub raw: String,
    /// Queues of the device measured.
    pub queue_count: usize,
    /// Cores of this machine.
    pub cores: usize,
    /// One row per thread count, fewest first.
    pub rows: Vec<ScalingRow>,
}

impl ScalingTable {
    fn single(&self) -> Option<&ScalingRow> {
        self.rows.iter().find(|r| r.threads == 1)
    }

    /// The HAL's throughput with `row`'s threads over its throughput with one.
    pub fn hal_speedup(&self, row: &ScalingRow) -> Option<f64> {
        Some(row.hal.rate()? / self.single()?.hal.rate()?)
    }

    /// [`hal_speedup`](Self::hal_speedup) over the thread count (1.0: linear).
    pub fn hal_efficiency(&self, row: &ScalingRow) -> Option<f64> {
        Some(self.hal_speedup(row)? / row.threads as f64)
    }

    /// The raw baseline's speedup over its own single thread, over the thread count.
    pub fn raw_efficiency(&self, row: &ScalingRow) -> Option<f64> {
        let single = self.single()?.raw.as_ref()?.rate()?;
        Some(row.raw.as_ref()?.rate()? / single / row.threads as f64)
    }

    /// The HAL's throughput over the raw baseline's (higher is better).
    pub fn ratio(&self, row: &ScalingRow) -> Option<f64> {
        Some(row.hal.rate()? / row.raw.as_ref()?.rate()?)
    }

    /// How `row` stands against [`TARGET_EFFICIENCY`]; `None` for one thread, or without both
    /// sides' figures.
    pub fn verdict(&self, row: &ScalingRow) -> Option<Verdict> {
        if row.threads < 2 {
            return None;
        }
        let (hal, raw) = (self.hal_efficiency(row)?, self.raw_efficiency(row)?);
        Some(if row.threads > self.cores {
            Verdict::BeyondCores
        } else if raw < TARGET_EFFICIENCY {
            Verdict::RawDoesNotScale
        } else if hal >= TARGET_EFFICIENCY {
            Verdict::Met
        } else {
            Verdict::Missed
        })
    }
}

/// From the earliest start to the latest end of `spans` (one per thread; the raw-CUDA threads use
/// it too).
pub(crate) fn span(spans: &[(Instant, Instant)]) -> Result<Duration> {
    let began = spans.iter().map(|s| s.0).min();
    let ended = spans.iter().map(|s| s.1).max();
    match (began, ended) {
        (Some(began), Some(ended)) => Ok(ended.saturating_duration_since(began)),
        _ => Err(Error::invalid_argument("threaded chains: no threads ran")),
    }
}

/// Runs `threads` threads at once: thread t first prepares with `ready(t)`, then every thread waits
/// on one barrier (also one whose preparation failed: the others would wait for it forever) and
/// runs `body(t, prepared)`, which returns once its chain is done. The span from the earliest
/// start to the latest end (the HAL's and both raw sides' threaded chains use it).
pub(crate) fn together<P>(
    threads: usize,
    ready: impl Fn(usize) -> Result<P> + Sync,
    body: impl Fn(usize, P) -> Result<()> + Sync,
) -> Result<Duration> {
    let start = Barrier::new(threads);
    let spans = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (start, ready, body) = (&start, &ready, &body);
                scope.spawn(move || -> Result<(Instant, Instant)> {
                    let prepared = ready(t);
                    start.wait();
                    let prepared = prepared?;
                    let began = Instant::now();
                    body(t, prepared)?;
                    Ok((began, Instant::now()))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err(Error::internal("a threaded chain's thread panicked"))))
            .collect::<Result<Vec<_>>>()
    })?;
    span(&spans)
}

/// One thread per entry of `cbs`, each executing its command buffer `ops` times as a dependent
/// chain on its own semaphore, to the queue `placement` gives it; the time from the threads' common
/// start to the last one's host wait returning.
pub fn hal_chains(env: &Env, cbs: &[CommandBuffer], placement: Placement, ops: u64) -> Result<Duration> {
    together(
        cbs.len(),
        |t| {
            let index = match placement {
                Placement::OwnQueue => t,
                Placement::OneQueue => 0,
            };
            let q = env.device.queue(index)?;
            Ok((q, env.device.create_semaphore(0)?))
        },
        |t, (q, s)| {
            for i in 0..ops {
                q.execute(&[SV::new(&s, i)], &cbs[t], &[SV::new(&s, i + 1)])?;
            }
            s.wait(ops, LONG)
        },
    )
}

/// The raw side of the tables.
enum Raw {
    /// Raw CUDA, with a stream per thread.
    Cuda(RawCuda),
    /// Raw Vulkan, with a queue per thread.
    Vulkan(Box<RawVulkan>),
    /// A driver with no raw baseline (cpu-sim).
    None,
}

/// Cores of this machine (1 where it cannot tell).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Both tables ([`Placement::ALL`]) on `env`'s device, with `sizes`; `progress` is told each row
/// as it starts. On CUDA and Vulkan the raw baseline is measured beside every row (on Vulkan an
/// own-queue row with more threads than the GPU's compute family has queues reports its raw cell
/// as not run); on cpu-sim there is none.
pub fn run(env: &Env, sizes: ScalingSizes, progress: &mut dyn FnMut(&str)) -> Result<Vec<ScalingTable>> {
    let info = env.device.info();
    let counts = sizes.thread_counts();
    let most = counts.last().copied().unwrap_or(1);
    let raw = if info.driver == CUDA_DRIVER {
        let mut raw = RawCuda::new(info.ordinal, most, &[])?;
        raw.add_thread_graphs(most)?;
        Raw::Cuda(raw)
    } else if info.driver == VULKAN_DRIVER {
        let mut raw = RawVulkan::new(info.ordinal, &touch_spirv()?, &[])?;
        raw.add_thread_buffers(most)?;
        Raw::Vulkan(Box::new(raw))
    } else {
        Raw::None
    };
    // One command buffer per thread: on CUDA a reusable buffer replays as a graph, and launches of
    // one graph are ordered behind each other even on different streams.
    let cbs = (0..most).map(|_| env.dispatches(1)).collect::<Result<Vec<_>>>()?;
    let ops = sizes.ops_per_thread.max(1);
    let collect = |threads: usize, trial: &mut dyn FnMut() -> Result<Duration>| {
        Samples::try_collect(sizes.warmup, sizes.trials.max(1), threads as u64 * ops, |_| trial())
    };
    let mut tables = Vec::new();
    for placement in Placement::ALL {
        let mut rows = Vec::new();
        for &threads in &counts {
            progress(&format!("scaling, {}, {threads} threads", placement.name()));
            let hal = if placement == Placement::OwnQueue && threads > info.queue_count {
                Cell::Skipped(format!(
                    "not run: {threads} threads need {threads} queues, the device has {}",
                    info.queue_count
                ))
            } else {
                Cell::Measured(collect(threads, &mut || hal_chains(env, &cbs[..threads], placement, ops))?)
            };
            let shared = placement == Placement::OneQueue;
            let (raw, raw_graph) = match &raw {
                Raw::Cuda(raw) => (
                    Some(Cell::Measured(collect(threads, &mut || raw.threaded_chains(threads, shared, ops))?)),
                    Some(Cell::Measured(collect(threads, &mut || raw.threaded_graph_chains(threads, shared, ops))?)),
                ),
                Raw::Vulkan(raw) if !shared && threads > raw.distinct_queues() => (
                    Some(Cell::Skipped(match raw.distinct_queues() {
                        1 => "not run: the GPU has 1 queue".to_string(),
                        n => format!("not run: the GPU has {n} queues"),
                    })),
                    None,
                ),
                Raw::Vulkan(raw) => {
                    (Some(Cell::Measured(collect(threads, &mut || raw.threaded_chains(threads, shared, ops))?)), None)
                }
                Raw::None => (None, None),
            };
            rows.push(ScalingRow { threads, hal, raw, raw_graph });
        }
        let raw_name = match (&raw, placement) {
            (Raw::Cuda(_), Placement::OwnQueue) => {
                "raw CUDA: cuLaunchKernel + cuEventRecord per op, a stream per thread"
            }
            (Raw::Cuda(_), Placement::OneQueue) => "raw CUDA: cuLaunchKernel + cuEventRecord per op, all on one stream",
            (Raw::Vulkan(_), Placement::OwnQueue) => {
                "raw Vulkan: vkQueueSubmit recorded cb, timeline wait+signal, a queue per thread"
            }
            (Raw::Vulkan(_), Placement::OneQueue) => {
                "raw Vulkan: vkQueueSubmit recorded cb, timeline wait+signal, all on one queue behind a mutex"
            }
            (Raw::None, _) => "no raw baseline on this driver",
        };
        tables.push(ScalingTable {
            placement,
            raw: raw_name.to_string(),
            queue_count: info.queue_count,
            cores: cores(),
            rows,
        });
    }
    Ok(tables)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(us_per_submission: f64) -> Cell {
        Cell::Measured(Samples::from_values(vec![us_per_submission]))
    }

    fn table(cores: usize, rows: Vec<(usize, f64, Option<f64>)>) -> ScalingTable {
        ScalingTable {
            placement: Placement::OwnQueue,
            raw: String::new(),
            queue_count: 16,
            cores,
            rows: rows
                .into_iter()
                .map(|(threads, hal, raw)| ScalingRow {
                    threads,
                    hal: measured(hal),
                    raw: raw.map(measured),
                    raw_graph: None,
                })
                .collect(),
        }
    }

    #[test]
    fn thread_counts_are_powers_of_two_up_to_the_cap() {
        let counts = |max| ScalingSizes::quick(max).thread_counts();
        assert_eq!(counts(16), [1, 2, 4, 8, 16]);
        assert_eq!(counts(5), [1, 2, 4]);
        assert_eq!(counts(1), [1]);
        assert_eq!(counts(0), [1]);
    }

    #[test]
    fn speedup_efficiency_and_verdicts_follow_the_rates() {
        // Microseconds per submission: 10 -> 100k/s for one thread.
        let t = table(4, vec![(1, 10.0, Some(5.0)), (2, 5.0, Some(2.5)), (4, 5.0, Some(1.25)), (8, 1.0, Some(0.6))]);
        let r = &t.rows;
        assert!((t.hal_speedup(&r[1]).unwrap() - 2.0).abs() < 1e-9);
        assert!((t.hal_efficiency(&r[2]).unwrap() - 0.5).abs() < 1e-9);
        assert!((t.raw_efficiency(&r[2]).unwrap() - 1.0).abs() < 1e-9);
        assert!((t.ratio(&r[0]).unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(t.verdict(&r[0]), None, "one thread is the reference");
        assert_eq!(t.verdict(&r[1]), Some(Verdict::Met));
        assert_eq!(t.verdict(&r[2]), Some(Verdict::Missed));
        assert_eq!(t.verdict(&r[3]), Some(Verdict::BeyondCores));
        let slow_raw = table(4, vec![(1, 10.0, Some(5.0)), (2, 10.0, Some(5.0))]);
        assert_eq!(slow_raw.verdict(&slow_raw.rows[1]), Some(Verdict::RawDoesNotScale));
        let no_raw = table(4, vec![(1, 10.0, None), (2, 5.0, None)]);
        assert_eq!(no_raw.verdict(&no_raw.rows[1]), None);
        assert!((no_raw.hal_efficiency(&no_raw.rows[1]).unwrap() - 1.0).abs() < 1e-9);
    }
}
