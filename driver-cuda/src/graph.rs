//! CUDA graphs built from a recorded command list, instantiated once and relaunched on every execute
//! (one `cuGraphLaunch` instead of a launch per command).
//!
//! Nodes are explicit (kernel, memset, memcpy), not captured. Commands between two execution barriers
//! have no edges between them and may run concurrently, as the contract allows; each command after a
//! barrier depends on every command of the segment before it, joined through one empty node when
//! that segment has several, so edges stay linear in the command count.
//!
//! A command buffer recorded against binding slots builds its graph at its first execute; every
//! execute then brings its own [`NodeParams`] (the addresses its table gives), and the launch
//! updates the nodes whose parameters differ from the ones the executable graph holds
//! (`cuGraphExec*NodeSetParams`) before it launches, both under the graph's launch lock. An update
//! affects only later launches, so an execute still running on the device keeps its buffers, and
//! two executes issued in either order each run with their own.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUgraph, CUgraphExec, CUgraphNode};
use hal::driver::Command;
use hal::{Error, Result};
use smallvec::SmallVec;

use crate::command_buffer::{resolve_address, update_source};
use crate::context::{Bound, Context};
use crate::module::KernelLaunch;
use crate::result;
use crate::stream::CudaStream;

/// What one graph node does, with the addresses of one execute.
#[derive(Clone, PartialEq)]
pub(crate) enum NodeParams {
    /// A kernel launch.
    Kernel(KernelLaunch),
    /// `count` elements of `element_size` bytes at `dst` set to `value`.
    Memset { dst: u64, value: u32, element_size: u32, count: usize },
    /// `length` bytes from `src` to `dst`.
    Copy { src: u64, dst: u64, length: usize },
}

/// One step of a graph's plan: a node, or an execution barrier between segments.
enum Step {
    Node(NodeParams),
    Barrier,
}

/// The graph steps of `commands` (empty transfers dropped). `payload` and `offsets` place update
/// bytes (see `command_buffer`). Reads every buffer's address now.
fn plan(commands: &[Command], payload: u64, offsets: &[u64]) -> Result<Vec<Step>> {
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
                Step::Node(NodeParams::Memset {
                    dst,
                    value,
                    element_size,
                    count: (*length / u64::from(element_size)) as usize,
                })
            }
            Command::Update { target, offset, data } => {
                if data.is_empty() {
                    continue;
                }
                let dst = resolve_address(target, *offset, data.len() as u64)?;
                Step::Node(NodeParams::Copy { src: update_source(payload, offsets, index)?, dst, length: data.len() })
            }
            Command::Copy { source, source_offset, target, target_offset, length } => {
                if *length == 0 {
                    continue;
                }
                let src = resolve_address(source, *source_offset, *length)?;
                let dst = resolve_address(target, *target_offset, *length)?;
                Step::Node(NodeParams::Copy { src, dst, length: *length as usize })
            }
            Command::Dispatch { executable, entry_point, workgroups, constants, bindings } => Step::Node(
                NodeParams::Kernel(KernelLaunch::resolve(executable, *entry_point, *workgroups, constants, bindings)?),
            ),
            Command::Barrier => Step::Barrier,
        };
        steps.push(step);
    }
    Ok(steps)
}

/// The node parameters of `commands` for one execute of a graph built from the same recording.
pub(crate) fn node_params(commands: &[Command], payload: u64, offsets: &[u64]) -> Result<Vec<NodeParams>> {
    Ok(plan(commands, payload, offsets)?
        .into_iter()
        .filter_map(|step| if let Step::Node(params) = step { Some(params) } else { None })
        .collect())
}

/// An instantiated graph. Launches (and the node updates before them) are serialised by a lock
/// (graph objects are not internally synchronised).
pub struct GraphExec {
    context: Arc<Context>,
    graph: CUgraph,
    exec: CUgraphExec,
    /// The nodes in command order (barrier joins excluded), for updates.
    nodes: Vec<CUgraphNode>,
    /// The parameters the executable graph holds now, per node; the lock serialises launches.
    current: Mutex<Vec<NodeParams>>,
}

// SAFETY: graph handles are driver objects; launches and updates go through `current`'s lock,
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

    /// Adds the node `params` describes, depending on the current segment's dependencies.
    fn add(&mut self, bound: &Bound<'_>, params: &NodeParams) -> Result<()> {
        let (graph, deps) = (self.graph, &self.deps[..]);
        let node = match params {
            NodeParams::Kernel(launch) => {
                let (function, grid, block) = (launch.function, launch.grid, launch.block);
                launch.clone().with_params(|values| {
                    // SAFETY: `values` points at one value per kernel parameter (ABI order, counts
                    // checked in `KernelLaunch::resolve`), which CUDA copies into the node now.
                    unsafe { result::graph_add_kernel_node(bound, graph, deps, function, grid, block, values) }
                })?
            }
            // `dst` addresses `count` elements of memory the command buffer keeps alive.
            NodeParams::Memset { dst, value, element_size, count } => {
                result::graph_add_memset_node(bound, graph, deps, *dst, *value, *element_size, *count)?
            }
            // Both addresses are unified (device or mapped pinned) addresses of `length` bytes
            // that the command buffer keeps alive.
            NodeParams::Copy { src, dst, length } => {
                result::graph_add_memcpy_node(bound, graph, deps, *src, *dst, *length)?
            }
        };
        self.segment.push(node);
        self.nodes.push(node);
        Ok(())
    }
}

