//! Indirect dispatches whose graph node's grid is set on the device (`src/commands/indirect_node.rs`),
//! beside the host launcher (`HAL_CUDA_INDIRECT=host`): the same counts give the same grids on both
//! paths, a count past the limits fails its own execute and no other, and the fault of one execute
//! among many in flight names that execute. Without the CUDA driver library at build time every
//! test is ignored (see `tests/common/mod.rs`).

mod common;

use common::*;
use driver_cuda::{CudaOptions, CudaPreparedCommands};
use hal::driver::CommandBufferExt;
use hal::{BindingRef, BufferBinding, BufferRef, CommandBufferMode, SemaphoreValue as SV, StatusCode};

macro_rules! require_cuda {
    () => {
        if !require_cuda() {
            return;
        }
    };
}

fn is_graph(command_buffer: &hal::CommandBuffer) -> bool {
    let prepared = command_buffer.prepared().expect("ended");
    prepared.as_any().downcast_ref::<CudaPreparedCommands>().expect("cuda").is_graph()
}

/// An execute's words, or its failure's code.
type Outcome = Result<Vec<u32>, StatusCode>;

/// What `grid_ids` writes for a grid of `count` workgroups into `words` words (zeros elsewhere).
fn expected_ids(count: [u32; 3], words: usize) -> Vec<u32> {
    let mut out = vec![0u32; words];
    if count.contains(&0) {
        return out;
    }
    for z in 0..count[2] {
        for y in 0..count[1] {
            for x in 0..count[0] {
                let linear = ((z * count[1] + y) * count[0] + x) as usize;
                out[linear] = x | (y << 10) | (z << 20);
            }
        }
    }
    out
}

/// Runs one reusable command buffer (`grid_ids` over the count in `count`) with each of `counts`,
/// one execute at a time, on a device built with `options`; returns, per count, the words written
/// or the execute's failure code. Also returns whether the buffer replayed as a graph.
fn run_counts(options: CudaOptions, counts: &[[u32; 3]]) -> Option<(bool, Vec<Outcome>)> {
    let (device, _backend) = device_with(options);
    let kernels = kernels(&device)?;
    let count = host_buffer(&device, 16);
    let out = device_buffer(&device, 4 * 64);
    let cb = device.create_command_buffer(CommandBufferMode::Reusable).expect("command buffer");
    // grid_ids: entry point 4, one binding, no constants.
    cb.dispatch_indirect(&kernels, 4, &count, 0, &[], &[BufferBinding::whole(&out)]).expect("dispatch_indirect");
    cb.end().expect("end");
    let graph = is_graph(&cb);
    let queue = device.queue(0).expect("queue 0");
    let mut results = Vec::new();
    for (i, c) in counts.iter().enumerate() {
        let s = device.create_semaphore(0).expect("semaphore");
        queue.fill(&[], &out, 0, 4 * 64, 0u32, &[SV::new(&s, 1)]).expect("zero");
        count.write_values(0, c).expect("write the count");
        queue.execute(&[SV::new(&s, 1)], &cb, &[SV::new(&s, 2)]).expect("execute");
        match s.wait(2, hal::Timeout::After(std::time::Duration::from_secs(20))) {
            Ok(()) => results.push(Ok(u32s(&read_back(&device, &out)))),
            Err(e) => {
                assert!(e.message().contains("workgroup count"), "count {i} {c:?}: {e}");
                results.push(Err(e.code()));
            }
        }
    }
    Some((graph, results))
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn device_set_grids_match_the_host_launcher() {
    require_cuda!();
    let (_device, backend) = device_with(CudaOptions::default());
    if !backend.indirect_on_device() {
        not_run("indirect dispatches cannot be set on the device here (no libcudadevrt.a? set HAL_CUDA_DEVRT)");
        return;
    }
    drop(backend);
    let limits = [(1u32 << 31) - 1, 65535, 65535];
    let counts = [[3, 2, 1], [0, 1, 1], [2, 1, 2], [1, limits[1] + 1, 1], [5, 1, 1], [4, 4, 4], [1, 1, 0], [7, 1, 1]];
    let Some((graph, on_device)) = run_counts(CudaOptions::default(), &counts) else { return };
    assert!(graph, "a reusable buffer with an indirect dispatch replays as a graph");
    let host_options = CudaOptions { indirect_on_device: false, ..CudaOptions::default() };
    let Some((graph, on_host)) = run_counts(host_options, &counts) else { return };
    assert!(!graph, "with counts read on the host, the buffer replays directly");
    for (i, count) in counts.iter().enumerate() {
        let want = if count[1] > limits[1] { Err(StatusCode::OutOfRange) } else { Ok(expected_ids(*count, 64)) };
        assert_eq!(on_device[i], want, "device path, count {count:?}");
        assert_eq!(on_host[i], want, "host path, count {count:?}");
    }
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn each_fault_fails_its_own_execute_among_many_in_flight() {
    require_cuda!();
    let (device, backend) = device_with(CudaOptions::default());
    if !backend.indirect_on_device() {
        not_run("indirect dispatches cannot be set on the device here (no libcudadevrt.a? set HAL_CUDA_DEVRT)");
        return;
    }
    let Some(kernels) = kernels(&device) else { return };
    // Slot 0: the output, slot 1: the count. Tables differ at every execute, so the graph's
    // instances are rebuilt and then updated in place, count parameter included.
    let cb = device.create_command_buffer(CommandBufferMode::Reusable).expect("command buffer");
    cb.dispatch_indirect_refs(&kernels, 4, BufferRef::slot(1), 0, &[], &[BindingRef::slot(0, 0, 4 * 64)])
        .expect("dispatch_indirect_refs");
    cb.end().expect("end");
    let executes = 200;
    let faulty = |i: usize| i % 7 == 3 || (i >= 64 && i % 64 == 3);
    let mut buffers = Vec::new();
    for i in 0..executes {
        let count = host_buffer(&device, 16);
        let x = (i % 5) as u32 + 1;
        count.write_values(0, &[x, if faulty(i) { 70000 } else { 1 }, 1]).expect("write the count");
        buffers.push((count, device_buffer(&device, 4 * 64), x));
    }
    let queue = device.queue(0).expect("queue 0");
    let semaphores: Vec<_> = (0..executes).map(|_| device.create_semaphore(0).expect("semaphore")).collect();
    for (i, (count, out, _)) in buffers.iter().enumerate() {
        let table = [BufferBinding::whole(out), BufferBinding::whole(count)];
        queue.execute_with_bindings(&[], &cb, &table, &[SV::new(&semaphores[i], 1)]).expect("execute");
    }
    for (i, s) in semaphores.iter().enumerate() {
        let waited = s.wait(1, hal::Timeout::After(std::time::Duration::from_secs(30)));
        let (_, out, x) = &buffers[i];
        if faulty(i) {
            let e = waited.expect_err(&format!("execute {i} had a count past the limits"));
            assert_eq!(e.code(), StatusCode::OutOfRange, "execute {i}: {e}");
            assert_eq!(u32s(&read_back(&device, out)), vec![0; 64], "execute {i} wrote");
        } else {
            waited.unwrap_or_else(|e| panic!("execute {i} failed: {e}"));
            assert_eq!(u32s(&read_back(&device, out)), expected_ids([*x, 1, 1], 64), "execute {i}");
        }
    }
}
