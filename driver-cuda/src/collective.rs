//! Collectives through NCCL, loaded at run time (`libnccl.so.2`, through cudarc's `nccl`
//! bindings): a channel is an NCCL communicator, and each collective is enqueued on the queue's
//! stream like any other work, so semaphores order it with everything else.
//!
//! NCCL is optional: [`probe`] opens the library once and checks every symbol this file calls
//! (cudarc panics on a missing library or symbol); without it the device answers
//! `create_channel_id` and `create_channel` with `Unavailable` and the reason.
//!
//! What NCCL imposes: creating a channel blocks until every rank has called it (each rank from its
//! own thread or process); one rank per GPU; every rank enqueues the collectives of a channel in the
//! same order. All-to-all is a group of sends and receives (`ncclAlltoAll` is newer than 2.28), and
//! a barrier is a one-element all-reduce.
//!
//! A collective that will not run on one rank (its wait failed) cannot be withdrawn from the others,
//! whose kernels wait for it on the GPU. So every communicator of that channel in this process is
//! aborted (`ncclCommAbort` makes kernels in flight return): their collectives in flight and every
//! later one fail with the abandoning rank's status, and the channel is dead (make a new one).
//! Ranks in other processes are not reached this way: they wait until their own process aborts
//! (NCCL's own timeouts; see docs/embedding.md).
//!
//! A rank *leaves* when its last channel handle drops or its device drops: it can never enqueue
//! again. The process remembers how many collectives it had enqueued; a peer whose collectives go
//! past that number is aborted (its surplus would wait on the GPU for ever), and a peer's later
//! collective past it fails at enqueue, both with `Unavailable` naming the rank that left.
//!
//! NCCL 2.22 and later connect ranks lazily by default: the first collective of each kind blocks
//! its enqueueing thread until every peer has enqueued it too. A runtime that drives every device
//! from one thread would then deadlock on its first collective, and an abandoned first collective
//! would leave its peers blocked inside NCCL, where no abort reaches them (a communicator is used by
//! one thread at a time). So the driver connects eagerly: unless the process set
//! `NCCL_RUNTIME_CONNECT` itself, it sets it to `0` before NCCL is loaded, and NCCL connects every
//! rank when the channel is made. [`connects_lazily`] says whether the process chose otherwise (a
//! channel of several ranks made then logs a warning once).

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use hal::driver::lock;
use hal::driver::{AbandonFn, ChannelBackend, CollectiveCall};
use hal::{ChannelId, CollectiveOp, DeviceId, ElementType, Error, ReduceOp, Result};

use crate::memory::{CudaMemory, MemoryCounter, resolve_address};
use crate::queue_stream::CudaStream;
use crate::sys::context::{Bound, Context};
use crate::sys::result::{self, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId};

/// Every NCCL function this file calls (the probe checks each is exported).
const SYMBOLS: &[&str] = &[
    "ncclGetVersion",
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclGetErrorString",
    "ncclAllReduce",
    "ncclBroadcast",
    "ncclReduce",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclSend",
    "ncclRecv",
    "ncclGroupStart",
    "ncclGroupEnd",
];

/// `Ok(version)` (e.g. 22805) when NCCL can be used, else `Unavailable` with the reason. Probed once.
pub fn probe() -> Result<i32> {
    static PROBE: OnceLock<Result<i32>> = OnceLock::new();
    PROBE.get_or_init(probe_uncached).clone()
}

