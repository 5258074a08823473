//! The options a cpu-sim device is built with ([`CpuSimOptions`]): its queues, workgroup runners and
//! memory limits.

/// How to build a cpu-sim device: start from [`Default`] and change what you need with the
/// `with_*` methods (new options will come as new methods, with defaults that keep today's device).
/// See the crate docs for an example.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CpuSimOptions {
    /// Queues, each with its own stream worker.
    pub queue_count: usize,
    /// Pool threads running a dispatch's workgroups beside the stream thread that runs it (0: one
    /// fewer than the available cores, at least one).
    pub workgroup_threads: usize,
    /// Largest single allocation in bytes.
    pub max_allocation_size: u64,
    /// Bytes all allocations of the device may hold at once.
    pub memory_limit: u64,
    /// Whether light work may run on the thread that submits it (see
    /// [`with_light_work_at_issue`](Self::with_light_work_at_issue)); off by default.
    pub light_work_at_issue: bool,
    /// Bytes of released transient buffers (`queue_dealloca`) kept for later allocas of the same
    /// size (see [`with_transient_cache`](Self::with_transient_cache)).
    pub transient_cache_bytes: u64,
}

impl Default for CpuSimOptions {
    /// 4 queues, one workgroup runner per core, allocations up to 4 GiB, 8 GiB in all, up to
    /// 256 MiB of released transient memory kept for reuse.
    fn default() -> Self {
        CpuSimOptions {
            queue_count: 4,
            workgroup_threads: 0,
            max_allocation_size: 4 << 30,
            memory_limit: 8 << 30,
            light_work_at_issue: false,
            transient_cache_bytes: 256 << 20,
        }
    }
}

impl CpuSimOptions {
    /// The same options with `count` queues (each a stream with its own worker thread).
    pub fn with_queue_count(mut self, count: usize) -> Self {
        self.queue_count = count;
        self
    }

    /// The same options with `threads` pool threads running workgroups beside the stream thread
    /// (0: one fewer than the available cores, at least one).
    pub fn with_workgroup_threads(mut self, threads: usize) -> Self {
        self.workgroup_threads = threads;
        self
    }

    /// The same options with allocations of at most `bytes` each (larger ones are
    /// `ResourceExhausted`).
    pub fn with_max_allocation_size(mut self, bytes: u64) -> Self {
        self.max_allocation_size = bytes;
        self
    }

    /// The same options with at most `bytes` held by all the device's allocations at once.
    pub fn with_memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// The same options keeping up to `bytes` of released transient memory for reuse (0: none). A
    /// `queue_alloca` of the size of a kept block takes it as it is, instead of zeroed memory from
    /// the system allocator (the stream thread runs the alloca while the runners wait: a program
    /// that allocates its intermediates every call pays for it every call). The kept bytes show as
    /// the device's `memory_kept`, outside its memory limit, and `Device::trim` gives them back.
    pub fn with_transient_cache(mut self, bytes: u64) -> Self {
        self.transient_cache_bytes = bytes;
        self
    }

    /// The same options with light work run on the submitting thread (`on`) or always on its
    /// queue's stream thread (`off`, the default). With it on, a submission whose queue has nothing
    /// left to run and which waits on nothing there runs at the call when it is estimated to take
    /// under 100 us (its entry points' last timed workgroups, the bytes it moves; small allocations,
    /// writes and reads): it is done, its signals applied, when the call returns, with no stream or
    /// completion thread woken. Only for programs whose kernels never wait on something the
    /// submitting thread does after the call (IREE's dispatches, for one): a kernel that spins on
    /// a flag that thread sets later would wait for it forever.
    pub fn with_light_work_at_issue(mut self, on: bool) -> Self {
        self.light_work_at_issue = on;
        self
    }
}
