//! Collectives on cpu-sim: the ranks of a channel meet by channel id. Each collective is a *meeting*
//! keyed by its sequence number (per pair of ranks for sends and receives): every rank's stream
//! thread arrives with its arguments and blocks; the last to arrive reads every rank's send range,
//! computes every rank's result and writes it, then all return. A rank whose collective will not
//! run (its wait failed, its device went away) arrives without blocking, with that status, and the
//! meeting fails for every rank at once: nobody waits for it. A rank waiting at a meeting gives up
//! with `Cancelled` when its work is asked to stop (device teardown), failing the meeting for the
//! others too. A rank that left (its last channel handle or its device dropped) fails, with
//! `Unavailable` naming it, every meeting it had not arrived at and every later one; a rank that
//! merely has not submitted yet is waited for.
//!
//! The meetings of a channel are held by the process that made its id, as NCCL's bootstrap root
//! is. Its ranks on devices of that process join directly; a rank in another process on the same
//! host (Linux) joins through the host process's Unix socket, named in the id
//! (`remote.rs`), and the host takes part in each meeting on its behalf with the bytes it sent
//! (`host.rs`), checking who connects (`peer.rs`); `wire.rs` is the messages between them.

#[cfg(target_os = "linux")]
mod host;
#[cfg(target_os = "linux")]
mod peer;
#[cfg(target_os = "linux")]
mod remote;
#[cfg(target_os = "linux")]
mod wire;

use std::any::Any;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::Duration;

use hal::driver::{AbandonFn, ChannelBackend, CollectiveCall};
use hal::driver::{lock, wait_timeout};
use hal::{ChannelId, CollectiveArgs, CollectiveOp, ElementType, Error, ReduceOp, Result};

use crate::memory::{read_buffer, write_buffer};

/// How often a rank waiting at a meeting checks whether its work was asked to stop.
pub(crate) const CANCEL_POLL: Duration = Duration::from_millis(2);

/// How long a rank leaving a channel waits for the replies still owed to ranks of other processes
/// (this process may be about to exit, and their results go with it).
const REPLY_GRACE: Duration = Duration::from_secs(10);

/// The first bytes of every id cpu-sim makes.
const MAGIC: &[u8; 8] = b"cpu-sim\0";

/// Bytes of an id before its signature: the magic, a serial, the pid and the nonce.
const HEAD: usize = 28;

/// The channels of this process, by id.
fn groups() -> &'static Mutex<HashMap<[u8; ChannelId::LEN], Weak<Group>>> {
    static GROUPS: OnceLock<Mutex<HashMap<[u8; ChannelId::LEN], Weak<Group>>>> = OnceLock::new();
    GROUPS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A random number fixed for this process's life: with the pid, it names where the meetings of the
/// ids this process made are held (a pid alone repeats across PID namespaces).
pub(crate) fn process_nonce() -> u64 {
    static NONCE: OnceLock<u64> = OnceLock::new();
    *NONCE.get_or_init(|| u64::from_le_bytes(os_random()))
}

/// `N` bytes from the operating system's random source (`getrandom`). Without one there is no key
/// that others cannot guess, so no id may be made: that is a panic, as std's own hash keys are.
fn os_random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the operating system's random source (getrandom) failed");
    bytes
}

/// A new channel id, unique across processes: the magic, a serial, then the pid and nonce of this
/// process, which holds the channel's meetings (on Linux its socket starts listening now, so a
/// rank in another process can join as soon as it has the id), then this process's signature of
/// those (the secret part: a rank of another process shows the whole id to join).
pub fn new_channel_id() -> ChannelId {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    #[cfg(target_os = "linux")]
    host::listen();
    let serial = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut bytes = [0u8; ChannelId::LEN];
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..16].copy_from_slice(&serial.to_le_bytes());
    bytes[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    bytes[20..HEAD].copy_from_slice(&process_nonce().to_le_bytes());
    let signature = signature(&bytes[..HEAD]);
    bytes[HEAD..].copy_from_slice(&signature);
    ChannelId::from_bytes(&bytes).expect("LEN bytes")
}

/// This process's signature of an id's head: HMAC-SHA-256 of it under a 256-bit key drawn from the
/// operating system's random source once per process, so only this process can make an id that
/// names it (the head is public: the pid and nonce are in its socket's name). The MAC of the head
/// with a block number appended fills each 32 bytes of the signature in turn, the last block
/// truncated to the bytes left: every byte of the id past its head is keyed.
fn signature(head: &[u8]) -> [u8; ChannelId::LEN - HEAD] {
    use hmac::{Hmac, Mac};
    type HmacSha256 = Hmac<sha2::Sha256>;
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    let key = KEY.get_or_init(os_random);
    let mut signature = [0u8; ChannelId::LEN - HEAD];
    for (block, chunk) in signature.chunks_mut(32).enumerate() {
        let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
        mac.update(head);
        mac.update(&[block as u8]);
        chunk.copy_from_slice(&mac.finalize().into_bytes()[..chunk.len()]);
    }
    signature
}