fn probe_uncached() -> Result<i32> {
    if std::env::var_os(RUNTIME_CONNECT).is_none() {
        // SAFETY: NCCL has no other way to be told to connect when a channel is made; this runs
        // once, before NCCL is loaded and reads its settings. Rust's own environment accesses are
        // serialised with it; a C library that reads the environment on another thread at this very
        // moment is the remaining risk, which an embedder avoids by setting the variable itself.
        unsafe { std::env::set_var(RUNTIME_CONNECT, "0") };
    }
    let candidates = cudarc::get_lib_name_candidates("nccl");
    // SAFETY: loading NCCL runs its initialisers, which need nothing but being loaded; the handle is
    // only used to look symbols up.
    let opened = candidates.iter().find_map(|name| unsafe { libloading::Library::new(name) }.ok().map(|l| (name, l)));
    let Some((name, library)) = opened else {
        return Err(Error::unavailable(format!("cuda: NCCL was not found (tried {})", candidates.join(", "))));
    };
    let missing: Vec<&str> = SYMBOLS
        .iter()
        .copied()
        // SAFETY: only the symbol's presence is checked; the pointer is never called through here.
        .filter(|symbol| unsafe { library.get::<*const ()>(symbol.as_bytes()) }.is_err())
        .collect();
    if !missing.is_empty() {
        return Err(Error::unavailable(format!("cuda: {name} lacks {}", missing.join(", "))));
    }
    // cudarc opens the same candidates; with one present its loader cannot fail.
    if !result::is_nccl_library_present() {
        return Err(Error::unavailable(format!("cuda: {name} opened but cudarc could not load it")));
    }
    let version = result::nccl_get_version()?;
    std::mem::forget(library);
    Ok(version)
}

/// A new NCCL unique id (rank 0 calls this).
pub fn unique_id() -> Result<ChannelId> {
    probe()?;
    let id = result::nccl_get_unique_id()?;
    let bytes: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
    ChannelId::from_bytes(&bytes)
}

/// The NCCL version from which connections are made at the first collective unless
/// `NCCL_RUNTIME_CONNECT=0` (2.22.0).
const LAZY_CONNECT_SINCE: i32 = 22200;

/// The environment variable that makes NCCL connect ranks when a channel is made (`0`).
const RUNTIME_CONNECT: &str = "NCCL_RUNTIME_CONNECT";

/// Whether NCCL connects ranks at their first collective rather than when the channel is made: only
/// when the process set `NCCL_RUNTIME_CONNECT` to something other than `0` itself (the driver sets
/// `0` otherwise, see the module docs) on NCCL 2.22 or later. Then a runtime that drives several
/// ranks from one thread deadlocks on their first collective, and an abandoned first collective
/// leaves the other ranks of this process blocked in NCCL. `false` without NCCL.
pub fn connects_lazily() -> bool {
    let version = probe();
    let eager = std::env::var(RUNTIME_CONNECT).is_ok_and(|v| v.trim() == "0");
    version.is_ok_and(|version| version >= LAZY_CONNECT_SINCE) && !eager
}

/// Connects rank `rank` of communicator `comm` to every other rank now, while every rank is in
/// [`NcclChannel::create`] (NCCL's init made them all meet there): NCCL connects a pair of ranks for
/// sends and receives at their first one, which blocks until the peer makes its matching call. A
/// thread that submits a send for one rank and then the matching receive for another, as a
/// runtime driving every GPU from one thread does, would block on the send for good. One grouped
/// exchange of a byte with every peer connects them all here.
fn connect_peers(
    bound: &Bound<'_>,
    context: &Arc<Context>,
    counter: &Arc<MemoryCounter>,
    comm: ncclComm_t,
    rank: usize,
    count: usize,
) -> Result<()> {
    if count < 2 {
        return Ok(());
    }
    // Byte `rank` is sent to every peer; byte `peer` receives from `peer`.
    let bytes = CudaMemory::device(context, counter, count as u64)?;
    let base = hal::driver::BufferBackend::device_address(&bytes) as usize;
    let stream = result::stream_create(bound, cudarc::driver::sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)?;
    let int8 = ncclDataType_t::ncclInt8;
    let exchanged = result::nccl_group_start(bound).and_then(|()| {
        let mut outcome = Ok(());
        for peer in (0..count).filter(|&peer| peer != rank) {
            let (to, from) = ((base + rank) as *const std::ffi::c_void, (base + peer) as *mut std::ffi::c_void);
            // SAFETY: `to` is one byte of `bytes`, which outlives the stream's work (synchronized
            // below); the communicator is this rank's, not yet shared.
            outcome =
                outcome.and_then(|()| unsafe { result::nccl_send(bound, to, 1, int8, peer as i32, comm, stream) });
            // SAFETY: `from` is byte `peer` of `bytes`, written by this receive alone; as above.
            outcome =
                outcome.and_then(|()| unsafe { result::nccl_recv(bound, from, 1, int8, peer as i32, comm, stream) });
        }
        // The group is closed whatever happened inside it.
        outcome.and(result::nccl_group_end(bound))
    });
    let drained = exchanged.and_then(|()| result::stream_synchronize(bound, stream));
    // SAFETY: the stream is this function's; destroyed once, after its work drained (or failed to
    // be issued), and `bytes` is dropped after it.
    let destroyed = unsafe { result::stream_destroy(bound, stream) };
    drained.and(destroyed)
}

