//! CUDA graphs built from a recorded command list, instantiated once at `end()` and relaunched on
//! every execute (one `cuGraphLaunch` instead of a launch per command).
//!
//! Nodes are explicit (kernel, memset, memcpy), not captured. Commands between two execution barriers
//! have no edges between them and may run concurrently, as the contract allows; each command after a
//! barrier depends on every command of the segment before it, joined through one empty node when
//! that segment has several, so edges stay linear in the command count.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUgraph, CUgraphExec, CUgraphNode};
use hal::Result;
use hal::driver::Command;
use smallvec::SmallVec;

use crate::command_buffer::{resolve_address, update_source};
use crate::context::{Bound, Context};
use crate::module::KernelLaunch;
use crate::result;
use crate::stream::CudaStream;

/// An instantiated graph. Launches of one graph are serialised by a lock (graph objects are not
/// internally synchronised).
pub struct GraphExec {
    context: Arc<Context>,
    graph: CUgraph,
    exec: CUgraphExec,
    nodes: usize,
    launch: Mutex<()>,
}

// SAFETY: graph handles are driver objects; launches go through `launch`, which serialises them.
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
    nodes: usize,
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
    /// Adds one node through `add` (given the graph and the current dependencies) and makes it part
    /// of the current segment.
    fn add_node(&mut self, add: impl FnOnce(CUgraph, &[CUgraphNode]) -> Result<CUgraphNode>) -> Result<()> {
        let node = add(self.graph, &self.deps)?;
        self.segment.push(node);
        self.nodes += 1;
        Ok(())
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

    fn add_kernel(&mut self, bound: &Bound<'_>, mut launch: KernelLaunch) -> Result<()> {
        let (function, grid, block) = (launch.function, launch.grid, launch.block);
        self.add_node(|graph, deps| {
            launch.with_params(|params| {
                // SAFETY: `params` points at one value per kernel parameter (ABI order, counts checked
                // in `KernelLaunch::resolve`), which CUDA copies into the node during this call.
                unsafe { result::graph_add_kernel_node(bound, graph, deps, function, grid, block, params) }
            })
        })
    }

    fn add_memset(&mut self, bound: &Bound<'_>, dst: u64, value: u32, element_size: u32, count: usize) -> Result<()> {
        // `dst` addresses `count` elements of memory the command buffer keeps alive.
        self.add_node(|graph, deps| result::graph_add_memset_node(bound, graph, deps, dst, value, element_size, count))
    }

    fn add_copy(&mut self, bound: &Bound<'_>, src: u64, dst: u64, length: usize) -> Result<()> {
        // Both addresses are unified (device or mapped pinned) addresses of `length` bytes that the
        // command buffer keeps alive.
        self.add_node(|graph, deps| result::graph_add_memcpy_node(bound, graph, deps, src, dst, length))
    }
}

impl GraphExec {
    /// Builds and instantiates the graph of `commands`. `payload` is the device address of the
    /// uploaded update bytes and `offsets` their place per command (see `command_buffer`). Every
    /// buffer must have a fixed address (no transient buffers).
    pub fn build(context: &Arc<Context>, commands: &[Command], payload: u64, offsets: &[u64]) -> Result<Self> {
        let bound = context.bind()?;
        let graph = result::graph_create(&bound)?;
        let mut builder = Builder { graph, deps: SmallVec::new(), segment: SmallVec::new(), nodes: 0 };
        for (index, command) in commands.iter().enumerate() {
            match command {
                Command::Fill { target, offset, length, pattern, pattern_len } => {
                    if *length == 0 {
                        continue;
                    }
                    let dst = resolve_address(target, *offset, *length)?;
                    let size = u32::from(*pattern_len);
                    let value = match pattern_len {
                        1 => pattern & 0xFF,
                        2 => pattern & 0xFFFF,
                        _ => *pattern,
                    };
                    builder.add_memset(&bound, dst, value, size, (*length / u64::from(size)) as usize)?;
                }
                Command::Update { target, offset, data } => {
                    if data.is_empty() {
                        continue;
                    }
                    let dst = resolve_address(target, *offset, data.len() as u64)?;
                    builder.add_copy(&bound, update_source(payload, offsets, index)?, dst, data.len())?;
                }
                Command::Copy { source, source_offset, target, target_offset, length } => {
                    if *length == 0 {
                        continue;
                    }
                    let src = resolve_address(source, *source_offset, *length)?;
                    let dst = resolve_address(target, *target_offset, *length)?;
                    builder.add_copy(&bound, src, dst, *length as usize)?;
                }
                Command::Dispatch { executable, entry_point, workgroups, constants, bindings } => {
                    let launch = KernelLaunch::resolve(executable, *entry_point, *workgroups, constants, bindings)?;
                    builder.add_kernel(&bound, launch)?;
                }
                Command::Barrier => builder.barrier(&bound)?,
            }
        }
        let exec = result::graph_instantiate(&bound, builder.graph)?;
        let nodes = builder.nodes;
        let graph = std::mem::replace(&mut builder.graph, std::ptr::null_mut());
        Ok(GraphExec { context: context.clone(), graph, exec, nodes, launch: Mutex::new(()) })
    }

    /// Commands turned into nodes (barriers and empty commands excluded).
    pub fn node_count(&self) -> usize {
        self.nodes
    }

    /// Enqueues one launch of the graph on `stream`.
    pub fn launch(&self, bound: &Bound<'_>, stream: &CudaStream) -> Result<()> {
        let _serialised = self.launch.lock().unwrap_or_else(|p| p.into_inner());
        result::graph_launch(bound, self.exec, stream.raw())
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let Ok(bound) = self.context.bind() else { return };
        // SAFETY: destroyed once, here; no launch is in progress (launches hold the command buffer,
        // and dropping it needs the last handle).
        let exec = unsafe { result::graph_exec_destroy(&bound, self.exec) };
        // SAFETY: destroyed once, here; the graph is not used after this.
        let graph = unsafe { result::graph_destroy(self.graph) };
        if let Err(e) = exec.and(graph) {
            tracing::debug!(%e, "destroying a graph failed");
        }
    }
}
