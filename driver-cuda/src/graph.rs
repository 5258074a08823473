//! CUDA graphs built from a recorded command list, instantiated once at `end()` and relaunched on
//! every execute (one `cuGraphLaunch` instead of a launch per command).
//!
//! Nodes are explicit (kernel, memset, memcpy), not captured. Commands between two execution barriers
//! have no edges between them and may run concurrently, as the contract allows; each command after a
//! barrier depends on every command of the segment before it, joined through one empty node when
//! that segment has several, so edges stay linear in the command count.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{
    self, CUDA_KERNEL_NODE_PARAMS_v2, CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS, CUgraph, CUgraphExec, CUgraphNode,
    CUmemorytype, CUresult,
};
use hal::{Command, Result};
use smallvec::SmallVec;

use crate::command_buffer::{resolve_address, update_source};
use crate::context::Context;
use crate::error::check;
use crate::module::KernelLaunch;
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
    context: Arc<Context>,
    /// What the next node depends on (the join of the segment before the last barrier).
    deps: SmallVec<[CUgraphNode; 4]>,
    /// Nodes since the last barrier.
    segment: SmallVec<[CUgraphNode; 8]>,
    nodes: usize,
}

impl Drop for Builder {
    fn drop(&mut self) {
        if !self.graph.is_null() {
            // SAFETY: the graph was created by `GraphExec::build` and is not used after this.
            unsafe { sys::cuGraphDestroy(self.graph) };
        }
    }
}

impl Builder {
    /// Adds one node through `add` (given the node out-pointer, the graph and the current
    /// dependencies), checks its result as `call`, and makes the node part of the current segment.
    fn add_node(
        &mut self,
        call: &str,
        add: impl FnOnce(&mut CUgraphNode, CUgraph, &[CUgraphNode]) -> CUresult,
    ) -> Result<()> {
        let mut node: CUgraphNode = std::ptr::null_mut();
        check(add(&mut node, self.graph, &self.deps), call)?;
        self.segment.push(node);
        self.nodes += 1;
        Ok(())
    }

    fn barrier(&mut self) -> Result<()> {
        match self.segment.len() {
            0 => {}
            1 => {
                self.deps.clear();
                self.deps.push(self.segment[0]);
            }
            _ => {
                let mut join: CUgraphNode = std::ptr::null_mut();
                // SAFETY: the graph is live; `segment` holds nodes of it.
                let code = unsafe {
                    sys::cuGraphAddEmptyNode(&mut join, self.graph, self.segment.as_ptr(), self.segment.len())
                };
                check(code, "cuGraphAddEmptyNode")?;
                self.deps.clear();
                self.deps.push(join);
            }
        }
        self.segment.clear();
        Ok(())
    }

    fn add_kernel(&mut self, mut launch: KernelLaunch) -> Result<()> {
        let (function, grid, block) = (launch.function, launch.grid, launch.block);
        self.add_node("cuGraphAddKernelNode", |node, graph, deps| {
            launch.with_params(|params| {
                let node_params = CUDA_KERNEL_NODE_PARAMS_v2 {
                    func: function,
                    gridDimX: grid[0],
                    gridDimY: grid[1],
                    gridDimZ: grid[2],
                    blockDimX: block[0],
                    blockDimY: block[1],
                    blockDimZ: block[2],
                    sharedMemBytes: 0,
                    kernelParams: params,
                    extra: std::ptr::null_mut(),
                    kern: std::ptr::null_mut(),
                    ctx: std::ptr::null_mut(),
                };
                // SAFETY: the graph is live and `deps` are its nodes; `params` points at one value per
                // kernel parameter (ABI order), which CUDA copies into the node during this call.
                unsafe { sys::cuGraphAddKernelNode_v2(node, graph, deps.as_ptr(), deps.len(), &node_params) }
            })
        })
    }

    fn add_memset(&mut self, dst: u64, value: u32, element_size: u32, count: usize) -> Result<()> {
        let params =
            CUDA_MEMSET_NODE_PARAMS { dst, pitch: 0, value, elementSize: element_size, width: count, height: 1 };
        let context = self.context.raw();
        self.add_node("cuGraphAddMemsetNode", |node, graph, deps| {
            // SAFETY: the graph is live and `deps` are its nodes; `dst` addresses `count` elements of
            // memory the command buffer keeps alive; the context handle is ours.
            unsafe { sys::cuGraphAddMemsetNode(node, graph, deps.as_ptr(), deps.len(), &params, context) }
        })
    }

