//! Recorded command buffers in their replayable CUDA form, prepared once at `end()`.
//!
//! Two replay modes:
//! - **graph**: a reusable buffer of at least `CudaOptions::reusable_graph_min_commands` commands
//!   (default 1), or a one-shot buffer of at least `CudaOptions::graph_min_commands` (default 2),
//!   becomes an instantiated CUDA graph (`src/commands/graph.rs`), relaunched by each execute: a one-kernel
//!   graph launch costs less than the kernel launch itself (see `docs/decisions.md#one-command-buffers-replay-as-graphs`). Indirect
//!   dispatches in a graph have their grids set on the device (`src/commands/indirect_node.rs`); a graph
//!   with them also allocates its fault rings (device and pinned memory). CUDA serialises graph
//!   launches across threads, though: a one-node graph whose launch would overlap another thread's
//!   replays directly;
//! - **direct**: each command is enqueued on the stream at execute (kernel launches, memsets,
//!   copies). Used for a one-shot buffer of one command (a graph's instantiation would cost more
//!   than its single launch saves), for buffers that touch `queue_alloca` buffers (their address is
//!   known only once the alloca is enqueued), for indirect dispatches where the device cannot set
//!   their grids (the host launcher reads the counts), for buffers holding collectives (each execute enqueues
//!   its NCCL calls on the stream in command order, between the other commands; a graph could
//!   capture them with stream capture, not done here), and as the fallback if a graph cannot be
//!   built.
//!
//! A command buffer recorded against binding slots builds its graph at its first execute and shares
//! it between all its executes: each brings its table's node parameters and the launch updates the
//! changed nodes in place (see [`crate::commands::graph`]) instead of building and instantiating again.
//! Where its commands touch `queue_alloca` buffers (a compiler runtime's per-call intermediates and
//! results, in its table or recorded), the graph is built at the first execute's issue and each
//! execute's node parameters are taken at its issue: by then every alloca it waits for has been
//! enqueued, so the addresses are known.
//!
//! Update payloads are uploaded to one device allocation at `end()`, so an update replays as a
//! device-to-device copy in both modes and never reads pageable host memory on the stream
//! (`payload.rs`).
//!
//! This room holds what a command buffer becomes: this file (the prepared form and the direct
//! replay), its graph (`graph.rs`), the device-set grids of its indirect dispatch nodes
//! (`indirect_node.rs`) and its update payload (`payload.rs`). The host launcher of indirect
//! dispatches replayed directly belongs to the queues' streams (`src/indirect_launcher.rs`).

pub(crate) mod graph;
pub(crate) mod indirect_node;
mod payload;

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hal::driver::CommandBufferExt;
use hal::driver::PreparedCommands;
use hal::driver::lock;
use hal::driver::stream_model::Work;
use hal::driver::{BindingState, Command};
use hal::{CommandBuffer, Error, Result};

use graph::{GraphExec, Launched, NodeParams, Recording, node_params};
use indirect_node::{IndirectRun, NodeUpdater};
use payload::{Payload, update_source, upload};

use crate::executable::{CudaExecutable, KernelLaunch};
use crate::host_copy::{CopyEnd, copy_async};
use crate::memory::{CudaMemory, MemoryCounter, resolve_address};
use crate::queue_stream::CudaStream;
use crate::sys::context::{Bound, Context};
use crate::sys::result;
use crate::timing::{DispatchTiming, SubmissionTimer, Timed};

/// How a prepared buffer replays.
enum Replay {
    /// Its own graph, built for its buffers.
    Graph(GraphExec),
    /// The graph its command buffer's executes share, pointed at this execute's buffers first.
    Bound {
        graph: Arc<GraphExec>,
        shared: Arc<SharedGraph>,
        params: Vec<NodeParams>,
    },
    /// The graph its command buffer's executes share, built at the first execute's issue and
    /// pointed at each execute's buffers at its issue: the commands touch transient buffers.
    BoundAtIssue {
        shared: Arc<IssuedGraph>,
        updater: Option<Arc<NodeUpdater>>,
    },
    Direct,
}

