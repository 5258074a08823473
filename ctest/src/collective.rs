//! Channels and collectives (`Device::create_channel`, `Queue::collective`): every operation on
//! every element type the cases name, against a CPU reference, with 2 and 4 ranks where the driver
//! gives that many devices; argument checks; and a failure on one rank failing the collective on
//! every rank without a hang, the channel still usable afterwards.
//!
//! A driver without collectives skips the area (`Unimplemented` or `Unavailable` from
//! `create_channel_id`), saying why. Rank counts above the fixture's `max_ranks` (CUDA: one rank
//! per GPU; the CUDA fixture's devices are all on GPU 0 unless spread over the GPUs) are left out, with a note; each case
//! runs with every count it can, 1 included (a one-rank channel still runs every operation end to
//! end). Channels are created from one thread per rank, as NCCL needs.

use hal::{
    Buffer, BufferBinding, BufferParams, BufferRef, Channel, CollectiveArgs, CollectiveOp, CommandBuffer,
    CommandBufferMode, Device, ElementType, Error, ReduceOp, Semaphore, StatusCode,
};

use crate::check::{CaseError, CaseResult, Context, expect_code};
use crate::context::{Cx, sv, to_bytes};
use crate::{ensure, ensure_eq};

/// The rank counts each case runs with (those the fixture allows).
const RANK_COUNTS: [usize; 3] = [1, 2, 4];

/// The counts of [`RANK_COUNTS`] at least `least` that the fixture allows, noting the others.
fn rank_counts(cx: &Cx, least: usize) -> Vec<usize> {
    let max = cx.fixture().max_ranks();
    let (run, left): (Vec<usize>, Vec<usize>) = RANK_COUNTS.iter().filter(|&&n| n >= least).partition(|&&n| n <= max);
    if !left.is_empty() {
        cx.note(format!("{left:?} ranks left out: this fixture's devices make at most {max}"));
    }
    run
}

/// `ranks` devices and a channel on each (made from one thread per rank), or a skip when the
/// driver has no collectives.
fn group(cx: &Cx, ranks: usize) -> Result<(Vec<Device>, Vec<Channel>), CaseError> {
    let mut devices = vec![cx.device().clone()];
    while devices.len() < ranks {
        let device = next_rank_device(cx, &devices, || cx.other_device())?;
        devices.push(device);
    }
    channels_on(devices)
}

/// Where a device is: its name and ordinal.
fn place(device: &Device) -> (String, usize) {
    (device.info().name.clone(), device.info().ordinal)
}

/// A device from `make` for one more rank beside `devices`. Where the fixture bounds the ranks
/// (CUDA: one per GPU, as NCCL takes one rank per GPU and hangs with two on one), it is on a GPU
/// none of `devices` is on: devices made for earlier groups of the case still hold their places, so
/// the fixture's next device may be on a GPU a rank of this group already has.
fn next_rank_device(
    cx: &Cx,
    devices: &[Device],
    mut make: impl FnMut() -> Result<Device, CaseError>,
) -> Result<Device, CaseError> {
    let places = cx.fixture().max_ranks();
    if places == usize::MAX {
        return make();
    }
    let taken: Vec<(String, usize)> = devices.iter().map(place).collect();
    // The fixture's devices go round its places, so one round reaches a free place.
    for _ in 0..=places {
        let device = make()?;
        if !taken.contains(&place(&device)) {
            return Ok(device);
        }
    }
    Err(CaseError::Fail(format!(
        "no device on a place apart from the {} rank(s) already placed ({taken:?}) in {} tries",
        devices.len(),
        places + 1
    )))
}

/// A channel on each of `devices` (its index is its rank), made from one thread per rank, or a
/// skip when the driver has no collectives.
fn channels_on(devices: Vec<Device>) -> Result<(Vec<Device>, Vec<Channel>), CaseError> {
    let ranks = devices.len();
    let id = match devices[0].create_channel_id() {
        Ok(id) => id,
        Err(e) if e.code() == StatusCode::Unimplemented || e.code() == StatusCode::Unavailable => {
            return Err(CaseError::Skip(format!("no collectives on this driver: {e}")));
        }
        Err(e) => return Err(CaseError::Fail(format!("create_channel_id: {e}"))),
    };
    let channels = std::thread::scope(|scope| {
        let joins: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, d)| {
                let id = &id;
                scope.spawn(move || d.create_channel(id, rank, ranks))
            })
            .collect();
        joins
            .into_iter()
            .enumerate()
            .map(|(rank, join)| match join.join() {
                Ok(channel) => channel.ctx(format!("rank {rank}'s channel")),
                Err(_) => Err(CaseError::Fail(format!("creating rank {rank}'s channel panicked"))),
            })
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok((devices, channels))
}

/// A host-visible buffer of `bytes` bytes holding `data` (zero-padded).
fn buffer(device: &Device, bytes: usize, data: &[u8]) -> Result<Buffer, CaseError> {
    let buffer = device.allocate_buffer(BufferParams::host_visible(), bytes.max(1) as u64).ctx("buffer")?;
    let mut contents = data.to_vec();
    contents.resize(bytes, 0);
    buffer.write(0, &contents).ctx("write")?;
    Ok(buffer)
}

/// Submits one collective per rank (each built by `args(rank)`), waits for all and returns each
/// rank's signal outcome.
fn run_all(
    devices: &[Device],
    channels: &[Channel],
    args: impl Fn(usize) -> CollectiveArgs,
) -> Result<Vec<hal::Result<()>>, CaseError> {
    // One thread per rank, as a process per GPU would: a library such as NCCL may block a rank's
    // first collective until its peers arrive.
    let signals: Vec<Semaphore> = std::thread::scope(|scope| {
        let joins: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, device)| {
                let (channel, args) = (&channels[rank], args(rank));
                scope.spawn(move || -> Result<Semaphore, CaseError> {
                    let s = device.create_semaphore(0).ctx("semaphore")?;
                    device
                        .queue(0)
                        .ctx("queue")?
                        .collective(&[], channel, args, &[sv(&s, 1)])
                        .ctx(format!("rank {rank}"))?;
                    Ok(s)
                })
            })
            .collect();
        joins
            .into_iter()
            .map(|join| join.join().unwrap_or_else(|_| Err(CaseError::Fail("a rank's submission panicked".into()))))
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok(signals.iter().map(|s| s.wait(1, hal::Timeout::After(crate::context::LONG))).collect())
}

