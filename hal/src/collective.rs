//! Channels and collectives: ranks of one group (devices in this process or in others) reduce,
//! gather, scatter and exchange buffers as queue operations, ordered by semaphores like any other,
//! or as commands of a command buffer ([`CommandBuffer::collective`](crate::CommandBuffer::collective):
//! each execute takes its collectives' places on their channels when it is submitted).
//!
//! A channel is made on each rank's device from the same [`ChannelId`], its rank and the rank count.
//! Rank 0 makes the id ([`Device::create_channel_id`](crate::Device::create_channel_id)) and the
//! embedder passes it to the other ranks by any means it has (a file, the environment, its own
//! store): the HAL invents no bootstrap. Every rank must submit the collectives of one channel in
//! the same order (as with NCCL); each runs when its waits are reached on every rank.
//!
//! If one rank's collective cannot run (its wait failed, its device went away), that collective
//! fails on every rank with a status naming the rank, instead of leaving the others waiting. A rank
//! that leaves (its last [`Channel`] handle or its device dropped) fails the collectives the others
//! wait for it in, and every later one, with `Unavailable` naming it; a rank that has merely not
//! submitted yet is waited for.
//!
//! ```
//! use hal::{BufferParams, CollectiveArgs, CollectiveOp, ElementType, ReduceOp, SemaphoreValue as SV, Timeout};
//!
//! let devices = [driver_cpu_sim::create_device()?, driver_cpu_sim::create_device()?];
//! let id = devices[0].create_channel_id()?;
//! let mut done = Vec::new();
//! let mut buffers = Vec::new();
//! for (rank, device) in devices.iter().enumerate() {
//!     let channel = device.create_channel(&id, rank, 2)?;
//!     let buffer = device.allocate_buffer(BufferParams::host_visible(), 16)?;
//!     buffer.write_values(0, &[rank as f32 + 1.0; 4])?;
//!     let signal = device.create_semaphore(0)?;
//!     let args = CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::F32, 4)
//!         .send(&buffer)
//!         .recv(&buffer);
//!     device.queue(0)?.collective(&[], &channel, args, &[SV::new(&signal, 1)])?;
//!     done.push((signal, channel));
//!     buffers.push(buffer);
//! }
//! for (signal, _) in &done {
//!     signal.wait(1, Timeout::Infinite)?;
//! }
//! let mut sums = [0f32; 4];
//! buffers[1].read_values(0, &mut sums)?;
//! assert_eq!(sums, [3.0; 4]);
//! # Ok::<(), hal::Error>(())
//! ```

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::buffer::Buffer;
use crate::command_buffer::BufferBinding;
use crate::device::DeviceId;
use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{Mutex, lock};

/// The id every rank of one channel is created with (128 bytes, as NCCL's unique id).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ChannelId([u8; ChannelId::LEN]);

impl ChannelId {
    /// Bytes in an id.
    pub const LEN: usize = 128;

    /// An id from its bytes (`InvalidArgument` unless there are exactly [`LEN`](Self::LEN)).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let array: [u8; Self::LEN] = bytes.try_into().map_err(|_| {
            Error::invalid_argument(format!("a channel id is {} bytes, not {}", Self::LEN, bytes.len()))
        })?;
        Ok(ChannelId(array))
    }

    /// Its bytes.
    pub fn as_bytes(&self) -> &[u8; Self::LEN] {
        &self.0
    }

    /// Its bytes as 256 lowercase hex digits (for a file or an environment variable).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// An id from [`to_hex`](Self::to_hex)'s form (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<Self> {
        let text = text.trim();
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        };
        let bad = || Error::invalid_argument(format!("not a channel id ({} hex digits): {text:.40}", 2 * Self::LEN));
        if text.len() != 2 * Self::LEN {
            return Err(bad());
        }
        let mut bytes = [0u8; Self::LEN];
        for (i, pair) in text.as_bytes().chunks(2).enumerate() {
            bytes[i] = (digit(pair[0]).ok_or_else(bad)? << 4) | digit(pair[1]).ok_or_else(bad)?;
        }
        Ok(ChannelId(bytes))
    }
}

impl fmt::Debug for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChannelId({}..)", &self.to_hex()[..16])
    }
}

/// A channel's driver object.
pub trait ChannelBackend: Send + Sync + Any {
    /// For downcasting to the driver's type.
    fn as_any(&self) -> &dyn Any;
}

/// One rank's end of a channel, on one device. Cheap to clone.
#[derive(Clone)]
pub struct Channel {
    shared: Arc<ChannelShared>,
}