/// What the executes of a command buffer recorded against binding slots share when their commands
/// touch transient buffers (kept in its [`BindingState`]): the graph, built at the first issue
/// whose transient buffers all had memory, and the update bytes its nodes read.
struct IssuedGraph {
    /// `None` until built; `Some(None)` when it could not be built (executes then replay directly).
    graph: std::sync::Mutex<Option<Option<Arc<GraphExec>>>>,
    payload: Arc<Payload>,
    /// Instances the graph may keep.
    instances: usize,
}

/// What the executes of a command buffer recorded against binding slots share (kept in its
/// [`BindingState`]): the graph built at the first execute, and the update bytes its nodes read.
struct SharedGraph {
    /// None when no graph could be built: every execute then replays directly.
    graph: Option<Arc<GraphExec>>,
    payload: Arc<Payload>,
    /// Instances a graph of these executes may keep.
    instances: usize,
    /// The graph with event record nodes around the dispatches a profile times (see `timed`).
    profiled: ProfiledGraph,
}

/// A graph of the same commands whose timed dispatches are bracketed by event record nodes,
/// built at the first profiled execute and rebuilt when a profile times other commands.
#[derive(Default)]
struct ProfiledGraph(std::sync::Mutex<Option<Arc<GraphExec>>>);

impl ProfiledGraph {
    /// The graph timing exactly `timed`, built by `build` if the one kept times others (or none).
    fn get(&self, timed: &[usize], build: impl FnOnce() -> Result<GraphExec>) -> Result<Arc<GraphExec>> {
        let mut kept = lock(&self.0);
        if let Some(graph) = kept.as_ref().filter(|g| g.timed() == timed) {
            return Ok(graph.clone());
        }
        let graph = Arc::new(build()?);
        *kept = Some(graph.clone());
        Ok(graph)
    }
}

/// Graph launches of one-node graphs in progress in this process (see
/// [`CudaPreparedCommands::enqueue`]).
static GRAPH_LAUNCHES: AtomicUsize = AtomicUsize::new(0);

/// A one-node graph launch in progress; `None` from [`enter`](Self::enter) when another thread's is.
struct GraphLaunches;

