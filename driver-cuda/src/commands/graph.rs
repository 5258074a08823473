//! CUDA graphs built from a recorded command list, instantiated once and relaunched on every execute
//! (one `cuGraphLaunch` instead of a launch per command).
//!
//! Nodes are explicit (kernel, memset, memcpy), not captured. Commands between two execution barriers
//! have no edges between them and may run concurrently, as the contract allows; each command after a
//! barrier depends on every command of the segment before it, joined through one empty node when
//! that segment has several, so edges stay linear in the command count.
//!
//! A command buffer recorded against binding slots builds its graph at its first execute; every
//! execute then brings its own `NodeParams` (the addresses its table gives). Its launch takes an
//! executable instance that already holds those parameters, or updates the nodes that differ in
//! one (`cuGraphExec*NodeSetParams`) before it launches, both under the graph's launch lock. An
//! update affects only later launches, so an execute still running on the device keeps its
//! buffers, and two executes issued in either order each run with their own. A few instances are
//! kept (`CudaOptions::bound_graph_instances`), so tables that recur launch without updates.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUevent, CUgraph, CUgraphExec, CUgraphNode};
use hal::driver::Command;
use hal::driver::{get_mut, lock};
use hal::{Error, Result};
use smallvec::SmallVec;

use crate::commands::indirect_node::{FaultRings, IndirectRun, NodeUpdater};
use crate::commands::payload::update_source;
use crate::event::CudaEvent;
use crate::executable::KernelLaunch;
use crate::memory::resolve_address;
use crate::queue_stream::CudaStream;
use crate::sys::context::{Bound, Context};
use crate::sys::result;

/// What one graph node does, with the addresses of one execute. Memset and memcpy nodes also
/// carry the ids of the buffers they touch: CUDA resolves such a node's addresses to their
/// allocations when it is built or set, so a node is reused as it is only for the same buffers,
/// never for a new buffer that happens to sit at a freed one's address (a kernel node's parameters
/// are plain values, compared by address alone).
#[derive(Clone, PartialEq)]
pub(crate) enum NodeParams {
    /// A kernel launch.
    Kernel(KernelLaunch),
    /// An indirect dispatch: `launch` (its grid set on the device) reading its count at device
    /// address `count` (see [`crate::commands::indirect_node`]).
    Indirect { launch: KernelLaunch, count: u64 },
    /// `count` elements of `element_size` bytes at `dst` set to `value`.
    Memset { dst: u64, value: u32, element_size: u32, count: usize, buffers: [u64; 2] },
    /// `length` bytes from `src` to `dst`.
    Copy { src: u64, dst: u64, length: usize, buffers: [u64; 2] },
}

/// One step of a graph's plan: a node, or an execution barrier between segments.
enum Step {
    Node(NodeParams),
    Barrier,
}