/// Whether this process made `id` (and so holds its meetings).
pub(crate) fn made_here(id: &ChannelId) -> bool {
    let bytes = id.as_bytes();
    let expected = signature(&bytes[..HEAD]);
    // Every byte is compared, so the time taken does not tell how much of a guess was right.
    let differs = bytes[HEAD..].iter().zip(expected).fold(0, |acc, (a, b)| acc | (a ^ b));
    maker(id).is_some_and(|(_, nonce)| nonce == process_nonce()) && differs == 0
}

/// The process that made `id`, `(pid, nonce)`, if cpu-sim made it.
fn maker(id: &ChannelId) -> Option<(u32, u64)> {
    let bytes = id.as_bytes();
    if &bytes[..8] != MAGIC {
        return None;
    }
    let pid = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    let nonce = u64::from_le_bytes(bytes[20..HEAD].try_into().expect("8 bytes"));
    Some((pid, nonce))
}

/// The process holding `id`'s meetings, `(pid, nonce)`, when it is not this one. Ids cpu-sim did
/// not make meet in this process.
fn host_elsewhere(id: &ChannelId) -> Option<(u32, u64)> {
    maker(id).filter(|&(_, nonce)| nonce != process_nonce())
}

/// The abstract Unix socket where the process that made `id` holds its meetings for ranks of other
/// processes (as `ss -xl` lists it, without the leading `@`); `None` for an id cpu-sim did not
/// make. Only a process of the same user that shows the whole id may join through it.
#[cfg(target_os = "linux")]
pub fn host_socket_name(id: &ChannelId) -> Option<String> {
    maker(id).map(|(pid, nonce)| host::socket_name(pid, nonce))
}

/// One channel's meetings, in the process that holds them.
struct Group {
    id: ChannelId,
    count: usize,
    state: Mutex<GroupState>,
    changed: Condvar,
}

#[derive(Default)]
struct GroupState {
    joined: Vec<bool>,
    /// Per rank: why it will never arrive again (its process went away), until it joins again.
    lost: Vec<Option<Error>>,
    meetings: HashMap<Key, Meeting>,
    /// Replies owed to ranks of other processes (their parts arrived; the answer is not sent yet).
    owed: usize,
}

/// Which meeting a collective belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Key {
    /// An operation of every rank, by its sequence number.
    All(u64),
    /// A send and its receive between two ranks (the lower first), by their pair's number.
    Pair(usize, usize, u64),
}

/// One collective's meeting: what each rank brought, and the outcome once known.
struct Meeting {
    /// Per rank: its part, or why it will not run. Ranks outside a pair stay `None`.
    parts: Vec<Option<std::result::Result<Part, Error>>>,
    outcome: Option<Result<()>>,
    /// Ranks that arrived and will not come back for it (took the outcome, or abandoned).
    gone: usize,
}

impl Key {
    pub(crate) fn of(call: &CollectiveCall, rank: usize) -> Key {
        match call.args.op {
            CollectiveOp::Send { peer } | CollectiveOp::Recv { peer } => {
                Key::Pair(rank.min(peer), rank.max(peer), call.sequence)
            }
            _ => Key::All(call.sequence),
        }
    }

    /// Ranks taking part.
    fn participants(&self, count: usize) -> usize {
        match self {
            Key::All(_) => count,
            Key::Pair(..) => 2,
        }
    }

    fn involves(&self, rank: usize) -> bool {
        match *self {
            Key::All(_) => true,
            Key::Pair(lo, hi, _) => rank == lo || rank == hi,
        }
    }
}

/// What one rank brings to a meeting: its buffers (a rank of this process), or the bytes a rank of
/// another process sent and a place for its result.
pub(crate) enum Part {
    /// A rank on a device of this process.
    Local(CollectiveArgs),
    /// A rank in another process.
    Remote(RemotePart),
}

/// A rank of another process at a meeting.
pub(crate) struct RemotePart {
    /// What it submitted.
    pub(crate) op: CollectiveOp,
    /// Its element type.
    pub(crate) element: ElementType,
    /// Its elements per rank.
    pub(crate) count: u64,
    /// Its send range's bytes (empty when its part sends nothing).
    pub(crate) input: Vec<u8>,
    /// Bytes its receive range holds.
    pub(crate) recv_len: u64,
    /// What the meeting wrote for it, to send back.
    pub(crate) output: Option<Vec<u8>>,
}