/// Element `i` of rank `r`'s input, as an `f64` every type can hold exactly.
fn value(r: usize, i: usize) -> f64 {
    ((r * 3 + i * 5) % 7) as f64 + 1.0
}

/// The little-endian bytes of `x` as `element`.
fn encode(element: ElementType, x: f64) -> Vec<u8> {
    match element {
        // Integer results wrap, as NCCL's do (products of 4 ranks overflow 8 bits).
        ElementType::I8 => (x as i64 as i8).to_le_bytes().to_vec(),
        ElementType::U8 => (x as i64 as u8).to_le_bytes().to_vec(),
        ElementType::I32 => (x as i64 as i32).to_le_bytes().to_vec(),
        ElementType::U32 => (x as i64 as u32).to_le_bytes().to_vec(),
        ElementType::I64 => (x as i64).to_le_bytes().to_vec(),
        ElementType::U64 => (x as u64).to_le_bytes().to_vec(),
        ElementType::F32 => (x as f32).to_le_bytes().to_vec(),
        ElementType::F64 => x.to_le_bytes().to_vec(),
        // Small integers and halves of them are exact in both 16-bit formats.
        ElementType::BF16 => ((((x as f32).to_bits()) >> 16) as u16).to_le_bytes().to_vec(),
        ElementType::F16 => {
            let (exponent, mantissa) = if x == 0.0 {
                (0, 0)
            } else {
                let e = x.abs().log2().floor() as i32;
                ((e + 15) as u16, (((x.abs() / 2f64.powi(e)) - 1.0) * 1024.0).round() as u16)
            };
            let sign = if x < 0.0 { 0x8000u16 } else { 0 };
            (sign | (exponent << 10) | mantissa).to_le_bytes().to_vec()
        }
    }
}

fn encode_all(element: ElementType, values: impl Iterator<Item = f64>) -> Vec<u8> {
    values.flat_map(|x| encode(element, x)).collect()
}

fn combine(op: ReduceOp, values: impl Iterator<Item = f64>, ranks: usize) -> f64 {
    let values: Vec<f64> = values.collect();
    match op {
        ReduceOp::Sum => values.iter().sum(),
        ReduceOp::Avg => values.iter().sum::<f64>() / ranks as f64,
        ReduceOp::Prod => values.iter().product(),
        ReduceOp::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
        ReduceOp::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    }
}

/// All-reduce with every reduction on every element type (average on the floating-point ones),
/// in place on even ranks and out of place on odd ones, with 2 and 4 ranks: every rank holds the
/// CPU reference's bytes (inputs are small integers, so sums, products and averages are exact).
pub(crate) fn all_reduce_every_op_and_type(cx: &Cx) -> CaseResult {
    const N: usize = 8;
    let types = ElementType::ALL;
    let ops = ReduceOp::ALL;
    let mut ran = 0;
    for ranks in rank_counts(cx, 1) {
        let (devices, channels) = group(cx, ranks)?;
        for element in types {
            for op in ops {
                if op == ReduceOp::Avg && !element.is_float() {
                    continue;
                }
                let bytes = N * element.size() as usize;
                let inputs: Vec<Buffer> = (0..ranks)
                    .map(|r| buffer(&devices[r], bytes, &encode_all(element, (0..N).map(|i| value(r, i)))))
                    .collect::<Result<_, _>>()?;
                let outputs: Vec<Buffer> = (0..ranks)
                    .map(|r| if r % 2 == 0 { Ok(inputs[r].clone()) } else { buffer(&devices[r], bytes, &[]) })
                    .collect::<Result<_, _>>()?;
                let outcomes = run_all(&devices, &channels, |r| {
                    CollectiveArgs::new(CollectiveOp::AllReduce(op), element, N as u64)
                        .send(&inputs[r])
                        .recv(&outputs[r])
                })?;
                let expected = encode_all(element, (0..N).map(|i| combine(op, (0..ranks).map(|r| value(r, i)), ranks)));
                for (r, outcome) in outcomes.into_iter().enumerate() {
                    outcome.ctx(format!("{ranks} ranks, {op:?} {element:?}, rank {r}"))?;
                    ensure_eq!(cx.bytes(&outputs[r])?, expected, "{ranks} ranks, {op:?} over {element:?}, rank {r}");
                }
                ran += 1;
            }
        }
    }
    cx.note(format!("{ran} all-reduces"));
    Ok(())
}