/// One rank's NCCL communicator.
pub(crate) struct NcclChannel {
    comm: ncclComm_t,
    id: [u8; ChannelId::LEN],
    context: Arc<Context>,
    rank: usize,
    count: usize,
    /// The device whose queues enqueue on it (its drop makes this rank leave).
    device: DeviceId,
    /// Collectives enqueued (or about to be: counted under the registry's lock before NCCL is
    /// called), so a rank that leaves knows which of its peers' collectives can never complete.
    enqueued: AtomicU64,
    /// Set once this rank left (see the module docs).
    left: AtomicBool,
    /// Serialises enqueues from several queues and the abort (a communicator is not thread-safe).
    calls: Mutex<()>,
    /// Why, once the communicator was aborted. Read without the lock: retiring a collective must not
    /// wait for an enqueue in progress (the completion thread checks it for every collective).
    aborted: OnceLock<Error>,
    /// Four bytes for barriers.
    scratch: CudaMemory,
}

/// The communicators of this process by channel id, and the ranks that left them.
#[derive(Default)]
struct Live {
    channels: Vec<([u8; ChannelId::LEN], Weak<NcclChannel>)>,
    departures: Vec<Departure>,
}

/// A rank that left channel `id` after enqueueing `after` collectives, and the status it leaves.
struct Departure {
    id: [u8; ChannelId::LEN],
    after: u64,
    status: Error,
}

/// The communicators of this process: an abandoned collective aborts those of its channel, and a
/// rank that leaves those whose collectives go past its own.
fn live() -> std::sync::MutexGuard<'static, Live> {
    static LIVE: OnceLock<Mutex<Live>> = OnceLock::new();
    lock(LIVE.get_or_init(Mutex::default))
}

/// Device `device` is being dropped: each of its ranks leaves its channel (it can never enqueue
/// again), even where the embedder still holds the channel handle.
pub(crate) fn device_dropped(device: DeviceId) {
    // Upgraded under the lock, looked at and dropped outside it: dropping the last handle of a
    // channel leaves it, which takes the lock.
    let channels: Vec<Arc<NcclChannel>> = live().channels.iter().filter_map(|(_, weak)| weak.upgrade()).collect();
    for channel in channels.iter().filter(|channel| channel.device == device) {
        channel.leave();
    }
}

// SAFETY: the communicator is used only under `calls`' lock (enqueues, abort) or with exclusive
// access (drop); NCCL allows a communicator to move between threads.
unsafe impl Send for NcclChannel {}
// SAFETY: see `Send`.
unsafe impl Sync for NcclChannel {}