impl GraphLaunches {
    fn enter() -> Option<GraphLaunches> {
        // Only when no other launch is in progress: a relaxed load first keeps the contended case
        // off the counter's cache line.
        if GRAPH_LAUNCHES.load(Ordering::Relaxed) != 0 {
            return None;
        }
        if GRAPH_LAUNCHES.fetch_add(1, Ordering::Relaxed) != 0 {
            GRAPH_LAUNCHES.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(GraphLaunches)
    }
}

impl Drop for GraphLaunches {
    fn drop(&mut self) {
        GRAPH_LAUNCHES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A command buffer prepared for CUDA.
pub struct CudaPreparedCommands {
    /// The recording; holds every buffer and executable the replay uses.
    commands: Arc<[Command]>,
    payload: Arc<Payload>,
    replay: Replay,
    /// For `Replay::Graph`: its profiled variant.
    profiled: ProfiledGraph,
    context: Arc<Context>,
    /// Whether a command is an indirect dispatch (a graph with one then checks its run).
    has_indirect: bool,
}

impl CudaPreparedCommands {
    /// Prepares `commands`: checks executables, uploads update payloads, and builds a graph when the
    /// buffer has at least `graph_min_commands` commands and no transient buffers. With `updater`,
    /// indirect dispatches are graph nodes (see [`crate::commands::indirect_node`]); without, a buffer with
    /// one replays directly.
    pub(crate) fn prepare(
        context: &Arc<Context>,
        counter: &Arc<MemoryCounter>,
        commands: &Arc<[Command]>,
        graph_min_commands: usize,
        updater: Option<&Arc<NodeUpdater>>,
    ) -> Result<Self> {
        let has_transient = check(commands, context.ordinal(), updater.is_some())?;
        let payload = Arc::new(upload(context, counter, commands)?);
        let work = commands.iter().filter(|c| !matches!(c, Command::Barrier)).count();
        let replay = if work >= graph_min_commands.max(1) && !has_transient {
            let recording = Recording { commands, payload: payload.address(), offsets: &payload.offsets };
            graph_or_direct(context, recording, 1, updater).map_or(Replay::Direct, Replay::Graph)
        } else {
            Replay::Direct
        };
        Ok(Self::new(context, commands, payload, replay))
    }

    /// Prepares one execute of a command buffer recorded against binding slots (`commands`
    /// resolved for its table). The first execute builds the graph and keeps it in `state`; later
    /// ones only compute their node parameters, which the launch applies in place. Commands that
    /// touch transient buffers, and buffers of fewer than `graph_min_commands` commands, replay
    /// directly. `updater` as for [`prepare`](Self::prepare).
    pub(crate) fn prepare_bound(
        context: &Arc<Context>,
        counter: &Arc<MemoryCounter>,
        commands: &Arc<[Command]>,
        state: &BindingState,
        graph_min_commands: usize,
        instances: usize,
        updater: Option<&Arc<NodeUpdater>>,
    ) -> Result<Self> {
        let work = commands.iter().filter(|c| !matches!(c, Command::Barrier)).count();
        let stored = state.get::<SharedGraph>();
        // With a graph already built, the node parameters resolve (and so check) every dispatch:
        // the entry points are not looked up twice per execute.
        let indirect_nodes = updater.is_some();
        let direct = match &stored {
            Some(shared) if shared.graph.is_some() => direct_reasons(commands, context.ordinal(), indirect_nodes)?,
            _ => {
                check_entries(commands)?;
                direct_reasons(commands, context.ordinal(), indirect_nodes)?
            }
        };
        if direct.other || work < graph_min_commands.max(1) {
            return Self::prepare(context, counter, commands, usize::MAX, None);
        }
        let issued = state.get::<IssuedGraph>();
        if direct.transient || issued.is_some() {
            let shared = match issued {
                Some(shared) => Some(shared),
                None => {
                    let payload = Arc::new(upload(context, counter, commands)?);
                    let made = Arc::new(IssuedGraph { graph: std::sync::Mutex::new(None), payload, instances });
                    // `None` where an execute without transient buffers stored its graph first.
                    state.set(made)
                }
            };
            let Some(shared) = shared else { return Self::prepare(context, counter, commands, usize::MAX, None) };
            let payload = shared.payload.clone();
            return Ok(Self::new(
                context,
                commands,
                payload,
                Replay::BoundAtIssue { shared, updater: updater.cloned() },
            ));
        }
        let shared = match stored {
            Some(shared) => shared,
            None => {
                let payload = Arc::new(upload(context, counter, commands)?);
                let recording = Recording { commands, payload: payload.address(), offsets: &payload.offsets };
                let graph = graph_or_direct(context, recording, instances, updater).map(Arc::new);
                let built = Arc::new(SharedGraph { graph, payload, instances, profiled: ProfiledGraph::default() });
                // Two first executes may race: both use the graph that was stored.
                state.set(built.clone()).unwrap_or(built)
            }
        };
        let replay = match &shared.graph {
            Some(graph) => Replay::Bound {
                graph: graph.clone(),
                shared: shared.clone(),
                params: node_params(commands, shared.payload.address(), &shared.payload.offsets)?,
            },
            None => Replay::Direct,
        };
        Ok(Self::new(context, commands, shared.payload.clone(), replay))
    }

    /// The prepared form of `commands` that replays as `replay`, its update bytes in `payload`.
    fn new(context: &Arc<Context>, commands: &Arc<[Command]>, payload: Arc<Payload>, replay: Replay) -> Self {
        CudaPreparedCommands {
            commands: commands.clone(),
            payload,
            replay,
            profiled: ProfiledGraph::default(),
            context: context.clone(),
            has_indirect: commands.iter().any(|c| matches!(c, Command::DispatchIndirect { .. })),
        }
    }

    /// The prepared form of an ended `command_buffer`, borrowed from it (every execute reads it: no
    /// lock, no reference count touched); `InvalidArgument` if another driver prepared it.
    pub(crate) fn of(command_buffer: &CommandBuffer) -> Result<&CudaPreparedCommands> {
        let prepared = command_buffer
            .prepared_ref()
            .ok_or_else(|| Error::failed_precondition(format!("{}: executed before end()", command_buffer)))?;
        prepared
            .as_any()
            .downcast_ref::<CudaPreparedCommands>()
            .ok_or_else(|| Error::invalid_argument(format!("{}: was not prepared by the cuda driver", command_buffer)))
    }

    /// Whether it replays as a CUDA graph (its own, or one its command buffer's executes share).
    pub fn is_graph(&self) -> bool {
        !matches!(self.replay, Replay::Direct)
    }

    /// Whether it replays through the graph its command buffer's executes share, updated in place.
    pub fn is_shared_graph(&self) -> bool {
        matches!(self.replay, Replay::Bound { .. } | Replay::BoundAtIssue { .. })
    }

    /// Graph nodes (0 in direct mode).
    pub fn graph_nodes(&self) -> usize {
        match &self.replay {
            Replay::Graph(graph) => graph.node_count(),
            Replay::Bound { graph, .. } => graph.node_count(),
            Replay::BoundAtIssue { shared, .. } => {
                lock(&shared.graph).as_ref().and_then(|graph| graph.as_ref()).map_or(0, |graph| graph.node_count())
            }
            Replay::Direct => 0,
        }
    }

    /// Enqueues one execution (of submission `work`) on `stream`. A graph launch with indirect
    /// dispatch nodes returns its run, whose faults the caller checks once the work completed.
    pub(crate) fn enqueue(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        work: &Arc<Work>,
    ) -> Result<Option<IndirectRun>> {
        match &self.replay {
            Replay::Graph(graph) if graph.node_count() == 1 && !self.has_indirect => {
                // CUDA serialises graph launches across threads (in one process they stop scaling
                // at two submitting threads, while kernel launches scale): a one-node graph whose
                // launch would wait for another thread's replays directly instead.
                let _launching = match GraphLaunches::enter() {
                    Some(launching) => launching,
                    None => return self.enqueue_direct(bound, stream, work).map(|()| None),
                };
                graph.launch(bound, stream, &[])
            }
            Replay::Graph(graph) => graph.launch(bound, stream, &[]),
            Replay::Bound { graph, params, .. } => {
                if let Launched::Yes(run) = graph.launch_with(bound, stream, params, self.recording(), &[])? {
                    return Ok(run);
                }
                // CUDA refused to update a node (a copy between memory kinds the node was not
                // built for) or to build another instance: this execute replays its commands
                // directly, in the same stream order.
                self.enqueue_direct(bound, stream, work).map(|()| None)
            }
            Replay::BoundAtIssue { shared, updater } => self.enqueue_at_issue(bound, stream, work, shared, updater),
            Replay::Direct => self.enqueue_direct(bound, stream, work).map(|()| None),
        }
    }

    /// [`enqueue`](Self::enqueue) through a graph built and pointed at its buffers now, at issue
    /// (see [`Replay::BoundAtIssue`]). Where a transient buffer has no memory yet (the execute does
    /// not wait for its alloca) or no graph can be built, the execute replays directly, which
    /// reports what is wrong.
    fn enqueue_at_issue(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        work: &Arc<Work>,
        shared: &IssuedGraph,
        updater: &Option<Arc<NodeUpdater>>,
    ) -> Result<Option<IndirectRun>> {
        let Ok(params) = node_params(&self.commands, shared.payload.address(), &shared.payload.offsets) else {
            return self.enqueue_direct(bound, stream, work).map(|()| None);
        };
        let graph = {
            let mut graph = lock(&shared.graph);
            graph
                .get_or_insert_with(|| {
                    graph_or_direct(&self.context, self.recording(), shared.instances, updater.as_ref()).map(Arc::new)
                })
                .clone()
        };
        if let Some(graph) = graph
            && let Launched::Yes(run) = graph.launch_with(bound, stream, &params, self.recording(), &[])?
        {
            return Ok(run);
        }
        self.enqueue_direct(bound, stream, work).map(|()| None)
    }

    fn recording(&self) -> Recording<'_> {
        Recording { commands: &self.commands, payload: self.payload.address(), offsets: &self.payload.offsets }
    }

    /// Enqueues one execution whose dispatches at command indices `timing.indices` (ascending) are
    /// each bracketed by two timing events from `timing.timer`, kept in `timing.out`. A graph
    /// replay launches the graph's profiled variant, whose event record nodes record this launch's
    /// events on the device between its kernels; a direct replay records them from the host around
    /// each launch.
    pub(crate) fn enqueue_timed(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        work: &Arc<Work>,
        timing: DispatchTiming<'_>,
    ) -> Result<()> {
        let DispatchTiming { indices: timed, timer, out } = timing;
        let (payload, offsets) = (self.payload.address(), &self.payload.offsets[..]);
        let recording = Recording { commands: &self.commands, payload, offsets };
        // Profiled graphs keep indirect dispatches out: such an execute replays directly.
        let build = |instances| move || GraphExec::build(&self.context, recording, instances, timed, None);
        let graph = match &self.replay {
            Replay::Graph(_) => self.profiled.get(timed, build(1)),
            Replay::Bound { shared, .. } => shared.profiled.get(timed, build(shared.instances)),
            // Timed executes of a graph built at issue replay directly.
            Replay::Direct | Replay::BoundAtIssue { .. } => {
                return self.enqueue_direct_timed(bound, stream, work, timed, timer, out);
            }
        };
        let graph = match graph {
            Ok(graph) => graph,
            Err(e) => {
                tracing::debug!(%e, "building a profiled graph failed; the execute replays directly");
                return self.enqueue_direct_timed(bound, stream, work, timed, timer, out);
            }
        };
        let mut pairs = Vec::with_capacity(timed.len());
        for _ in timed {
            let start = timer.acquire();
            let end = timer.acquire();
            match (start, end) {
                (Ok(start), Ok(end)) => pairs.push((start, end)),
                (start, end) => {
                    out.hold(start.ok());
                    out.hold(end.ok());
                    pairs.into_iter().for_each(|(s, e)| out.hold_pair(s, e));
                    return Err(Error::resource_exhausted("cuda: no timing events for a profiled execute"));
                }
            }
        }
        let raw: Vec<_> = pairs.iter().map(|(s, e)| (s.raw(), e.raw())).collect();
        let launched = match &self.replay {
            Replay::Bound { params, .. } => graph.launch_with(bound, stream, params, self.recording(), &raw),
            _ => graph.launch(bound, stream, &raw).map(Launched::Yes),
        };
        match launched {
            Ok(Launched::Yes(_)) => {
                for (&index, (start, end)) in timed.iter().zip(pairs) {
                    out.push_dispatch(index, start, end);
                }
                Ok(())
            }
            Ok(Launched::Refused) => {
                pairs.into_iter().for_each(|(s, e)| out.hold_pair(s, e));
                self.enqueue_direct_timed(bound, stream, work, timed, timer, out)
            }
            Err(e) => {
                pairs.into_iter().for_each(|(s, e)| out.hold_pair(s, e));
                Err(e)
            }
        }
    }

    /// The direct replay of [`enqueue_timed`](Self::enqueue_timed): timing events recorded from
    /// the host around each timed dispatch's launch.
    fn enqueue_direct_timed(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        work: &Arc<Work>,
        timed: &[usize],
        timer: &SubmissionTimer,
        out: &mut Timed,
    ) -> Result<()> {
        let mut opened = None;
        let result = self.enqueue_direct_with(bound, stream, work, &mut |index, _, after| {
            if !timed.contains(&index) {
                return Ok(());
            }
            let event = timer.record(bound, stream)?;
            match opened.take() {
                Some(start) if after => out.push_dispatch(index, start, event),
                _ => opened = Some(event),
            }
            Ok(())
        });
        // A dispatch whose launch failed after its start event was recorded.
        out.hold(opened);
        result
    }

    fn enqueue_direct(&self, bound: &Bound<'_>, stream: &CudaStream, work: &Arc<Work>) -> Result<()> {
        self.enqueue_direct_with(bound, stream, work, &mut |_, _, _| Ok(()))
    }

    /// Enqueues the commands one by one, calling `around(index, command, after)` on the stream
    /// just before (`after` false) and just after (`after` true) each one: where profiling records
    /// its timing events.
    pub(crate) fn enqueue_direct_with(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        work: &Arc<Work>,
        around: &mut dyn FnMut(usize, &Command, bool) -> Result<()>,
    ) -> Result<()> {
        let result = self.enqueue_commands(bound, stream, work, around);
        if let Err(e) = &result {
            // Stopped part-way: the collectives not enqueued will not run, and the other ranks
            // must not wait for them (those enqueued are settled: this does nothing to them).
            for call in work.op.collectives() {
                call.abandon(e.clone());
            }
        }
        result
    }

    fn enqueue_commands(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        work: &Arc<Work>,
        around: &mut dyn FnMut(usize, &Command, bool) -> Result<()>,
    ) -> Result<()> {
        let payload = self.payload.address();
        // The execute's collectives, one per collective command, in command order.
        let mut calls = work.op.collectives().iter();
        for (index, command) in self.commands.iter().enumerate() {
            if let Command::Collective { .. } = command {
                let call = calls.next().ok_or_else(|| {
                    Error::internal(format!("cuda: command {index} is a collective the execute has no call for"))
                })?;
                // Enqueued on the stream between the commands around it, like the queue operation.
                crate::collective::NcclChannel::of(call)?.enqueue(bound, stream, call)?;
                continue;
            }
            let source = match command {
                Command::Update { .. } => Some(update_source(payload, &self.payload.offsets, index)?),
                _ => None,
            };
            around(index, command, false)?;
            enqueue_command(bound, command, stream, source, Some(work))?;
            around(index, command, true)?;
        }
        Ok(())
    }
}

/// Checks each dispatch's entry point; returns whether the commands must replay directly (see
/// [`replays_directly`]).
/// The graph of `recording` (up to `instances` instances), or `None` where CUDA cannot build one: its
/// executes then replay directly.
fn graph_or_direct(
    context: &Arc<Context>,
    recording: Recording<'_>,
    instances: usize,
    updater: Option<&Arc<NodeUpdater>>,
) -> Option<GraphExec> {
    GraphExec::build(context, recording, instances, &[], updater)
        .map_err(|e| {
            let commands = recording.commands.len();
            tracing::warn!(%e, commands, "building a CUDA graph failed; replaying directly");
        })
        .ok()
}

fn check(commands: &[Command], ordinal: usize, indirect_nodes: bool) -> Result<bool> {
    check_entries(commands)?;
    replays_directly(commands, ordinal, indirect_nodes)
}

/// Looks up every dispatch's entry point (an error names one that does not exist).
fn check_entries(commands: &[Command]) -> Result<()> {
    for command in commands {
        if let Command::Dispatch { executable, entry_point, .. }
        | Command::DispatchIndirect { executable, entry_point, .. } = command
        {
            CudaExecutable::of(executable)?.entry(*entry_point)?;
        }
    }
    Ok(())
}

/// Whether the commands must replay directly: one touches a transient buffer (its address is known
/// only once its alloca ran), is an indirect dispatch while `indirect_nodes` is off (its grid is
/// known only when it runs, and only the device's updater can set it in a graph), copies with
/// another GPU's memory (a graph's copy node stays within its own GPU here), or is a collective
/// (each execute's NCCL calls are enqueued on the stream in command order; NCCL calls could be
/// captured into a graph with stream capture, which is not done here).
fn replays_directly(commands: &[Command], ordinal: usize, indirect_nodes: bool) -> Result<bool> {
    let direct = direct_reasons(commands, ordinal, indirect_nodes)?;
    Ok(direct.other || direct.transient)
}

/// Why commands would replay directly (see [`replays_directly`]).
struct DirectReasons {
    /// A command touches a transient buffer.
    transient: bool,
    /// Any other reason.
    other: bool,
}

fn direct_reasons(commands: &[Command], ordinal: usize, indirect_nodes: bool) -> Result<DirectReasons> {
    let mut reasons = DirectReasons { transient: false, other: false };
    for command in commands {
        reasons.other |= matches!(command, Command::Collective { .. })
            || (!indirect_nodes && matches!(command, Command::DispatchIndirect { .. }));
        for buffer in command.buffers() {
            let memory = CudaMemory::of(buffer)?;
            reasons.transient |= memory.is_transient();
            reasons.other |= memory.context().ordinal() != ordinal;
        }
    }
    Ok(reasons)
}

impl PreparedCommands for CudaPreparedCommands {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Enqueues one command on `stream`. `update_source` is the device address of an update's bytes;
/// single `queue_update`s go through staging instead. `work` is the submission an indirect
/// dispatch reports later failures to (commands of an execute have one).
pub(crate) fn enqueue_command(
    bound: &Bound<'_>,
    command: &Command,
    cuda_stream: &CudaStream,
    update_source: Option<u64>,
    work: Option<&Arc<Work>>,
) -> Result<()> {
    let stream = cuda_stream.raw();
    match command {
        Command::Fill { target, offset, length, pattern, pattern_len } => {
            if *length == 0 {
                return Ok(());
            }
            let dst = resolve_address(target, *offset, *length)?;
            let length = *length as usize;
            // `dst` addresses `length` bytes of live memory, aligned to the pattern length (hal checks
            // offsets; allocations are 256-byte aligned).
            match pattern_len {
                1 => result::memset_d8_async(bound, dst, *pattern as u8, length, stream),
                2 => result::memset_d16_async(bound, dst, *pattern as u16, length / 2, stream),
                4 => result::memset_d32_async(bound, dst, *pattern, length / 4, stream),
                other => Err(Error::invalid_argument(format!("fill: pattern length {other} must be 1, 2 or 4"))),
            }
        }
        Command::Update { target, offset, data } => {
            if data.is_empty() {
                return Ok(());
            }
            let source = update_source
                .ok_or_else(|| Error::internal("cuda: an update reached the stream without uploaded bytes"))?;
            let dst = resolve_address(target, *offset, data.len() as u64)?;
            // The source is `data.len()` bytes of the uploaded payload and the target range as many
            // bytes of live memory (device or mapped pinned).
            result::memcpy_async(bound, dst, source, data.len(), stream)
        }
        Command::Copy { source, source_offset, target, target_offset, length } => {
            if *length == 0 {
                return Ok(());
            }
            let src = CopyEnd {
                address: resolve_address(source, *source_offset, *length)?,
                host: CudaMemory::of(source)?.is_host(),
            };
            let dst = CopyEnd {
                address: resolve_address(target, *target_offset, *length)?,
                host: CudaMemory::of(target)?.is_host(),
            };
            // SAFETY: both ranges are `length` bytes of live memory (device or mapped pinned) that the
            // submission's buffers keep until it retires; the HAL refuses overlapping copies.
            unsafe { copy_async(bound, dst, src, *length as usize, stream) }
        }
        Command::Dispatch { executable, entry_point, workgroups, constants, bindings } => {
            KernelLaunch::resolve(executable, *entry_point, *workgroups, constants, bindings)?.launch_on(bound, stream)
        }
        Command::DispatchIndirect { executable, entry_point, count, count_offset, constants, bindings } => {
            let work = work.ok_or_else(|| Error::internal("cuda: an indirect dispatch outside an execute"))?;
            let launch = KernelLaunch::resolve(executable, *entry_point, [1, 1, 1], constants, bindings)?;
            let count = resolve_address(count, *count_offset, hal::driver::INDIRECT_COUNT_BYTES)?;
            let who = format!("indirect dispatch of entry point {entry_point} of {executable}");
            cuda_stream.indirect().enqueue(bound, cuda_stream.lane()?, stream, count, launch, work, who)
        }
        Command::Barrier => Ok(()),
        Command::Collective { .. } => {
            Err(Error::internal("cuda: a collective command outside an execute's direct replay"))
        }
    }
}
