//! Raw-CUDA baselines: the HAL workloads' patterns issued straight through cudarc's `sys` layer, in
//! the same process and on the same primary context as the HAL device, with the same `touch` kernel
//! ([`TOUCH_PTX`], one block of one thread). A CUDA row of the report is judged by its ratio to one
//! of these.
//!
//! Every method runs `ops` operations and returns the time until all of them completed on the GPU
//! (the HAL side waits on its last signal, the raw side synchronizes its stream), except the round
//! trips, which are a host wait per operation on both sides.
//!
//! Every driver function called here is in [`driver_cuda::loader::REQUIRED_SYMBOLS`] (see
//! [`SYMBOLS`]): the driver's probe has checked that libcuda exports it, so no call here can make
//! cudarc panic on a missing symbol. [`RawCuda::new`] runs that probe first, so without a GPU it
//! returns `Unavailable` and makes no cudarc call.

use std::ffi::{CString, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{
    self, CUDA_KERNEL_NODE_PARAMS_v2, CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec,
    CUgraphNode, CUmemoryPool, CUmodule, CUstream,
};
use driver_cuda::error::check;
use hal::driver::Driver;
use hal::{Buffer, BufferParams, Device, Error, ExternalMemory, Result};

use crate::workloads::TOUCH_PTX;

/// The driver-API functions this module calls (each is in `driver_cuda::loader::REQUIRED_SYMBOLS`;
/// a test checks it).
pub const SYMBOLS: &[&str] = &[
    "cuDeviceGet",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuDeviceGetDefaultMemPool",
    "cuModuleLoadDataEx",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemAllocFromPoolAsync",
    "cuMemFreeAsync",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuLaunchKernel",
    "cuGraphCreate",
    "cuGraphAddKernelNode_v2",
    "cuGraphInstantiateWithFlags",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
];

/// An instantiated graph of `kernels` dependent `touch` kernels.
struct Graph {
    kernels: usize,
    graph: CUgraph,
    exec: CUgraphExec,
}

/// The objects the baselines reuse: the device's primary context (retained), the `touch` kernel, a
/// 4 KiB device buffer it writes, non-blocking streams with one event each, the device's default
/// memory pool (the one `queue_alloca` uses), and graphs of dependent `touch` kernels.
///
/// Not `Send`: use it on the thread that created it (it binds the context there).
pub struct RawCuda {
    device: CUdevice,
    context: CUcontext,
    module: CUmodule,
    touch: CUfunction,
    data: CUdeviceptr,
    pool: CUmemoryPool,
    streams: Vec<CUstream>,
    events: Vec<CUevent>,
    graphs: Vec<Graph>,
    /// One 1-kernel graph per thread of [`threaded_graph_chains`](RawCuda::threaded_graph_chains)
    /// (owned by `graphs`): launches of one graph are ordered behind each other, on any stream.
    thread_graphs: Vec<CUgraphExec>,
    /// Imports of `data` into HAL devices ([`share_data`](RawCuda::share_data)) not yet released:
    /// `data` is freed only once none is left.
    data_imports: Arc<AtomicUsize>,
}

/// Bytes of the memory the raw kernels write (word 0).
const DATA_BYTES: usize = 4096;

const DISABLE_TIMING: u32 = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
const NON_BLOCKING: u32 = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
const WAIT_DEFAULT: u32 = sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT as u32;

impl RawCuda {
    /// Sets up on GPU `ordinal` with `streams` streams (at least 2) and one graph of dependent
    /// `touch` kernels per entry of `graph_kernels`. `Unavailable` without CUDA.
    pub fn new(ordinal: usize, streams: usize, graph_kernels: &[usize]) -> Result<Self> {
        let probe = driver_cuda::CudaDriver::default();
        probe.probe()?;
        let mut device: CUdevice = 0;
        // SAFETY: the probe succeeded, so cuInit ran; the out-pointer is a live local.
        check(unsafe { sys::cuDeviceGet(&mut device, ordinal as i32) }, "cuDeviceGet")?;
        let mut context: CUcontext = std::ptr::null_mut();
        // SAFETY: `device` is a valid device handle; the out-pointer is a live local.
        check(unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) }, "cuDevicePrimaryCtxRetain")?;
        // From here on `Drop` releases whatever was created, also when a later step fails.
        let mut raw = RawCuda {
            device,
            context,
            module: std::ptr::null_mut(),
            touch: std::ptr::null_mut(),
            data: 0,
            pool: std::ptr::null_mut(),
            streams: Vec::new(),
            events: Vec::new(),
            graphs: Vec::new(),
            thread_graphs: Vec::new(),
            data_imports: Arc::new(AtomicUsize::new(0)),
        };
        raw.bind()?;
        let image = CString::new(TOUCH_PTX).map_err(|_| Error::internal("TOUCH_PTX contains a NUL byte"))?;
        // SAFETY: the context is current; `image` is NUL-terminated PTX that lives across the call;
        // no JIT options are passed (null arrays with a count of 0).
        let code = unsafe {
            sys::cuModuleLoadDataEx(
                &mut raw.module,
                image.as_ptr().cast(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        check(code, "cuModuleLoadDataEx")?;
        let name = CString::new("touch").map_err(|_| Error::internal("kernel name"))?;
        // SAFETY: the module is loaded in the current context; `name` is NUL-terminated.
        check(unsafe { sys::cuModuleGetFunction(&mut raw.touch, raw.module, name.as_ptr()) }, "cuModuleGetFunction")?;
        // SAFETY: the context is current; the out-pointer is a field of a live value.
        check(unsafe { sys::cuMemAlloc_v2(&mut raw.data, DATA_BYTES) }, "cuMemAlloc")?;
        // SAFETY: `device` is valid; the out-pointer is a field of a live value.
        check(unsafe { sys::cuDeviceGetDefaultMemPool(&mut raw.pool, device) }, "cuDeviceGetDefaultMemPool")?;
        for _ in 0..streams.max(2) {
            let mut stream: CUstream = std::ptr::null_mut();
            // SAFETY: the context is current; the out-pointer is a live local.
            check(unsafe { sys::cuStreamCreate(&mut stream, NON_BLOCKING) }, "cuStreamCreate")?;
            raw.streams.push(stream);
            let mut event: CUevent = std::ptr::null_mut();
            // SAFETY: as above.
            check(unsafe { sys::cuEventCreate(&mut event, DISABLE_TIMING) }, "cuEventCreate")?;
            raw.events.push(event);
        }
        for &kernels in graph_kernels {
            raw.add_graph(kernels)?;
        }
        Ok(raw)
    }

    /// The word its kernels write, as a buffer of `device` (a CUDA device of the same GPU): a HAL
    /// workload whose kernels write it, as the raw side's do, is timed over the same memory. A
    /// one-thread kernel's time moves with the page it writes (on an H200, a 100-kernel graph took
    /// 59.3 or 69.5 us by the 4 KiB page its kernels wrote, the same page always the same), so two
    /// sides writing memory of their own compare their pages as much as their submission paths.
    /// `data` is freed only after every such buffer is released.
    pub fn share_data(&self, device: &Device) -> Result<Buffer> {
        self.data_imports.fetch_add(1, Ordering::AcqRel);
        let imports = self.data_imports.clone();
        let memory = ExternalMemory::CudaDevicePointer { address: self.data, length: DATA_BYTES as u64 };
        // SAFETY: `data` stays allocated until every import's release has run (`Drop` frees it only
        // when `data_imports` is back to 0, and otherwise leaves it allocated). The raw side and the
        // HAL use it in turn, each waiting for its own work before the other starts.
        unsafe {
            device.import_external_memory(memory, BufferParams::device_local(), move || {
                imports.fetch_sub(1, Ordering::AcqRel);
            })
        }
    }

    /// Streams (and events) it has.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Makes the context current on this thread (outside the timed part of every method).
    fn bind(&self) -> Result<()> {
        // SAFETY: `context` is a retained primary context, alive while `self` is.
        check(unsafe { sys::cuCtxSetCurrent(self.context) }, "cuCtxSetCurrent")
    }

    /// Builds and instantiates an explicit graph of `kernels` `touch` nodes, each depending on the
    /// one before (the shape of the HAL's command buffer of dispatches separated by barriers).
    fn add_graph(&mut self, kernels: usize) -> Result<()> {
        let mut graph: CUgraph = std::ptr::null_mut();
        // SAFETY: the context is current; the out-pointer is a live local.
        check(unsafe { sys::cuGraphCreate(&mut graph, 0) }, "cuGraphCreate")?;
        // Owned by `self` from here, so `Drop` destroys it if a later step fails.
        self.graphs.push(Graph { kernels, graph, exec: std::ptr::null_mut() });
        let mut previous: CUgraphNode = std::ptr::null_mut();
        for i in 0..kernels {
            let (mut data, mut value) = (self.data, i as u64);
            let mut params = [(&mut data as *mut u64).cast::<c_void>(), (&mut value as *mut u64).cast::<c_void>()];
            let node_params = CUDA_KERNEL_NODE_PARAMS_v2 {
                func: self.touch,
                gridDimX: 1,
                gridDimY: 1,
                gridDimZ: 1,
                blockDimX: 1,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: 0,
                kernelParams: params.as_mut_ptr(),
                extra: std::ptr::null_mut(),
                kern: std::ptr::null_mut(),
                ctx: std::ptr::null_mut(),
            };
            let deps: &[CUgraphNode] = if i == 0 { &[] } else { std::slice::from_ref(&previous) };
            let mut node: CUgraphNode = std::ptr::null_mut();
            // SAFETY: the graph is live and `deps` are its nodes; `params` points at one 8-byte slot
            // per kernel parameter (the pointer, then the u32 constant in the low bytes, as the
            // HAL's dispatch ABI passes it), which CUDA copies during the call.
            let code =
                unsafe { sys::cuGraphAddKernelNode_v2(&mut node, graph, deps.as_ptr(), deps.len(), &node_params) };
            check(code, "cuGraphAddKernelNode")?;
            previous = node;
        }
        let mut exec: CUgraphExec = std::ptr::null_mut();
        // SAFETY: the graph is complete and live; the out-pointer is a live local.
        check(unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) }, "cuGraphInstantiate")?;
        if let Some(last) = self.graphs.last_mut() {
            last.exec = exec;
        }
        Ok(())
    }

    fn graph_exec(&self, kernels: usize) -> Result<CUgraphExec> {
        self.graphs
            .iter()
            .find(|g| g.kernels == kernels)
            .map(|g| g.exec)
            .ok_or_else(|| Error::invalid_argument(format!("raw CUDA baseline: no {kernels}-kernel graph was built")))
    }

    /// Enqueues `touch(data, value)` as one block of one thread on stream `s`.
    #[inline]
    fn launch(&self, s: usize, value: u32) -> Result<()> {
        let (mut data, mut value) = (self.data, u64::from(value));
        let mut params = [(&mut data as *mut u64).cast::<c_void>(), (&mut value as *mut u64).cast::<c_void>()];
        // SAFETY: the context is current (bound by the calling method); `touch` takes (u32*, u32) and
        // `params` points at live 8-byte slots holding them (the u32 in the low bytes); `data` is a
        // live 4 KiB allocation.
        let code = unsafe {
            sys::cuLaunchKernel(
                self.touch,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                self.streams[s],
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check(code, "cuLaunchKernel")
    }

    /// Records event `e` on stream `s`.
    #[inline]
    fn record(&self, e: usize, s: usize) -> Result<()> {
        // SAFETY: live event and stream of the current context.
        check(unsafe { sys::cuEventRecord(self.events[e], self.streams[s]) }, "cuEventRecord")
    }

    /// Makes stream `s` wait for the last recording of event `e`.
    #[inline]
    fn wait(&self, s: usize, e: usize) -> Result<()> {
        // SAFETY: live stream and event of the current context; `e` has been recorded.
        check(unsafe { sys::cuStreamWaitEvent(self.streams[s], self.events[e], WAIT_DEFAULT) }, "cuStreamWaitEvent")
    }

    /// Blocks until stream `s` has drained.
    #[inline]
    fn sync(&self, s: usize) -> Result<()> {
        // SAFETY: live stream of the current context.
        check(unsafe { sys::cuStreamSynchronize(self.streams[s]) }, "cuStreamSynchronize")
    }

    /// Binds the context, runs `body` under the clock, and returns its time.
    fn timed(&self, body: impl FnOnce() -> Result<()>) -> Result<Duration> {
        self.bind()?;
        let start = Instant::now();
        body()?;
        Ok(start.elapsed())
    }

    /// `cuEventRecord` per operation on one stream, then a stream synchronize (the raw cost of an
    /// empty dependent submission).
    pub fn record_chain(&self, ops: u64) -> Result<Duration> {
        self.timed(|| {
            for _ in 0..ops {
                self.record(0, 0)?;
            }
            self.sync(0)
        })
    }

    /// Launch + `cuEventRecord` per operation on one stream, then a stream synchronize
    /// ("launch+record", the baseline of a dependent chain of single-dispatch submissions).
    pub fn launch_record_chain(&self, ops: u64) -> Result<Duration> {
        self.timed(|| {
            for i in 0..ops {
                self.launch(0, i as u32)?;
                self.record(0, 0)?;
            }
            self.sync(0)
        })
    }

    /// Launches alone on one stream, then a stream synchronize (the baseline of independent
    /// submissions).
    pub fn launches(&self, ops: u64) -> Result<Duration> {
        self.timed(|| {
            for i in 0..ops {
                self.launch(0, i as u32)?;
            }
            self.sync(0)
        })
    }

    /// `threads` threads, each a dependent chain of `ops` launch + `cuEventRecord` (as
    /// [`launch_record_chain`](Self::launch_record_chain)) on its own stream, or with `shared` all
    /// on stream 0, then a synchronize of that stream: the time from the threads' common start to
    /// the last one's synchronize returning. Each thread binds the context before the start and
    /// records its own event.
    pub fn threaded_chains(&self, threads: usize, shared: bool, ops: u64) -> Result<Duration> {
        self.threaded(threads, shared, ops, |raw, _, stream, i| raw.launch(stream, i as u32))
    }

    /// Builds one 1-kernel graph per thread for [`threaded_graph_chains`](Self::threaded_graph_chains)
    /// (`threads` in all; call before sharing the baseline between threads).
    pub fn add_thread_graphs(&mut self, threads: usize) -> Result<()> {
        self.bind()?;
        while self.thread_graphs.len() < threads {
            self.add_graph(1)?;
            let exec = self.graphs.last().map(|g| g.exec).ok_or_else(|| Error::internal("graph missing"))?;
            self.thread_graphs.push(exec);
        }
        Ok(())
    }

    /// [`threaded_chains`](Self::threaded_chains) with each launch a `cuGraphLaunch` of the thread's
    /// own 1-kernel graph (how the HAL replays a reusable one-dispatch command buffer), then the
    /// record.
    pub fn threaded_graph_chains(&self, threads: usize, shared: bool, ops: u64) -> Result<Duration> {
        if threads > self.thread_graphs.len() {
            return Err(Error::invalid_argument(format!(
                "raw CUDA threaded graph chains: {threads} threads, {} graphs built",
                self.thread_graphs.len()
            )));
        }
        self.threaded(threads, shared, ops, |raw, t, stream, _| {
            // SAFETY: a live executable graph of the current context, launched by thread `t` only;
            // a live stream of the same context.
            check(unsafe { sys::cuGraphLaunch(raw.thread_graphs[t], raw.streams[stream]) }, "cuGraphLaunch")
        })
    }

    /// `threads` threads, each enqueuing `ops` times `step(raw, thread, stream, op)` and a record
    /// on its own stream (or all on stream 0 with `shared`), then synchronizing: the span from the
    /// first start to the last end.
    fn threaded(
        &self,
        threads: usize,
        shared: bool,
        ops: u64,
        step: impl Fn(&RawCuda, usize, usize, u64) -> Result<()> + Sync,
    ) -> Result<Duration> {
        if threads == 0 || threads > self.streams.len() {
            return Err(Error::invalid_argument(format!(
                "raw CUDA threaded chains: {threads} threads need as many streams and events (it has {})",
                self.streams.len()
            )));
        }
        let raw = Shared(self);
        crate::scaling::together(
            threads,
            |_| raw.get().bind(),
            |t, ()| {
                let raw = raw.get();
                let stream = if shared { 0 } else { t };
                for i in 0..ops {
                    step(raw, t, stream, i)?;
                    raw.record(t, stream)?;
                }
                raw.sync(stream)
            },
        )
    }

    /// A dependent chain alternating between two streams: launch, record, and the other stream
    /// waits on that event before its own launch (every hop crosses streams).
    pub fn ping_pong(&self, ops: u64) -> Result<Duration> {
        self.timed(|| {
            for i in 0..ops {
                let s = (i % 2) as usize;
                if i > 0 {
                    self.wait(s, 1 - s)?;
                }
                self.launch(s, i as u32)?;
                self.record(s, s)?;
            }
            self.sync(0)?;
            self.sync(1)
        })
    }

    /// A dependent chain alternating between this GPU's stream 0 and `peer`'s (another GPU, or the
    /// same one): launch, record, and the other GPU's stream waits on that event before its own
    /// launch. Each hop binds its GPU's context, as a runtime driving two GPUs from one thread does.
    pub fn cross_ping_pong(&self, peer: &RawCuda, ops: u64) -> Result<Duration> {
        let start = Instant::now();
        for i in 0..ops {
            let (me, other) = if i % 2 == 0 { (self, peer) } else { (peer, self) };
            me.bind()?;
            if i > 0 {
                // SAFETY: stream 0 of the current context and event 0 of the other GPU's context,
                // recorded by the previous hop; CUDA lets a stream wait on another context's event.
                check(
                    unsafe { sys::cuStreamWaitEvent(me.streams[0], other.events[0], WAIT_DEFAULT) },
                    "cuStreamWaitEvent",
                )?;
            }
            me.launch(0, i as u32)?;
            me.record(0, 0)?;
        }
        for raw in [self, peer] {
            raw.bind()?;
            raw.sync(0)?;
        }
        Ok(start.elapsed())
    }

    /// `rounds` of fan-out/fan-in over `consumers` extra streams: a producer launch and record on
    /// stream 0, each consumer stream waits on it, launches and records, and stream 0 waits on
    /// every consumer before the joiner's launch (the next round's producer follows it in order).
    pub fn fan_out_in(&self, consumers: usize, rounds: u64) -> Result<Duration> {
        if consumers == 0 || consumers >= self.streams.len() {
            return Err(Error::invalid_argument(format!(
                "raw CUDA fan-out: {consumers} consumers need as many streams besides stream 0 (it has {})",
                self.streams.len()
            )));
        }
        self.timed(|| {
            for r in 0..rounds {
                self.launch(0, r as u32)?;
                self.record(0, 0)?;
                for k in 1..=consumers {
                    self.wait(k, 0)?;
                    self.launch(k, r as u32)?;
                    self.record(k, k)?;
                }
                for k in 1..=consumers {
                    self.wait(0, k)?;
                }
                self.launch(0, r as u32)?;
            }
            self.sync(0)
        })
    }

    /// Launch + `cuStreamSynchronize`, `ops` times (the baseline of a host round trip).
    pub fn launch_sync(&self, ops: u64) -> Result<Duration> {
        self.timed(|| {
            for i in 0..ops {
                self.launch(0, i as u32)?;
                self.sync(0)?;
            }
            Ok(())
        })
    }

    /// `kernels` dependent launches on one stream + `cuStreamSynchronize`, `calls` times (the
    /// baseline of a call of `kernels` submissions and one host wait).
    pub fn launches_sync(&self, kernels: usize, calls: u64) -> Result<Duration> {
        self.timed(|| {
            for call in 0..calls {
                for k in 0..kernels {
                    self.launch(0, (call as u32).wrapping_add(k as u32))?;
                }
                self.sync(0)?;
            }
            Ok(())
        })
    }

    /// `cuGraphLaunch` of the `kernels`-kernel graph `ops` times back to back on one stream, then a
    /// stream synchronize (the baseline of a chain of executes of a multi-dispatch command buffer).
    pub fn graph_chain(&self, kernels: usize, ops: u64) -> Result<Duration> {
        let exec = self.graph_exec(kernels)?;
        self.timed(|| {
            for _ in 0..ops {
                // SAFETY: live executable graph and stream of the current context; launches of it
                // come from this thread only.
                check(unsafe { sys::cuGraphLaunch(exec, self.streams[0]) }, "cuGraphLaunch")?;
            }
            self.sync(0)
        })
    }

    /// `cuGraphLaunch` of the `kernels`-kernel graph + `cuEventRecord` per op on one stream, then a
    /// stream synchronize: launch + record when the launch is a graph, as the HAL replays a reusable
    /// one-dispatch command buffer.
    pub fn graph_record_chain(&self, kernels: usize, ops: u64) -> Result<Duration> {
        let exec = self.graph_exec(kernels)?;
        self.timed(|| {
            for _ in 0..ops {
                // SAFETY: as in `graph_chain`.
                check(unsafe { sys::cuGraphLaunch(exec, self.streams[0]) }, "cuGraphLaunch")?;
                self.record(0, 0)?;
            }
            self.sync(0)
        })
    }

    /// `cuGraphLaunch` of the `kernels`-kernel graph + `cuStreamSynchronize`, `ops` times.
    pub fn graph_sync(&self, kernels: usize, ops: u64) -> Result<Duration> {
        let exec = self.graph_exec(kernels)?;
        self.timed(|| {
            for _ in 0..ops {
                // SAFETY: as in `graph_chain`.
                check(unsafe { sys::cuGraphLaunch(exec, self.streams[0]) }, "cuGraphLaunch")?;
                self.sync(0)?;
            }
            Ok(())
        })
    }

    /// `cuMemAllocFromPoolAsync` from the device's default pool (what `cuMemAllocAsync` uses, and
    /// what `queue_alloca` uses) + `cuMemFreeAsync` of `size` bytes on one stream, `ops` pairs,
    /// then a stream synchronize.
    pub fn alloc_free_async(&self, size: usize, ops: u64) -> Result<Duration> {
        self.alloc_free_pairs(size, ops, false)
    }

    /// [`alloc_free_async`](Self::alloc_free_async) with a `cuEventRecord` after each operation: the
    /// least a runtime whose every stream-ordered operation signals a timeline semaphore must issue
    /// (one event per signal), so the bound under any `queue_alloca` + `queue_dealloca` pair.
    pub fn alloc_free_async_recorded(&self, size: usize, ops: u64) -> Result<Duration> {
        self.alloc_free_pairs(size, ops, true)
    }

    /// `ops` stream-ordered alloc + free pairs on stream 0, each operation followed by a record when
    /// `record` is set, then a stream synchronize.
    fn alloc_free_pairs(&self, size: usize, ops: u64, record: bool) -> Result<Duration> {
        self.timed(|| {
            for _ in 0..ops {
                let mut ptr: CUdeviceptr = 0;
                // SAFETY: live pool and stream of the current context; the out-pointer is a live local.
                let code = unsafe { sys::cuMemAllocFromPoolAsync(&mut ptr, size, self.pool, self.streams[0]) };
                check(code, "cuMemAllocFromPoolAsync")?;
                if record {
                    self.record(0, 0)?;
                }
                // SAFETY: `ptr` was just allocated in stream order on this stream and is not used again.
                check(unsafe { sys::cuMemFreeAsync(ptr, self.streams[0]) }, "cuMemFreeAsync")?;
                if record {
                    self.record(1, 0)?;
                }
            }
            self.sync(0)
        })
    }
}

/// A [`RawCuda`] lent to the threads of [`RawCuda::threaded_chains`].
struct Shared<'a>(&'a RawCuda);

// SAFETY: the handles are plain CUDA driver handles, which the driver API lets any thread use once
// it has made their context current (each thread binds it first); the threads only launch, record
// their own event and synchronize, all thread-safe driver calls, and `self` outlives them (scoped).
unsafe impl Sync for Shared<'_> {}

impl<'a> Shared<'a> {
    /// The baseline lent (a method, so that closures capture the whole `Shared`, which is `Sync`,
    /// rather than its field).
    fn get(&self) -> &'a RawCuda {
        self.0
    }
}