/// The graph steps of `commands` with their command indices (empty transfers dropped). `payload`
/// and `offsets` place update bytes (see `command_buffer`). Reads every buffer's address now.
/// Indirect dispatches become nodes only with `indirect` (the device updates their grids).
fn plan(commands: &[Command], payload: u64, offsets: &[u64], indirect: bool) -> Result<Vec<(usize, Step)>> {
    let mut steps = Vec::with_capacity(commands.len());
    for (index, command) in commands.iter().enumerate() {
        let step = match command {
            Command::Fill { target, offset, length, pattern, pattern_len } => {
                if *length == 0 {
                    continue;
                }
                let dst = resolve_address(target, *offset, *length)?;
                let element_size = u32::from(*pattern_len);
                let value = match pattern_len {
                    1 => pattern & 0xFF,
                    2 => pattern & 0xFFFF,
                    _ => *pattern,
                };
                let count = (*length / u64::from(element_size)) as usize;
                Step::Node(NodeParams::Memset { dst, value, element_size, count, buffers: [target.id(), 0] })
            }
            Command::Update { target, offset, data } => {
                if data.is_empty() {
                    continue;
                }
                let dst = resolve_address(target, *offset, data.len() as u64)?;
                let src = update_source(payload, offsets, index)?;
                Step::Node(NodeParams::Copy { src, dst, length: data.len(), buffers: [0, target.id()] })
            }
            Command::Copy { source, source_offset, target, target_offset, length } => {
                if *length == 0 {
                    continue;
                }
                let src = resolve_address(source, *source_offset, *length)?;
                let dst = resolve_address(target, *target_offset, *length)?;
                Step::Node(NodeParams::Copy { src, dst, length: *length as usize, buffers: [source.id(), target.id()] })
            }
            Command::Dispatch { executable, entry_point, workgroups, constants, bindings } => Step::Node(
                NodeParams::Kernel(KernelLaunch::resolve(executable, *entry_point, *workgroups, constants, bindings)?),
            ),
            Command::DispatchIndirect { executable, entry_point, count, count_offset, constants, bindings } => {
                if !indirect {
                    return Err(Error::internal(
                        "cuda graph: an indirect dispatch is a graph node only where the device updates its grid",
                    ));
                }
                let launch = KernelLaunch::resolve(executable, *entry_point, [1, 1, 1], constants, bindings)?;
                let count = resolve_address(count, *count_offset, hal::driver::INDIRECT_COUNT_BYTES)?;
                Step::Node(NodeParams::Indirect { launch, count })
            }
            Command::Barrier => Step::Barrier,
            Command::Collective { .. } => {
                return Err(Error::internal("cuda graph: a collective cannot be a graph node (it replays directly)"));
            }
        };
        steps.push((index, step));
    }
    Ok(steps)
}

/// The node parameters of `commands` for one execute of a graph built from the same recording.
pub(crate) fn node_params(commands: &[Command], payload: u64, offsets: &[u64]) -> Result<Vec<NodeParams>> {
    // A graph exists, so its indirect dispatches (if any) were allowed to be nodes.
    Ok(plan(commands, payload, offsets, true)?
        .into_iter()
        .filter_map(|(_, step)| if let Step::Node(params) = step { Some(params) } else { None })
        .collect())
}

/// One execute's commands and where their update bytes are (see `command_buffer`): what a new
/// instance is built from.
#[derive(Clone, Copy)]
pub(crate) struct Recording<'a> {
    pub commands: &'a [Command],
    pub payload: u64,
    pub offsets: &'a [u64],
}

/// One or more executable instances of a recording's graph. Launches (and the node updates
/// before them) are serialised by one lock (graph objects are not internally synchronised).
pub struct GraphExec {
    context: Arc<Context>,
    /// The lock serialises launches and updates.
    instances: Mutex<Vec<Instance>>,
    max_instances: usize,
    /// Nodes per instance (the same recording gives the same nodes).
    node_count: usize,
    /// The command indices of the dispatches bracketed by event record nodes (profiling).
    timed: Vec<usize>,
    /// Updates indirect dispatch nodes' grids; `None`: indirect dispatches are not nodes.
    updater: Option<Arc<NodeUpdater>>,
}

/// One graph, instantiated, and the parameters its executable holds now. Each instance is built
/// from the commands of the execute that needed it, so its graph never names a buffer that was
/// not alive when it was built.
struct Instance {
    graph: CUgraph,
    exec: CUgraphExec,
    /// The nodes in command order (barrier joins excluded), for updates.
    nodes: Vec<CUgraphNode>,
    current: Vec<NodeParams>,
    /// When it was last launched (a count of launches), for least-recently-used reuse.
    last_launch: u64,
    /// Per timed dispatch, in command order: its start and end event record nodes.
    timers: Vec<(CUgraphNode, CUgraphNode)>,
    /// The event the timers record until a launch sets its own (kept as long as the graph).
    placeholder: Option<CudaEvent>,
    /// Its indirect dispatch nodes, if it has any.
    indirect: Option<IndirectNodes>,
}

