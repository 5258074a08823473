//! All-reduce (f32 sum) through the HAL against raw NCCL in the same process, sizes 8 B to 1 GiB:
//! one thread per rank (GPU), each with a HAL device and channel and, beside them, a raw NCCL
//! communicator on its own stream (cudarc's NCCL bindings, no HAL). Both run the same sizes in turn
//! in each round; each sample enqueues `iters` all-reduces back to back and waits once on the host:
//! - `raw`: `ncclAllReduce` on a stream, then `cuStreamSynchronize` (what nccl-tests times);
//! - `hal queue`: `Queue::collective`, each waiting on the one before through a timeline semaphore;
//!   the host waits on the last value;
//! - `hal cb`: a reusable command buffer holding the one all-reduce, executed the same way;
//! - `raw p2p`: the raw loop on a second communicator whose ranks first exchanged a byte with every
//!   peer (grouped `ncclSend`/`ncclRecv`), as a communicator that also carries point-to-point
//!   traffic has: whether connected peers slow its all-reduces;
//! - `raw rec`: the raw loop with an event recorded after each all-reduce, as a stream that marks
//!   where each submission ends has: whether something between two NCCL kernels slows them.
//!
//! Prints per size the medians over rounds: time per all-reduce, bus bandwidth (NCCL's definition:
//! `bytes * 2 (n - 1) / n / time`) and the HAL/raw ratio; then, per size, the host time per
//! all-reduce spent enqueuing (raw: the `ncclAllReduce` calls; queue: the submissions), before the
//! wait: where it equals the total, the host's enqueuing is what bounds the rate.
//!
//! `cargo run --release -p bench --example allreduce_sweep -- [RANKS] [ROUNDS] [MAX_BYTES]`
//! (defaults: every GPU, 5 rounds, 1 GiB). Needs CUDA and NCCL; set `NCCL_NVLS_ENABLE=0` where the
//! machine asks for it.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use hal::driver::Driver;
use hal::{
    BufferParams, ChannelId, CollectiveArgs, CollectiveOp, CommandBufferMode, ElementType, Error, ReduceOp, Result,
    SemaphoreValue as SV, Timeout,
};

/// Sizes in bytes: 8 B, then x8 up to 1 GiB.
fn sizes(max: u64) -> Vec<u64> {
    let mut out = vec![8u64];
    while out.last().is_some_and(|&s| s * 8 <= max) {
        out.push(out.last().copied().unwrap_or(8) * 8);
    }
    if out.last() != Some(&max) && max > 8 {
        out.push(max);
    }
    out
}