struct ChannelShared {
    device: DeviceId,
    rank: usize,
    count: usize,
    backend: Arc<dyn ChannelBackend>,
    /// What the driver does when a collective is dropped without having run.
    abandon: Option<AbandonFn>,
    /// Collectives submitted so far: each takes the next number, which pairs it with the same
    /// collective of the other ranks.
    next: AtomicU64,
    /// Per peer, the sends and receives exchanged with it so far (point-to-point operations pair
    /// by their own numbers: ranks that do not take part do not count them).
    next_with: Vec<AtomicU64>,
}

impl Channel {
    /// Wraps a driver's channel (what `DeviceBackend::create_channel` returned).
    pub(crate) fn wrap(
        device: DeviceId,
        rank: usize,
        count: usize,
        backend: Arc<dyn ChannelBackend>,
        abandon: Option<AbandonFn>,
    ) -> Self {
        let next_with = (0..count).map(|_| AtomicU64::new(0)).collect();
        let shared = ChannelShared { device, rank, count, backend, abandon, next: AtomicU64::new(0), next_with };
        Channel { shared: Arc::new(shared) }
    }

    /// Its rank.
    pub fn rank(&self) -> usize {
        self.shared.rank
    }

    /// How many ranks the channel has.
    pub fn count(&self) -> usize {
        self.shared.count
    }

    /// The device it was made on.
    pub fn device(&self) -> DeviceId {
        self.shared.device
    }

    /// The driver's object.
    pub fn backend(&self) -> &Arc<dyn ChannelBackend> {
        &self.shared.backend
    }

    /// The sequence number of the next collective `op` (taken by a submission): one counter for
    /// operations of every rank, one per peer for sends and receives.
    pub(crate) fn take_sequence(&self, op: &CollectiveOp) -> u64 {
        let counter = match op {
            CollectiveOp::Send { peer } | CollectiveOp::Recv { peer } => &self.shared.next_with[*peer],
            _ => &self.shared.next,
        };
        counter.fetch_add(1, Ordering::Relaxed)
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "channel rank {} of {}", self.shared.rank, self.shared.count)
    }
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// How values combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// `a + b`.
    Sum,
    /// `a * b`.
    Prod,
    /// The smaller.
    Min,
    /// The larger.
    Max,
    /// The sum divided by the rank count (floating-point types only).
    Avg,
}

impl ReduceOp {
    /// Every reduction, in declaration order (which only ever grows at the end).
    pub const ALL: [ReduceOp; 5] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg];
}

/// The element type of a collective's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElementType {
    /// `i8`.
    I8,
    /// `u8`.
    U8,
    /// `i32`.
    I32,
    /// `u32`.
    U32,
    /// `i64`.
    I64,
    /// `u64`.
    U64,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

impl ElementType {
    /// Every element type, in declaration order. The order is part of the API: the C API numbers
    /// the types by their position here, and it only ever grows at the end.
    pub const ALL: [ElementType; 10] = [
        ElementType::I8,
        ElementType::U8,
        ElementType::I32,
        ElementType::U32,
        ElementType::I64,
        ElementType::U64,
        ElementType::F16,
        ElementType::BF16,
        ElementType::F32,
        ElementType::F64,
    ];

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            ElementType::I8 | ElementType::U8 => 1,
            ElementType::F16 | ElementType::BF16 => 2,
            ElementType::I32 | ElementType::U32 | ElementType::F32 => 4,
            ElementType::I64 | ElementType::U64 | ElementType::F64 => 8,
        }
    }

    /// Whether it is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, ElementType::F16 | ElementType::BF16 | ElementType::F32 | ElementType::F64)
    }
}

/// What a collective does. `count` (in [`CollectiveArgs`]) is elements per rank, as in NCCL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectiveOp {
    /// Every rank's `recv` (count) becomes the reduction of every rank's `send` (count).
    AllReduce(ReduceOp),
    /// Every rank's `recv` (count) becomes `root`'s `send` (count; only the root passes one).
    Broadcast {
        /// The rank whose data is sent.
        root: usize,
    },
    /// `root`'s `recv` (count) becomes the reduction of every rank's `send` (count).
    Reduce {
        /// How values combine.
        op: ReduceOp,
        /// The rank that receives.
        root: usize,
    },
    /// Every rank's `recv` (count x ranks) becomes every rank's `send` (count), in rank order.
    AllGather,
    /// Rank r's `recv` (count) becomes the reduction of block r of every rank's `send` (count x
    /// ranks).
    ReduceScatter(ReduceOp),
    /// Block j of rank i's `recv` (count x ranks) becomes block i of rank j's `send`.
    AllToAll,
    /// `send` (count) goes to `peer`, which receives it with a matching `Recv`.
    Send {
        /// The receiving rank.
        peer: usize,
    },
    /// `recv` (count) takes what `peer` sends.
    Recv {
        /// The sending rank.
        peer: usize,
    },
    /// No data: completes once every rank reached it.
    Barrier,
}