/// Broadcast, reduce, all-gather, reduce-scatter and all-to-all over `u32` blocks, with 2 and 4
/// ranks, and a barrier: every rank's result is the CPU reference's.
pub(crate) fn gather_scatter_broadcast_and_all_to_all(cx: &Cx) -> CaseResult {
    const N: usize = 6;
    let u32s = |b: &[u8]| -> Vec<u32> { b.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect() };
    let bytes_of = |v: &[u32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    for ranks in rank_counts(cx, 1) {
        let (devices, channels) = group(cx, ranks)?;
        let word = |r: usize, i: usize| (r * 1000 + i) as u32;
        // Each rank's send buffer: ranks x N words, word (r, i) at i.
        let sends: Vec<Buffer> = (0..ranks)
            .map(|r| {
                buffer(&devices[r], 4 * N * ranks, &bytes_of(&(0..N * ranks).map(|i| word(r, i)).collect::<Vec<_>>()))
            })
            .collect::<Result<_, _>>()?;
        let fresh = |r: usize| buffer(&devices[r], 4 * N * ranks, &[]);
        let check = |what: &str,
                     outs: &[Buffer],
                     outcomes: Vec<hal::Result<()>>,
                     want: &dyn Fn(usize) -> Option<Vec<u32>>|
         -> CaseResult {
            for (r, outcome) in outcomes.into_iter().enumerate() {
                outcome.ctx(format!("{what}, {ranks} ranks, rank {r}"))?;
                if let Some(want) = want(r) {
                    let got = u32s(&cx.bytes(&outs[r])?);
                    ensure_eq!(got[..want.len()], want[..], "{what}, {ranks} ranks, rank {r}");
                }
            }
            Ok(())
        };
        let root = ranks - 1;
        let n = N as u64;
        // Broadcast from the last rank.
        let outs: Vec<Buffer> = (0..ranks).map(fresh).collect::<Result<_, _>>()?;
        let outcomes = run_all(&devices, &channels, |r| {
            let args = CollectiveArgs::new(CollectiveOp::Broadcast { root }, ElementType::U32, n).recv(&outs[r]);
            if r == root { args.send(&sends[r]) } else { args }
        })?;
        check("broadcast", &outs, outcomes, &|_| Some((0..N).map(|i| word(root, i)).collect()))?;
        // Sum-reduce to the last rank.
        let outs: Vec<Buffer> = (0..ranks).map(fresh).collect::<Result<_, _>>()?;
        let outcomes = run_all(&devices, &channels, |r| {
            let args = CollectiveArgs::new(CollectiveOp::Reduce { op: ReduceOp::Sum, root }, ElementType::U32, n)
                .send(&sends[r]);
            if r == root { args.recv(&outs[r]) } else { args }
        })?;
        let sum = |i: usize| (0..ranks).map(|r| word(r, i)).sum::<u32>();
        check("reduce", &outs, outcomes, &|r| (r == root).then(|| (0..N).map(sum).collect()))?;
        // All-gather of each rank's first N words.
        let outs: Vec<Buffer> = (0..ranks).map(fresh).collect::<Result<_, _>>()?;
        let outcomes = run_all(&devices, &channels, |r| {
            CollectiveArgs::new(CollectiveOp::AllGather, ElementType::U32, n).send(&sends[r]).recv(&outs[r])
        })?;
        check("all-gather", &outs, outcomes, &|_| {
            Some((0..ranks).flat_map(|q| (0..N).map(move |i| word(q, i))).collect())
        })?;
        // Reduce-scatter: rank r gets block r summed over ranks.
        let outs: Vec<Buffer> = (0..ranks).map(fresh).collect::<Result<_, _>>()?;
        let outcomes = run_all(&devices, &channels, |r| {
            CollectiveArgs::new(CollectiveOp::ReduceScatter(ReduceOp::Sum), ElementType::U32, n)
                .send(&sends[r])
                .recv(&outs[r])
        })?;
        check("reduce-scatter", &outs, outcomes, &|r| Some((0..N).map(|i| sum(r * N + i)).collect()))?;
        // All-to-all: block j of rank i's result is block i of rank j's send.
        let outs: Vec<Buffer> = (0..ranks).map(fresh).collect::<Result<_, _>>()?;
        let outcomes = run_all(&devices, &channels, |r| {
            CollectiveArgs::new(CollectiveOp::AllToAll, ElementType::U32, n).send(&sends[r]).recv(&outs[r])
        })?;
        check("all-to-all", &outs, outcomes, &|i| {
            Some((0..ranks).flat_map(|j| (0..N).map(move |k| word(j, i * N + k))).collect())
        })?;
        // Barrier.
        let outcomes =
            run_all(&devices, &channels, |_| CollectiveArgs::new(CollectiveOp::Barrier, ElementType::U8, 0))?;
        check("barrier", &[], outcomes, &|_| None)?;
    }
    Ok(())
}

/// Sends and receives pair up between two ranks by their own order, whatever the other ranks
/// do meanwhile: with 4 ranks, 0 sends to 1 and 2 sends to 3 (twice each, different data), then
/// 1 sends back to 0; every receiver holds what its peer sent.
pub(crate) fn send_and_receive_pairs(cx: &Cx) -> CaseResult {
    if rank_counts(cx, 4).is_empty() {
        return Err(CaseError::Skip("needs 4 ranks".into()));
    }
    let (devices, channels) = group(cx, 4)?;
    const N: u64 = 16;
    let data = |from: usize, round: u32| -> Vec<u8> {
        (0..N).flat_map(|i| (from as u32 * 100 + round * 10 + i as u32).to_le_bytes()).collect()
    };
    let submit = |rank: usize, op: CollectiveOp, buffer: &Buffer, s: &Semaphore, value: u64| -> CaseResult {
        let args = CollectiveArgs::new(op, ElementType::U32, N);
        let args = if matches!(op, CollectiveOp::Send { .. }) { args.send(buffer) } else { args.recv(buffer) };
        devices[rank]
            .queue(0)
            .ctx("queue")?
            .collective(&[], &channels[rank], args, &[sv(s, value)])
            .ctx(format!("rank {rank} {}", op.name()))
    };
    let sems: Vec<Semaphore> =
        devices.iter().map(|d| d.create_semaphore(0).ctx("semaphore")).collect::<Result<_, _>>()?;
    let mut received = Vec::new();
    for round in 0..2u32 {
        for (from, to) in [(0usize, 1usize), (2, 3)] {
            let out = buffer(&devices[from], (4 * N) as usize, &data(from, round))?;
            let into = buffer(&devices[to], (4 * N) as usize, &[])?;
            let value = u64::from(round) + 1;
            submit(from, CollectiveOp::Send { peer: to }, &out, &sems[from], value)?;
            submit(to, CollectiveOp::Recv { peer: from }, &into, &sems[to], value)?;
            received.push((from, round, into, to));
        }
    }
    let back = buffer(&devices[1], (4 * N) as usize, &data(1, 7))?;
    let at_zero = buffer(&devices[0], (4 * N) as usize, &[])?;
    submit(0, CollectiveOp::Recv { peer: 1 }, &at_zero, &sems[0], 3)?;
    submit(1, CollectiveOp::Send { peer: 0 }, &back, &sems[1], 3)?;
    for (rank, s) in sems.iter().enumerate() {
        let last = if rank < 2 { 3 } else { 2 };
        cx.wait(s, last)?;
    }
    for (from, round, into, to) in &received {
        ensure_eq!(cx.bytes(into)?, data(*from, *round), "round {round}: rank {to} from rank {from}");
    }
    ensure_eq!(cx.bytes(&at_zero)?, data(1, 7), "rank 0 from rank 1");
    Ok(())
}

/// Rank 1's all-reduce waits on a semaphore that fails: every rank's all-reduce fails (no hang),
/// the others' status naming rank 1's failure. The next all-reduce on the same channel (sequence
/// numbers still aligned) works on every rank, or, on a driver whose channel dies with an abandoned
/// collective (NCCL), fails at once on every rank with that status.
pub(crate) fn failure_on_one_rank_fails_every_rank(cx: &Cx) -> CaseResult {
    let counts = rank_counts(cx, 2);
    if counts.is_empty() {
        return Err(CaseError::Skip("needs 2 ranks".into()));
    }
    if let Some(reason) = cx.fixture().abandon_blocks_peers() {
        return Err(CaseError::Skip(format!("the driver as configured cannot release the other ranks: {reason}")));
    }
    if cx.fixture().channel_dies_on_abandon() {
        cx.note("the channel dies with the abandoned collective: the next one must fail, not hang");
    }
    for ranks in counts {
        let (devices, channels) = group(cx, ranks)?;
        let gate = devices[1].create_semaphore(0).ctx("gate")?;
        let bufs: Vec<Buffer> = (0..ranks).map(|r| buffer(&devices[r], 16, &[1, 0, 0, 0])).collect::<Result<_, _>>()?;
        let mut signals = Vec::new();
        for rank in 0..ranks {
            let s = devices[rank].create_semaphore(0).ctx("semaphore")?;
            let waits = if rank == 1 { vec![sv(&gate, 1)] } else { vec![] };
            let args = CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::U32, 4)
                .send(&bufs[rank])
                .recv(&bufs[rank]);
            devices[rank]
                .queue(0)
                .ctx("queue")?
                .collective(&waits, &channels[rank], args, &[sv(&s, 1)])
                .ctx("submit")?;
            signals.push(s);
        }
        gate.fail(Error::data_loss("ctest: rank 1's input was lost"));
        for (rank, s) in signals.iter().enumerate() {
            let e = cx.wait_failed(s, 1, StatusCode::DataLoss)?;
            ensure!(e.message().contains("rank 1's input was lost"), "{ranks} ranks, rank {rank}: {e}");
        }
        let outcomes = run_all(&devices, &channels, |r| {
            CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::U32, 4)
                .send(&bufs[r])
                .recv(&bufs[r])
        })?;
        for (rank, outcome) in outcomes.into_iter().enumerate() {
            if cx.fixture().channel_dies_on_abandon() {
                // The channel is dead (NCCL aborted it): the next collective fails at once, no hang.
                let e = outcome.err().ok_or_else(|| CaseError::Fail(format!("rank {rank}: a dead channel ran")))?;
                ensure!(e.message().contains("rank 1's input was lost"), "{ranks} ranks, rank {rank}: {e}");
                continue;
            }
            outcome.ctx(format!("{ranks} ranks: the next all-reduce, rank {rank}"))?;
            ensure_eq!(cx.bytes(&bufs[rank])?[..4], (ranks as u32).to_le_bytes(), "{ranks} ranks, rank {rank}");
        }
    }
    Ok(())
}

