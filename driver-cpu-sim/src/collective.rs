//! Collectives on cpu-sim: the ranks of a channel are devices in this process, which meet by channel
//! id. Each collective is a *meeting* keyed by its sequence number (per pair of ranks for sends and
//! receives): every rank's stream thread arrives with its arguments and blocks; the last to arrive
//! reads every rank's send range, computes every rank's result and writes it, then all return. A
//! rank whose collective will not run (its wait failed, its device went away) arrives without
//! blocking, with that status, and the meeting fails for every rank at once: nobody waits for it.
//! A rank waiting at a meeting gives up with `Cancelled` when its work is asked to stop (device
//! teardown), failing the meeting for the others too.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use hal::driver::{AbandonFn, ChannelBackend, CollectiveCall};
use hal::{ChannelId, CollectiveArgs, CollectiveOp, ElementType, Error, ReduceOp, Result};

use crate::command_exec::{read_buffer, write_buffer};

/// How often a rank waiting at a meeting checks whether its work was asked to stop.
const CANCEL_POLL: Duration = Duration::from_millis(2);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here leaves the state whole: a poisoned lock is still usable.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The channels of this process, by id.
fn groups() -> &'static Mutex<HashMap<[u8; ChannelId::LEN], Weak<Group>>> {
    static GROUPS: OnceLock<Mutex<HashMap<[u8; ChannelId::LEN], Weak<Group>>>> = OnceLock::new();
    GROUPS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A new channel id: unique in this process (the rendezvous is in-process).