/// The indirect dispatch nodes of one instance: per node, its updater node and the kernel node's
/// device handle, in node order; their fault rings; and how many times the instance launched
/// (each launch runs every updater once, so the host's count names the device's run).
struct IndirectNodes {
    updaters: Vec<(CUgraphNode, u64)>,
    rings: Arc<FaultRings>,
    launches: u64,
    /// The updater's module stays loaded while a graph names its kernel.
    updater: Arc<NodeUpdater>,
}

impl IndirectNodes {
    /// The updater node's parameter values for indirect node `index` reading its count at `count`.
    fn updater_values(&self, index: usize, count: u64) -> [u64; 4] {
        let (state, ring) = self.rings.params(index);
        [count, self.updaters[index].1, state, ring]
    }
}

/// What a launch did.
pub(crate) enum Launched {
    /// CUDA refused to update a node: nothing was launched.
    Refused,
    /// Launched; with indirect nodes, the run their faults are checked for at completion.
    Yes(Option<IndirectRun>),
}

// SAFETY: graph handles are driver objects; launches and updates go through `instances`' lock,
// which serialises them.
unsafe impl Send for GraphExec {}
// SAFETY: see `Send`.
unsafe impl Sync for GraphExec {}

/// A graph being built: destroyed on drop unless instantiated.
struct Builder {
    graph: CUgraph,
    /// What the next node depends on (the join of the segment before the last barrier).
    deps: SmallVec<[CUgraphNode; 4]>,
    /// Nodes since the last barrier.
    segment: SmallVec<[CUgraphNode; 8]>,
    nodes: Vec<CUgraphNode>,
}

impl Drop for Builder {
    fn drop(&mut self) {
        if !self.graph.is_null() {
            // SAFETY: the graph was created by `GraphExec::build`, is destroyed once (instantiation
            // takes it and leaves null) and is not used after this. As before, a failure only leaks.
            let _ = unsafe { result::graph_destroy(self.graph) };
        }
    }
}

impl Builder {
    /// Adds an indirect dispatch: the kernel node (device-updatable, after its updater) and the
    /// updater node on the segment's dependencies, running `updater` with `values`' last three (the
    /// first, the kernel node's handle, is filled in here). Returns the updater node and the
    /// kernel node's device handle.
    fn add_indirect(
        &mut self,
        bound: &Bound<'_>,
        launch: &KernelLaunch,
        updater: &NodeUpdater,
        mut values: [u64; 4],
    ) -> Result<(CUgraphNode, u64)> {
        let graph = self.graph;
        let (function, block, shared) = (launch.function, launch.block, launch.shared_bytes);
        let kernel = launch.clone().with_params(|params| {
            // SAFETY: `params` points at one value per kernel parameter (layout order, counts
            // checked in `KernelLaunch::resolve`), which CUDA copies into the node now.
            unsafe { result::graph_add_kernel_node(bound, graph, &[], function, [1, 1, 1], block, shared, params) }
        })?;
        let handle = result::graph_kernel_node_device_updatable(bound, kernel)?;
        values[1] = handle;
        let update = add_updater_node(bound, graph, &self.deps, updater, &mut values)?;
        result::graph_add_dependency(bound, graph, update, kernel)?;
        self.nodes.push(kernel);
        self.segment.push(kernel);
        Ok((update, handle))
    }

    fn barrier(&mut self, bound: &Bound<'_>) -> Result<()> {
        match self.segment.len() {
            0 => {}
            1 => {
                self.deps.clear();
                self.deps.push(self.segment[0]);
            }
            _ => {
                let join = result::graph_add_empty_node(bound, self.graph, &self.segment)?;
                self.deps.clear();
                self.deps.push(join);
            }
        }
        self.segment.clear();
        Ok(())
    }

