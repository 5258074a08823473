//! Channels and collectives: ranks of one group (devices in this process or in others) reduce,
//! gather, scatter and exchange buffers as queue operations, ordered by semaphores like any other.

use hal::{Channel, ChannelId, CollectiveArgs, CollectiveOp, Device, ElementType, Error, Queue, ReduceOp, Result};

use crate::handle::{self, check_out, get, store, thal_channel_t, thal_device_t, thal_queue_t, write_value};
use crate::queue::{buffer_binding, thal_buffer_binding_t};
use crate::semaphore::{semaphore_list, thal_semaphore_list_t};
use crate::status::{guard, thal_status_t};

/// Bytes in a channel id.
pub const THAL_CHANNEL_ID_LENGTH: usize = 128;

/// The id every rank of one channel is created with: rank 0 makes it, the embedder passes the bytes
/// to the other ranks by any means it has.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct thal_channel_id_t {
    /// The id's bytes.
    pub bytes: [u8; THAL_CHANNEL_ID_LENGTH],
}

/// Every rank's `recv` (count) becomes the reduction of every rank's `send` (count).
pub const THAL_COLLECTIVE_ALL_REDUCE: u32 = 0;
/// Every rank's `recv` (count) becomes rank `root`'s `send` (only the root passes one).
pub const THAL_COLLECTIVE_BROADCAST: u32 = 1;
/// Rank `root`'s `recv` (count) becomes the reduction of every rank's `send` (count).
pub const THAL_COLLECTIVE_REDUCE: u32 = 2;
/// Every rank's `recv` (count x ranks) becomes every rank's `send` (count), in rank order.
pub const THAL_COLLECTIVE_ALL_GATHER: u32 = 3;
/// Rank r's `recv` (count) becomes the reduction of block r of every rank's `send` (count x ranks).
pub const THAL_COLLECTIVE_REDUCE_SCATTER: u32 = 4;
/// Block j of rank i's `recv` (count x ranks) becomes block i of rank j's `send`.
pub const THAL_COLLECTIVE_ALL_TO_ALL: u32 = 5;
/// `send` (count) goes to rank `peer`, which receives it with a matching `THAL_COLLECTIVE_RECV`.
pub const THAL_COLLECTIVE_SEND: u32 = 6;
/// `recv` (count) takes what rank `peer` sends.
pub const THAL_COLLECTIVE_RECV: u32 = 7;
/// No data: completes once every rank reached it.
pub const THAL_COLLECTIVE_BARRIER: u32 = 8;

/// `a + b`.
pub const THAL_REDUCE_SUM: u32 = 0;
/// `a * b`.
pub const THAL_REDUCE_PROD: u32 = 1;
/// The smaller.
pub const THAL_REDUCE_MIN: u32 = 2;
/// The larger.
pub const THAL_REDUCE_MAX: u32 = 3;
/// The sum divided by the rank count (floating-point types only).
pub const THAL_REDUCE_AVG: u32 = 4;

/// `int8_t`.
pub const THAL_ELEMENT_TYPE_I8: u32 = 0;
/// `uint8_t`.
pub const THAL_ELEMENT_TYPE_U8: u32 = 1;
/// `int32_t`.
pub const THAL_ELEMENT_TYPE_I32: u32 = 2;
/// `uint32_t`.
pub const THAL_ELEMENT_TYPE_U32: u32 = 3;
/// `int64_t`.
pub const THAL_ELEMENT_TYPE_I64: u32 = 4;
/// `uint64_t`.
pub const THAL_ELEMENT_TYPE_U64: u32 = 5;
/// IEEE half precision.
pub const THAL_ELEMENT_TYPE_F16: u32 = 6;
/// bfloat16.
pub const THAL_ELEMENT_TYPE_BF16: u32 = 7;
/// `float`.
pub const THAL_ELEMENT_TYPE_F32: u32 = 8;
/// `double`.
pub const THAL_ELEMENT_TYPE_F64: u32 = 9;