impl Part {
    fn op(&self) -> CollectiveOp {
        match self {
            Part::Local(args) => args.op,
            Part::Remote(part) => part.op,
        }
    }

    fn element(&self) -> ElementType {
        match self {
            Part::Local(args) => args.element,
            Part::Remote(part) => part.element,
        }
    }

    fn count(&self) -> u64 {
        match self {
            Part::Local(args) => args.count,
            Part::Remote(part) => part.count,
        }
    }

    /// The first `length` bytes of its send range.
    fn input(&self, length: u64) -> Result<Cow<'_, [u8]>> {
        match self {
            Part::Local(args) => {
                let b = args.send.as_ref().ok_or_else(|| Error::internal("a send range was checked"))?;
                read_buffer(&b.buffer, b.offset, length).map(Cow::Owned)
            }
            Part::Remote(part) => match part.input.get(..length as usize) {
                Some(input) => Ok(Cow::Borrowed(input)),
                None => Err(Error::invalid_argument(format!(
                    "a rank in another process sent {} bytes for its send range, {length} needed",
                    part.input.len()
                ))),
            },
        }
    }

    /// Writes `data` at the start of its receive range.
    fn output(&mut self, data: &[u8]) -> Result<()> {
        match self {
            Part::Local(args) => {
                let b = args.recv.as_ref().ok_or_else(|| Error::internal("a recv range was checked"))?;
                write_buffer(&b.buffer, b.offset, data)
            }
            Part::Remote(part) if data.len() as u64 > part.recv_len => Err(Error::invalid_argument(format!(
                "a rank in another process has a receive range of {} bytes, {} needed",
                part.recv_len,
                data.len()
            ))),
            Part::Remote(part) => {
                part.output = Some(data.to_vec());
                Ok(())
            }
        }
    }
}

/// This device's end of a channel.
pub struct CpuChannel {
    end: End,
}

enum End {
    /// The channel's meetings are held in this process.
    Local(LocalRank),
    /// They are held by the process that made the id.
    #[cfg(target_os = "linux")]
    Remote(remote::RemoteRank),
}