    /// Adds the node `params` describes, depending on the current segment's dependencies. With
    /// `timer`, a kernel node is bracketed: an event record node before it (on its dependencies)
    /// and one after it; the pair is returned.
    fn add(
        &mut self,
        bound: &Bound<'_>,
        params: &NodeParams,
        timer: Option<CUevent>,
    ) -> Result<Option<(CUgraphNode, CUgraphNode)>> {
        let start = match (timer, params) {
            (Some(event), NodeParams::Kernel(_)) => {
                Some(result::graph_add_event_record_node(bound, self.graph, &self.deps, event)?)
            }
            _ => None,
        };
        let graph = self.graph;
        let deps: SmallVec<[CUgraphNode; 4]> = match start {
            Some(start) => SmallVec::from_slice(&[start]),
            None => self.deps.clone(),
        };
        let deps = &deps[..];
        let node = match params {
            NodeParams::Kernel(launch) => {
                let (function, grid, block, shared) = (launch.function, launch.grid, launch.block, launch.shared_bytes);
                launch.clone().with_params(|values| {
                    // SAFETY: `values` points at one value per kernel parameter (layout order, counts
                    // checked in `KernelLaunch::resolve`), which CUDA copies into the node now.
                    unsafe { result::graph_add_kernel_node(bound, graph, deps, function, grid, block, shared, values) }
                })?
            }
            // `dst` addresses `count` elements of memory the command buffer keeps alive.
            NodeParams::Memset { dst, value, element_size, count, .. } => {
                result::graph_add_memset_node(bound, graph, deps, *dst, *value, *element_size, *count)?
            }
            // Both addresses are unified (device or mapped pinned) addresses of `length` bytes
            // that the command buffer keeps alive.
            NodeParams::Copy { src, dst, length, .. } => {
                result::graph_add_memcpy_node(bound, graph, deps, *src, *dst, *length)?
            }
            NodeParams::Indirect { .. } => {
                return Err(Error::internal("cuda graph: an indirect dispatch is added with its updater"));
            }
        };
        self.nodes.push(node);
        match (start, timer) {
            (Some(start), Some(event)) => {
                let end = result::graph_add_event_record_node(bound, graph, &[node], event)?;
                // What follows the next barrier waits for the end event too: a later command's
                // start is then never stamped before this one's end.
                self.segment.push(end);
                Ok(Some((start, end)))
            }
            _ => {
                self.segment.push(node);
                Ok(None)
            }
        }
    }
}

impl Instance {
    /// Builds and instantiates the graph of `commands` (see [`GraphExec::build`]), bracketing the
    /// dispatches at command indices `timed` with event record nodes.
    fn build(
        context: &Arc<Context>,
        execute: Recording<'_>,
        timed: &[usize],
        updater: Option<&Arc<NodeUpdater>>,
    ) -> Result<Self> {
        let Recording { commands, payload, offsets } = execute;
        // Timed graphs keep indirect dispatches out (their timers bracket kernel nodes only).
        let updater = updater.filter(|_| timed.is_empty());
        let steps = plan(commands, payload, offsets, updater.is_some())?;
        let placeholder = if timed.is_empty() { None } else { Some(crate::timing::timing_event(context)?) };
        let bound = context.bind()?;
        let indirect = match updater {
            Some(updater) => {
                let who: Vec<String> = commands
                    .iter()
                    .filter_map(|command| match command {
                        Command::DispatchIndirect { executable, entry_point, .. } => {
                            Some(format!("indirect dispatch of entry point {entry_point} of {executable}"))
                        }
                        _ => None,
                    })
                    .collect();
                if who.is_empty() {
                    None
                } else {
                    let rings = Arc::new(FaultRings::new(context, &bound, who, updater.limits())?);
                    Some(IndirectNodes { updaters: Vec::new(), rings, launches: 0, updater: updater.clone() })
                }
            }
            None => None,
        };
        let graph = result::graph_create(&bound)?;
        let mut builder = Builder { graph, deps: SmallVec::new(), segment: SmallVec::new(), nodes: Vec::new() };
        let mut current = Vec::with_capacity(steps.len());
        let mut timers = Vec::with_capacity(timed.len());
        let mut indirect = indirect;
        for (index, step) in steps {
            match step {
                Step::Node(NodeParams::Indirect { launch, count }) => {
                    let nodes = indirect
                        .as_mut()
                        .ok_or_else(|| Error::internal("cuda graph: an indirect node without its updater"))?;
                    let (state, ring) = nodes.rings.params(nodes.updaters.len());
                    let added = builder.add_indirect(&bound, &launch, &nodes.updater, [count, 0, state, ring])?;
                    nodes.updaters.push(added);
                    current.push(NodeParams::Indirect { launch, count });
                }
                Step::Node(params) => {
                    let timer = placeholder.as_ref().filter(|_| timed.contains(&index)).map(CudaEvent::raw);
                    timers.extend(builder.add(&bound, &params, timer)?);
                    current.push(params);
                }
                Step::Barrier => builder.barrier(&bound)?,
            }
        }
        if timers.len() != timed.len() {
            return Err(Error::internal(format!(
                "cuda graph: {} of the {} timed commands are dispatches",
                timers.len(),
                timed.len()
            )));
        }
        let exec = result::graph_instantiate(&bound, builder.graph)?;
        let nodes = std::mem::take(&mut builder.nodes);
        let graph = std::mem::replace(&mut builder.graph, std::ptr::null_mut());
        Ok(Instance { graph, exec, nodes, current, last_launch: 0, timers, placeholder, indirect })
    }