pub fn new_channel_id() -> ChannelId {
    use std::hash::{BuildHasher, Hasher};
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let serial = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut bytes = [0u8; ChannelId::LEN];
    bytes[..8].copy_from_slice(b"cpu-sim\0");
    bytes[8..16].copy_from_slice(&serial.to_le_bytes());
    bytes[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    for (i, chunk) in bytes[20..].chunks_mut(8).enumerate() {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(serial ^ (i as u64));
        let word = hasher.finish().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    ChannelId::from_bytes(&bytes).expect("LEN bytes")
}

/// One channel's ranks in this process.
struct Group {
    id: [u8; ChannelId::LEN],
    count: usize,
    state: Mutex<GroupState>,
    changed: Condvar,
}

#[derive(Default)]
struct GroupState {
    joined: Vec<bool>,
    meetings: HashMap<Key, Meeting>,
}

/// Which meeting a collective belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Key {
    /// An operation of every rank, by its sequence number.
    All(u64),
    /// A send and its receive between two ranks (the lower first), by their pair's number.
    Pair(usize, usize, u64),
}

/// One collective's meeting: what each rank brought, and the outcome once known.
struct Meeting {
    /// Per rank: its arguments, or why its part will not run. Ranks outside a pair stay `None`.
    parts: Vec<Option<std::result::Result<CollectiveArgs, Error>>>,
    outcome: Option<Result<()>>,
    /// Ranks that arrived and will not come back for it (took the outcome, or abandoned).
    gone: usize,
}

impl Key {
    fn of(call: &CollectiveCall, rank: usize) -> Key {
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
}

/// This device's end of a channel.
pub struct CpuChannel {
    group: Arc<Group>,
    rank: usize,
}

impl ChannelBackend for CpuChannel {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for CpuChannel {
    fn drop(&mut self) {
        lock(&self.group.state).joined[self.rank] = false;
        let mut groups = lock(groups());
        if groups.get(&self.group.id).is_some_and(|g| g.strong_count() <= 1) {
            groups.remove(&self.group.id);
        }
    }
}

/// Joins channel `id` as `rank` of `count` (`FailedPrecondition` for a rank joined twice,
/// `InvalidArgument` for a count that differs from the ranks already there).
pub fn join(id: &ChannelId, rank: usize, count: usize) -> Result<(Arc<dyn ChannelBackend>, Option<AbandonFn>)> {
    let group = {
        let mut groups = lock(groups());
        let existing = groups.get(id.as_bytes()).and_then(Weak::upgrade);
        match existing {
            Some(group) => group,
            None => {
                let state = GroupState { joined: vec![false; count], meetings: HashMap::new() };
                let group =
                    Arc::new(Group { id: *id.as_bytes(), count, state: Mutex::new(state), changed: Condvar::new() });
                groups.insert(*id.as_bytes(), Arc::downgrade(&group));
                group
            }
        }
    };
    if group.count != count {
        return Err(Error::invalid_argument(format!("cpu-sim: channel {id:?} has {} ranks, not {count}", group.count)));
    }
    {
        let mut state = lock(&group.state);
        if state.joined[rank] {
            return Err(Error::failed_precondition(format!("cpu-sim: rank {rank} of channel {id:?} was already made")));
        }
        state.joined[rank] = true;
    }
    let abandon: AbandonFn = Arc::new(|call: &CollectiveCall, status: Error| {
        if let Some(channel) = call.channel.backend().as_any().downcast_ref::<CpuChannel>() {
            channel.abandon(call, status);
        }
    });
    Ok((Arc::new(CpuChannel { group, rank }), Some(abandon)))
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
        let key = Key::of(call, self.rank);
        let group = &self.group;
        let mut state = lock(&group.state);
        self.arrive(&mut state, key, Ok(call.args.clone()));
        loop {
            let meeting = state.meetings.get_mut(&key).expect("a meeting lives until every participant left");
            if let Some(outcome) = meeting.outcome.clone() {
                meeting.gone += 1;
                if meeting.gone == key.participants(group.count) {
                    state.meetings.remove(&key);
                }
                return outcome.map_err(|e| e.context(format!("{call}")));
            }
            if cancelled() {
                let status = Error::cancelled(format!("rank {} stopped waiting for the other ranks", self.rank));
                meeting.outcome = Some(Err(status));
                group.changed.notify_all();
                continue;
            }
            state = group.changed.wait_timeout(state, CANCEL_POLL).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Records that this rank's part of `call` will not run, failing the meeting for the others.
    fn abandon(&self, call: &CollectiveCall, status: Error) {
        let key = Key::of(call, self.rank);
        let mut state = lock(&self.group.state);
        self.arrive(&mut state, key, Err(status));
        let meeting = state.meetings.get_mut(&key).expect("just arrived");
        meeting.gone += 1;
        if meeting.gone == key.participants(self.group.count) {
            state.meetings.remove(&key);
        }
    }

    /// Adds this rank's part to meeting `key`, completing it if it was the last.
    fn arrive(&self, state: &mut GroupState, key: Key, part: std::result::Result<CollectiveArgs, Error>) {
        let count = self.group.count;
        let meeting =
            state.meetings.entry(key).or_insert_with(|| Meeting { parts: vec![None; count], outcome: None, gone: 0 });
        if let Err(status) = &part
            && meeting.outcome.is_none()
        {
            meeting.outcome = Some(Err(status.clone().context(format!("rank {}'s part did not run", self.rank))));
        }
        if meeting.parts[self.rank].is_some() && meeting.outcome.is_none() {
            meeting.outcome = Some(Err(Error::internal(format!("rank {} arrived twice at {key:?}", self.rank))));
        }
        meeting.parts[self.rank] = Some(part);
        let arrived = meeting.parts.iter().filter(|p| p.is_some()).count();
        if meeting.outcome.is_none() && arrived == key.participants(count) {
            meeting.outcome = Some(perform(key, &meeting.parts, count));
        }
        self.group.changed.notify_all();
    }
}

/// Runs a collective every participant arrived at with its arguments.
fn perform(key: Key, parts: &[Option<std::result::Result<CollectiveArgs, Error>>], count: usize) -> Result<()> {
    let args: Vec<Option<&CollectiveArgs>> = parts.iter().map(|p| p.as_ref().and_then(|p| p.as_ref().ok())).collect();
    let first = args.iter().flatten().next().ok_or_else(|| Error::internal("a meeting without arguments"))?;
    let (element, n) = (first.element, first.count);
    // Every participant must have submitted the same collective.
    for (rank, a) in args.iter().enumerate() {
        let Some(a) = a else { continue };
        let same = match (key, a.op, first.op) {
            (Key::Pair(..), CollectiveOp::Send { .. } | CollectiveOp::Recv { .. }, _) => true,
            (_, op, first_op) => op == first_op,
        };
        if !same || a.element != element || a.count != n {
            return Err(Error::invalid_argument(format!(
                "ranks disagree: rank {rank} submitted {} of {} {:?}, another {} of {n} {element:?}",
                a.op.name(),
                a.count,
                a.element,
                first.op.name()
            )));
        }
    }
    let bytes = (n * element.size()) as usize;
    let read = |a: &CollectiveArgs| -> Result<Vec<u8>> {
        let b = a.send.as_ref().ok_or_else(|| Error::internal("a send range was checked"))?;
        read_buffer(&b.buffer, b.offset, b.length)
    };
    let write = |a: &CollectiveArgs, data: &[u8]| -> Result<()> {
        let b = a.recv.as_ref().ok_or_else(|| Error::internal("a recv range was checked"))?;
        write_buffer(&b.buffer, b.offset, data)
    };
    let all = |i: usize| args[i].ok_or_else(|| Error::internal("a participant without arguments"));
    match first.op {
        CollectiveOp::Barrier => Ok(()),
        CollectiveOp::AllReduce(op) => {
            let inputs = (0..count).map(|i| read(all(i)?).map(|v| v[..bytes].to_vec())).collect::<Result<Vec<_>>>()?;
            let out = reduce(element, op, &inputs, count);
            (0..count).try_for_each(|i| write(all(i)?, &out))
        }
        CollectiveOp::Reduce { op, root } => {
            let inputs = (0..count).map(|i| read(all(i)?).map(|v| v[..bytes].to_vec())).collect::<Result<Vec<_>>>()?;
            write(all(root)?, &reduce(element, op, &inputs, count))
        }
        CollectiveOp::Broadcast { root } => {
            let data = read(all(root)?)?;
            (0..count).try_for_each(|i| write(all(i)?, &data[..bytes]))
        }
        CollectiveOp::AllGather => {
            let mut out = Vec::with_capacity(bytes * count);
            for i in 0..count {
                out.extend_from_slice(&read(all(i)?)?[..bytes]);
            }
            (0..count).try_for_each(|i| write(all(i)?, &out))
        }
        CollectiveOp::ReduceScatter(op) => {
            let inputs = (0..count).map(|i| read(all(i)?)).collect::<Result<Vec<_>>>()?;
            for r in 0..count {
                let blocks: Vec<Vec<u8>> = inputs.iter().map(|v| v[r * bytes..(r + 1) * bytes].to_vec()).collect();
                write(all(r)?, &reduce(element, op, &blocks, count))?;
            }
            Ok(())
        }
        CollectiveOp::AllToAll => {
            let inputs = (0..count).map(|i| read(all(i)?)).collect::<Result<Vec<_>>>()?;
            for i in 0..count {
                let out: Vec<u8> = (0..count).flat_map(|j| inputs[j][i * bytes..(i + 1) * bytes].to_vec()).collect();
                write(all(i)?, &out)?;
            }
            Ok(())
        }
        CollectiveOp::Send { .. } | CollectiveOp::Recv { .. } => {
            let Key::Pair(lo, hi, _) = key else { return Err(Error::internal("a send outside a pair")) };
            let (a, b) = (all(lo)?, all(hi)?);
            let (sender, receiver) = match (a.op, b.op) {
                (CollectiveOp::Send { peer }, CollectiveOp::Recv { peer: back }) if peer == hi && back == lo => (a, b),
                (CollectiveOp::Recv { peer: back }, CollectiveOp::Send { peer }) if peer == lo && back == hi => (b, a),
                (x, y) => {
                    return Err(Error::invalid_argument(format!(
                        "ranks {lo} and {hi} do not pair a send with a receive ({} and {})",
                        x.name(),
                        y.name()
                    )));
                }
            };
            write(receiver, &read(sender)?[..bytes])
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
