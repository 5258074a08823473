//! Vulkan and CUDA on one GPU, device to device: a Vulkan HAL device and a CUDA HAL device of the
//! same GPU (their UUIDs matched) share memory (a Vulkan buffer allocated for export, imported by
//! CUDA as `ExternalMemory::OpaqueFd`) and a timeline semaphore (a Vulkan timeline exported as an
//! opaque fd, imported by CUDA: `ExternalTimepoint::VulkanTimeline` on one side,
//! `ExternalTimepoint::CudaExternalSemaphore` on the other). Every queue operation of a round is
//! submitted before the host waits for anything: the two queues order each other on the device.
//!
//! - a Vulkan dispatch writes a pattern that a CUDA kernel reads (adding one in place, then copied
//!   out), then a CUDA copy writes another that a Vulkan read sees, bit-exact;
//! - a CUDA signal whose waits fail is made from the host, and a CUDA queue waiting on a value
//!   nobody signals makes a bounded teardown whose wait fails with `Cancelled`;
//! - the time of one Vulkan -> CUDA -> Vulkan round trip (`MEASURED:`).
//!
//! Needs a GPU with both CUDA and Vulkan (NVIDIA's driver and its Vulkan ICD). Where either is
//! missing, or no Vulkan device has CUDA device 0's UUID, or it cannot export memory and timeline
//! semaphores as opaque fds, each test prints `not run: <why>` and passes (fails under
//! `HAL_REQUIRE_CUDA=1`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use driver_vulkan::interop as vk_interop;
use hal::driver::Driver;
use hal::{BufferBinding, BufferParams, CommandBufferMode, Error, SemaphoreValue as SV, StatusCode, Timeout};

/// A CUDA device and the Vulkan device of the same GPU.
struct Pair {
    cuda: hal::Device,
    vulkan: hal::Device,
}

/// CUDA device 0 and the Vulkan device with its UUID, or `None` after a `not run:` line (a panic
/// under `HAL_REQUIRE_CUDA=1`).
fn setup() -> Option<Pair> {
    if !require_cuda() {
        return None;
    }
    let driver = driver_vulkan::VulkanDriver;
    let listed = match driver.enumerate() {
        Ok(listed) => listed,
        Err(e) => {
            not_run(&format!("Vulkan not available: {e}"));
            return None;
        }
    };
    let cuda = device();
    let uuid = driver_cuda::interop::device_uuid(&cuda).expect("CUDA device 0's UUID");
    let Some(ordinal) =
        listed.iter().position(|info| driver_cuda::interop::uuid_from_stable_id(&info.stable_id) == Some(uuid))
    else {
        let ids: Vec<&str> = listed.iter().map(|info| info.stable_id.as_str()).collect();
        not_run(&format!(
            "no Vulkan device is CUDA device 0's GPU ({}, UUID {}); Vulkan lists {ids:?}",
            cuda.info().name,
            cuda.info().stable_id
        ));
        return None;
    };
    let vulkan = driver.create_device(ordinal).expect("the Vulkan device of CUDA device 0's GPU");
    assert!(driver_cuda::interop::is_same_gpu(&cuda, &vk_interop::device_uuid(&vulkan).unwrap()).unwrap());
    let sharing = vk_interop::fd_sharing(&vulkan).unwrap();
    if !(sharing.memory_export && sharing.timeline_export) {
        not_run(&format!(
            "Vulkan device {ordinal} ({}) cannot export memory and timeline semaphores as opaque fds: {sharing:?}",
            vulkan.info().name
        ));
        return None;
    }
    Some(Pair { cuda, vulkan })
}

/// `out[i] = (i * 2654435761) ^ seed`, on the Vulkan device.
const PATTERN_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
struct C { seed: u32 }
var<immediate> c: C;
@compute @workgroup_size(64)
fn pattern(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&out) {
        out[id.x] = (id.x * 2654435761u) ^ c.seed;
    }
}
"#;

/// What [`PATTERN_WGSL`] writes, on the CPU.
fn pattern(n: u32, seed: u32) -> Vec<u32> {
    (0..n).map(|i| i.wrapping_mul(2_654_435_761) ^ seed).collect()
}