    /// Launches the instance on `stream`; with indirect nodes, counts the launch and returns it.
    fn launch(&mut self, bound: &Bound<'_>, stream: &CudaStream) -> Result<Option<IndirectRun>> {
        result::graph_launch(bound, self.exec, stream.raw())?;
        Ok(self.indirect.as_mut().map(|nodes| {
            nodes.launches += 1;
            IndirectRun { rings: nodes.rings.clone(), run: nodes.launches }
        }))
    }

    /// Points the timers at `events` (one pair per timed dispatch) for the next launch.
    fn set_timers(&self, bound: &Bound<'_>, events: &[(CUevent, CUevent)]) -> Result<()> {
        if events.len() != self.timers.len() {
            return Err(Error::internal(format!(
                "cuda graph: {} event pairs for {} timed dispatches",
                events.len(),
                self.timers.len()
            )));
        }
        for (&(start_node, end_node), &(start, end)) in self.timers.iter().zip(events) {
            result::graph_exec_set_event(bound, self.exec, start_node, start)?;
            result::graph_exec_set_event(bound, self.exec, end_node, end)?;
        }
        Ok(())
    }

    /// Sets the nodes whose parameters differ from `params`.
    fn update(&mut self, bound: &Bound<'_>, params: &[NodeParams]) -> Result<()> {
        let mut indirect_index = 0;
        for ((node, now), wanted) in self.nodes.iter().zip(self.current.iter_mut()).zip(params) {
            let index = indirect_index;
            if matches!(now, NodeParams::Indirect { .. }) {
                indirect_index += 1;
            }
            if now == wanted {
                continue;
            }
            if let (NodeParams::Indirect { count: was, .. }, NodeParams::Indirect { count, .. }) = (&*now, wanted)
                && was != count
            {
                let nodes = self
                    .indirect
                    .as_ref()
                    .ok_or_else(|| Error::internal("cuda graph: an indirect node without its updater"))?;
                let mut values = nodes.updater_values(index, *count);
                set_updater_params(bound, self.exec, nodes.updaters[index].0, &nodes.updater, &mut values)?;
            }
            set_node_params(bound, self.exec, *node, now, wanted)?;
            *now = wanted.clone();
        }
        Ok(())
    }

    fn destroy(self, bound: &Bound<'_>) {
        // SAFETY: destroyed once, here; no launch is in progress (launches hold the graph through
        // their prepared command buffer, and dropping it needs the last handle).
        let exec = unsafe { result::graph_exec_destroy(bound, self.exec) };
        // SAFETY: destroyed once, here; the graph is not used after this.
        let graph = unsafe { result::graph_destroy(self.graph) };
        if let Err(e) = exec.and(graph) {
            tracing::debug!(%e, "destroying a graph failed");
        }
        // The placeholder event and the fault rings drop last, after the graph that named them.
        drop(self.placeholder);
        drop(self.indirect);
    }
}