impl GraphExec {
    /// Builds and instantiates the graph of `commands`. `payload` is the device address of the
    /// uploaded update bytes and `offsets` their place per command (see `command_buffer`). Every
    /// buffer must have a fixed address (no transient buffers).
    pub fn build(context: &Arc<Context>, commands: &[Command], payload: u64, offsets: &[u64]) -> Result<Self> {
        let steps = plan(commands, payload, offsets)?;
        let bound = context.bind()?;
        let graph = result::graph_create(&bound)?;
        let mut builder = Builder { graph, deps: SmallVec::new(), segment: SmallVec::new(), nodes: Vec::new() };
        let mut current = Vec::with_capacity(steps.len());
        for step in steps {
            match step {
                Step::Node(params) => {
                    builder.add(&bound, &params)?;
                    current.push(params);
                }
                Step::Barrier => builder.barrier(&bound)?,
            }
        }
        let exec = result::graph_instantiate(&bound, builder.graph)?;
        let nodes = std::mem::take(&mut builder.nodes);
        let graph = std::mem::replace(&mut builder.graph, std::ptr::null_mut());
        Ok(GraphExec { context: context.clone(), graph, exec, nodes, current: Mutex::new(current) })
    }

    /// Commands turned into nodes (barriers and empty commands excluded).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Enqueues one launch of the graph as built on `stream`.
    pub fn launch(&self, bound: &Bound<'_>, stream: &CudaStream) -> Result<()> {
        let _serialised = self.current.lock().unwrap_or_else(|p| p.into_inner());
        result::graph_launch(bound, self.exec, stream.raw())
    }

    /// Enqueues one launch on `stream` with `params` (one per node, from [`node_params`] over the
    /// recording this graph was built from), updating the nodes whose parameters changed first.
    /// `Ok(false)` when CUDA refused to update a node: nothing was launched, and the caller replays
    /// the execute another way (the nodes updated by then stay recorded as updated).
    pub(crate) fn launch_with(&self, bound: &Bound<'_>, stream: &CudaStream, params: &[NodeParams]) -> Result<bool> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if params.len() != self.nodes.len() {
            return Err(Error::internal(format!(
                "cuda graph: {} node parameters for a graph of {} nodes",
                params.len(),
                self.nodes.len()
            )));
        }
        for ((node, now), wanted) in self.nodes.iter().zip(current.iter_mut()).zip(params) {
            if now != wanted {
                if let Err(e) = set_node_params(bound, self.exec, *node, now, wanted) {
                    tracing::debug!(%e, "updating a graph node failed; the execute replays directly");
                    return Ok(false);
                }
                *now = wanted.clone();
            }
        }
        result::graph_launch(bound, self.exec, stream.raw())?;
        Ok(true)
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
        (NodeParams::Kernel(now), NodeParams::Kernel(wanted)) if now.function == wanted.function => {
            let (function, grid, block) = (wanted.function, wanted.grid, wanted.block);
            wanted.clone().with_params(|values| {
                // SAFETY: `node` is a kernel node of the graph `exec` was instantiated from, running
                // the same function; `values` is as for `graph_add_kernel_node`, copied by CUDA now.
                unsafe { result::graph_exec_set_kernel_params(bound, exec, node, function, grid, block, values) }
            })
        }
        // `dst` addresses `count` elements of memory the executing command buffer keeps alive.
        (NodeParams::Memset { .. }, NodeParams::Memset { dst, value, element_size, count }) => {
            result::graph_exec_set_memset_params(bound, exec, node, *dst, *value, *element_size, *count)
        }
        // Unified addresses of `length` bytes the executing command buffer keeps alive.
        (NodeParams::Copy { .. }, NodeParams::Copy { src, dst, length }) => {
            result::graph_exec_set_memcpy_params(bound, exec, node, *src, *dst, *length)
        }
        _ => Err(Error::internal("cuda graph: an execute's node differs in kind from the graph's")),
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let Ok(bound) = self.context.bind() else { return };
        // SAFETY: destroyed once, here; no launch is in progress (launches hold the graph through
        // their prepared command buffer, and dropping it needs the last handle).
        let exec = unsafe { result::graph_exec_destroy(&bound, self.exec) };
        // SAFETY: destroyed once, here; the graph is not used after this.
        let graph = unsafe { result::graph_destroy(self.graph) };
        if let Err(e) = exec.and(graph) {
            tracing::debug!(%e, "destroying a graph failed");
        }
    }
}