impl ChannelBackend for NcclChannel {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl NcclChannel {
    /// Joins communicator `id` as `rank` of `count` on `context`'s GPU: blocks until every rank
    /// joined (NCCL's `ncclCommInitRank`).
    pub(crate) fn create(
        device: DeviceId,
        context: &Arc<Context>,
        counter: &Arc<MemoryCounter>,
        id: &ChannelId,
        rank: usize,
        count: usize,
    ) -> Result<(Arc<dyn ChannelBackend>, Option<AbandonFn>)> {
        probe()?;
        let scratch = CudaMemory::device(context, counter, 4)?;
        // NCCL takes the GPU from the current context.
        let bound = context.bind()?;
        let mut unique = ncclUniqueId { internal: [0; 128] };
        for (slot, byte) in unique.internal.iter_mut().zip(id.as_bytes()) {
            *slot = *byte as std::ffi::c_char;
        }
        let ranks = i32::try_from(count).map_err(|_| Error::invalid_argument(format!("{count} ranks")))?;
        let comm = result::nccl_comm_init_rank(&bound, ranks, unique, rank as i32)?;
        if let Err(e) = connect_peers(&bound, context, counter, comm, rank, count) {
            // SAFETY: the communicator was just made and nothing else holds it; aborted once.
            let _ = unsafe { result::nccl_comm_abort(&bound, comm) };
            return Err(e.context(format!("rank {rank} of {count}: connecting to its peers")));
        }
        if count > 1 && connects_lazily() {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    "cuda: NCCL connects ranks at their first collective (the process set NCCL_RUNTIME_CONNECT, not \
                     to 0): ranks driven from one thread deadlock on their first collective, and one abandoned on \
                     one rank can leave the other ranks of this process blocked in NCCL; leave it unset or 0"
                )
            });
        }
        let channel = Arc::new(NcclChannel {
            comm,
            id: *id.as_bytes(),
            context: context.clone(),
            rank,
            count,
            device,
            enqueued: AtomicU64::new(0),
            left: AtomicBool::new(false),
            calls: Mutex::new(()),
            aborted: OnceLock::new(),
            scratch,
        });
        {
            let mut guard = live();
            let Live { channels, departures } = &mut *guard;
            channels.retain(|(_, weak)| weak.strong_count() > 0);
            channels.push((*id.as_bytes(), Arc::downgrade(&channel)));
            departures.retain(|d| channels.iter().any(|(id, _)| *id == d.id));
        }
        let abandon: AbandonFn = Arc::new(|call: &CollectiveCall, status: Error| {
            if let Some(channel) = call.channel.backend().as_any().downcast_ref::<NcclChannel>() {
                channel.abandoned(call, status);
            }
        });
        Ok((channel, Some(abandon)))
    }

    /// The channel behind `call`, if this driver made it.
    pub(crate) fn of(call: &CollectiveCall) -> Result<&NcclChannel> {
        call.channel
            .backend()
            .as_any()
            .downcast_ref::<NcclChannel>()
            .ok_or_else(|| Error::invalid_argument(format!("{call}: the channel was not made by the cuda driver")))
    }

    /// `call` will not run on this rank: aborts every communicator of the channel in this process,
    /// with `status` for their collectives.
    fn abandoned(&self, call: &CollectiveCall, status: Error) {
        let status = status.context(format!("rank {}'s {call} did not run", self.rank));
        tracing::error!(%status, "cuda: aborting the channel's NCCL communicators in this process");
        let peers: Vec<Arc<NcclChannel>> =
            live().channels.iter().filter(|(id, _)| *id == self.id).filter_map(|(_, weak)| weak.upgrade()).collect();
        for peer in peers {
            peer.abort(&status);
        }
    }

    /// This rank leaves (once): its peers in this process whose collectives go past the ones it
    /// enqueued are aborted, and their later ones past it fail at enqueue (see the module docs).
    fn leave(&self) {
        if self.count < 2 || self.left.swap(true, Ordering::AcqRel) || self.aborted.get().is_some() {
            return;
        }
        // Peers are upgraded under the lock and dropped outside it (see `device_dropped`).
        let (peers, after, status) = {
            let mut live = live();
            let after = self.enqueued.load(Ordering::Acquire);
            let status = Error::unavailable(format!(
                "rank {} left channel {:?} after its {after} collective(s) (its channel or its device was dropped)",
                self.rank,
                ChannelId::from_bytes(&self.id).map(|id| format!("{id:?}")).unwrap_or_default()
            ));
            live.departures.push(Departure { id: self.id, after, status: status.clone() });
            let peers: Vec<Arc<NcclChannel>> =
                live.channels.iter().filter(|(id, _)| *id == self.id).filter_map(|(_, weak)| weak.upgrade()).collect();
            (peers, after, status)
        };
        // A peer that counted a collective past `after` did so before the departure was recorded
        // (the lock orders them): that collective can never complete.
        for peer in peers.iter().filter(|p| !std::ptr::eq(&***p, self) && p.enqueued.load(Ordering::Acquire) > after) {
            tracing::error!(%status, rank = peer.rank, "cuda: aborting a rank whose collectives wait for a rank that left");
            peer.abort(&status);
        }
    }

    /// Counts the collective about to be enqueued, unless a rank of the channel left before it:
    /// then its status (the lock orders this against [`leave`](Self::leave)).
    fn reserve(&self) -> Result<()> {
        let live = live();
        let number = self.enqueued.load(Ordering::Acquire) + 1;
        if let Some(gone) = live.departures.iter().find(|d| d.id == self.id && d.after < number) {
            return Err(gone.status.clone());
        }
        self.enqueued.store(number, Ordering::Release);
        Ok(())
    }

    /// Aborts this communicator (once): kernels in flight return, and every collective of it fails
    /// with `status` from now on (see [`failure`](Self::failure)).
    fn abort(&self, status: &Error) {
        let _calls = lock(&self.calls);
        // Set before the abort, so a collective seen complete while this is unset ran to its end.
        if self.aborted.set(status.clone()).is_ok() {
            let aborted = self.context.bind().and_then(|bound| {
                // SAFETY: the communicator is live and aborted once (`aborted` was unset), under the
                // lock (no enqueue runs); `Drop` does not destroy an aborted one.
                unsafe { result::nccl_comm_abort(&bound, self.comm) }
            });
            if let Err(e) = aborted {
                tracing::warn!(%e, "cuda: aborting an NCCL communicator failed");
            }
        }
    }

    /// Why this channel's collectives fail, once its communicator was aborted (a completed
    /// collective of an aborted communicator may have returned early, so it fails too).
    pub(crate) fn failure(&self) -> Option<Error> {
        self.aborted.get().cloned()
    }

    /// Enqueues `call` on `stream`.
    pub(crate) fn enqueue(&self, bound: &Bound<'_>, stream: &CudaStream, call: &CollectiveCall) -> Result<()> {
        let _calls = lock(&self.calls);
        if let Some(status) = self.aborted.get() {
            return Err(status.context(format!("{call}: the channel was aborted")));
        }
        self.reserve().map_err(|status| status.context(format!("{call}")))?;
        call.settle();
        let args = &call.args;
        let (n, element) = (args.count as usize, args.element);
        let size = element.size();
        let (send_elements, recv_elements) = args.elements(self.rank, self.count);
        let address = |binding: &Option<hal::BufferBinding>, elements: Option<u64>| -> Result<*mut std::ffi::c_void> {
            match (binding, elements) {
                (Some(b), Some(e)) => Ok(resolve_address(&b.buffer, b.offset, e * size)? as *mut std::ffi::c_void),
                _ => Ok(std::ptr::null_mut()),
            }
        };
        let send = address(&args.send, send_elements)?;
        let recv = address(&args.recv, recv_elements)?;
        let (comm, raw) = (self.comm, stream.raw());
        let dtype = data_type(element);
        // Each `unsafe` below carries the result layer's contract for collectives: the communicator
        // is live and used under `calls`' lock, the stream is this queue's (of the bound context),
        // and `send`/`recv` address the element counts NCCL uses on this rank (checked by the HAL,
        // resolved above) in memory the collective's buffers keep alive until it retires.
        match args.op {
            // SAFETY: `send` and `recv` hold `n` elements each; see the contract above.
            CollectiveOp::AllReduce(op) => unsafe {
                result::nccl_all_reduce(bound, send, recv, n, dtype, red_op(op), comm, raw)
            },
            CollectiveOp::Broadcast { root } => {
                let send = if send.is_null() { recv } else { send };
                // SAFETY: `recv` (and `send` on the root) hold `n` elements; see the contract above.
                unsafe { result::nccl_broadcast(bound, send, recv, n, dtype, root as i32, comm, raw) }
            }
            CollectiveOp::Reduce { op, root } => {
                let recv = if recv.is_null() { send } else { recv };
                // SAFETY: `send` (and `recv` on the root) hold `n` elements; see the contract above.
                unsafe { result::nccl_reduce(bound, send, recv, n, dtype, red_op(op), root as i32, comm, raw) }
            }
            // SAFETY: `send` holds `n` elements, `recv` `n` per rank; see the contract above.
            CollectiveOp::AllGather => unsafe { result::nccl_all_gather(bound, send, recv, n, dtype, comm, raw) },
            // SAFETY: `send` holds `n` elements per rank, `recv` `n`; see the contract above.
            CollectiveOp::ReduceScatter(op) => unsafe {
                result::nccl_reduce_scatter(bound, send, recv, n, dtype, red_op(op), comm, raw)
            },
            CollectiveOp::AllToAll => {
                let block = n as u64 * size;
                result::nccl_group_start(bound)?;
                let mut outcome = Ok(());
                for peer in 0..self.count {
                    let offset = peer as u64 * block;
                    let (to, from) = (send.wrapping_byte_add(offset as usize), recv.wrapping_byte_add(offset as usize));
                    let peer = peer as i32;
                    // SAFETY: `to` is this peer's block of `n` elements in `send`; see the contract above.
                    outcome = outcome.and_then(|()| unsafe { result::nccl_send(bound, to, n, dtype, peer, comm, raw) });
                    // SAFETY: `from` is this peer's block of `n` elements in `recv`; see the contract above.
                    outcome =
                        outcome.and_then(|()| unsafe { result::nccl_recv(bound, from, n, dtype, peer, comm, raw) });
                }
                // The group is closed whatever happened inside it.
                outcome.and(result::nccl_group_end(bound))
            }
            // SAFETY: `send` holds `n` elements; see the contract above.
            CollectiveOp::Send { peer } => unsafe { result::nccl_send(bound, send, n, dtype, peer as i32, comm, raw) },
            // SAFETY: `recv` holds `n` elements; see the contract above.
            CollectiveOp::Recv { peer } => unsafe { result::nccl_recv(bound, recv, n, dtype, peer as i32, comm, raw) },
            CollectiveOp::Barrier => {
                let scratch = hal::driver::BufferBackend::device_address(&self.scratch) as *mut std::ffi::c_void;
                let (int32, sum) = (ncclDataType_t::ncclInt32, ncclRedOp_t::ncclSum);
                // SAFETY: the scratch word is this channel's own 4 bytes, alive as long as it is; see
                // the contract above.
                unsafe { result::nccl_all_reduce(bound, scratch, scratch, 1, int32, sum, comm, raw) }
                    .map_err(|e| e.context("barrier"))
            }
        }
        .map_err(|e| e.context(format!("{call}")))
    }
}