impl CollectiveOp {
    /// Its name, for errors and traces.
    pub fn name(&self) -> &'static str {
        match self {
            CollectiveOp::AllReduce(_) => "all-reduce",
            CollectiveOp::Broadcast { .. } => "broadcast",
            CollectiveOp::Reduce { .. } => "reduce",
            CollectiveOp::AllGather => "all-gather",
            CollectiveOp::ReduceScatter(_) => "reduce-scatter",
            CollectiveOp::AllToAll => "all-to-all",
            CollectiveOp::Send { .. } => "send",
            CollectiveOp::Recv { .. } => "recv",
            CollectiveOp::Barrier => "barrier",
        }
    }
}

/// One collective's arguments: what, on which element type, how many elements per rank, and the
/// buffer ranges (`send` and `recv` may be the same range: in place).
#[derive(Clone, Debug)]
pub struct CollectiveArgs {
    /// What it does.
    pub op: CollectiveOp,
    /// The element type.
    pub element: ElementType,
    /// Elements per rank (see [`CollectiveOp`]).
    pub count: u64,
    /// What this rank contributes.
    pub send: Option<BufferBinding>,
    /// Where this rank's result goes.
    pub recv: Option<BufferBinding>,
}

impl CollectiveArgs {
    /// `op` over `count` elements of `element` per rank, with no buffers yet.
    pub fn new(op: CollectiveOp, element: ElementType, count: u64) -> Self {
        CollectiveArgs { op, element, count, send: None, recv: None }
    }

    /// Sends from the whole of `buffer`.
    pub fn send(mut self, buffer: &Buffer) -> Self {
        self.send = Some(BufferBinding::whole(buffer));
        self
    }

    /// Receives into the whole of `buffer`.
    pub fn recv(mut self, buffer: &Buffer) -> Self {
        self.recv = Some(BufferBinding::whole(buffer));
        self
    }

    /// Sends from `binding` (a range of a buffer).
    pub fn send_range(mut self, binding: BufferBinding) -> Self {
        self.send = Some(binding);
        self
    }

    /// Receives into `binding`.
    pub fn recv_range(mut self, binding: BufferBinding) -> Self {
        self.recv = Some(binding);
        self
    }

    /// Elements `send` and `recv` need on `rank` of `ranks` (`None`: that buffer is not used).
    pub fn elements(&self, rank: usize, ranks: usize) -> (Option<u64>, Option<u64>) {
        let (n, all) = (self.count, self.count.saturating_mul(ranks as u64));
        match self.op {
            CollectiveOp::AllReduce(_) => (Some(n), Some(n)),
            CollectiveOp::Broadcast { root } => ((rank == root).then_some(n), Some(n)),
            CollectiveOp::Reduce { root, .. } => (Some(n), (rank == root).then_some(n)),
            CollectiveOp::AllGather => (Some(n), Some(all)),
            CollectiveOp::ReduceScatter(_) => (Some(all), Some(n)),
            CollectiveOp::AllToAll => (Some(all), Some(all)),
            CollectiveOp::Send { .. } => (Some(n), None),
            CollectiveOp::Recv { .. } => (None, Some(n)),
            CollectiveOp::Barrier => (None, None),
        }
    }

    /// Checks the arguments for `channel` (`InvalidArgument` / `OutOfRange` naming what is wrong).
    pub(crate) fn check(&self, channel: &Channel) -> Result<()> {
        let (rank, ranks) = (channel.rank(), channel.count());
        let who = || format!("{} on {channel}", self.op.name());
        let peer = match self.op {
            CollectiveOp::Broadcast { root } | CollectiveOp::Reduce { root, .. } => Some(root),
            CollectiveOp::Send { peer } | CollectiveOp::Recv { peer } => Some(peer),
            _ => None,
        };
        if let Some(peer) = peer.filter(|&p| p >= ranks) {
            return Err(Error::out_of_range(format!("{}: rank {peer} does not exist", who())));
        }
        if matches!(self.op, CollectiveOp::Send { peer } | CollectiveOp::Recv { peer } if peer == rank) {
            return Err(Error::invalid_argument(format!("{}: a rank cannot send to itself", who())));
        }
        let reduce = match self.op {
            CollectiveOp::AllReduce(op) | CollectiveOp::ReduceScatter(op) | CollectiveOp::Reduce { op, .. } => Some(op),
            _ => None,
        };
        if reduce == Some(ReduceOp::Avg) && !self.element.is_float() {
            return Err(Error::invalid_argument(format!(
                "{}: avg needs a floating-point type, not {:?}",
                who(),
                self.element
            )));
        }
        let (send, recv) = self.elements(rank, ranks);
        for (name, needed, binding) in [("send", send, &self.send), ("recv", recv, &self.recv)] {
            let Some(elements) = needed else { continue };
            let bytes = elements.checked_mul(self.element.size()).ok_or_else(|| {
                Error::out_of_range(format!("{}: {elements} elements of {:?} overflow", who(), self.element))
            })?;
            let Some(binding) = binding else {
                return Err(Error::invalid_argument(format!("{}: needs a {name} buffer of {bytes} bytes", who())));
            };
            binding.buffer.check_range(binding.offset, binding.length)?;
            if binding.length < bytes {
                return Err(Error::out_of_range(format!(
                    "{}: the {name} range holds {} bytes, {bytes} needed",
                    who(),
                    binding.length
                )));
            }
        }
        Ok(())
    }
}