/// How a rank leaves a channel without submitting its part.
#[derive(Clone, Copy, Debug)]
enum Leaving {
    /// Its last handle of the channel is dropped, then its device.
    DropsItsChannel,
    /// Its device is dropped; its channel handle stays.
    DropsItsDevice,
}

/// A rank that has not submitted yet is waited for; a rank that left is not: with 2 and 4 ranks,
/// every rank but 1 submits an all-reduce, still pending while rank 1 holds its channel without
/// submitting; rank 1 then submits and every rank gets the sum. The others submit a second
/// all-reduce and rank 1 leaves as `leaving` says without submitting its part: theirs fail
/// `Unavailable` (within the suite's bound, never a hang) naming rank 1, and so does a third
/// submitted after it left.
fn a_rank_that_leaves(cx: &Cx, leaving: Leaving) -> CaseResult {
    let counts = rank_counts(cx, 2);
    if counts.is_empty() {
        return Err(CaseError::Skip("needs 2 ranks".into()));
    }
    let sum =
        |b: &Buffer| CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::U32, 4).send(b).recv(b);
    for ranks in counts {
        // Rank 1's device is the case's alone (the context keeps the others), so it can be dropped.
        let mut devices = vec![cx.device().clone()];
        let own = next_rank_device(cx, &devices, || cx.fixture().create_device().ctx("rank 1's device"))?;
        devices.push(own);
        while devices.len() < ranks {
            let device = next_rank_device(cx, &devices, || cx.other_device())?;
            devices.push(device);
        }
        let (mut devices, mut channels) = channels_on(devices)?;
        let bufs: Vec<Buffer> = (0..ranks).map(|r| buffer(&devices[r], 16, &[1, 0, 0, 0])).collect::<Result<_, _>>()?;
        let signals: Vec<Semaphore> =
            devices.iter().map(|d| d.create_semaphore(0).ctx("semaphore")).collect::<Result<_, _>>()?;
        let submit = |r: usize, value: u64| -> CaseResult {
            devices[r]
                .queue(0)
                .ctx("queue")?
                .collective(&[], &channels[r], sum(&bufs[r]), &[sv(&signals[r], value)])
                .ctx(format!("{ranks} ranks: rank {r}'s all-reduce {value}"))
        };
        // One thread per rank that submits first: NCCL may block a first collective until its
        // peers arrive.
        let (pending, late) = std::thread::scope(|scope| {
            let early: Vec<_> =
                (0..ranks).filter(|&r| r != 1).map(|r| (r, scope.spawn(move || submit(r, 1)))).collect();
            let pending = cx.still_pending(&signals[0], 1, &format!("{ranks} ranks: before rank 1 submitted"));
            let late = submit(1, 1);
            for (r, join) in early {
                join.join().unwrap_or_else(|_| Err(CaseError::Fail(format!("rank {r}'s submission panicked"))))?;
            }
            Ok::<_, CaseError>((pending, late))
        })?;
        pending?;
        late?;
        for (r, s) in signals.iter().enumerate() {
            cx.wait(s, 1)?;
            ensure_eq!(cx.bytes(&bufs[r])?[..4], (ranks as u32).to_le_bytes(), "{ranks} ranks, rank {r}'s sum");
        }
        for r in (0..ranks).filter(|&r| r != 1) {
            submit(r, 2)?;
        }
        let kept = match leaving {
            Leaving::DropsItsChannel => {
                drop(channels.remove(1));
                drop(devices.remove(1));
                None
            }
            Leaving::DropsItsDevice => {
                drop(devices.remove(1));
                Some(channels.remove(1))
            }
        };
        // Ranks 0, 2, 3 are now at 0, 1, 2.
        let stayed = |i: usize| if i == 0 { 0 } else { i + 1 };
        for (i, s) in signals.iter().enumerate().filter(|&(r, _)| r != 1).map(|(_, s)| s).enumerate() {
            let e = cx.wait_failed(s, 2, StatusCode::Unavailable)?;
            ensure!(
                e.message().contains("rank 1"),
                "{ranks} ranks, {leaving:?}: rank {}: names no rank: {e}",
                stayed(i)
            );
        }
        let after: Vec<Semaphore> =
            devices.iter().map(|d| d.create_semaphore(0).ctx("semaphore")).collect::<Result<_, _>>()?;
        for (i, device) in devices.iter().enumerate() {
            let buffer = &bufs[stayed(i)];
            device
                .queue(0)
                .ctx("queue")?
                .collective(&[], &channels[i], sum(buffer), &[sv(&after[i], 1)])
                .ctx(format!("{ranks} ranks: rank {}'s all-reduce after rank 1 left", stayed(i)))?;
        }
        for (i, s) in after.iter().enumerate() {
            let e = cx.wait_failed(s, 1, StatusCode::Unavailable)?;
            ensure!(
                e.message().contains("rank 1"),
                "{ranks} ranks, {leaving:?}: rank {}'s all-reduce after rank 1 left: names no rank: {e}",
                stayed(i)
            );
        }
        drop(kept);
    }
    Ok(())
}