/// All-reduces per sample: enough to dwarf the host wait at small sizes, few at large ones.
fn iterations(bytes: u64) -> u64 {
    match bytes {
        0..=65_536 => 200,
        65_537..=2_097_152 => 100,
        2_097_153..=33_554_432 => 40,
        _ => 10,
    }
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let driver = driver_cuda::CudaDriver::from_env();
    let gpus = driver.enumerate()?.len();
    let ranks = args.first().and_then(|a| a.parse().ok()).unwrap_or(gpus);
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let max: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1 << 30);
    if ranks == 0 || ranks > gpus {
        return Err(Error::invalid_argument(format!("{ranks} ranks on a machine with {gpus} GPUs")));
    }
    let sizes = sizes(max);
    println!("all-reduce f32 sum over {ranks} GPU(s), {rounds} rounds, medians; raw = ncclAllReduce + sync");
    let hal_id = driver_cuda::collective::unique_id()?;
    let raw_ids = [driver_cuda::collective::unique_id()?, driver_cuda::collective::unique_id()?];
    let barrier = Arc::new(Barrier::new(ranks));
    let threads: Vec<_> = (0..ranks)
        .map(|rank| {
            let (hal_id, raw_ids, barrier, sizes) = (hal_id.clone(), raw_ids.clone(), barrier.clone(), sizes.clone());
            std::thread::spawn(move || rank_main(rank, ranks, rounds, &sizes, &hal_id, &raw_ids, &barrier))
        })
        .collect();
    let mut results = Vec::new();
    for thread in threads {
        results.push(thread.join().map_err(|_| Error::internal("a rank thread panicked"))??);
    }
    // Rank 0's figures (every rank waits for the slowest, so they agree).
    let samples = &results[0];
    println!(
        "{:>10} {:>6} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10} {:>8} {:>10} {:>8}",
        "bytes",
        "iters",
        "raw us",
        "queue us",
        "cb us",
        "raw GB/s",
        "queue",
        "cb",
        "queue/raw",
        "cb/raw",
        "raw p2p us",
        "p2p/raw",
        "raw rec us",
        "rec/raw"
    );
    for (i, &bytes) in sizes.iter().enumerate() {
        let column = |k: usize| median(samples.iter().map(|r| r[i].0[k]).collect());
        let (raw, queue, cb, p2p, recorded) = (column(0), column(1), column(2), column(3), column(4));
        let bus = |t: f64| bytes as f64 * 2.0 * (ranks as f64 - 1.0) / ranks as f64 / t / 1e9;
        println!(
            "{bytes:>10} {:>6} {:>10.2} {:>10.2} {:>10.2} {:>9.2} {:>9.2} {:>9.2} {:>8.2}x {:>7.2}x {:>10.2} {:>7.2}x {:>10.2} {:>7.2}x",
            iterations(bytes),
            raw * 1e6,
            queue * 1e6,
            cb * 1e6,
            bus(raw),
            bus(queue),
            bus(cb),
            queue / raw,
            cb / raw,
            p2p * 1e6,
            p2p / raw,
            recorded * 1e6,
            recorded / raw
        );
    }
    println!("{:>10} {:>12} {:>10} {:>14} {:>10}", "bytes", "raw enq us", "raw us", "queue enq us", "queue us");
    for (i, &bytes) in sizes.iter().enumerate() {
        let column = |k: usize| median(samples.iter().map(|r| r[i].0[k]).collect());
        let enqueued = |k: usize| median(samples.iter().map(|r| r[i].1[k]).collect());
        println!(
            "{bytes:>10} {:>12.2} {:>10.2} {:>14.2} {:>10.2}",
            enqueued(0) * 1e6,
            column(0) * 1e6,
            enqueued(1) * 1e6,
            column(1) * 1e6
        );
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Per round, per size: seconds per all-reduce (raw, HAL queue operation, HAL command buffer, raw
/// with every peer connected, raw with an event recorded after each), then the enqueuing seconds
/// per all-reduce of raw and of the HAL queue operation.
type Samples = Vec<Vec<([f64; 5], [f64; 2])>>;

fn rank_main(
    rank: usize,
    ranks: usize,
    rounds: usize,
    sizes: &[u64],
    hal_id: &ChannelId,
    raw_ids: &[ChannelId; 2],
    barrier: &Barrier,
) -> Result<Samples> {
    let max = sizes.iter().copied().max().unwrap_or(8);
    let device = driver_cuda::create_device(rank)?;
    let channel = device.create_channel(hal_id, rank, ranks)?;
    let send = device.allocate_buffer(BufferParams::device_local(), max)?;
    let recv = device.allocate_buffer(BufferParams::device_local(), max)?;
    let raw = raw::Rank::new(rank, ranks, &raw_ids[0], max)?;
    let p2p = raw::Rank::new(rank, ranks, &raw_ids[1], max)?;
    p2p.connect_peers(rank, ranks)?;
    let queue = device.queue(0)?;
    let timeline = device.create_semaphore(0)?;
    let args = |bytes: u64| {
        CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::F32, bytes / 4).send(&send).recv(&recv)
    };
    // One reusable command buffer per size, holding the one all-reduce.
    let buffers = sizes
        .iter()
        .map(|&bytes| {
            let cb = device.create_command_buffer(CommandBufferMode::Reusable)?;
            cb.collective(&channel, args(bytes))?;
            cb.end()?;
            Ok(cb)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut value = 0u64;
    let mut hal_run = |size: usize, iters: u64, as_command_buffer: bool| -> Result<(Duration, Duration)> {
        let args = args(sizes[size]);
        let started = Instant::now();
        for _ in 0..iters {
            let (waits, signals) = ([SV::new(&timeline, value)], [SV::new(&timeline, value + 1)]);
            if as_command_buffer {
                queue.execute(&waits, &buffers[size], &signals)?;
            } else {
                queue.collective(&waits, &channel, args.clone(), &signals)?;
            }
            value += 1;
        }
        let enqueued = started.elapsed();
        timeline.wait(value, Timeout::After(Duration::from_secs(120)))?;
        Ok((started.elapsed(), enqueued))
    };
    // Warm every path at every size once (NCCL sets up its buffers and kernels lazily).
    for (size, &bytes) in sizes.iter().enumerate() {
        barrier.wait();
        raw.run(bytes, 2)?;
        barrier.wait();
        p2p.run(bytes, 2)?;
        barrier.wait();
        raw.run_recording(bytes, 2)?;
        barrier.wait();
        hal_run(size, 2, false)?;
        barrier.wait();
        hal_run(size, 2, true)?;
    }
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let mut round = Vec::with_capacity(sizes.len());
        for (size, &bytes) in sizes.iter().enumerate() {
            let iters = iterations(bytes);
            let per = |d: Duration| d.as_secs_f64() / iters as f64;
            barrier.wait();
            let (raw_total, raw_enqueued) = raw.run_timed(bytes, iters, std::ptr::null_mut())?;
            barrier.wait();
            let (queue_total, queue_enqueued) = hal_run(size, iters, false)?;
            barrier.wait();
            let cb_time = per(hal_run(size, iters, true)?.0);
            let (raw_time, queue_time) = (per(raw_total), per(queue_total));
            barrier.wait();
            let p2p_time = per(p2p.run(bytes, iters)?);
            barrier.wait();
            let recorded_time = per(raw.run_recording(bytes, iters)?);
            round.push((
                [raw_time, queue_time, cb_time, p2p_time, recorded_time],
                [per(raw_enqueued), per(queue_enqueued)],
            ));
        }
        samples.push(round);
    }
    drop(buffers);
    drop(device);
    Ok(samples)
}

/// The baseline: NCCL and the CUDA driver API called directly.
mod raw {
    use std::time::{Duration, Instant};

    use cudarc::driver::sys::{self as cu, CUcontext, CUdevice, CUdeviceptr, CUstream};
    use cudarc::nccl::sys as nccl;
    use driver_cuda::error::check;
    use hal::{ChannelId, Error, Result};

    /// One rank: the GPU's primary context, a stream, send and receive buffers, a communicator.
    /// Used on the thread that made it.
    pub struct Rank {
        device: CUdevice,
        context: CUcontext,
        stream: CUstream,
        send: CUdeviceptr,
        recv: CUdeviceptr,
        comm: nccl::ncclComm_t,
    }

    fn nccl_check(code: nccl::ncclResult_t, call: &str) -> Result<()> {
        if code == nccl::ncclResult_t::ncclSuccess { Ok(()) } else { Err(Error::internal(format!("{call}: {code:?}"))) }
    }

    impl Rank {
        pub fn new(rank: usize, ranks: usize, id: &ChannelId, bytes: u64) -> Result<Rank> {
            let mut device: CUdevice = 0;
            // SAFETY: the HAL device made before this ran cuInit; the out-pointer is a live local.
            check(unsafe { cu::cuDeviceGet(&mut device, rank as i32) }, "cuDeviceGet")?;
            let mut context: CUcontext = std::ptr::null_mut();
            // SAFETY: `device` is valid; the out-pointer is a live local.
            check(unsafe { cu::cuDevicePrimaryCtxRetain(&mut context, device) }, "cuDevicePrimaryCtxRetain")?;
            let mut this =
                Rank { device, context, stream: std::ptr::null_mut(), send: 0, recv: 0, comm: std::ptr::null_mut() };
            this.bind()?;
            let flags = cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
            // SAFETY: the context is current; the out-pointer is a field of a live value.
            check(unsafe { cu::cuStreamCreate(&mut this.stream, flags) }, "cuStreamCreate")?;
            // SAFETY: as above.
            check(unsafe { cu::cuMemAlloc_v2(&mut this.send, bytes as usize) }, "cuMemAlloc")?;
            // SAFETY: as above.
            check(unsafe { cu::cuMemAlloc_v2(&mut this.recv, bytes as usize) }, "cuMemAlloc")?;
            let mut unique = nccl::ncclUniqueId { internal: [0; 128] };
            for (slot, byte) in unique.internal.iter_mut().zip(id.as_bytes()) {
                *slot = *byte as std::ffi::c_char;
            }
            // SAFETY: NCCL was loaded by the HAL's probe; this GPU's context is current; it blocks
            // until every rank called it (one thread each).
            let code = unsafe { nccl::ncclCommInitRank(&mut this.comm, ranks as i32, unique, rank as i32) };
            nccl_check(code, "ncclCommInitRank")?;
            Ok(this)
        }

        /// Exchanges one byte with every other rank in one group (both ways), connecting the pairs
        /// for point-to-point transfers; then synchronizes.
        pub fn connect_peers(&self, rank: usize, ranks: usize) -> Result<()> {
            self.bind()?;
            // SAFETY: no arguments; pairs with the group end below.
            nccl_check(unsafe { nccl::ncclGroupStart() }, "ncclGroupStart")?;
            for peer in (0..ranks).filter(|&peer| peer != rank) {
                let (to, from) = (self.send + rank as u64, self.recv + peer as u64);
                // SAFETY: `to` and `from` are single bytes of this rank's buffers (at least `ranks`
                // bytes); the stream and communicator are live.
                let sent = unsafe {
                    nccl::ncclSend(
                        to as *const std::ffi::c_void,
                        1,
                        nccl::ncclDataType_t::ncclInt8,
                        peer as i32,
                        self.comm,
                        self.stream as nccl::cudaStream_t,
                    )
                };
                nccl_check(sent, "ncclSend")?;
                // SAFETY: as above.
                let received = unsafe {
                    nccl::ncclRecv(
                        from as *mut std::ffi::c_void,
                        1,
                        nccl::ncclDataType_t::ncclInt8,
                        peer as i32,
                        self.comm,
                        self.stream as nccl::cudaStream_t,
                    )
                };
                nccl_check(received, "ncclRecv")?;
            }
            // SAFETY: closes the group opened above.
            nccl_check(unsafe { nccl::ncclGroupEnd() }, "ncclGroupEnd")?;
            // SAFETY: the stream is live.
            check(unsafe { cu::cuStreamSynchronize(self.stream) }, "cuStreamSynchronize")
        }

        fn bind(&self) -> Result<()> {
            // SAFETY: the context is retained by `self`.
            check(unsafe { cu::cuCtxSetCurrent(self.context) }, "cuCtxSetCurrent")
        }

        /// `iters` all-reduces of `bytes` back to back, then a stream sync.
        pub fn run(&self, bytes: u64, iters: u64) -> Result<Duration> {
            Ok(self.run_timed(bytes, iters, std::ptr::null_mut())?.0)
        }

        /// [`run`](Self::run) with one event recorded after each all-reduce.
        pub fn run_recording(&self, bytes: u64, iters: u64) -> Result<Duration> {
            self.bind()?;
            let mut event: cu::CUevent = std::ptr::null_mut();
            let flags = cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
            // SAFETY: the context is current; the out-pointer is a live local.
            check(unsafe { cu::cuEventCreate(&mut event, flags) }, "cuEventCreate")?;
            let timed = self.run_timed(bytes, iters, event);
            // SAFETY: made above; the stream that recorded it was synchronized by `run_timed`.
            unsafe { cu::cuEventDestroy_v2(event) };
            Ok(timed?.0)
        }

        /// `iters` all-reduces (each followed by a record of `event` unless it is null), then a
        /// stream sync: the whole time and the time until the last call returned.
        pub fn run_timed(&self, bytes: u64, iters: u64, event: cu::CUevent) -> Result<(Duration, Duration)> {
            self.bind()?;
            let started = Instant::now();
            for _ in 0..iters {
                // SAFETY: both buffers hold at least `bytes`; the stream and communicator are live.
                let code = unsafe {
                    nccl::ncclAllReduce(
                        self.send as *const std::ffi::c_void,
                        self.recv as *mut std::ffi::c_void,
                        (bytes / 4) as usize,
                        nccl::ncclDataType_t::ncclFloat32,
                        nccl::ncclRedOp_t::ncclSum,
                        self.comm,
                        self.stream as nccl::cudaStream_t,
                    )
                };
                nccl_check(code, "ncclAllReduce")?;
                if !event.is_null() {
                    // SAFETY: the event and stream are live, of the current context.
                    check(unsafe { cu::cuEventRecord(event, self.stream) }, "cuEventRecord")?;
                }
            }
            let enqueued = started.elapsed();
            // SAFETY: the stream is live.
            check(unsafe { cu::cuStreamSynchronize(self.stream) }, "cuStreamSynchronize")?;
            Ok((started.elapsed(), enqueued))
        }
    }

    impl Drop for Rank {
        fn drop(&mut self) {
            let _ = self.bind();
            // SAFETY: each handle was made by `new` (or is null / 0 and skipped) and is released once;
            // the stream is drained first.
            unsafe {
                if !self.stream.is_null() {
                    cu::cuStreamSynchronize(self.stream);
                }
                if !self.comm.is_null() {
                    nccl::ncclCommDestroy(self.comm);
                }
                if self.send != 0 {
                    cu::cuMemFree_v2(self.send);
                }
                if self.recv != 0 {
                    cu::cuMemFree_v2(self.recv);
                }
                if !self.stream.is_null() {
                    cu::cuStreamDestroy_v2(self.stream);
                }
                cu::cuDevicePrimaryCtxRelease_v2(self.device);
            }
        }
    }
}