/// One submitted collective, as a driver runs it (`QueueOp::Collective`): the channel, the
/// arguments, and its sequence number on the channel. If it is dropped without having run (its
/// wait failed, the device went away), the driver's [`AbandonFn`] is told
/// ([`abandon`](CollectiveCall::abandon)), so the other ranks fail it instead of waiting.
pub struct CollectiveCall {
    /// The channel.
    pub channel: Channel,
    /// The arguments (checked).
    pub args: CollectiveArgs,
    /// Its number on the channel: the same collective has the same number on every rank (for a
    /// send or receive: on both ranks, counted per pair).
    pub sequence: u64,
    settled: AtomicBool,
    reason: Mutex<Option<Error>>,
    abandon: Option<AbandonFn>,
}

/// What a driver runs when a collective is dropped without having run: `(call, status)`.
pub type AbandonFn = Arc<dyn Fn(&CollectiveCall, Error) + Send + Sync>;

impl CollectiveCall {
    pub(crate) fn new(channel: Channel, args: CollectiveArgs) -> Self {
        let sequence = channel.take_sequence(&args.op);
        let abandon = channel.shared.abandon.clone();
        CollectiveCall { channel, args, sequence, settled: AtomicBool::new(false), reason: Mutex::new(None), abandon }
    }

    /// Marks it as run (or failed and reported by the driver itself): dropping it then tells no one.
    pub fn settle(&self) {
        self.settled.store(true, Ordering::Release);
    }

    /// Records why it will not run (the scheduler, failing it), for the status the other ranks get.
    pub fn will_not_run(&self, status: &Error) {
        lock(&self.reason).get_or_insert_with(|| status.clone());
    }

    /// Tells the channel now that it will not run, with `status` (once; later calls and the drop do
    /// nothing).
    pub fn abandon(&self, status: Error) {
        if self.settled.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(abandon) = &self.abandon {
            abandon(self, status);
        }
    }
}

impl Drop for CollectiveCall {
    fn drop(&mut self) {
        if self.settled.load(Ordering::Acquire) {
            return;
        }
        let status = lock(&self.reason)
            .take()
            .unwrap_or_else(|| Error::cancelled(format!("{}: dropped before it ran", self.args.op.name())));
        self.abandon(status);
    }
}

impl fmt::Display for CollectiveCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} #{} of {} elements on {}", self.args.op.name(), self.sequence, self.args.count, self.channel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_id_hex_round_trip_and_refusals() {
        let mut bytes = [0u8; ChannelId::LEN];
        bytes.iter_mut().enumerate().for_each(|(i, b)| *b = (i as u8).wrapping_mul(7));
        let id = ChannelId::from_bytes(&bytes).unwrap();
        let hex = id.to_hex();
        assert_eq!(hex.len(), 256);
        assert_eq!(ChannelId::from_hex(&format!(" {hex}\n")).unwrap(), id);
        assert!(ChannelId::from_hex(&hex[..254]).is_err());
        assert!(ChannelId::from_hex(&hex.replace('0', "g")).is_err());
        assert!(ChannelId::from_bytes(&bytes[..5]).is_err());
    }

    #[test]
    fn element_counts_follow_nccl() {
        let args = |op| CollectiveArgs::new(op, ElementType::F32, 8);
        assert_eq!(args(CollectiveOp::AllGather).elements(1, 4), (Some(8), Some(32)));
        assert_eq!(args(CollectiveOp::ReduceScatter(ReduceOp::Sum)).elements(1, 4), (Some(32), Some(8)));
        assert_eq!(args(CollectiveOp::Broadcast { root: 0 }).elements(1, 4), (None, Some(8)));
        assert_eq!(args(CollectiveOp::Reduce { op: ReduceOp::Max, root: 2 }).elements(1, 4), (Some(8), None));
        assert_eq!(args(CollectiveOp::Barrier).elements(0, 4), (None, None));
    }
}