/// A rank whose last channel handle (and then its device) is dropped without submitting its part
/// fails the all-reduce the other ranks wait for, and every later one, `Unavailable` naming it;
/// before that, a rank that has not submitted yet is waited for (see [`a_rank_that_leaves`]).
pub(crate) fn a_rank_that_drops_its_channel_fails_the_others_collectives(cx: &Cx) -> CaseResult {
    a_rank_that_leaves(cx, Leaving::DropsItsChannel)
}

/// A rank whose device is dropped while its channel handle lives (it can never submit again)
/// fails the all-reduce the other ranks wait for, and every later one, `Unavailable` naming it
/// (see [`a_rank_that_leaves`]).
pub(crate) fn a_rank_whose_device_drops_fails_the_others_collectives(cx: &Cx) -> CaseResult {
    a_rank_that_leaves(cx, Leaving::DropsItsDevice)
}

/// What is refused, and with which status, on a one-rank channel: a rank outside the channel or a
/// count of 0 (`InvalidArgument`), a root or peer that does not exist and ranges too small
/// (`OutOfRange`), a missing buffer, a send to oneself, an average of integers and a channel of
/// another device (`InvalidArgument`); nothing is signalled, and the channel still works after.
pub(crate) fn arguments_checked(cx: &Cx) -> CaseResult {
    let (devices, channels) = group(cx, 1)?;
    let id = devices[0].create_channel_id().ctx("id")?;
    expect_code(devices[0].create_channel(&id, 1, 1), StatusCode::InvalidArgument, "rank 1 of 1")?;
    expect_code(devices[0].create_channel(&id, 0, 0), StatusCode::InvalidArgument, "0 ranks")?;
    let small = buffer(&devices[0], 8, &[])?;
    let big = buffer(&devices[0], 64, &[])?;
    let s = devices[0].create_semaphore(0).ctx("semaphore")?;
    let q = devices[0].queue(0).ctx("queue")?;
    let all_reduce = |op| CollectiveArgs::new(CollectiveOp::AllReduce(op), ElementType::U32, 4);
    let refused: [(CollectiveArgs, StatusCode, &str); 7] = [
        (all_reduce(ReduceOp::Sum).send(&big), StatusCode::InvalidArgument, "no recv buffer"),
        (all_reduce(ReduceOp::Sum).send(&big).recv(&small), StatusCode::OutOfRange, "recv too small"),
        (all_reduce(ReduceOp::Avg).send(&big).recv(&big), StatusCode::InvalidArgument, "avg of u32"),
        (
            CollectiveArgs::new(CollectiveOp::Broadcast { root: 1 }, ElementType::U32, 4).recv(&big),
            StatusCode::OutOfRange,
            "root 1 of 1",
        ),
        (
            CollectiveArgs::new(CollectiveOp::Send { peer: 0 }, ElementType::U32, 4).send(&big),
            StatusCode::InvalidArgument,
            "send to itself",
        ),
        (
            CollectiveArgs::new(CollectiveOp::AllGather, ElementType::U32, 4).send(&big).recv(&small),
            StatusCode::OutOfRange,
            "all-gather of 16 bytes into 8",
        ),
        (
            CollectiveArgs::new(CollectiveOp::Recv { peer: 5 }, ElementType::U32, 4).recv(&big),
            StatusCode::OutOfRange,
            "peer 5",
        ),
    ];
    for (args, code, what) in refused {
        expect_code(q.collective(&[], &channels[0], args, &[sv(&s, 1)]), code, what)?;
    }
    let other = cx.other_device()?;
    let other_id = other.create_channel_id().ctx("the other device's id")?;
    let theirs = other.create_channel(&other_id, 0, 1).ctx("the other device's channel")?;
    let args = all_reduce(ReduceOp::Sum).send(&big).recv(&big);
    expect_code(
        q.collective(&[], &theirs, args, &[sv(&s, 1)]),
        StatusCode::InvalidArgument,
        "another device's channel",
    )?;
    cx.still_pending(&s, 1, "after refused collectives")?;
    // Nothing was used up: the channel still runs a collective.
    let outcomes = run_all(&devices, &channels, |_| all_reduce(ReduceOp::Max).send(&big).recv(&big))?;
    outcomes.into_iter().collect::<hal::Result<Vec<()>>>().ctx("the collective after refusals")?;
    Ok(())
}

/// Runs `f(rank)` on one thread per rank, as a process per GPU would (NCCL may block a rank's
/// first collective until its peers arrive); each rank's result, in rank order.
fn per_rank<T: Send>(ranks: usize, f: impl Fn(usize) -> Result<T, CaseError> + Sync) -> Result<Vec<T>, CaseError> {
    std::thread::scope(|scope| {
        let f = &f;
        let joins: Vec<_> = (0..ranks).map(|rank| scope.spawn(move || f(rank))).collect();
        joins
            .into_iter()
            .map(|join| join.join().unwrap_or_else(|_| Err(CaseError::Fail("a rank's thread panicked".into()))))
            .collect()
    })
}