impl ChannelBackend for CpuChannel {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Joins channel `id` as `rank` of `count` (`FailedPrecondition` for a rank joined twice,
/// `InvalidArgument` for a count that differs from the ranks already there; `Unavailable` when the
/// process that made the id does not answer).
pub fn join(id: &ChannelId, rank: usize, count: usize) -> Result<(Arc<dyn ChannelBackend>, Option<AbandonFn>)> {
    let end = match host_elsewhere(id) {
        None => End::Local(LocalRank::join(id, rank, count)?),
        Some((pid, nonce)) => join_elsewhere(id, pid, nonce, rank, count)?,
    };
    let abandon: AbandonFn = Arc::new(|call: &CollectiveCall, status: Error| {
        if let Some(channel) = call.channel.backend().as_any().downcast_ref::<CpuChannel>() {
            channel.abandon(call, status);
        }
    });
    Ok((Arc::new(CpuChannel { end }), Some(abandon)))
}

#[cfg(target_os = "linux")]
fn join_elsewhere(id: &ChannelId, pid: u32, nonce: u64, rank: usize, count: usize) -> Result<End> {
    remote::RemoteRank::join(id, pid, nonce, rank, count).map(End::Remote)
}

#[cfg(not(target_os = "linux"))]
fn join_elsewhere(id: &ChannelId, pid: u32, _nonce: u64, _rank: usize, _count: usize) -> Result<End> {
    Err(Error::unavailable(format!(
        "cpu-sim: channel {id:?} was made by process {pid}; ranks in other processes need Linux (abstract Unix \
         sockets)"
    )))
}

impl CpuChannel {
    /// The channel behind `call`, if cpu-sim made it.
    pub fn of(call: &CollectiveCall) -> Result<&CpuChannel> {
        call.channel
            .backend()
            .as_any()
            .downcast_ref::<CpuChannel>()
            .ok_or_else(|| Error::invalid_argument(format!("{call}: the channel was not made by cpu-sim")))
    }

    /// Runs this rank's part of `call` (on its stream thread): blocks until every rank arrived and
    /// the collective is done, or fails with the first failure of any rank. `cancelled` is polled
    /// while waiting.
    pub fn run(&self, call: &CollectiveCall, cancelled: &dyn Fn() -> bool) -> Result<()> {
        call.settle();
        match &self.end {
            End::Local(local) => {
                let key = Key::of(call, local.rank);
                local.arrive(key, Ok(Part::Local(call.args.clone())));
                let stop = || {
                    cancelled()
                        .then(|| Error::cancelled(format!("rank {} stopped waiting for the other ranks", local.rank)))
                };
                local.await_outcome(key, &stop).0.map_err(|e| e.context(format!("{call}")))
            }
            #[cfg(target_os = "linux")]
            End::Remote(remote) => remote.run(call, cancelled),
        }
    }

    /// This rank leaves while its handle lives (its device is gone, so it can never submit again):
    /// the meetings it has not arrived at fail for the others.
    fn leave(&self) {
        match &self.end {
            End::Local(local) => local.leave(),
            #[cfg(target_os = "linux")]
            End::Remote(remote) => remote.leave(),
        }
    }

    /// Records that this rank's part of `call` will not run, failing the meeting for the others.
    fn abandon(&self, call: &CollectiveCall, status: Error) {
        match &self.end {
            End::Local(local) => local.abandon(Key::of(call, local.rank), status),
            #[cfg(target_os = "linux")]
            End::Remote(remote) => remote.abandon(call, status),
        }
    }
}

/// The channels made on one device: when the device is dropped (after its work was drained), their
/// ranks leave, since a rank without its device can never submit again and its peers must not wait
/// for it.
#[derive(Default)]
pub(crate) struct DeviceChannels(Mutex<Vec<Weak<dyn ChannelBackend>>>);

impl DeviceChannels {
    /// Records `channel`, made on this device.
    pub(crate) fn add(&self, channel: &Arc<dyn ChannelBackend>) {
        let mut channels = lock(&self.0);
        channels.retain(|c| c.strong_count() > 0);
        channels.push(Arc::downgrade(channel));
    }
}

impl Drop for DeviceChannels {
    fn drop(&mut self) {
        let channels: Vec<Weak<dyn ChannelBackend>> = lock(&self.0).drain(..).collect();
        for channel in channels.iter().filter_map(Weak::upgrade) {
            if let Some(channel) = channel.as_any().downcast_ref::<CpuChannel>() {
                channel.leave();
            }
        }
    }
}

/// A rank joined to a channel whose meetings this process holds: for a device of this process, or
/// on behalf of a rank in another process. Leaves on drop.
pub(crate) struct LocalRank {
    group: Arc<Group>,
    rank: usize,
}

impl Drop for LocalRank {
    fn drop(&mut self) {
        self.leave();
        let mut state = lock(&self.group.state);
        state.joined[self.rank] = false;
        self.group.changed.notify_all();
        let deadline = std::time::Instant::now() + REPLY_GRACE;
        while state.owed > 0 {
            let now = std::time::Instant::now();
            if now >= deadline {
                tracing::warn!(
                    "cpu-sim: rank {} left with {} replies to other processes unsent",
                    self.rank,
                    state.owed
                );
                break;
            }
            state = wait_timeout(&self.group.changed, state, deadline - now).0;
        }
        drop(state);
        let mut groups = lock(groups());
        if groups.get(self.group.id.as_bytes()).is_some_and(|g| g.strong_count() <= 1) {
            groups.remove(self.group.id.as_bytes());
        }
    }
}

impl LocalRank {
    /// Joins channel `id` as `rank` of `count` (see [`join`]).
    pub(crate) fn join(id: &ChannelId, rank: usize, count: usize) -> Result<LocalRank> {
        let group = {
            let mut groups = lock(groups());
            let existing = groups.get(id.as_bytes()).and_then(Weak::upgrade);
            match existing {
                Some(group) => group,
                None => {
                    let state = GroupState {
                        joined: vec![false; count],
                        lost: vec![None; count],
                        meetings: HashMap::new(),
                        owed: 0,
                    };
                    let group =
                        Arc::new(Group { id: id.clone(), count, state: Mutex::new(state), changed: Condvar::new() });
                    groups.insert(*id.as_bytes(), Arc::downgrade(&group));
                    group
                }
            }
        };
        if group.count != count {
            return Err(Error::invalid_argument(format!(
                "cpu-sim: channel {id:?} has {} ranks, not {count}",
                group.count
            )));
        }
        if rank >= count {
            return Err(Error::invalid_argument(format!("cpu-sim: rank {rank} of a channel of {count} ranks")));
        }
        {
            let mut state = lock(&group.state);
            if state.joined[rank] {
                return Err(Error::failed_precondition(format!(
                    "cpu-sim: rank {rank} of channel {id:?} was already made"
                )));
            }
            state.joined[rank] = true;
            state.lost[rank] = None;
        }
        Ok(LocalRank { group, rank })
    }

    /// Its rank.
    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    /// Adds this rank's part to meeting `key`, completing it if it was the last.
    pub(crate) fn arrive(&self, key: Key, part: std::result::Result<Part, Error>) {
        let count = self.group.count;
        let mut state = lock(&self.group.state);
        let state = &mut *state;
        if let Ok(Part::Remote(_)) = &part {
            state.owed += 1;
        }
        let meeting = state.meetings.entry(key).or_insert_with(|| Meeting {
            parts: (0..count).map(|_| None).collect(),
            outcome: None,
            gone: 0,
        });
        if let Err(status) = &part
            && meeting.outcome.is_none()
        {
            meeting.outcome = Some(Err(status.clone().context(format!("rank {}'s part did not run", self.rank))));
        }
        if meeting.parts[self.rank].is_some() && meeting.outcome.is_none() {
            meeting.outcome = Some(Err(Error::internal(format!("rank {} arrived twice at {key:?}", self.rank))));
        }
        meeting.parts[self.rank] = Some(part);
        // A rank whose process went away will not come: it arrives failed.
        for (rank, lost) in state.lost.iter().enumerate() {
            if let Some(status) = lost
                && key.involves(rank)
                && meeting.parts[rank].is_none()
            {
                arrive_lost(meeting, rank, status);
            }
        }
        let arrived = meeting.parts.iter().filter(|p| p.is_some()).count();
        if meeting.outcome.is_none() && arrived == key.participants(count) {
            meeting.outcome = Some(perform(key, &mut meeting.parts, count));
        }
        if meeting.gone == key.participants(count) {
            state.meetings.remove(&key);
        }
        self.group.changed.notify_all();
    }

    /// Waits for the outcome of meeting `key` (which this rank arrived at); `stop` is polled and a
    /// status from it fails the meeting. Returns the outcome and what the meeting wrote for a
    /// remote part.
    pub(crate) fn await_outcome(&self, key: Key, stop: &dyn Fn() -> Option<Error>) -> (Result<()>, Option<Vec<u8>>) {
        let group = &self.group;
        let mut state = lock(&group.state);
        loop {
            let meeting = state.meetings.get_mut(&key).expect("a meeting lives until every participant left");
            if let Some(outcome) = meeting.outcome.clone() {
                let output = match &mut meeting.parts[self.rank] {
                    Some(Ok(Part::Remote(part))) => part.output.take(),
                    _ => None,
                };
                meeting.gone += 1;
                if meeting.gone == key.participants(group.count) {
                    state.meetings.remove(&key);
                }
                return (outcome, output);
            }
            if let Some(status) = stop() {
                meeting.outcome = Some(Err(status));
                group.changed.notify_all();
                continue;
            }
            state = wait_timeout(&group.changed, state, CANCEL_POLL).0;
        }
    }

    /// A reply owed to this rank's process was sent (or can no longer be).
    pub(crate) fn replied(&self) {
        let mut state = lock(&self.group.state);
        state.owed = state.owed.saturating_sub(1);
        self.group.changed.notify_all();
    }

    /// Records that this rank's part of meeting `key` will not run, failing it for the others.
    pub(crate) fn abandon(&self, key: Key, status: Error) {
        self.arrive(key, Err(status));
        let mut state = lock(&self.group.state);
        let meeting = state.meetings.get_mut(&key).expect("just arrived, not yet gone");
        meeting.gone += 1;
        if meeting.gone == key.participants(self.group.count) {
            state.meetings.remove(&key);
        }
    }

    /// This rank left (its channel or its device is gone): see [`lose`](Self::lose).
    pub(crate) fn leave(&self) {
        self.lose(Error::unavailable(format!(
            "cpu-sim: rank {} left channel {:?} (its channel or its device was dropped)",
            self.rank, self.group.id
        )));
    }

    /// This rank will not come again (its process went away, or it left): every meeting it has not
    /// arrived at fails with `status` (or the status it was first lost with), and so does every
    /// later one until the rank joins again.
    pub(crate) fn lose(&self, status: Error) {
        let count = self.group.count;
        let mut state = lock(&self.group.state);
        let state = &mut *state;
        let status = state.lost[self.rank].get_or_insert(status).clone();
        state.meetings.retain(|key, meeting| {
            if key.involves(self.rank) && meeting.parts[self.rank].is_none() {
                arrive_lost(meeting, self.rank, &status);
            }
            meeting.gone < key.participants(count)
        });
        self.group.changed.notify_all();
    }
}

/// `rank`, lost with `status`, arrives at `meeting` failed and leaves at once.
fn arrive_lost(meeting: &mut Meeting, rank: usize, status: &Error) {
    if meeting.outcome.is_none() {
        meeting.outcome = Some(Err(status.context(format!("rank {rank}'s part did not run"))));
    }
    meeting.parts[rank] = Some(Err(status.clone()));
    meeting.gone += 1;
}

/// Runs a collective every participant arrived at with its part.
fn perform(key: Key, parts: &mut [Option<std::result::Result<Part, Error>>], count: usize) -> Result<()> {
    let (op, element, n) = {
        let args: Vec<Option<&Part>> = parts.iter().map(|p| p.as_ref().and_then(|p| p.as_ref().ok())).collect();
        let first = args.iter().flatten().next().ok_or_else(|| Error::internal("a meeting without arguments"))?;
        let (element, n) = (first.element(), first.count());
        // Every participant must have submitted the same collective.
        for (rank, a) in args.iter().enumerate() {
            let Some(a) = a else { continue };
            let same = match (key, a.op(), first.op()) {
                (Key::Pair(..), CollectiveOp::Send { .. } | CollectiveOp::Recv { .. }, _) => true,
                (_, op, first_op) => op == first_op,
            };
            if !same || a.element() != element || a.count() != n {
                return Err(Error::invalid_argument(format!(
                    "ranks disagree: rank {rank} submitted {} of {} {:?}, another {} of {n} {element:?}",
                    a.op().name(),
                    a.count(),
                    a.element(),
                    first.op().name()
                )));
            }
        }
        (first.op(), element, n)
    };
    // Each participant's send range, as much of it as its part needs.
    let mut inputs: Vec<Option<Vec<u8>>> = Vec::with_capacity(count);
    for (rank, part) in parts.iter().enumerate() {
        let input = match part {
            Some(Ok(part)) => {
                let needed = CollectiveArgs::new(part.op(), element, n).elements(rank, count).0;
                needed.map(|elements| part.input(elements * element.size()).map(Cow::into_owned)).transpose()?
            }
            _ => None,
        };
        inputs.push(input);
    }
    let ops: Vec<Option<CollectiveOp>> =
        parts.iter().map(|p| p.as_ref().and_then(|p| p.as_ref().ok()).map(Part::op)).collect();
    let bytes = (n * element.size()) as usize;
    let input = |i: usize| inputs[i].as_deref().ok_or_else(|| Error::internal("a participant without a send range"));
    let mut write = |i: usize, data: &[u8]| match parts[i].as_mut() {
        Some(Ok(part)) => part.output(data),
        _ => Err(Error::internal("a participant without arguments")),
    };
    match op {
        CollectiveOp::Barrier => Ok(()),
        CollectiveOp::AllReduce(op) => {
            let inputs = (0..count).map(|i| input(i).map(<[u8]>::to_vec)).collect::<Result<Vec<_>>>()?;
            let out = reduce(element, op, &inputs, count);
            (0..count).try_for_each(|i| write(i, &out))
        }
        CollectiveOp::Reduce { op, root } => {
            let inputs = (0..count).map(|i| input(i).map(<[u8]>::to_vec)).collect::<Result<Vec<_>>>()?;
            write(root, &reduce(element, op, &inputs, count))
        }
        CollectiveOp::Broadcast { root } => {
            let data = input(root)?.to_vec();
            (0..count).try_for_each(|i| write(i, &data))
        }
        CollectiveOp::AllGather => {
            let mut out = Vec::with_capacity(bytes * count);
            for i in 0..count {
                out.extend_from_slice(input(i)?);
            }
            (0..count).try_for_each(|i| write(i, &out))
        }
        CollectiveOp::ReduceScatter(op) => {
            for r in 0..count {
                let blocks = (0..count)
                    .map(|i| input(i).map(|v| v[r * bytes..(r + 1) * bytes].to_vec()))
                    .collect::<Result<Vec<_>>>()?;
                write(r, &reduce(element, op, &blocks, count))?;
            }
            Ok(())
        }
        CollectiveOp::AllToAll => {
            for i in 0..count {
                let mut out = Vec::with_capacity(bytes * count);
                for j in 0..count {
                    out.extend_from_slice(&input(j)?[i * bytes..(i + 1) * bytes]);
                }
                write(i, &out)?;
            }
            Ok(())
        }
        CollectiveOp::Send { .. } | CollectiveOp::Recv { .. } => {
            let Key::Pair(lo, hi, _) = key else { return Err(Error::internal("a send outside a pair")) };
            let op_of = |i: usize| ops[i].ok_or_else(|| Error::internal("a participant without arguments"));
            let (sender, receiver) = match (op_of(lo)?, op_of(hi)?) {
                (CollectiveOp::Send { peer }, CollectiveOp::Recv { peer: back }) if peer == hi && back == lo => {
                    (lo, hi)
                }
                (CollectiveOp::Recv { peer: back }, CollectiveOp::Send { peer }) if peer == lo && back == hi => {
                    (hi, lo)
                }
                (x, y) => {
                    return Err(Error::invalid_argument(format!(
                        "ranks {lo} and {hi} do not pair a send with a receive ({} and {})",
                        x.name(),
                        y.name()
                    )));
                }
            };
            let data = input(sender)?.to_vec();
            write(receiver, &data)
        }
    }
}

/// Combines `inputs` (one per rank, same length) element by element with `op`.
fn reduce(element: ElementType, op: ReduceOp, inputs: &[Vec<u8>], ranks: usize) -> Vec<u8> {
    macro_rules! ints {
        ($t:ty) => {{
            let size = std::mem::size_of::<$t>();
            let get = |v: &[u8], i: usize| <$t>::from_le_bytes(v[i * size..(i + 1) * size].try_into().expect("size"));
            let n = inputs[0].len() / size;
            let mut out = Vec::with_capacity(inputs[0].len());
            for i in 0..n {
                let mut acc = get(&inputs[0], i);
                for input in &inputs[1..] {
                    let x = get(input, i);
                    acc = match op {
                        ReduceOp::Sum | ReduceOp::Avg => acc.wrapping_add(x),
                        ReduceOp::Prod => acc.wrapping_mul(x),
                        ReduceOp::Min => acc.min(x),
                        ReduceOp::Max => acc.max(x),
                    };
                }
                out.extend_from_slice(&acc.to_le_bytes());
            }
            out
        }};
    }
    // Floats combine in f64 and round once to the element type.
    let floats = |size: usize, get: &dyn Fn(&[u8]) -> f64, put: &dyn Fn(f64, &mut Vec<u8>)| {
        let n = inputs[0].len() / size;
        let mut out = Vec::with_capacity(inputs[0].len());
        for i in 0..n {
            let at = |v: &Vec<u8>| get(&v[i * size..(i + 1) * size]);
            let mut acc = at(&inputs[0]);
            for input in &inputs[1..] {
                let x = at(input);
                acc = match op {
                    ReduceOp::Sum | ReduceOp::Avg => acc + x,
                    ReduceOp::Prod => acc * x,
                    ReduceOp::Min => acc.min(x),
                    ReduceOp::Max => acc.max(x),
                };
            }
            if op == ReduceOp::Avg {
                acc /= ranks as f64;
            }
            put(acc, &mut out);
        }
        out
    };
    match element {
        ElementType::I8 => ints!(i8),
        ElementType::U8 => ints!(u8),
        ElementType::I32 => ints!(i32),
        ElementType::U32 => ints!(u32),
        ElementType::I64 => ints!(i64),
        ElementType::U64 => ints!(u64),
        ElementType::F32 => floats(4, &|b| f64::from(f32::from_le_bytes(b.try_into().expect("4 bytes"))), &|x, out| {
            out.extend_from_slice(&(x as f32).to_le_bytes())
        }),
        ElementType::F64 => floats(8, &|b| f64::from_le_bytes(b.try_into().expect("8 bytes")), &|x, out| {
            out.extend_from_slice(&x.to_le_bytes())
        }),
        ElementType::BF16 => {
            floats(2, &|b| f64::from(f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)), &|x, out| {
                out.extend_from_slice(&f32_to_bf16(x as f32).to_le_bytes())
            })
        }
        ElementType::F16 => floats(2, &|b| f64::from(f16_to_f32(u16::from_le_bytes([b[0], b[1]]))), &|x, out| {
            out.extend_from_slice(&f32_to_f16(x as f32).to_le_bytes())
        }),
    }
}

/// bfloat16 bits of `x`, rounded to nearest even (NaN stays NaN).
fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let round = 0x7FFF + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// The value of IEEE half-precision bits.
fn f16_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exponent = i32::from((h >> 10) & 0x1F);
    let mantissa = f32::from(h & 0x3FF);
    match exponent {
        0 => sign * mantissa * 2f32.powi(-24),
        31 if mantissa == 0.0 => sign * f32::INFINITY,
        31 => f32::NAN,
        e => sign * (1.0 + mantissa / 1024.0) * 2f32.powi(e - 15),
    }
}