/// One collective. Versioned: set `struct_size` to `sizeof(thal_collective_args_t)`.
#[repr(C)]
pub struct thal_collective_args_t {
    /// `sizeof(thal_collective_args_t)` as the caller was compiled.
    pub struct_size: usize,
    /// `THAL_COLLECTIVE_*`.
    pub op: u32,
    /// `THAL_REDUCE_*`, for all-reduce, reduce and reduce-scatter.
    pub reduce: u32,
    /// The root rank (broadcast, reduce) or the peer rank (send, recv); ignored otherwise.
    pub rank: usize,
    /// `THAL_ELEMENT_TYPE_*`.
    pub element_type: u32,
    /// Elements per rank (see `THAL_COLLECTIVE_*`).
    pub count: u64,
    /// What this rank contributes; `buffer` NULL for none.
    pub send: thal_buffer_binding_t,
    /// Where this rank's result goes (may be `send`'s range: in place); `buffer` NULL for none.
    pub recv: thal_buffer_binding_t,
}

fn reduce_op(value: u32) -> Result<ReduceOp> {
    Ok(match value {
        THAL_REDUCE_SUM => ReduceOp::Sum,
        THAL_REDUCE_PROD => ReduceOp::Prod,
        THAL_REDUCE_MIN => ReduceOp::Min,
        THAL_REDUCE_MAX => ReduceOp::Max,
        THAL_REDUCE_AVG => ReduceOp::Avg,
        other => return Err(Error::invalid_argument(format!("args.reduce {other}: not a THAL_REDUCE"))),
    })
}

fn element_type(value: u32) -> Result<ElementType> {
    // `THAL_ELEMENT_TYPE_*` are the positions in `ElementType::ALL`.
    ElementType::ALL
        .get(value as usize)
        .copied()
        .ok_or_else(|| Error::invalid_argument(format!("args.element_type {value}: not a THAL_ELEMENT_TYPE")))
}

/// The HAL form of the caller's collective.
///
/// # Safety
/// `args` is NULL or a valid versioned struct whose non-NULL buffers are handles the caller holds.
unsafe fn collective_args(args: *const thal_collective_args_t) -> Result<CollectiveArgs> {
    // SAFETY: the caller's contract.
    let args = unsafe { crate::params::versioned(args, "args", "thal_collective_args_t") }?;
    let op = match args.op {
        THAL_COLLECTIVE_ALL_REDUCE => CollectiveOp::AllReduce(reduce_op(args.reduce)?),
        THAL_COLLECTIVE_BROADCAST => CollectiveOp::Broadcast { root: args.rank },
        THAL_COLLECTIVE_REDUCE => CollectiveOp::Reduce { op: reduce_op(args.reduce)?, root: args.rank },
        THAL_COLLECTIVE_ALL_GATHER => CollectiveOp::AllGather,
        THAL_COLLECTIVE_REDUCE_SCATTER => CollectiveOp::ReduceScatter(reduce_op(args.reduce)?),
        THAL_COLLECTIVE_ALL_TO_ALL => CollectiveOp::AllToAll,
        THAL_COLLECTIVE_SEND => CollectiveOp::Send { peer: args.rank },
        THAL_COLLECTIVE_RECV => CollectiveOp::Recv { peer: args.rank },
        THAL_COLLECTIVE_BARRIER => CollectiveOp::Barrier,
        other => return Err(Error::invalid_argument(format!("args.op {other}: not a THAL_COLLECTIVE"))),
    };
    let mut collective = CollectiveArgs::new(op, element_type(args.element_type)?, args.count);
    if !args.send.buffer.is_null() {
        collective = collective.send_range(buffer_binding(&args.send, "args.send.buffer")?);
    }
    if !args.recv.buffer.is_null() {
        collective = collective.recv_range(buffer_binding(&args.recv, "args.recv.buffer")?);
    }
    Ok(collective)
}