impl Drop for NcclChannel {
    fn drop(&mut self) {
        // Every collective of the channel holds it until it retired: nothing is in flight now.
        self.leave();
        let aborted = self.aborted.get().is_some();
        if !aborted {
            let destroyed = self.context.bind().and_then(|bound| {
                // SAFETY: destroyed once, here, not aborted, with nothing enqueued on it any more.
                unsafe { result::nccl_comm_destroy(&bound, self.comm) }
            });
            if let Err(e) = destroyed {
                tracing::warn!(%e, "cuda: destroying an NCCL communicator failed");
            }
        }
    }
}

fn data_type(element: ElementType) -> ncclDataType_t {
    use ncclDataType_t as T;
    match element {
        ElementType::I8 => T::ncclInt8,
        ElementType::U8 => T::ncclUint8,
        ElementType::I32 => T::ncclInt32,
        ElementType::U32 => T::ncclUint32,
        ElementType::I64 => T::ncclInt64,
        ElementType::U64 => T::ncclUint64,
        ElementType::F16 => T::ncclFloat16,
        ElementType::BF16 => T::ncclBfloat16,
        ElementType::F32 => T::ncclFloat32,
        ElementType::F64 => T::ncclFloat64,
    }
}

fn red_op(op: ReduceOp) -> ncclRedOp_t {
    use ncclRedOp_t as R;
    match op {
        ReduceOp::Sum => R::ncclSum,
        ReduceOp::Prod => R::ncclProd,
        ReduceOp::Min => R::ncclMin,
        ReduceOp::Max => R::ncclMax,
        ReduceOp::Avg => R::ncclAvg,
    }
}