/// A reusable command buffer per rank (fill and update, then an all-reduce of the rank's input,
/// then a copy of the sum into binding slot 0) executed 3 times with a table with new inputs written between executes: each
/// execute's collective pairs with the other ranks' same execute, every rank holds that round's
/// sums after the copy, and the fill recorded before the all-reduce never shows.
pub(crate) fn command_buffer_all_reduce_executed_repeatedly(cx: &Cx) -> CaseResult {
    const N: usize = 8;
    let bytes = 4 * N;
    for ranks in rank_counts(cx, 1) {
        let (devices, channels) = group(cx, ranks)?;
        let fresh =
            |r: usize| -> Result<Vec<Buffer>, CaseError> { (0..3).map(|_| buffer(&devices[r], bytes, &[])).collect() };
        // Per rank: input, sum, out.
        let buffers: Vec<Vec<Buffer>> = (0..ranks).map(fresh).collect::<Result<_, _>>()?;
        let steps: Vec<CommandBuffer> = (0..ranks)
            .map(|r| -> Result<CommandBuffer, CaseError> {
                let [input, sum, out] = [&buffers[r][0], &buffers[r][1], &buffers[r][2]];
                let cb = devices[r].create_command_buffer(CommandBufferMode::Reusable).ctx("command buffer")?;
                cb.fill(sum, 0, bytes as u64, 0xDEAD_BEEFu32).ctx("fill")?;
                cb.update(out, 0, &[0xAB; 4 * N]).ctx("update")?;
                cb.barrier().ctx("barrier")?;
                let args = CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::U32, N as u64)
                    .send(input)
                    .recv(sum);
                cb.collective(&channels[r], args).ctx(format!("rank {r}: recording the all-reduce"))?;
                cb.barrier().ctx("barrier")?;
                // The copy's target is binding slot 0: a table's execute numbers its collectives too.
                cb.copy(sum, 0, BufferRef::slot(0), 0, bytes as u64).ctx("copy")?;
                cb.end().ctx("end")?;
                Ok(cb)
            })
            .collect::<Result<_, _>>()?;
        let done: Vec<Semaphore> =
            devices.iter().map(|d| d.create_semaphore(0).ctx("semaphore")).collect::<Result<_, _>>()?;
        for round in 1..=3u64 {
            let word = |r: usize, i: usize| (round as usize * 1000 + r * 10 + i) as u32;
            for (r, rank_buffers) in buffers.iter().enumerate() {
                let input: Vec<u32> = (0..N).map(|i| word(r, i)).collect();
                rank_buffers[0].write(0, &to_bytes(&input)).ctx("writing the input")?;
            }
            per_rank(ranks, |r| {
                let queue = devices[r].queue(0).ctx("queue")?;
                let table = [BufferBinding::whole(&buffers[r][2])];
                queue
                    .execute_with_bindings(&[sv(&done[r], round - 1)], &steps[r], &table, &[sv(&done[r], round)])
                    .ctx(format!("rank {r}: execute {round}"))
            })?;
            for s in &done {
                cx.wait(s, round)?;
            }
            let expected: Vec<u32> = (0..N).map(|i| (0..ranks).map(|r| word(r, i)).sum()).collect();
            for (r, rank_buffers) in buffers.iter().enumerate() {
                ensure_eq!(cx.words(&rank_buffers[1])?, expected, "{ranks} ranks, execute {round}, rank {r}'s sum");
                ensure_eq!(cx.words(&rank_buffers[2])?, expected, "{ranks} ranks, execute {round}, rank {r}'s copy");
            }
        }
    }
    Ok(())
}

/// Queue collectives and executes of a command buffer holding two collectives, interleaved on one
/// channel (a queue sum, an execute, a queue min, the execute again, a queue barrier), each rank
/// submitting in the same order: they pair by submission order, whatever kind each is: the
/// in-place sum of the command buffer ran twice (its result is `ranks` times the first sum), its
/// all-gather holds every rank's block, and the queue collectives their results.
pub(crate) fn command_buffer_and_queue_collectives_share_one_order(cx: &Cx) -> CaseResult {
    const N: usize = 4;
    let u32s = |words: Vec<u32>| -> Vec<u8> { to_bytes(&words) };
    numbers_taken_at_submission(cx)?;
    for ranks in rank_counts(cx, 1) {
        let (devices, channels) = group(cx, ranks)?;
        let n = N as u64;
        let (a_of, b_of, c_of, d_of) = (
            |r: usize, i: usize| (r + 1 + i) as u32,
            |r: usize, i: usize| (r * 7 + i) as u32,
            |r: usize, i: usize| (r * 100 + i) as u32,
            |r: usize, i: usize| (50 + i - r) as u32,
        );
        // Per rank: a (queue sum), b (command buffer sum), c and g (command buffer all-gather), d (queue min).
        let rank_buffers = |r: usize| -> Result<Vec<Buffer>, CaseError> {
            let d = &devices[r];
            Ok(vec![
                buffer(d, 4 * N, &u32s((0..N).map(|i| a_of(r, i)).collect()))?,
                buffer(d, 4 * N, &u32s((0..N).map(|i| b_of(r, i)).collect()))?,
                buffer(d, 4 * N, &u32s((0..N).map(|i| c_of(r, i)).collect()))?,
                buffer(d, 4 * N * ranks, &[])?,
                buffer(d, 4 * N, &u32s((0..N).map(|i| d_of(r, i)).collect()))?,
            ])
        };
        let buffers: Vec<Vec<Buffer>> = (0..ranks).map(rank_buffers).collect::<Result<_, _>>()?;
        let steps: Vec<CommandBuffer> = (0..ranks)
            .map(|r| -> Result<CommandBuffer, CaseError> {
                let [b, c, g] = [&buffers[r][1], &buffers[r][2], &buffers[r][3]];
                let cb = devices[r].create_command_buffer(CommandBufferMode::Reusable).ctx("command buffer")?;
                let sum = CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::U32, n);
                cb.collective(&channels[r], sum.send(b).recv(b)).ctx("recording the sum")?;
                let gather = CollectiveArgs::new(CollectiveOp::AllGather, ElementType::U32, n).send(c).recv(g);
                cb.collective(&channels[r], gather).ctx("recording the all-gather")?;
                cb.end().ctx("end")?;
                Ok(cb)
            })
            .collect::<Result<_, _>>()?;
        let done = per_rank(ranks, |r| {
            let (queue, channel, bufs) = (devices[r].queue(0).ctx("queue")?, &channels[r], &buffers[r]);
            let s = devices[r].create_semaphore(0).ctx("semaphore")?;
            let in_place = |op, buffer: &Buffer| CollectiveArgs::new(op, ElementType::U32, n).send(buffer).recv(buffer);
            let what = |step: &str| format!("rank {r}: {step}");
            queue
                .collective(&[], channel, in_place(CollectiveOp::AllReduce(ReduceOp::Sum), &bufs[0]), &[sv(&s, 1)])
                .ctx(what("queue sum"))?;
            queue.execute(&[sv(&s, 1)], &steps[r], &[sv(&s, 2)]).ctx(what("first execute"))?;
            queue
                .collective(
                    &[sv(&s, 2)],
                    channel,
                    in_place(CollectiveOp::AllReduce(ReduceOp::Min), &bufs[4]),
                    &[sv(&s, 3)],
                )
                .ctx(what("queue min"))?;
            queue.execute(&[sv(&s, 3)], &steps[r], &[sv(&s, 4)]).ctx(what("second execute"))?;
            let barrier = CollectiveArgs::new(CollectiveOp::Barrier, ElementType::U8, 0);
            queue.collective(&[sv(&s, 4)], channel, barrier, &[sv(&s, 5)]).ctx(what("queue barrier"))?;
            Ok(s)
        })?;
        for s in &done {
            cx.wait(s, 5)?;
        }
        let first_sum = |i: usize| (0..ranks).map(|r| b_of(r, i)).sum::<u32>();
        let a: Vec<u32> = (0..N).map(|i| (0..ranks).map(|r| a_of(r, i)).sum()).collect();
        let b: Vec<u32> = (0..N).map(|i| ranks as u32 * first_sum(i)).collect();
        let g: Vec<u32> = (0..ranks).flat_map(|q| (0..N).map(move |i| c_of(q, i))).collect();
        let d: Vec<u32> = (0..N).map(|i| (0..ranks).map(|r| d_of(r, i)).min().unwrap_or(0)).collect();
        for (r, bufs) in buffers.iter().enumerate() {
            ensure_eq!(cx.words(&bufs[0])?, a, "{ranks} ranks, rank {r}: the queue sum");
            ensure_eq!(cx.words(&bufs[1])?, b, "{ranks} ranks, rank {r}: the command buffer's sum, twice");
            ensure_eq!(cx.words(&bufs[3])?, g, "{ranks} ranks, rank {r}: the command buffer's all-gather");
            ensure_eq!(cx.words(&bufs[4])?, d, "{ranks} ranks, rank {r}: the queue min");
        }
    }
    Ok(())
}