    fn add_copy(&mut self, src: u64, dst: u64, length: usize) -> Result<()> {
        let params = CUDA_MEMCPY3D {
            srcXInBytes: 0,
            srcY: 0,
            srcZ: 0,
            srcLOD: 0,
            srcMemoryType: CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            srcHost: std::ptr::null(),
            srcDevice: src,
            srcArray: std::ptr::null_mut(),
            reserved0: std::ptr::null_mut(),
            srcPitch: 0,
            srcHeight: 0,
            dstXInBytes: 0,
            dstY: 0,
            dstZ: 0,
            dstLOD: 0,
            dstMemoryType: CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst,
            dstArray: std::ptr::null_mut(),
            reserved1: std::ptr::null_mut(),
            dstPitch: 0,
            dstHeight: 0,
            WidthInBytes: length,
            Height: 1,
            Depth: 1,
        };
        let context = self.context.raw();
        self.add_node("cuGraphAddMemcpyNode", |node, graph, deps| {
            // SAFETY: the graph is live and `deps` are its nodes; both addresses are unified (device or
            // mapped pinned) addresses of `length` bytes that the command buffer keeps alive.
            unsafe { sys::cuGraphAddMemcpyNode(node, graph, deps.as_ptr(), deps.len(), &params, context) }
        })
    }
}

impl GraphExec {
    /// Builds and instantiates the graph of `commands`. `payload` is the device address of the
    /// uploaded update bytes and `offsets` their place per command (see `command_buffer`). Every
    /// buffer must have a fixed address (no transient buffers).
    pub fn build(context: &Arc<Context>, commands: &[Command], payload: u64, offsets: &[u64]) -> Result<Self> {
        context.bind()?;
        let mut graph: CUgraph = std::ptr::null_mut();
        // SAFETY: the context is bound; the out-pointer is a live local.
        check(unsafe { sys::cuGraphCreate(&mut graph, 0) }, "cuGraphCreate")?;
        let mut builder =
            Builder { graph, context: context.clone(), deps: SmallVec::new(), segment: SmallVec::new(), nodes: 0 };
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
                    builder.add_memset(dst, value, size, (*length / u64::from(size)) as usize)?;
                }
                Command::Update { target, offset, data } => {
                    if data.is_empty() {
                        continue;
                    }
                    let dst = resolve_address(target, *offset, data.len() as u64)?;
                    builder.add_copy(update_source(payload, offsets, index)?, dst, data.len())?;
                }
                Command::Copy { source, source_offset, target, target_offset, length } => {
                    if *length == 0 {
                        continue;
                    }
                    let src = resolve_address(source, *source_offset, *length)?;
                    let dst = resolve_address(target, *target_offset, *length)?;
                    builder.add_copy(src, dst, *length as usize)?;
                }
                Command::Dispatch { executable, entry_point, workgroups, constants, bindings } => {
                    let launch = KernelLaunch::resolve(executable, *entry_point, *workgroups, constants, bindings)?;
                    builder.add_kernel(launch)?;
                }
                Command::Barrier => builder.barrier()?,
            }
        }
        let mut exec: CUgraphExec = std::ptr::null_mut();
        // SAFETY: the graph is complete and live; the out-pointer is a live local.
        check(unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, builder.graph, 0) }, "cuGraphInstantiate")?;
        let nodes = builder.nodes;
        let graph = std::mem::replace(&mut builder.graph, std::ptr::null_mut());
        Ok(GraphExec { context: context.clone(), graph, exec, nodes, launch: Mutex::new(()) })
    }

    /// Commands turned into nodes (barriers and empty commands excluded).
    pub fn node_count(&self) -> usize {
        self.nodes
    }

    /// Enqueues one launch of the graph on `stream` (the caller has bound the context).
    pub fn launch(&self, stream: &CudaStream) -> Result<()> {
        let _serialised = self.launch.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the executable graph is live; `stream` is a live stream of the bound context.
        check(unsafe { sys::cuGraphLaunch(self.exec, stream.raw()) }, "cuGraphLaunch")
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        if self.context.bind().is_err() {
            return;
        }
        // SAFETY: destroyed once; no launch is in progress (launches hold the command buffer, and
        // dropping it needs the last handle).
        let exec = unsafe { sys::cuGraphExecDestroy(self.exec) };
        // SAFETY: as above; the graph is not used after this.
        let graph = unsafe { sys::cuGraphDestroy(self.graph) };
        if let Err(e) = check(exec, "cuGraphExecDestroy").and_then(|()| check(graph, "cuGraphDestroy")) {
            tracing::debug!(%e, "destroying a graph failed");
        }
    }
}