fn pattern_kernel(vulkan: &hal::Device) -> hal::Executable {
    let spirv = driver_vulkan::wgsl::compile(PATTERN_WGSL, "pattern").expect("compile the pattern kernel");
    let source = hal::ExecutableSource::Bytes {
        format: hal::ExecutableFormat::Spirv,
        data: Arc::from(spirv),
        entry_points: vec![hal::EntryPointInfo::new("pattern", 64, 1, 1)],
    };
    vulkan.load_executable(&source).expect("load the pattern kernel")
}

/// Counts the words of `got` that differ from `expected`, naming the first.
fn differences(got: &[u32], expected: &[u32]) -> (usize, String) {
    let wrong = got.iter().zip(expected).filter(|(g, e)| g != e).count();
    let first = got
        .iter()
        .zip(expected)
        .position(|(g, e)| g != e)
        .map(|i| format!("word {i}: {:#010x}, expected {:#010x}", got[i], expected[i]))
        .unwrap_or_default();
    (wrong + got.len().abs_diff(expected.len()), first)
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn vulkan_writes_cuda_reads_then_cuda_writes_vulkan_reads_submitted_up_front() {
    let Some(Pair { cuda, vulkan }) = setup() else { return };
    let n: u32 = 1 << 20;
    let bytes = u64::from(n) * 4;
    let (vq, cq) = (vulkan.queue(0).unwrap(), cuda.queue(0).unwrap());

    // The shared objects: Vulkan's, exported; CUDA's, imported.
    let exported = vk_interop::allocate_exportable_buffer(&vulkan, bytes).unwrap();
    let timeline = vk_interop::create_exportable_timeline(&vulkan, 0).unwrap();
    let semaphore = driver_cuda::interop::import_semaphore_fd(&cuda, timeline.export_fd().unwrap()).unwrap();
    let memory = vk_interop::export_memory(&exported).unwrap();
    println!("exported {} bytes (dedicated: {}) for a buffer of {bytes}", memory.length, memory.dedicated);
    let released = Arc::new(AtomicUsize::new(0));
    let shared = {
        let released = released.clone();
        // SAFETY: the memory lives while either API references it; CUDA's uses are ordered with
        // Vulkan's through the timeline below.
        unsafe {
            cuda.import_external_memory(memory.into_external(), BufferParams::device_local(), move || {
                released.fetch_add(1, Ordering::SeqCst);
            })
        }
        .unwrap()
    };
    assert!(shared.size() >= bytes);

    let a_seed = 0x5EED_0001;
    let b: Vec<u32> = pattern(n, 0xB0B0_B0B0).iter().map(|w| w.rotate_left(7)).collect();
    let kernel = pattern_kernel(&vulkan);
    let cb = vulkan.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    cb.dispatch(&kernel, 0, [n / 64, 1, 1], &[a_seed], &[BufferBinding::whole(&exported)]).unwrap();
    cb.end().unwrap();
    let Some(cuda_kernels) = kernels(&cuda) else { return };
    let add_one = cuda.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    let entry = cuda_kernels.entry_point("add_one_u32").unwrap();
    add_one.dispatch(&cuda_kernels, entry, [n / 256, 1, 1], &[n], &[BufferBinding::whole(&shared)]).unwrap();
    add_one.end().unwrap();
    let cuda_copy = cuda.allocate_buffer(BufferParams::device_local(), bytes).unwrap();
    let cuda_source = cuda.allocate_buffer(BufferParams::device_local(), bytes).unwrap();
    let (vs, cs) = (vulkan.create_semaphore(0).unwrap(), cuda.create_semaphore(0).unwrap());

    // Everything submitted before the host waits for anything.
    // (a) Vulkan: the dispatch writes pattern A, then the timeline reaches 1.
    vq.execute(&[], &cb, &[SV::new(&vs, 1)]).unwrap();
    // SAFETY: the timeline is the driver's and held by the operation until it retired.
    unsafe { vq.signal_external(&[SV::new(&vs, 1)], timeline.at(1), &[]) }.unwrap();
    // CUDA: waits for 1 on the device, then a kernel adds one to every word of the shared memory in
    // place, and the result is copied out and read back.
    // SAFETY: the imported semaphore is held by the operation until it retired.
    unsafe { cq.wait_external(&[], semaphore.at(1), &[SV::new(&cs, 1)]) }.unwrap();
    cq.execute(&[SV::new(&cs, 1)], &add_one, &[SV::new(&cs, 2)]).unwrap();
    cq.copy(&[SV::new(&cs, 2)], &shared, 0, &cuda_copy, 0, bytes, &[SV::new(&cs, 3)]).unwrap();
    let a_read = cq.read(&[SV::new(&cs, 3)], &cuda_copy, 0, bytes, &[]).unwrap();
    // (b) CUDA: after the copy out, writes pattern B into the shared memory, then signals 2.
    cq.write_values(&[], &cuda_source, 0, &b, &[]).unwrap();
    cq.copy(&[SV::new(&cs, 3)], &cuda_source, 0, &shared, 0, bytes, &[SV::new(&cs, 4)]).unwrap();
    // SAFETY: as above.
    unsafe { cq.signal_external(&[SV::new(&cs, 4)], semaphore.at(2), &[SV::new(&cs, 5)]) }.unwrap();
    // Vulkan: waits for 2 on the device, then reads the exported buffer.
    // SAFETY: as above.
    unsafe { vq.wait_external(&[], timeline.at(2), &[SV::new(&vs, 2)]) }.unwrap();
    let b_read = vq.read(&[SV::new(&vs, 2)], &exported, 0, bytes, &[]).unwrap();

    let got_a = a_read.wait_as::<u32>(T).expect("CUDA's read of what Vulkan wrote");
    let expected_a: Vec<u32> = pattern(n, a_seed).iter().map(|w| w.wrapping_add(1)).collect();
    let (wrong, first) = differences(&got_a, &expected_a);
    assert_eq!(
        wrong, 0,
        "(a) the CUDA kernel's result differs in {wrong} of {n} words from Vulkan's pattern + 1 ({first})"
    );
    let got_b = b_read.wait_as::<u32>(T).expect("Vulkan's read of what CUDA wrote");
    let (wrong, first) = differences(&got_b, &b);
    assert_eq!(wrong, 0, "(b) Vulkan read {wrong} of {n} words different from what CUDA wrote ({first})");
    cs.wait(5, T).unwrap();
    drop((add_one, cuda_kernels));
    assert_eq!(timeline.value().unwrap(), 2, "both sides' values reached the one timeline");
    println!(
        "MEASURED: Vulkan -> CUDA and CUDA -> Vulkan through shared memory and a timeline, {n} words each way, bit-exact"
    );

    vulkan.wait_semaphores(hal::WaitMode::All, &[SV::new(&vs, 2)], T).unwrap();
    assert_eq!(released.load(Ordering::SeqCst), 0, "CUDA's import is alive: not released yet");
    drop(shared);
    cuda.queue(0).unwrap().barrier(&[], &[]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while released.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(released.load(Ordering::SeqCst), 1, "the import's release runs once");
    drop((semaphore, cb, exported));
    drop(cuda);
    drop(vulkan);
    drop(timeline);
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn a_failed_cuda_signal_comes_from_the_host_and_an_unsignalled_wait_is_a_bounded_cancelled_teardown() {
    let Some(Pair { cuda, vulkan }) = setup() else { return };
    let timeline = vk_interop::create_exportable_timeline(&vulkan, 0).unwrap();
    let semaphore = driver_cuda::interop::import_semaphore_fd(&cuda, timeline.export_fd().unwrap()).unwrap();
    let queue = cuda.queue(1).unwrap();

    // A signal whose wait fails: the HAL signal fails, and the value comes anyway, from the host.
    let (gate, s) = (cuda.create_semaphore(0).unwrap(), cuda.create_semaphore(0).unwrap());
    // SAFETY: the imported semaphore is held by the operation until it retired.
    unsafe { queue.signal_external(&[SV::new(&gate, 1)], semaphore.at(3), &[SV::new(&s, 1)]) }.unwrap();
    assert!(!timeline.wait(3, Duration::from_millis(100)).unwrap(), "not before the HAL wait is reached");
    gate.fail(Error::aborted("the producer gave up"));
    assert_eq!(s.wait(1, T).expect_err("the wait failed").code(), StatusCode::Aborted);
    assert!(timeline.wait(3, Duration::from_secs(5)).unwrap(), "the value came anyway, from the host");

    // A wait on a value nobody signals: a timeout, other queues keep working, then a bounded
    // teardown that signals the value from the host and cancels the wait.
    let waited = cuda.create_semaphore(0).unwrap();
    // SAFETY: as above.
    unsafe { queue.wait_external(&[], semaphore.at(7), &[SV::new(&waited, 1)]) }.unwrap();
    let behind = cuda.allocate_buffer(BufferParams::device_local(), 4).unwrap();
    queue.fill(&[], &behind, 0, 4, 1u32, &[SV::new(&waited, 2)]).unwrap();
    let timeout = waited.wait(1, Timeout::After(Duration::from_millis(200))).expect_err("7 never comes");
    assert_eq!(timeout.code(), StatusCode::DeadlineExceeded, "{timeout}");
    let other = cuda.create_semaphore(0).unwrap();
    cuda.queue(0).unwrap().barrier(&[], &[SV::new(&other, 1)]).unwrap();
    other.wait(1, T).unwrap();
    assert_eq!(timeline.value().unwrap(), 3);

    let start = Instant::now();
    drop(queue);
    drop(cuda);
    let teardown = start.elapsed();
    println!("MEASURED: teardown with a CUDA queue waiting on a timeline value nobody signals: {teardown:?}");
    assert!(teardown < Duration::from_secs(5), "teardown is bounded: {teardown:?}");
    let status = waited.wait(1, T).expect_err("the wait was cancelled");
    assert_eq!(status.code(), StatusCode::Cancelled, "{status}");
    assert!(status.message().contains("signal from the host"), "{status}");
    assert_eq!(timeline.value().unwrap(), 7, "teardown released the wait by signalling the value");
    drop(semaphore);
    drop(timeline);
    drop(vulkan);
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn vulkan_to_cuda_to_vulkan_round_trip_time() {
    let Some(Pair { cuda, vulkan }) = setup() else { return };
    let timeline = vk_interop::create_exportable_timeline(&vulkan, 0).unwrap();
    let semaphore = driver_cuda::interop::import_semaphore_fd(&cuda, timeline.export_fd().unwrap()).unwrap();
    let (vq, cq) = (vulkan.queue(0).unwrap(), cuda.queue(0).unwrap());
    let vk_word = vulkan.allocate_buffer(BufferParams::device_local(), 4).unwrap();
    let cuda_word = cuda.allocate_buffer(BufferParams::device_local(), 4).unwrap();
    let done = vulkan.create_semaphore(0).unwrap();
    let (warm_up, rounds) = (20u64, 200u64);
    let mut times = Vec::new();
    for round in 0..warm_up + rounds {
        let value = 2 * round;
        let start = Instant::now();
        // Vulkan work, then the timeline reaches an odd value; CUDA waits for it, works, signals
        // the next (even) one; Vulkan waits for that. Submitted up front, one host wait at the end.
        vq.fill(&[], &vk_word, 0, 4, round as u32, &[]).unwrap();
        // SAFETY: both semaphores are held by the operations until they retired.
        unsafe {
            vq.signal_external(&[], timeline.at(value + 1), &[]).unwrap();
            cq.wait_external(&[], semaphore.at(value + 1), &[]).unwrap();
            cq.fill(&[], &cuda_word, 0, 4, round as u32, &[]).unwrap();
            cq.signal_external(&[], semaphore.at(value + 2), &[]).unwrap();
            vq.wait_external(&[], timeline.at(value + 2), &[SV::new(&done, round + 1)]).unwrap();
        }
        done.wait(round + 1, T).unwrap();
        if round >= warm_up {
            times.push(start.elapsed());
        }
    }
    times.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "MEASURED: Vulkan -> CUDA -> Vulkan round trip through a shared timeline (a HAL fill on each side, submitted \
         up front, one host wait): median {:.1} us over {rounds} rounds (min {:.1} us, p90 {:.1} us)",
        us(times[times.len() / 2]),
        us(times[0]),
        us(times[times.len() * 9 / 10])
    );
    assert_eq!(timeline.value().unwrap(), 2 * (warm_up + rounds));
    drop((vq, cq, vk_word, cuda_word));
    drop(cuda);
    drop(semaphore);
    drop(vulkan);
    drop(timeline);
}