impl GraphExec {
    /// Builds the graph of `commands` and instantiates it. `payload` is the device address of the
    /// uploaded update bytes and `offsets` their place per command (see `command_buffer`). Every
    /// buffer must have a fixed address (no transient buffers). `max_instances` (at least 1) bounds
    /// the instances `launch_with` may keep, one per recent set of parameters.
    /// With `updater`, indirect dispatches become nodes whose grid the device sets (an untimed
    /// graph only); without, a recording with one fails to build.
    pub(crate) fn build(
        context: &Arc<Context>,
        execute: Recording<'_>,
        max_instances: usize,
        timed: &[usize],
        updater: Option<&Arc<NodeUpdater>>,
    ) -> Result<Self> {
        let first = Instance::build(context, execute, timed, updater)?;
        let node_count = first.nodes.len();
        Ok(GraphExec {
            context: context.clone(),
            instances: Mutex::new(vec![first]),
            max_instances: max_instances.max(1),
            node_count,
            timed: timed.to_vec(),
            updater: updater.cloned(),
        })
    }

    /// The command indices of the dispatches its event record nodes bracket.
    pub fn timed(&self) -> &[usize] {
        &self.timed
    }

    /// Commands turned into nodes (barriers and empty commands excluded).
    pub fn node_count(&self) -> usize {
        self.node_count
    }

    /// Enqueues one launch of the graph as built on `stream`; its timed dispatches (if any) record
    /// `events`, a (start, end) pair each in command order.
    /// With indirect nodes, the launch's run is returned, to check at completion.
    pub(crate) fn launch(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        events: &[(CUevent, CUevent)],
    ) -> Result<Option<IndirectRun>> {
        let mut instances = lock(&self.instances);
        if !self.timed.is_empty() {
            instances[0].set_timers(bound, events)?;
        }
        instances[0].launch(bound, stream)
    }

    /// Enqueues one launch on `stream` of the execute whose node parameters are `params` (from
    /// [`node_params`] over `commands`, the recording this graph was built from resolved for the
    /// execute's table). The instance that holds exactly `params` launches as it is; otherwise a
    /// new instance is built from `commands` while there are fewer than `max_instances`, or the
    /// least recently launched one is updated (the nodes whose parameters differ are set). Tables
    /// that come back (a runtime's allocator hands out the same buffers again) thus launch without
    /// updates. [`Launched::Refused`] when CUDA refused to update a node: nothing was launched, and
    /// the caller replays the execute another way. Timed dispatches record `events` as in
    /// [`launch`](Self::launch).
    pub(crate) fn launch_with(
        &self,
        bound: &Bound<'_>,
        stream: &CudaStream,
        params: &[NodeParams],
        execute: Recording<'_>,
        events: &[(CUevent, CUevent)],
    ) -> Result<Launched> {
        if params.len() != self.node_count {
            return Err(Error::internal(format!(
                "cuda graph: {} node parameters for a graph of {} nodes",
                params.len(),
                self.node_count
            )));
        }
        let mut instances = lock(&self.instances);
        let launches = instances.iter().map(|i| i.last_launch).max().unwrap_or(0) + 1;
        let index = match instances.iter().position(|i| i.current == params) {
            Some(index) => index,
            None if instances.len() < self.max_instances => {
                match Instance::build(&self.context, execute, &self.timed, self.updater.as_ref()) {
                    Ok(instance) => {
                        instances.push(instance);
                        instances.len() - 1
                    }
                    Err(e) => {
                        tracing::debug!(%e, "building another graph instance failed; the execute replays directly");
                        return Ok(Launched::Refused);
                    }
                }
            }
            None => {
                let oldest = instances.iter().enumerate().min_by_key(|(_, i)| i.last_launch);
                let index = oldest.map_or(0, |(index, _)| index);
                if let Err(e) = instances[index].update(bound, params) {
                    tracing::debug!(%e, "updating a graph node failed; the execute replays directly");
                    return Ok(Launched::Refused);
                }
                index
            }
        };
        let instance = &mut instances[index];
        instance.last_launch = launches;
        if !self.timed.is_empty() {
            instance.set_timers(bound, events)?;
        }
        Ok(Launched::Yes(instance.launch(bound, stream)?))
    }
}