impl RawCuda {
    /// Whether every HAL import of `data` has been released, waiting up to a second for the last
    /// ones (a release runs once the HAL's queued uses of the buffer are done).
    fn data_released(&self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.data_imports.load(Ordering::Acquire) != 0 {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

impl Drop for RawCuda {
    fn drop(&mut self) {
        // Teardown errors are ignored: nothing can be done about them here, and a faulted context
        // returns its sticky error from every call.
        if self.bind().is_err() {
            return;
        }
        // SAFETY (this block): every handle below was created by `new` in this context and is
        // destroyed once; the streams are drained first, so no work uses them any more.
        unsafe {
            for &stream in &self.streams {
                sys::cuStreamSynchronize(stream);
            }
            for graph in &self.graphs {
                if !graph.exec.is_null() {
                    sys::cuGraphExecDestroy(graph.exec);
                }
                sys::cuGraphDestroy(graph.graph);
            }
            for &event in &self.events {
                sys::cuEventDestroy_v2(event);
            }
            for &stream in &self.streams {
                sys::cuStreamDestroy_v2(stream);
            }
            if self.data != 0 && self.data_released() {
                sys::cuMemFree_v2(self.data);
            }
            if !self.module.is_null() {
                sys::cuModuleUnload(self.module);
            }
            sys::cuDevicePrimaryCtxRelease_v2(self.device);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_symbol_is_checked_by_the_probe() {
        for symbol in SYMBOLS {
            assert!(
                driver_cuda::loader::REQUIRED_SYMBOLS.contains(symbol),
                "{symbol} is not in driver_cuda::loader::REQUIRED_SYMBOLS"
            );
        }
    }

    #[test]
    fn without_cuda_it_is_unavailable_not_a_panic() {
        match RawCuda::new(0, 2, &[1, 10]) {
            Ok(raw) => {
                // A GPU is here: the baselines must run.
                assert!(raw.launch_record_chain(10).is_ok());
                assert!(raw.graph_chain(10, 2).is_ok());
                assert!(raw.alloc_free_async(4096, 10).is_ok());
                assert!(raw.threaded_chains(2, false, 10).is_ok());
                assert!(raw.threaded_chains(2, true, 10).is_ok());
                assert!(raw.threaded_chains(3, false, 10).is_err(), "3 threads, 2 streams");
            }
            Err(e) => {
                println!("CUDA not available ({e}); raw baselines NOT run");
                assert_eq!(e.code(), hal::StatusCode::Unavailable);
            }
        }
    }

    #[test]
    #[ignore = "needs a CUDA GPU: on one, run with --include-ignored"]
    fn a_shared_word_is_the_one_the_raw_kernels_write_and_is_freed_after_its_release() {
        let raw = RawCuda::new(0, 2, &[]).expect("a CUDA GPU");
        let device = driver_cuda::create_device(0).expect("the GPU the raw side found");
        let shared = raw.share_data(&device).expect("import of the raw word");
        assert_eq!(shared.size(), DATA_BYTES as u64);
        assert_eq!(raw.data_imports.load(Ordering::Acquire), 1);
        // The raw side's last launch writes 6 to word 0; the HAL reads it through its buffer.
        raw.launches(7).expect("raw launches");
        let read = device.queue(0).and_then(|q| q.read(&[], &shared, 0, 4, &[])).expect("read");
        let bytes = read.wait(hal::Timeout::Infinite).expect("read back");
        assert_eq!(u32::from_ne_bytes(bytes[..4].try_into().expect("4 bytes")), 6);
        drop(shared);
        assert!(raw.data_released(), "the import was never released");
    }
}