/// On one rank: an execute held behind a gate takes its collectives' numbers when it is submitted,
/// after the queue collective submitted before it and before the one submitted after it, and a
/// second execute of the same command buffer takes new ones (the device's report lists them); once
/// the gate opens everything runs.
fn numbers_taken_at_submission(cx: &Cx) -> CaseResult {
    let (devices, channels) = group(cx, 1)?;
    let (device, channel) = (&devices[0], &channels[0]);
    let data = buffer(device, 16, &to_bytes(&[3; 4]))?;
    let sum =
        || CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::U32, 4).send(&data).recv(&data);
    let cb = device.create_command_buffer(CommandBufferMode::Reusable).ctx("command buffer")?;
    cb.collective(channel, sum()).ctx("recording the all-reduce")?;
    cb.collective(channel, CollectiveArgs::new(CollectiveOp::Barrier, ElementType::U8, 0)).ctx("the barrier")?;
    cb.end().ctx("end")?;
    let (queue, gate, s) =
        (device.queue(0).ctx("queue")?, device.create_semaphore(0).ctx("gate")?, device.create_semaphore(0).ctx("s")?);
    queue.collective(&[], channel, sum(), &[sv(&s, 1)]).ctx("queue all-reduce #0")?;
    queue.execute(&[sv(&s, 1), sv(&gate, 1)], &cb, &[sv(&s, 2)]).ctx("first execute")?;
    queue.collective(&[sv(&s, 2)], channel, sum(), &[sv(&s, 3)]).ctx("queue all-reduce #3")?;
    queue.execute(&[sv(&s, 3)], &cb, &[sv(&s, 4)]).ctx("second execute")?;
    let report = device.report();
    for held in ["(all-reduce #1, barrier #2)", "all-reduce #3", "(all-reduce #4, barrier #5)"] {
        ensure!(report.contains(held), "the held work does not show {held}: {report}");
    }
    gate.signal(1).ctx("opening the gate")?;
    cx.wait(&s, 4)?;
    ensure_eq!(cx.words(&data)?, [3; 4], "one rank's sums");
    Ok(())
}