/// Points `node` of `exec`, which holds `now`, at `wanted` (a node of the same kind).
fn set_node_params(
    bound: &Bound<'_>,
    exec: CUgraphExec,
    node: CUgraphNode,
    now: &NodeParams,
    wanted: &NodeParams,
) -> Result<()> {
    match (now, wanted) {
        (NodeParams::Kernel(now), NodeParams::Kernel(wanted))
        | (NodeParams::Indirect { launch: now, .. }, NodeParams::Indirect { launch: wanted, .. })
            if now.function == wanted.function =>
        {
            let (function, grid, block, shared) = (wanted.function, wanted.grid, wanted.block, wanted.shared_bytes);
            wanted.clone().with_params(|values| {
                // SAFETY: `node` is a kernel node of the graph `exec` was instantiated from, running
                // the same function; `values` is as for `graph_add_kernel_node`, copied by CUDA now.
                unsafe {
                    result::graph_exec_set_kernel_params(bound, exec, node, function, grid, block, shared, values)
                }
            })
        }
        // `dst` addresses `count` elements of memory the executing command buffer keeps alive.
        (NodeParams::Memset { .. }, NodeParams::Memset { dst, value, element_size, count, .. }) => {
            result::graph_exec_set_memset_params(bound, exec, node, *dst, *value, *element_size, *count)
        }
        // Unified addresses of `length` bytes the executing command buffer keeps alive.
        (NodeParams::Copy { .. }, NodeParams::Copy { src, dst, length, .. }) => {
            result::graph_exec_set_memcpy_params(bound, exec, node, *src, *dst, *length)
        }
        _ => Err(Error::internal("cuda graph: an execute's node differs in kind from the graph's")),
    }
}

/// Adds an updater node running `updater` with `values` (count, kernel node handle, run counter,
/// fault ring) on `deps`.
fn add_updater_node(
    bound: &Bound<'_>,
    graph: CUgraph,
    deps: &[CUgraphNode],
    updater: &NodeUpdater,
    values: &mut [u64; 4],
) -> Result<CUgraphNode> {
    let mut params: [*mut std::ffi::c_void; 4] = values.each_mut().map(|v| (v as *mut u64).cast());
    // SAFETY: the updater takes four 8-byte parameters; `params` points at them, live during the
    // call, when CUDA copies them into the node.
    unsafe {
        result::graph_add_kernel_node(
            bound,
            graph,
            deps,
            updater.function(),
            [1, 1, 1],
            [1, 1, 1],
            0,
            params.as_mut_ptr(),
        )
    }
}

/// Points updater node `node` of `exec` at `values` (as for [`add_updater_node`]).
fn set_updater_params(
    bound: &Bound<'_>,
    exec: CUgraphExec,
    node: CUgraphNode,
    updater: &NodeUpdater,
    values: &mut [u64; 4],
) -> Result<()> {
    let mut params: [*mut std::ffi::c_void; 4] = values.each_mut().map(|v| (v as *mut u64).cast());
    // SAFETY: `node` is an updater node of the graph `exec` was instantiated from, running the
    // updater; its four 8-byte parameters are at `params`, copied by CUDA now.
    unsafe {
        result::graph_exec_set_kernel_params(
            bound,
            exec,
            node,
            updater.function(),
            [1, 1, 1],
            [1, 1, 1],
            0,
            params.as_mut_ptr(),
        )
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let Ok(bound) = self.context.bind() else { return };
        for instance in std::mem::take(get_mut(&mut self.instances)) {
            instance.destroy(&bound);
        }
    }
}