/// Makes a new channel id, of which `device`'s rank will be 0, into `*id`. `UNIMPLEMENTED` for a
/// driver without collectives; cuda: `UNAVAILABLE` when NCCL cannot be loaded.
///
/// # Safety
/// `device` is a handle the caller holds; `id` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_device_create_channel_id(
    device: *mut thal_device_t,
    id: *mut thal_channel_id_t,
) -> thal_status_t {
    guard("thal_device_create_channel_id", || {
        // SAFETY: the caller's contract.
        unsafe {
            let made = get::<Device>(device, "device")?.create_channel_id()?;
            write_value(id, "id", thal_channel_id_t { bytes: *made.as_bytes() })
        }
    })
}

/// Makes `device`'s end of channel `id`, as rank `rank` of `count`, into `*out`. `INVALID_ARGUMENT`
/// for `count` 0 or `rank >= count`; the driver refuses a rank taken twice or a count that differs
/// from the other ranks'. Releasing a rank's last handle (or its device) fails the collectives the
/// others wait for it in with `UNAVAILABLE`.
///
/// # Safety
/// `device` is a handle the caller holds; `id` is readable; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_channel_create(
    device: *mut thal_device_t,
    id: *const thal_channel_id_t,
    rank: usize,
    count: usize,
    out: *mut *mut thal_channel_t,
) -> thal_status_t {
    guard("thal_channel_create", || {
        // SAFETY: the caller's contract.
        unsafe {
            check_out(out, "out")?;
            let id = id.as_ref().ok_or_else(|| Error::invalid_argument("argument 'id': a NULL thal_channel_id_t"))?;
            let channel =
                get::<Device>(device, "device")?.create_channel(&ChannelId::from_bytes(&id.bytes)?, rank, count)?;
            store(out, channel)?;
        }
        Ok(())
    })
}

/// Runs a collective on `channel` (made on `queue`'s device) in queue order once `waits` are
/// reached; `signals` are signalled when every rank's part is done. Every rank must submit the
/// collectives of a channel in the same order. If one rank's part cannot run, the collective fails
/// on every rank with a status naming it. Arguments that do not fit the operation are refused here
/// (`INVALID_ARGUMENT`, `OUT_OF_RANGE`) and nothing is signalled.
///
/// # Safety
/// `queue` and `channel` are handles the caller holds; `args` is a valid versioned struct; lists
/// are NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_queue_collective(
    queue: *mut thal_queue_t,
    waits: *const thal_semaphore_list_t,
    channel: *mut thal_channel_t,
    args: *const thal_collective_args_t,
    signals: *const thal_semaphore_list_t,
) -> thal_status_t {
    guard("thal_queue_collective", || {
        // SAFETY: the caller's contract.
        unsafe {
            get::<Queue>(queue, "queue")?.collective(
                &semaphore_list(waits, "waits")?,
                &*get::<Channel>(channel, "channel")?,
                collective_args(args)?,
                &semaphore_list(signals, "signals")?,
            )
        }
    })
}

/// Writes `channel`'s rank and rank count to `*rank` and `*count`.
///
/// # Safety
/// `channel` is a handle the caller holds; `rank` and `count` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_channel_rank(
    channel: *mut thal_channel_t,
    rank: *mut usize,
    count: *mut usize,
) -> thal_status_t {
    guard("thal_channel_rank", || {
        // SAFETY: the caller's contract.
        unsafe {
            let channel = get::<Channel>(channel, "channel")?;
            write_value(rank, "rank", channel.rank())?;
            write_value(count, "count", channel.count())
        }
    })
}

/// Adds a reference to `channel`.
///
/// # Safety
/// `channel` is a handle the caller holds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_channel_retain(channel: *mut thal_channel_t) -> thal_status_t {
    guard("thal_channel_retain", || handle::retain::<Channel>(channel, "channel"))
}

/// Drops a reference to `channel`; the last one leaves the channel (see `thal_channel_create`).
/// NULL is allowed.
///
/// # Safety
/// `channel` is NULL or a handle the caller holds and gives up.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn thal_channel_release(channel: *mut thal_channel_t) -> thal_status_t {
    if channel.is_null() {
        return std::ptr::null_mut();
    }
    guard("thal_channel_release", || handle::release::<Channel>(channel, "channel"))
}