/// `CommandBuffer::collective` checks its arguments when it records, as `Queue::collective` does:
/// a channel of another device, a buffer of another device, a missing buffer and a send to oneself
/// are `InvalidArgument`, a range too small and a root that does not exist `OutOfRange`; nothing
/// is recorded (the buffer's one valid collective runs), and recording after `end` is
/// `FailedPrecondition`.
pub(crate) fn command_buffer_collective_arguments_checked(cx: &Cx) -> CaseResult {
    let (devices, channels) = group(cx, 1)?;
    let small = buffer(&devices[0], 8, &[])?;
    let big = buffer(&devices[0], 64, &to_bytes(&[5; 16]))?;
    let other = cx.other_device()?;
    let foreign = other.allocate_buffer(BufferParams::host_visible(), 64).ctx("the other device's buffer")?;
    let other_id = other.create_channel_id().ctx("the other device's id")?;
    let theirs = other.create_channel(&other_id, 0, 1).ctx("the other device's channel")?;
    let cb = devices[0].create_command_buffer(CommandBufferMode::OneShot).ctx("command buffer")?;
    let sum = || CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::U32, 4);
    let refused: [(&Channel, CollectiveArgs, StatusCode, &str); 7] = [
        (&theirs, sum().send(&big).recv(&big), StatusCode::InvalidArgument, "another device's channel"),
        (&channels[0], sum().send(&foreign).recv(&big), StatusCode::InvalidArgument, "another device's buffer"),
        (&channels[0], sum().send(&big), StatusCode::InvalidArgument, "no recv buffer"),
        (&channels[0], sum().send(&big).recv(&small), StatusCode::OutOfRange, "recv too small"),
        (
            &channels[0],
            CollectiveArgs::new(CollectiveOp::Broadcast { root: 1 }, ElementType::U32, 4).recv(&big),
            StatusCode::OutOfRange,
            "root 1 of 1",
        ),
        (
            &channels[0],
            CollectiveArgs::new(CollectiveOp::Reduce { op: ReduceOp::Sum, root: 3 }, ElementType::U32, 4).send(&big),
            StatusCode::OutOfRange,
            "reduce to root 3 of 1",
        ),
        (
            &channels[0],
            CollectiveArgs::new(CollectiveOp::Send { peer: 0 }, ElementType::U32, 4).send(&big),
            StatusCode::InvalidArgument,
            "send to itself",
        ),
    ];
    for (channel, args, code, what) in refused {
        expect_code(cb.collective(channel, args), code, what)?;
    }
    // The one valid collective: a sum over one rank leaves the words as they are, then a copy
    // shows it ran before the commands after it.
    cb.collective(&channels[0], sum().send(&big).recv(&big)).ctx("the valid collective")?;
    cb.copy(&big, 0, &small, 0, 8).ctx("copy")?;
    cb.end().ctx("end")?;
    expect_code(cb.collective(&channels[0], sum().send(&big).recv(&big)), StatusCode::FailedPrecondition, "after end")?;
    let done = devices[0].create_semaphore(0).ctx("semaphore")?;
    devices[0].queue(0).ctx("queue")?.execute(&[], &cb, &[sv(&done, 1)]).ctx("execute")?;
    cx.wait(&done, 1)?;
    ensure_eq!(cx.words(&small)?, [5, 5], "the copy after the collective");
    Ok(())
}

/// Each rank executes a command buffer holding two collectives (an all-reduce and a barrier);
/// rank 1's execute waits on a semaphore that fails, so it never runs: every rank's execute fails
/// (no hang) with the failure's code, the others' status naming rank 1. Executing the same command
/// buffers again then works on every rank (the sequence numbers stayed aligned), or, on a driver
/// whose channel dies with an abandoned collective (NCCL), fails at once on every rank.
pub(crate) fn command_buffer_collective_abandoned_fails_every_rank(cx: &Cx) -> CaseResult {
    let counts = rank_counts(cx, 2);
    if counts.is_empty() {
        return Err(CaseError::Skip("needs 2 ranks".into()));
    }
    if let Some(reason) = cx.fixture().abandon_blocks_peers() {
        return Err(CaseError::Skip(format!("the driver as configured cannot release the other ranks: {reason}")));
    }
    let dies = cx.fixture().channel_dies_on_abandon();
    if dies {
        cx.note("the channel dies with the abandoned collectives: the next execute must fail, not hang");
    }
    for ranks in counts {
        let (devices, channels) = group(cx, ranks)?;
        let gate = devices[1].create_semaphore(0).ctx("gate")?;
        let bufs: Vec<Buffer> = (0..ranks).map(|r| buffer(&devices[r], 16, &[1, 0, 0, 0])).collect::<Result<_, _>>()?;
        let outs: Vec<Buffer> = (0..ranks).map(|r| buffer(&devices[r], 16, &[])).collect::<Result<_, _>>()?;
        let steps: Vec<CommandBuffer> = (0..ranks)
            .map(|r| -> Result<CommandBuffer, CaseError> {
                let cb = devices[r].create_command_buffer(CommandBufferMode::Reusable).ctx("command buffer")?;
                let sum = CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::U32, 4)
                    .send(&bufs[r])
                    .recv(&bufs[r]);
                cb.collective(&channels[r], sum).ctx("recording the all-reduce")?;
                let barrier = CollectiveArgs::new(CollectiveOp::Barrier, ElementType::U8, 0);
                cb.collective(&channels[r], barrier).ctx("recording the barrier")?;
                cb.copy(&bufs[r], 0, &outs[r], 0, 16).ctx("copy")?;
                cb.end().ctx("end")?;
                Ok(cb)
            })
            .collect::<Result<_, _>>()?;
        let signals = per_rank(ranks, |r| {
            let s = devices[r].create_semaphore(0).ctx("semaphore")?;
            let waits = if r == 1 { vec![sv(&gate, 1)] } else { vec![] };
            devices[r].queue(0).ctx("queue")?.execute(&waits, &steps[r], &[sv(&s, 1)]).ctx(format!("rank {r}"))?;
            Ok(s)
        })?;
        gate.fail(Error::data_loss("ctest: the gate's producer was lost"));
        for (r, s) in signals.iter().enumerate() {
            let e = cx.wait_failed(s, 1, StatusCode::DataLoss)?;
            ensure!(e.message().contains("the gate's producer was lost"), "{ranks} ranks, rank {r}: {e}");
            ensure!(r == 1 || e.message().contains("rank 1"), "{ranks} ranks, rank {r}: names no rank: {e}");
        }
        // Where abandoning aborts the collectives in flight (the channel dies), the stream goes on
        // past them: the commands after them may run, on whatever the aborted collective left. The
        // rank whose execute did not run never copies.
        for (r, out) in outs.iter().enumerate().filter(|&(r, _)| r == 1 || !dies) {
            ensure_eq!(cx.bytes(out)?, [0; 16], "{ranks} ranks, rank {r}: the copy after a failed collective ran");
        }
        let again = per_rank(ranks, |r| {
            let s = devices[r].create_semaphore(0).ctx("semaphore")?;
            devices[r].queue(0).ctx("queue")?.execute(&[], &steps[r], &[sv(&s, 1)]).ctx(format!("rank {r} again"))?;
            Ok(s.wait(1, hal::Timeout::After(crate::context::LONG)))
        })?;
        for (r, outcome) in again.into_iter().enumerate() {
            if dies {
                let e = outcome.err().ok_or_else(|| CaseError::Fail(format!("rank {r}: a dead channel ran")))?;
                ensure!(e.message().contains("the gate's producer was lost"), "{ranks} ranks, rank {r}: {e}");
                continue;
            }
            outcome.ctx(format!("{ranks} ranks: the next execute, rank {r}"))?;
            ensure_eq!(cx.bytes(&outs[r])?[..4], (ranks as u32).to_le_bytes(), "{ranks} ranks, rank {r}");
        }
    }
    Ok(())
}