/// IEEE half-precision bits of `x`, rounded to nearest even.
fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    if x.is_nan() {
        return sign | 0x7E00;
    }
    let magnitude = x.abs();
    if magnitude >= 65520.0 {
        return sign | 0x7C00;
    }
    if magnitude < 2f32.powi(-14) {
        // Subnormal (or zero): units of 2^-24, rounded to nearest even.
        let units = magnitude * 2f32.powi(24);
        let rounded = units.round_ties_even();
        return sign | rounded as u16;
    }
    let exponent = ((bits >> 23) & 0xFF) as i32 - 127 + 15;
    let mantissa = bits & 0x7F_FFFF;
    let mut half = ((exponent as u32) << 10) | (mantissa >> 13);
    let rest = mantissa & 0x1FFF;
    if rest > 0x1000 || (rest == 0x1000 && half & 1 == 1) {
        half += 1;
    }
    sign | half as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_precision_conversions_round_trip_and_round() {
        for x in [0.0f32, 1.0, -2.5, 0.333, 65504.0, 6.1e-5, 1e-7] {
            let back = f16_to_f32(f32_to_f16(x));
            assert!((back - x).abs() <= x.abs() * 1e-3 + 6e-8, "{x} -> {back}");
        }
        assert_eq!(f32_to_f16(1.0), 0x3C00);
        assert_eq!(f32_to_f16(1e6), 0x7C00, "overflow is infinity");
        assert_eq!(f32_to_bf16(1.0), 0x3F80);
        assert_eq!(f32::from_bits(u32::from(f32_to_bf16(3.0)) << 16), 3.0);
    }

    #[test]
    fn a_rank_joins_once_and_counts_must_agree() {
        let id = new_channel_id();
        let first = join(&id, 0, 2).unwrap();
        let twice = join(&id, 0, 2).err().expect("rank 0 twice");
        assert_eq!(twice.code(), hal::StatusCode::FailedPrecondition, "{twice}");
        let mismatch = join(&id, 1, 3).err().expect("a count of 3 for a channel of 2");
        assert_eq!(mismatch.code(), hal::StatusCode::InvalidArgument, "{mismatch}");
        drop(first);
        join(&id, 0, 2).expect("rank 0 is free again once its channel dropped");
        assert_ne!(new_channel_id(), new_channel_id(), "ids are unique");
    }

    #[test]
    fn an_id_counts_as_made_here_only_with_this_processs_signature() {
        let id = new_channel_id();
        assert!(made_here(&id));
        let mut forged = *id.as_bytes();
        forged[ChannelId::LEN - 1] ^= 1;
        assert!(!made_here(&ChannelId::from_bytes(&forged).unwrap()), "a signature changed in one bit");
        let mut elsewhere = *id.as_bytes();
        elsewhere[20] ^= 1;
        assert!(!made_here(&ChannelId::from_bytes(&elsewhere).unwrap()), "another process's nonce");
        assert!(!made_here(&ChannelId::from_bytes(&[0; ChannelId::LEN]).unwrap()), "not cpu-sim's");
    }

    #[test]
    fn a_tampered_or_forged_id_is_refused() {
        let id = new_channel_id();
        // Any one bit flipped, of the head (magic, serial, pid, nonce) or of the signature.
        for byte in 0..ChannelId::LEN {
            let mut tampered = *id.as_bytes();
            tampered[byte] ^= 0x80;
            assert!(!made_here(&ChannelId::from_bytes(&tampered).unwrap()), "byte {byte} flipped");
        }
        // Another serial with the signature of the first: the signature covers the serial.
        let mut replayed = *new_channel_id().as_bytes();
        replayed[HEAD..].copy_from_slice(&id.as_bytes()[HEAD..]);
        assert!(!made_here(&ChannelId::from_bytes(&replayed).unwrap()), "a signature moved to another head");
        // This process's head with a signature made without the key (zeros, or the head's SHA-256).
        use sha2::Digest;
        let mut unkeyed = *id.as_bytes();
        unkeyed[HEAD..].fill(0);
        assert!(!made_here(&ChannelId::from_bytes(&unkeyed).unwrap()), "an empty signature");
        let digest = sha2::Sha256::digest(&id.as_bytes()[..HEAD]);
        unkeyed[HEAD..HEAD + 32].copy_from_slice(&digest);
        assert!(!made_here(&ChannelId::from_bytes(&unkeyed).unwrap()), "an unkeyed hash");
        // The signature fills the id: no byte past the head is left constant.
        let other = new_channel_id();
        let same = (HEAD..ChannelId::LEN).filter(|&i| id.as_bytes()[i] == other.as_bytes()[i]).count();
        assert!(same < 16, "{same} of the signature's bytes agree between two ids");
    }

    #[test]
    fn reductions_of_every_kind() {
        let ints: Vec<Vec<u8>> =
            [[1i32, -4], [7, 2], [3, 9]].iter().map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
        let get = |v: Vec<u8>| -> Vec<i32> { v.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect() };
        assert_eq!(get(reduce(ElementType::I32, ReduceOp::Sum, &ints, 3)), vec![11, 7]);
        assert_eq!(get(reduce(ElementType::I32, ReduceOp::Prod, &ints, 3)), vec![21, -72]);
        assert_eq!(get(reduce(ElementType::I32, ReduceOp::Min, &ints, 3)), vec![1, -4]);
        assert_eq!(get(reduce(ElementType::I32, ReduceOp::Max, &ints, 3)), vec![7, 9]);
        let floats: Vec<Vec<u8>> = [1.0f32, 2.0, 6.0].iter().map(|x| x.to_le_bytes().to_vec()).collect();
        let avg = reduce(ElementType::F32, ReduceOp::Avg, &floats, 3);
        assert_eq!(f32::from_le_bytes(avg.try_into().unwrap()), 3.0);
    }
}
