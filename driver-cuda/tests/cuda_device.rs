//! The CUDA driver on a real GPU: transfers, dispatches, graphs, queue-ordered allocation, cross-queue
//! chains through event-backed semaphores, wait-before-signal, failure propagation and teardown.
//! Without the CUDA driver library at build time every test is ignored (see `tests/common/mod.rs`).
//! The trapping kernel lives in `cuda_fault.rs` (its own process: a fault poisons the GPU's primary
//! context for the process).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use driver_cuda::CudaPreparedCommands;
use hal::driver::{BufferExt, CommandBufferExt};
use hal::{
    BindingRef, BufferBinding, BufferParams, BufferRef, CommandBufferMode, Error, ExecutableFormat, ExecutableSource,
    SemaphoreValue as SV, StatusCode, Timeout,
};

macro_rules! require_cuda {
    () => {
        if !require_cuda() {
            return;
        }
    };
}

fn is_graph(command_buffer: &hal::CommandBuffer) -> bool {
    let prepared = command_buffer.prepared().unwrap();
    prepared.as_any().downcast_ref::<CudaPreparedCommands>().unwrap().is_graph()
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn probe_and_device_info() {
    require_cuda!();
    let driver = driver_cuda::CudaDriver::default();
    let infos = hal::driver::Driver::enumerate(&driver).unwrap();
    assert!(!infos.is_empty());
    for info in &infos {
        println!("cuda device {}: {} {:?}", info.ordinal, info.name, info.properties);
        assert_eq!(info.driver, "cuda");
        assert!(info.max_workgroup_threads >= 1024);
        // Every GPU since compute capability 3.0 has these grid and block limits.
        assert_eq!(info.max_workgroup_count, [(1 << 31) - 1, 65535, 65535]);
        assert_eq!(info.max_workgroup_size, [1024, 1024, 64]);
        let cc = info.properties.iter().find(|(n, _)| n == "compute_capability").unwrap();
        assert!(cc.1.contains('.'));
        assert!(info.properties.iter().any(|(n, v)| n == "multiprocessors" && v.parse::<u32>().unwrap() > 0));
    }
    let mut registry = hal::Registry::new();
    driver_cuda::register(&mut registry);
    let device = registry.create_device("cuda", 0).unwrap();
    assert_eq!(device.info().queue_count, 4);
    assert_eq!(registry.create_device("cuda", 999).unwrap_err().code(), StatusCode::OutOfRange);
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn fill_patterns_update_copy_write_read() {
    require_cuda!();
    let device = device();
    let q = device.queue(0).unwrap();
    let a = device_buffer(&device, 1024);
    let b = device_buffer(&device, 1024);
    let s = device.create_semaphore(0).unwrap();
    assert_eq!(read_back(&device, &a), vec![0u8; 1024], "device memory starts zeroed");
    q.fill(&[], &a, 3, 5, 0xABu8, &[SV::new(&s, 1)]).unwrap();
    q.fill(&[], &a, 10, 6, 0xBEEFu16, &[SV::new(&s, 2)]).unwrap();
    q.fill(&[], &a, 20, 300, 0x0403_0201u32, &[SV::new(&s, 3)]).unwrap();
    q.update(&[], &a, 400, &[9, 8, 7], &[SV::new(&s, 4)]).unwrap();
    q.write(&[], &a, 500, vec![5u8; 100], &[SV::new(&s, 5)]).unwrap();
    q.copy(&[SV::new(&s, 5)], &a, 0, &b, 0, 1024, &[SV::new(&s, 6)]).unwrap();
    let partial = q.read(&[SV::new(&s, 6)], &b, 398, 8, &[SV::new(&s, 7)]).unwrap();
    s.wait(7, T).unwrap();
    assert_eq!(partial.take().unwrap(), [0, 0, 9, 8, 7, 0, 0, 0]);
    let bytes = read_back(&device, &b);
    assert_eq!(&bytes[..3], &[0, 0, 0]);
    assert_eq!(&bytes[3..8], &[0xAB; 5]);
    assert_eq!(&bytes[8..10], &[0, 0]);
    assert_eq!(&bytes[10..16], &[0xEF, 0xBE, 0xEF, 0xBE, 0xEF, 0xBE]);
    assert!(bytes[20..320].chunks(4).all(|c| c == [1, 2, 3, 4]));
    assert!(bytes[320..400].iter().all(|&x| x == 0));
    assert_eq!(&bytes[500..600], &[5u8; 100][..]);
    assert!(bytes[600..].iter().all(|&x| x == 0));

    // Host-visible memory: filled and copied on the device, mapped by the host.
    let h = host_buffer(&device, 256);
    assert!(h.read_to_vec().unwrap().iter().all(|&x| x == 0));
    h.write(0, &[1, 2, 3, 4]).unwrap();
    q.fill(&[], &h, 64, 64, 0x1122_3344u32, &[SV::new(&s, 8)]).unwrap();
    q.copy(&[SV::new(&s, 8)], &h, 0, &h, 128, 4, &[SV::new(&s, 9)]).unwrap();
    q.copy(&[SV::new(&s, 9)], &h, 64, &a, 0, 64, &[SV::new(&s, 10)]).unwrap();
    s.wait(10, T).unwrap();
    let host = h.read_to_vec().unwrap();
    assert!(host[64..128].chunks(4).all(|c| c == [0x44, 0x33, 0x22, 0x11]));
    assert_eq!(&host[128..132], &[1, 2, 3, 4]);
    assert!(read_back(&device, &a)[..64].chunks(4).all(|c| c == [0x44, 0x33, 0x22, 0x11]));
    // Device memory cannot be mapped.
    assert_eq!(a.read_to_vec().unwrap_err().code(), StatusCode::PermissionDenied);
    // A large write and read go through bigger staging blocks.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let c = device_buffer(&device, big.len() as u64);
    q.write(&[], &c, 0, big.clone(), &[SV::new(&s, 11)]).unwrap();
    let back = q.read(&[SV::new(&s, 11)], &c, 0, big.len() as u64, &[SV::new(&s, 12)]).unwrap();
    s.wait(12, T).unwrap();
    assert!(back.take().unwrap() == big);
    device.resource_usage();
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn dispatches_follow_the_abi() {
    require_cuda!();
    let device = device();
    let Some(exe) = kernels(&device) else { return };
    let q = device.queue(1).unwrap();
    let s = device.create_semaphore(0).unwrap();
    let ep = |name: &str| exe.entry_point(name).unwrap();

    // fill_u32 on 500 elements bound at byte offset 8: bytes outside the binding stay zero.
    let n = 500u64;
    let out = device_buffer(&device, 4 * n + 16);
    let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    cb.dispatch(&exe, ep("fill_u32"), [2, 1, 1], &[n as u32, 0xC0FFEE], &[BufferBinding::range(&out, 8, 4 * n)])
        .unwrap();
    cb.end().unwrap();
    assert!(!is_graph(&cb), "a single command launches directly");
    q.execute(&[], &cb, &[SV::new(&s, 1)]).unwrap();
    s.wait(1, T).unwrap();
    let words = u32s(&read_back(&device, &out));
    assert_eq!(&words[..2], &[0, 0]);
    assert!(words[2..2 + n as usize].iter().all(|&w| w == 0xC0FFEE));
    assert_eq!(&words[2 + n as usize..], &[0, 0]);

    // The same dispatch in a reusable buffer replays as a one-node graph, executed twice.
    let again = device_buffer(&device, 4 * n + 16);
    let cb = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    cb.dispatch(&exe, ep("fill_u32"), [2, 1, 1], &[n as u32, 0xBEEF], &[BufferBinding::range(&again, 8, 4 * n)])
        .unwrap();
    cb.end().unwrap();
    assert!(is_graph(&cb), "a reusable buffer of one command replays as a graph");
    let r = device.create_semaphore(0).unwrap();
    q.execute(&[], &cb, &[SV::new(&r, 1)]).unwrap();
    q.execute(&[SV::new(&r, 1)], &cb, &[SV::new(&r, 2)]).unwrap();
    r.wait(2, T).unwrap();
    let words = u32s(&read_back(&device, &again));
    assert_eq!(&words[..2], &[0, 0]);
    assert!(words[2..2 + n as usize].iter().all(|&w| w == 0xBEEF));
    assert_eq!(&words[2 + n as usize..], &[0, 0]);

    // add_f32 then scale_offset_f32 (float constants as bits, a 3-D grid) in one graph.
    let n = 1000usize;
    let bytes = 4 * n as u64;
    let (a, b, c, d) = (
        host_buffer(&device, bytes),
        host_buffer(&device, bytes),
        device_buffer(&device, bytes),
        device_buffer(&device, bytes),
    );
    a.write(0, &f32_bytes((0..n).map(|i| i as f32))).unwrap();
    b.write(0, &f32_bytes((0..n).map(|i| 0.5 * i as f32))).unwrap();
    let cb = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    let whole = |buffers: &[&hal::Buffer]| buffers.iter().map(|b| BufferBinding::whole(b)).collect::<Vec<_>>();
    cb.dispatch(&exe, ep("add_f32"), [4, 1, 1], &[n as u32], &whole(&[&a, &b, &c])).unwrap();
    cb.barrier().unwrap();
    let constants = hal::constants![n as u32, 2.0f32, -1.0f32];
    cb.dispatch(&exe, ep("scale_offset_f32"), [4, 2, 2], &constants, &whole(&[&c, &d])).unwrap();
    cb.end().unwrap();
    assert!(is_graph(&cb));
    q.execute(&[], &cb, &[SV::new(&s, 2)]).unwrap();
    s.wait(2, T).unwrap();
    assert_eq!(f32s(&read_back(&device, &c)), (0..n).map(|i| 1.5 * i as f32).collect::<Vec<_>>());
    assert_eq!(f32s(&read_back(&device, &d)), (0..n).map(|i| 3.0 * i as f32 - 1.0).collect::<Vec<_>>());

    // A 7x5x3 grid: every workgroup runs once with its own id.
    let ids = device_buffer(&device, 4 * 105);
    let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    cb.dispatch(&exe, ep("grid_ids"), [7, 5, 3], &[], &[BufferBinding::whole(&ids)]).unwrap();
    cb.end().unwrap();
    q.execute(&[], &cb, &[SV::new(&s, 3)]).unwrap();
    s.wait(3, T).unwrap();
    let mut expected = Vec::new();
    for z in 0..3u32 {
        for y in 0..5u32 {
            for x in 0..7u32 {
                expected.push(x | y << 10 | z << 20);
            }
        }
    }
    assert_eq!(u32s(&read_back(&device, &ids)), expected);
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn mixed_graph_with_transfers_and_updates_replays() {
    require_cuda!();
    let device = device();
    let Some(exe) = kernels(&device) else { return };
    let q = device.queue(2).unwrap();
    let s = device.create_semaphore(0).unwrap();
    let buf = device_buffer(&device, 4096);
    let host = host_buffer(&device, 4096);
    let cb = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    cb.fill(&buf, 0, 4096, 0u32).unwrap();
    cb.barrier().unwrap();
    cb.update(&buf, 16, &u32_bytes([7, 8, 9])).unwrap();
    cb.barrier().unwrap();
    cb.dispatch(&exe, exe.entry_point("add_one_u32").unwrap(), [4, 1, 1], &[1024], &[BufferBinding::whole(&buf)])
        .unwrap();
    cb.barrier().unwrap();
    cb.copy(&buf, 0, &host, 0, 4096).unwrap();
    cb.barrier().unwrap();
    cb.fill(&host, 4000, 96, 0xFFu8).unwrap();
    cb.end().unwrap();
    let graph = is_graph(&cb);
    println!("mixed command buffer replays as a graph: {graph}");
    for round in 1..=3u64 {
        q.execute(&[], &cb, &[SV::new(&s, round)]).unwrap();
        s.wait(round, T).unwrap();
        let words = u32s(&host.read_to_vec().unwrap());
        assert_eq!(&words[..7], &[1, 1, 1, 1, 8, 9, 10], "round {round}");
        assert!(words[7..1000].iter().all(|&w| w == 1));
        assert!(words[1000..].iter().all(|&w| w == u32::MAX));
        host.write(0, &[0u8; 4096]).unwrap();
    }
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn reusable_ten_dispatch_graph_runs_many_times() {
    require_cuda!();
    let device = device();
    let Some(exe) = kernels(&device) else { return };
    let q = device.queue(0).unwrap();
    let n = 4096u32;
    let data = device_buffer(&device, 4 * u64::from(n));
    let cb = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    for _ in 0..10 {
        cb.dispatch(&exe, exe.entry_point("add_one_u32").unwrap(), [16, 1, 1], &[n], &[BufferBinding::whole(&data)])
            .unwrap();
        cb.barrier().unwrap();
    }
    cb.end().unwrap();
    assert!(is_graph(&cb), "a 10-dispatch buffer replays as a graph");
    let prepared = cb.prepared().unwrap();
    assert_eq!(prepared.as_any().downcast_ref::<CudaPreparedCommands>().unwrap().graph_nodes(), 10);
    let s = device.create_semaphore(0).unwrap();
    let runs = 200u64;
    let start = Instant::now();
    for i in 1..=runs {
        // Each execution waits on the previous one's value: covered by its event, so device-side.
        q.execute(&[SV::new(&s, i - 1)], &cb, &[SV::new(&s, i)]).unwrap();
    }
    s.wait(runs, T).unwrap();
    let elapsed = start.elapsed();
    println!(
        "ten-dispatch graph: {runs} dependent executions in {elapsed:?} ({:.1} us each)",
        elapsed.as_secs_f64() * 1e6 / runs as f64
    );
    assert!(u32s(&read_back(&device, &data)).iter().all(|&w| w == 10 * runs as u32));
    device.resource_usage();
}

/// A buffer that fills the first 4 KiB of `t` with `value` words, adds one to each, and copies
/// them into `out`.
fn fill_add_one_copy(
    device: &hal::Device,
    exe: &hal::Executable,
    mode: CommandBufferMode,
    t: &hal::Buffer,
    value: u32,
    out: &hal::Buffer,
) -> hal::CommandBuffer {
    let cb = device.create_command_buffer(mode).unwrap();
    cb.fill(t, 0, 4096, value).unwrap();
    cb.barrier().unwrap();
    cb.dispatch(exe, exe.entry_point("add_one_u32").unwrap(), [4, 1, 1], &[1024], &[BufferBinding::whole(t)]).unwrap();
    cb.barrier().unwrap();
    cb.copy(t, 0, out, 0, 4096).unwrap();
    cb.end().unwrap();
    cb
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn alloca_dealloca_in_queue_order_and_direct_replay_of_transients() {
    require_cuda!();
    let device = device();
    let Some(exe) = kernels(&device) else { return };
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
    let s = device.create_semaphore(0).unwrap();
    let t = q0.alloca(&[], BufferParams::device_local(), 4096, &[SV::new(&s, 1)]).unwrap();
    assert_eq!(t.size(), 4096);
    let out = device_buffer(&device, 4096);
    // Recorded before the alloca ran: the address is read at execute, so this replays directly.
    let cb = fill_add_one_copy(&device, &exe, CommandBufferMode::Reusable, &t, 41, &out);
    assert!(!is_graph(&cb), "transient buffers replay directly");
    q1.execute(&[SV::new(&s, 1)], &cb, &[SV::new(&s, 2)]).unwrap();
    q0.dealloca(&[SV::new(&s, 2)], &t, &[SV::new(&s, 3)]).unwrap();
    s.wait(3, T).unwrap();
    assert!(u32s(&read_back(&device, &out)).iter().all(|&w| w == 42));
    assert_eq!(t.backend().device_address(), 0, "released after the dealloca");

    // Host-visible transients are mapped only between alloca and dealloca.
    let h = q0.alloca(&[], BufferParams::host_visible(), 64, &[SV::new(&s, 4)]).unwrap();
    s.wait(4, T).unwrap();
    q0.fill(&[], &h, 0, 64, 3u8, &[SV::new(&s, 5)]).unwrap();
    s.wait(5, T).unwrap();
    assert_eq!(h.read_to_vec().unwrap(), vec![3; 64]);
    q0.dealloca(&[], &h, &[SV::new(&s, 6)]).unwrap();
    s.wait(6, T).unwrap();
    assert_eq!(h.read_to_vec().unwrap_err().code(), StatusCode::FailedPrecondition);

    // Use before alloca fails the submission's signals, clearly; a double dealloca is refused at the call.
    let late = q0.alloca(&[SV::new(&s, 100)], BufferParams::device_local(), 64, &[SV::new(&s, 101)]).unwrap();
    let f = device.create_semaphore(0).unwrap();
    q1.fill(&[], &late, 0, 64, 0u8, &[SV::new(&f, 1)]).unwrap();
    let err = f.wait(1, T).unwrap_err();
    assert_eq!(err.code(), StatusCode::FailedPrecondition, "{err}");
    assert!(err.message().contains("has no memory"), "{err}");
    s.signal(100).unwrap();
    s.wait(101, T).unwrap();
    q0.dealloca(&[], &late, &[SV::new(&s, 102)]).unwrap();
    // A second dealloca is refused at the call (by the HAL, before the driver sees it).
    let err = q0.dealloca(&[SV::new(&s, 102)], &late, &[SV::new(&s, 103)]).unwrap_err();
    assert_eq!(err.code(), StatusCode::FailedPrecondition, "{err}");
    println!("double dealloca: {err}");

    // Many alloca/dealloca pairs stay cheap and leak nothing.
    let p = device.create_semaphore(0).unwrap();
    let start = Instant::now();
    for i in 0..500u64 {
        let b =
            q0.alloca(&[SV::new(&p, 2 * i)], BufferParams::device_local(), 1 << 20, &[SV::new(&p, 2 * i + 1)]).unwrap();
        q0.dealloca(&[SV::new(&p, 2 * i + 1)], &b, &[SV::new(&p, 2 * i + 2)]).unwrap();
    }
    p.wait(1000, T).unwrap();
    println!("500 chained alloca+dealloca pairs of 1 MiB: {:?}", start.elapsed());
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn alloca_and_dealloca_on_an_idle_queue_are_done_at_submission() {
    require_cuda!();
    let device = device();
    let Some(exe) = kernels(&device) else { return };
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
    let s = device.create_semaphore(0).unwrap();
    let t = q0.alloca(&[], BufferParams::device_local(), 4096, &[SV::new(&s, 1)]).unwrap();
    assert_eq!(s.query().unwrap(), 1, "an alloca on an idle queue is done when the call returns");
    assert_ne!(t.backend().device_address(), 0);
    // Another queue uses the memory at once: the value was reached on the host, so its stream
    // waits for nothing, and the memory must already be usable from every stream.
    let out = device_buffer(&device, 4096);
    let cb = fill_add_one_copy(&device, &exe, CommandBufferMode::OneShot, &t, 6, &out);
    q1.execute(&[SV::new(&s, 1)], &cb, &[SV::new(&s, 2)]).unwrap();
    s.wait(2, T).unwrap();
    assert!(u32s(&read_back(&device, &out)).iter().all(|&w| w == 7));
    // q1 retires its execute before q0 sees anything: q0 is idle, so the dealloca is done at once.
    q0.dealloca(&[SV::new(&s, 2)], &t, &[SV::new(&s, 3)]).unwrap();
    assert_eq!(s.query().unwrap(), 3, "a dealloca on an idle queue is done when the call returns");
    assert_eq!(t.backend().device_address(), 0, "released at submission");
    // Pairs chained on one semaphore stay on that path, and reuse the pool's memory.
    let before = device.resource_usage().memory_in_use;
    for i in 0..200u64 {
        let b = q0
            .alloca(&[SV::new(&s, 3 + 2 * i)], BufferParams::device_local(), 1 << 20, &[SV::new(&s, 4 + 2 * i)])
            .unwrap();
        assert_eq!(s.query().unwrap(), 4 + 2 * i);
        q0.dealloca(&[SV::new(&s, 4 + 2 * i)], &b, &[SV::new(&s, 5 + 2 * i)]).unwrap();
    }
    assert_eq!(s.query().unwrap(), 403);
    assert_eq!(device.resource_usage().memory_in_use, before, "every pair gave its memory back");
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn wait_before_signal_is_held_then_released() {
    require_cuda!();
    let device = device();
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
    let buf = device_buffer(&device, 256);
    let gate = device.create_semaphore(0).unwrap();
    let mid = device.create_semaphore(0).unwrap();
    let done = device.create_semaphore(0).unwrap();
    // Submitted first, signalled later: q1 waits on mid=1 which q0 will signal after the host gate.
    q1.fill(&[SV::new(&mid, 1)], &buf, 128, 128, 0x22u8, &[SV::new(&done, 1)]).unwrap();
    q0.fill(&[SV::new(&gate, 5)], &buf, 0, 128, 0x11u8, &[SV::new(&mid, 1)]).unwrap();
    assert_eq!(
        done.wait(1, Timeout::After(Duration::from_millis(50))).unwrap_err().code(),
        StatusCode::DeadlineExceeded
    );
    let report = device.report();
    assert!(report.contains(&format!("semaphore {} >= 5", gate.id())), "report names the wait: {report}");
    println!("hang report while held:\n{report}");
    // A foreign (host-only) semaphore works too.
    let foreign = hal::Semaphore::new(0);
    let other = device.create_semaphore(0).unwrap();
    q0.barrier(&[SV::new(&foreign, 1)], &[SV::new(&other, 1)]).unwrap();
    gate.signal(5).unwrap();
    done.wait(1, T).unwrap();
    let bytes = read_back(&device, &buf);
    assert_eq!(&bytes[..128], &[0x11; 128][..]);
    assert_eq!(&bytes[128..], &[0x22; 128][..]);
    foreign.signal(1).unwrap();
    other.wait(1, T).unwrap();
    device.resource_usage();
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn failures_propagate_and_other_queues_keep_working() {
    require_cuda!();
    let device = device();
    let (q0, q1, q2) = (device.queue(0).unwrap(), device.queue(1).unwrap(), device.queue(2).unwrap());
    let buf = device_buffer(&device, 64);
    let gate = device.create_semaphore(0).unwrap();
    let a = device.create_semaphore(0).unwrap();
    let b = device.create_semaphore(0).unwrap();
    q0.fill(&[SV::new(&gate, 1)], &buf, 0, 64, 1u8, &[SV::new(&a, 1)]).unwrap();
    q1.fill(&[SV::new(&a, 1)], &buf, 0, 64, 2u8, &[SV::new(&b, 1)]).unwrap();
    gate.fail(Error::data_loss("upstream broke"));
    let err = b.wait(1, T).unwrap_err();
    assert_eq!(err.code(), StatusCode::DataLoss);
    assert!(err.message().contains("upstream broke"), "{err}");
    assert_eq!(a.wait(1, T).unwrap_err().code(), StatusCode::DataLoss);
    // Already failed at submission: the signals fail at once.
    let c = device.create_semaphore(0).unwrap();
    q2.barrier(&[SV::new(&b, 1)], &[SV::new(&c, 1)]).unwrap();
    assert_eq!(c.wait(1, T).unwrap_err().code(), StatusCode::DataLoss);
    // Unrelated work on every queue still runs.
    let ok = device.create_semaphore(0).unwrap();
    for (i, q) in [&q0, &q1, &q2].into_iter().enumerate() {
        q.fill(&[], &buf, 0, 64, 7u8, &[SV::new(&ok, i as u64 + 1)]).unwrap();
        ok.wait(i as u64 + 1, T).unwrap();
    }
    assert_eq!(read_back(&device, &buf), vec![7; 64]);
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn bad_input_is_refused_clearly() {
    require_cuda!();
    let device = device();
    let Some(ptx) = ptx() else { return };
    let source = |entries: Vec<hal::EntryPointInfo>| ExecutableSource::Bytes {
        format: ExecutableFormat::Ptx,
        data: Arc::from(ptx.as_bytes()),
        entry_points: entries,
    };
    let err = device.load_executable(&source(vec![hal::EntryPointInfo::new("no_such_kernel", 64, 0, 0)])).unwrap_err();
    assert_eq!(err.code(), StatusCode::NotFound);
    assert!(err.message().contains("no_such_kernel"), "{err}");
    let err = device.load_executable(&source(vec![hal::EntryPointInfo::new("noop", 4096, 0, 0)])).unwrap_err();
    assert_eq!(err.code(), StatusCode::InvalidArgument, "{err}");
    let garbage = ExecutableSource::Bytes {
        format: ExecutableFormat::Ptx,
        data: Arc::from(&b".version 99.0\n.target sm_999\nthis is not ptx"[..]),
        entry_points: vec![hal::EntryPointInfo::new("noop", 1, 0, 0)],
    };
    let err = device.load_executable(&garbage).unwrap_err();
    println!("garbage PTX: {err}");
    assert!(err.message().contains("CUDA_ERROR_"), "{err}");
    let native = ExecutableSource::Native(Vec::new());
    assert_eq!(device.load_executable(&native).unwrap_err().code(), StatusCode::Unimplemented);
    // Allocation checks happen in hal, once for all drivers.
    let params =
        BufferParams::new(hal::MemoryType::DEVICE_LOCAL | hal::MemoryType::HOST_VISIBLE, hal::BufferUsage::DEFAULT);
    assert_eq!(device.allocate_buffer(params, 64).unwrap_err().code(), StatusCode::InvalidArgument);
    let err = device.allocate_buffer(BufferParams::device_local(), 1 << 50).unwrap_err();
    assert_eq!(err.code(), StatusCode::ResourceExhausted, "{err}");
    assert!(device.queue(4).is_err());
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn many_submissions_across_queues_then_idle() {
    require_cuda!();
    let device = device();
    let buf = device_buffer(&device, 4096);
    let queues: Vec<_> = (0..4).map(|i| device.queue(i).unwrap()).collect();
    let semaphores: Vec<_> = (0..4).map(|_| device.create_semaphore(0).unwrap()).collect();
    let rounds = 500u64;
    let start = Instant::now();
    for r in 1..=rounds {
        for q in 0..4 {
            // Each queue waits on its neighbour's previous round: a lattice of device-side waits.
            let prev = &semaphores[(q + 3) % 4];
            queues[q]
                .fill(&[SV::new(prev, r - 1)], &buf, 1024 * q as u64, 1024, r as u32, &[SV::new(&semaphores[q], r)])
                .unwrap();
        }
    }
    for s in &semaphores {
        s.wait(rounds, T).unwrap();
    }
    println!("{} fills across 4 queues in {:?}", 4 * rounds, start.elapsed());
    assert!(u32s(&read_back(&device, &buf)).iter().all(|&w| w == rounds as u32));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let usage = device.resource_usage();
        if usage.is_idle() {
            println!("idle: {usage}");
            break;
        }
        assert!(Instant::now() < deadline, "not idle: {usage}\n{}", device.report());
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn teardown_cancels_held_work_and_semaphores_outlive_the_device() {
    require_cuda!();
    let device = device();
    let q = device.queue(0).unwrap();
    let buf = device_buffer(&device, 64);
    let never = device.create_semaphore(0).unwrap();
    let held = device.create_semaphore(0).unwrap();
    let published = device.create_semaphore(0).unwrap();
    q.fill(&[SV::new(&never, 1)], &buf, 0, 64, 1u8, &[SV::new(&held, 1)]).unwrap();
    q.fill(&[], &buf, 0, 64, 2u8, &[SV::new(&published, 1)]).unwrap();
    let start = Instant::now();
    drop(q);
    drop(device);
    println!("device dropped in {:?}", start.elapsed());
    let err = held.wait(1, T).unwrap_err();
    assert_eq!(err.code(), StatusCode::Cancelled, "{err}");
    published.wait(1, T).unwrap();
    drop(buf);
    drop(published);
}

/// Ranges of a host-visible buffer's pinned memory imported again (as an embedder that
/// sub-allocates does per operation: the IREE bridge): CUDA refuses a second registration of a page,
/// so the import uses the existing mapping. Two overlapping imports at once both work in place, and
/// each release runs once, after its last use, while the buffer keeps its memory.
#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn ranges_of_pinned_buffers_import_in_place() {
    require_cuda!();
    let device = device();
    let q = device.queue(0).unwrap();
    let whole = device.allocate_buffer(BufferParams::host_visible(), 4096).unwrap();
    let base = {
        let mut mapping = whole.map(0, 4096).unwrap();
        // SAFETY: the mapping is this test's alone; the pointer is only used while `whole` lives
        // (host-visible CUDA memory stays mapped for the buffer's life).
        unsafe { mapping.as_mut_slice().as_mut_ptr() }
    };
    let releases = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let import = |offset: usize, bytes: u64| {
        let counted = releases.clone();
        let ptr = std::ptr::NonNull::new(base.wrapping_add(offset)).unwrap();
        // SAFETY: the range lies inside `whole`, which outlives both imports.
        unsafe {
            device.import_host_memory(ptr, bytes, BufferParams::host_visible(), move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
        }
        .unwrap()
    };
    let first = import(0, 2048);
    let second = import(1024, 2048);
    let s = device.create_semaphore(0).unwrap();
    q.fill(&[], &first, 0, 1024, 7u32, &[SV::new(&s, 1)]).unwrap();
    q.fill(&[SV::new(&s, 1)], &second, 1024, 2048 - 1024, 9u32, &[SV::new(&s, 2)]).unwrap();
    s.wait(2, Timeout::After(Duration::from_secs(10))).unwrap();
    drop((first, second));
    let words = whole.read_as::<u32>().unwrap();
    assert!(words[..256].iter().all(|&w| w == 7), "the first import's fill");
    assert!(words[256..512].iter().all(|&w| w == 0), "between the fills");
    assert!(words[512..768].iter().all(|&w| w == 9), "the second import's fill");
    assert!(words[768..].iter().all(|&w| w == 0), "past the second import");
    let deadline = Instant::now() + Duration::from_secs(10);
    while releases.load(std::sync::atomic::Ordering::SeqCst) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(releases.load(std::sync::atomic::Ordering::SeqCst), 2, "each release once");
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn dropped_device_memory_goes_back_to_the_driver() {
    require_cuda!();
    let device = device();
    // Two fifths of the GPU's memory, six times over: each allocation needs the last one's memory.
    let chunk = device.info().max_allocation_size / 5 * 2;
    for round in 0..6 {
        let buffer = device
            .allocate_buffer(BufferParams::device_local(), chunk)
            .unwrap_or_else(|e| panic!("round {round}: allocating {chunk} bytes after dropping the last: {e}"));
        drop(buffer);
    }
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn host_visible_memory_kept_for_reuse_comes_back_zeroed_until_trimmed() {
    require_cuda!();
    let device = device();
    let q = device.queue(0).unwrap();
    let s = device.create_semaphore(0).unwrap();
    for round in 0..4u64 {
        // The same sizes each round: from the second on, the blocks the last round dropped.
        let small = host_buffer(&device, 100);
        let large = host_buffer(&device, 3 << 20);
        for buffer in [&small, &large] {
            let bytes = buffer.read_to_vec().unwrap();
            assert!(bytes.iter().all(|&b| b == 0), "round {round}: a {}-byte host buffer is not zeroed", bytes.len());
        }
        // Dirty them from the host and from the device before they drop.
        small.write(0, &[0xAB; 100]).unwrap();
        q.fill(&[], &large, 0, 3 << 20, 0xCDu8, &[SV::new(&s, round + 1)]).unwrap();
        s.wait(round + 1, T).unwrap();
        assert!(large.read_to_vec().unwrap().iter().all(|&b| b == 0xCD));
    }
    // The last round's blocks are kept; trim gives them back.
    let kept = device.resource_usage().memory_kept;
    assert!(kept >= (3 << 20) + 4096, "{kept} bytes kept after dropping 3 MiB and 100 bytes of host memory");
    device.trim().unwrap();
    assert_eq!(device.resource_usage().memory_kept, 0);
}

/// A reusable buffer over binding slots whose first table holds a `queue_alloca` buffer replays
/// through a graph built at that execute's issue (the alloca's address is known only once it is
/// enqueued) and pointed at each later execute's buffers: transient ones at other addresses, and
/// a device-local one.
#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn slot_tables_of_alloca_buffers_replay_through_a_graph_built_at_issue() {
    require_cuda!();
    let device = device();
    let Some(exe) = kernels(&device) else { return };
    let q = device.queue(0).unwrap();
    let n = 1024u32;
    let bytes = 4 * u64::from(n);
    let cb = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    cb.fill(BufferRef::slot(0), 0, bytes, 7u32).unwrap();
    cb.barrier().unwrap();
    let add_one = exe.entry_point("add_one_u32").unwrap();
    cb.dispatch_refs(&exe, add_one, [n / 256, 1, 1], &[n], &[BindingRef::slot(0, 0, bytes)]).unwrap();
    cb.barrier().unwrap();
    cb.copy(BufferRef::slot(0), 0, BufferRef::slot(1), 0, bytes).unwrap();
    cb.end().unwrap();
    let s = device.create_semaphore(0).unwrap();
    let mut v = 0u64;
    let step = |v: &mut u64| {
        *v += 1;
        (SV::new(&s, *v - 1), SV::new(&s, *v))
    };
    for round in 0..12 {
        let out = host_buffer(&device, bytes);
        // Odd rounds hold another alloca meanwhile, so the scratch lands elsewhere in the pool.
        let pad = (round % 2 == 1).then(|| {
            let (wait, signal) = step(&mut v);
            q.alloca(&[wait], BufferParams::device_local(), 3 * bytes, &[signal]).unwrap()
        });
        let transient = round % 4 != 3;
        let (wait, signal) = step(&mut v);
        let scratch = if transient {
            q.alloca(&[wait], BufferParams::device_local(), bytes, &[signal]).unwrap()
        } else {
            q.barrier(&[wait], &[signal]).unwrap();
            device_buffer(&device, bytes)
        };
        let (wait, signal) = step(&mut v);
        let table = [BufferBinding::whole(&scratch), BufferBinding::whole(&out)];
        q.execute_with_bindings(&[wait], &cb, &table, &[signal]).unwrap();
        for buffer in pad.iter().chain(transient.then_some(&scratch)) {
            let (wait, signal) = step(&mut v);
            q.dealloca(&[wait], buffer, &[signal]).unwrap();
        }
        s.wait(v, T).unwrap();
        assert_eq!(u32s(&out.read_to_vec().unwrap()), vec![8; n as usize], "round {round} (transient: {transient})");
    }
}
