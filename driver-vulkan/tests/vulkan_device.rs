//! What the Vulkan driver does beyond the conformance suite: its storage-range limit, allocas done at
//! submission on an idle queue, and a clean `Unavailable` where there is no Vulkan device. Where no
//! device was found at build time the tests that need one are ignored (see `build.rs`).

mod common;

use std::process::Command;

use ctest::kernels::wgsl::SpirvCatalogue;
use ctest::{Kernel, KernelCatalogue};
use hal::driver::Driver;
use hal::{BufferBinding, BufferParams, BufferUsage, CommandBufferMode, ExecutableKind, MemoryType, StatusCode};

fn device() -> hal::Device {
    let mut registry = hal::Registry::new();
    driver_vulkan::register(&mut registry);
    registry.create_device(driver_vulkan::DRIVER_NAME, 0).expect("a Vulkan device")
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn a_binding_past_the_storage_buffer_range_is_refused_when_recorded_naming_the_limit() {
    let device = device();
    let limit = device.info().max_binding_length;
    assert!(limit < u64::MAX, "a Vulkan device states its maxStorageBufferRange");
    if limit > 1 << 30 {
        // NVIDIA states 4 GiB - 1: a buffer past it is more memory than a test should take.
        println!(
            "not run: the device's storage-buffer range is {limit} bytes; this test allocates past it only up to 1 GiB"
        );
        return;
    }
    let buffer =
        device.allocate_buffer(BufferParams::new(MemoryType::DEVICE_LOCAL, BufferUsage::DEFAULT), limit + 4).unwrap();
    let catalogue = SpirvCatalogue::new(driver_vulkan::wgsl::compile);
    let fill = device.load_executable(&catalogue.source(Kernel::FillU32, ExecutableKind::Spirv).unwrap()).unwrap();
    let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    let e = cb.dispatch(&fill, 0, [1, 1, 1], &[7], &[BufferBinding::range(&buffer, 0, limit + 4)]).unwrap_err();
    assert_eq!(e.code(), StatusCode::OutOfRange, "{e}");
    assert!(e.message().contains(&limit.to_string()) && e.message().contains("binding 0"), "{e}");
    // The limit itself is fine.
    cb.dispatch(&fill, 0, [1, 1, 1], &[7], &[BufferBinding::range(&buffer, 0, limit)]).unwrap();
}

/// Run by [`without_a_driver_the_device_is_unavailable_with_the_reason`] in a child whose loader
/// finds no driver.
#[test]
#[ignore = "run (with --include-ignored) by without_a_driver_the_device_is_unavailable_with_the_reason"]
fn probe_in_a_process_without_a_driver() {
    let e = driver_vulkan::VulkanDriver.probe().unwrap_err();
    let mut registry = hal::Registry::new();
    driver_vulkan::register(&mut registry);
    let created = registry.create_device(driver_vulkan::DRIVER_NAME, 0).unwrap_err();
    println!("probe: {e}; create: {created}");
    assert_eq!(e.code(), StatusCode::Unavailable, "{e}");
    assert_eq!(created.code(), StatusCode::Unavailable, "{created}");
}

#[test]
fn without_a_driver_the_device_is_unavailable_with_the_reason() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args(["probe_in_a_process_without_a_driver", "--exact", "--include-ignored", "--nocapture"])
        // The loader reads only this ICD list, and the file is not there.
        .env("VK_DRIVER_FILES", "/nonexistent/vulkan-icd.json")
        .env("VK_ICD_FILENAMES", "/nonexistent/vulkan-icd.json")
        .output()
        .expect("run this test binary");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{text}");
    assert!(text.contains("probe: UNAVAILABLE: vulkan:"), "{text}");
}

/// Adds its constant to word 0 of its buffer; spins first while word 1 of its gate is 0 (bounded, so
/// a lost gate write cannot hang the test, but long enough that a loaded machine sees it pending).
/// The gate is read with an atomic add of 0, which a compiler cannot take out of the loop (llvmpipe
/// did so with an atomic load, and the spin ended at once).
const BUMP_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@group(0) @binding(1) var<storage, read_write> gate: array<atomic<u32>>;
struct Constants { add: u32 }
var<immediate> c: Constants;
@compute @workgroup_size(1)
fn bump() {
    var spins = 0u;
    while atomicAdd(&gate[1], 0u) == 0u && spins < 4000000000u {
        spins += 1u;
    }
    data[0] += c.add;
}
"#;

/// A reusable command buffer bumping word 0 of `data` by `add`, gated by word 1 of `gate`.
fn bump_command_buffer(device: &hal::Device, data: &hal::Buffer, gate: &hal::Buffer, add: u32) -> hal::CommandBuffer {
    let source = hal::ExecutableSource::Bytes {
        format: hal::ExecutableFormat::Spirv,
        data: std::sync::Arc::from(driver_vulkan::wgsl::compile(BUMP_WGSL, "bump").unwrap()),
        entry_points: vec![hal::EntryPointInfo::new("bump", 1, 2, 1)],
    };
    let bump = device.load_executable(&source).unwrap();
    let cb = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    cb.dispatch(&bump, 0, [1, 1, 1], &[add], &[BufferBinding::whole(data), BufferBinding::whole(gate)]).unwrap();
    cb.end().unwrap();
    cb
}

fn host_buffer(device: &hal::Device, words: &[u32]) -> hal::Buffer {
    let buffer = device.allocate_buffer(BufferParams::host_visible(), 4 * words.len() as u64).unwrap();
    buffer.write_values(0, words).unwrap();
    buffer
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn a_reusable_command_buffer_executed_many_times_is_recorded_once() {
    let device = device();
    let (data, open_gate) = (host_buffer(&device, &[0]), host_buffer(&device, &[0, 1]));
    let cb = bump_command_buffer(&device, &data, &open_gate, 3);
    let done = device.create_semaphore(0).unwrap();
    let queue = device.queue(0).unwrap();
    for value in 1..=20u64 {
        queue.execute(&[], &cb, &[hal::SemaphoreValue::new(&done, value)]).unwrap();
        done.wait(value, hal::Timeout::Infinite).unwrap();
    }
    assert_eq!(data.read_as::<u32>().unwrap(), vec![60], "every execute ran");
    assert_eq!(driver_vulkan::recordings_of(&cb), Some(1), "executes one after another replay one recording");
    // Chained executes are in flight together: the recording is made for simultaneous use.
    for value in 21..=100u64 {
        let wait = [hal::SemaphoreValue::new(&done, value - 1)];
        queue.execute(&wait, &cb, &[hal::SemaphoreValue::new(&done, value)]).unwrap();
    }
    done.wait(100, hal::Timeout::Infinite).unwrap();
    assert_eq!(data.read_as::<u32>().unwrap(), vec![300], "every execute ran");
    assert_eq!(driver_vulkan::recordings_of(&cb), Some(1), "80 chained executes replay one recording");
    // A one-shot command buffer runs once: recorded at its execute.
    let once = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    once.barrier().unwrap();
    once.end().unwrap();
    assert_eq!(driver_vulkan::recordings_of(&once), None);
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn executes_in_flight_together_replay_one_recording_made_for_simultaneous_use() {
    let device = device();
    let (data, open_gate) = (host_buffer(&device, &[0]), host_buffer(&device, &[0, 1]));
    let cb = bump_command_buffer(&device, &data, &open_gate, 1);
    let done = device.create_semaphore(0).unwrap();
    let queue = device.queue(0).unwrap();
    // The first execute is held on the device, so the second is submitted while it is pending:
    // nothing in the recording changes per execute, so it is pending twice, never recorded again
    // (and the submit thread never waits for the first to finish before submitting the second).
    let mut gate = common::DeviceGate::on(&device, &queue);
    queue.execute(&[hal::SemaphoreValue::new(gate.passed(), 1)], &cb, &[hal::SemaphoreValue::new(&done, 1)]).unwrap();
    queue.execute(&[], &cb, &[hal::SemaphoreValue::new(&done, 2)]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let in_flight = driver_vulkan::recordings_of(&cb);
    assert_eq!(done.query().unwrap(), 0, "nothing completed before the gate opened");
    gate.open();
    done.wait(2, hal::Timeout::Infinite).unwrap();
    assert_eq!(in_flight, Some(1), "two executes in flight replay one recording");
    for value in 3..=6u64 {
        queue.execute(&[], &cb, &[hal::SemaphoreValue::new(&done, value)]).unwrap();
        done.wait(value, hal::Timeout::Infinite).unwrap();
    }
    assert_eq!(data.read_as::<u32>().unwrap(), vec![6], "every execute ran");
    assert_eq!(driver_vulkan::recordings_of(&cb), Some(1), "every execute replayed the one recording");
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn a_recording_refused_part_way_leaves_its_queue_able_to_record_again() {
    let device = device();
    let (data, open_gate) = (host_buffer(&device, &[0, 0, 0, 0, 0]), host_buffer(&device, &[0, 1]));
    let source = hal::ExecutableSource::Bytes {
        format: hal::ExecutableFormat::Spirv,
        data: std::sync::Arc::from(driver_vulkan::wgsl::compile(BUMP_WGSL, "bump").unwrap()),
        entry_points: vec![hal::EntryPointInfo::new("bump", 1, 2, 1)],
    };
    let bump = device.load_executable(&source).unwrap();
    let queue = device.queue(0).unwrap();
    // A barrier is recorded before the dispatch whose transient buffer was deallocated before the
    // execute ran: the command buffer is left part-way through its recording.
    let transient_done = device.create_semaphore(0).unwrap();
    let transient = queue
        .alloca(&[], hal::BufferParams::device_local(), 20, &[hal::SemaphoreValue::new(&transient_done, 1)])
        .unwrap();
    queue
        .dealloca(
            &[hal::SemaphoreValue::new(&transient_done, 1)],
            &transient,
            &[hal::SemaphoreValue::new(&transient_done, 2)],
        )
        .unwrap();
    transient_done.wait(2, hal::Timeout::Infinite).unwrap();
    let refused = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    refused.barrier().unwrap();
    refused
        .dispatch(&bump, 0, [1, 1, 1], &[1], &[BufferBinding::whole(&transient), BufferBinding::whole(&open_gate)])
        .unwrap();
    refused.end().unwrap();
    // A first execute (a queue's first submission goes through its submit thread), waited for.
    let warm = device.create_semaphore(0).unwrap();
    queue
        .execute(&[], &bump_command_buffer(&device, &data, &open_gate, 0), &[hal::SemaphoreValue::new(&warm, 1)])
        .unwrap();
    warm.wait(1, hal::Timeout::Infinite).unwrap();
    let failed = device.create_semaphore(0).unwrap();
    let issued_here = driver_vulkan::submissions_issued_by_callers(&device).unwrap();
    queue.execute(&[], &refused, &[hal::SemaphoreValue::new(&failed, 1)]).unwrap();
    // Its idle queue had reached its previous value: the refusal came on this thread.
    assert_eq!(driver_vulkan::submissions_issued_by_callers(&device), Some(issued_here + 1));
    let e = failed.wait(1, hal::Timeout::Infinite).unwrap_err();
    assert_eq!(e.code(), StatusCode::FailedPrecondition, "{e}");
    assert!(e.message().contains("command 1") && e.message().contains("has no memory"), "{e}");
    // The next executes on the queue record into the command buffer handed back (under the
    // validation layer, beginning one still in the recording state is an error).
    let done = device.create_semaphore(0).unwrap();
    for value in 1..=2u64 {
        let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
        cb.dispatch(&bump, 0, [1, 1, 1], &[5], &[BufferBinding::whole(&data), BufferBinding::whole(&open_gate)])
            .unwrap();
        cb.end().unwrap();
        queue.execute(&[], &cb, &[hal::SemaphoreValue::new(&done, value)]).unwrap();
        done.wait(value, hal::Timeout::Infinite).unwrap();
    }
    assert_eq!(data.read_as::<u32>().unwrap()[0], 10);
}

/// A submission whose queue the host saw reach its previous value, and that waits on no other
/// queue, is issued on the submitting thread, with no hand-off to the queue's submit thread (but
/// the queue's first); submissions behind unfinished ones (a chain) go through the submit thread.
/// Both run, in order.
#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn round_trips_are_issued_on_the_submitting_thread_and_chains_behind_them_keep_their_order() {
    let device = device();
    let (data, open_gate) = (host_buffer(&device, &[0]), host_buffer(&device, &[0, 1]));
    let cb = bump_command_buffer(&device, &data, &open_gate, 2);
    let queue = device.queue(0).unwrap();
    let done = device.create_semaphore(0).unwrap();
    let issued_here = || driver_vulkan::submissions_issued_by_callers(&device).unwrap();
    let before = issued_here();
    const ROUND_TRIPS: u64 = 20;
    for value in 1..=ROUND_TRIPS {
        queue.execute(&[], &cb, &[hal::SemaphoreValue::new(&done, value)]).unwrap();
        done.wait(value, hal::Timeout::Infinite).unwrap();
    }
    assert_eq!(data.read_as::<u32>().unwrap(), vec![2 * ROUND_TRIPS as u32], "every round trip ran");
    let direct = issued_here() - before;
    // One can go to the submit thread when it still held the stream after the previous value
    // was reached; most cannot.
    assert!(direct >= ROUND_TRIPS / 2, "{direct} of {ROUND_TRIPS} round trips were issued on the submitting thread");
    // The driver's tallies agree: each round trip was one vkQueueSubmit of its own, wherever issued.
    let counts = driver_vulkan::host_thread_counts(&device).unwrap();
    assert_eq!(counts.issued_by_callers, issued_here());
    assert!(counts.submit_calls >= ROUND_TRIPS, "{counts:?}");
    assert!(counts.submit_time > std::time::Duration::ZERO, "{counts:?}");
    const CHAIN: u64 = 50;
    for value in ROUND_TRIPS + 1..=ROUND_TRIPS + CHAIN {
        let wait = [hal::SemaphoreValue::new(&done, value - 1)];
        queue.execute(&wait, &cb, &[hal::SemaphoreValue::new(&done, value)]).unwrap();
    }
    done.wait(ROUND_TRIPS + CHAIN, hal::Timeout::Infinite).unwrap();
    assert_eq!(data.read_as::<u32>().unwrap(), vec![2 * (ROUND_TRIPS + CHAIN) as u32], "every chained execute ran");
}

/// Replays [`submissions_from_many_threads_keep_each_queues_order_under_random_mixes`] with this seed.
const ISSUE_STRESS_SEED_ENV: &str = "HAL_ISSUE_STRESS_SEED";

/// Threads sharing two queues, each running a random mix of round trips (issued on the submitting
/// thread where the queue is idle), chains (the submit thread's), work a host signal releases, and
/// work on the other queue behind its last value: every execute runs once, in each thread's order,
/// and nothing hangs. The seed is printed; [`ISSUE_STRESS_SEED_ENV`] replays one.
#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn submissions_from_many_threads_keep_each_queues_order_under_random_mixes() {
    let seed = std::env::var(ISSUE_STRESS_SEED_ENV).ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    println!("seed {seed} ({ISSUE_STRESS_SEED_ENV}={seed} replays)");
    let device = device();
    let open_gate = host_buffer(&device, &[0, 1]);
    const THREADS: u64 = 6;
    const OPS: u64 = 200;
    let before = driver_vulkan::submissions_issued_by_callers(&device).unwrap();
    let outcomes: Vec<Result<(u32, u32), String>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (device, open_gate) = (&device, &open_gate);
                scope.spawn(move || stress_thread(device, open_gate, seed.wrapping_add(thread), OPS))
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err("the thread panicked".into()))).collect()
    });
    for (thread, outcome) in outcomes.iter().enumerate() {
        match outcome {
            Ok((ran, expected)) => assert_eq!(ran, expected, "thread {thread}: executes that ran (seed {seed})"),
            Err(e) => {
                // Dropping the device would wait for streams that may never finish: leave it.
                std::mem::forget(device);
                panic!("thread {thread}: {e} (seed {seed})");
            }
        }
    }
    let issued_here = driver_vulkan::submissions_issued_by_callers(&device).unwrap() - before;
    if std::env::var(driver_vulkan::ISSUE_ON_CALLER_ENV).as_deref() == Ok("0") {
        assert_eq!(issued_here, 0, "issued on submitting threads with {}=0", driver_vulkan::ISSUE_ON_CALLER_ENV);
    } else {
        assert!(issued_here > 0, "no submission was issued on its submitting thread (seed {seed})");
    }
}

/// One thread of the stress test: `ops` random operations on its own counter, each waited for
/// before the next; (the counter's value, the executes made).
fn stress_thread(device: &hal::Device, open_gate: &hal::Buffer, seed: u64, ops: u64) -> Result<(u32, u32), String> {
    let mut rng = seed | 1;
    let mut next = move |bound: u64| {
        // xorshift64*
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % bound
    };
    let data = host_buffer(device, &[0]);
    let cb = bump_command_buffer(device, &data, open_gate, 1);
    let queues = [device.queue(0).unwrap(), device.queue(1 % device.queue_count()).unwrap()];
    let done = device.create_semaphore(0).unwrap();
    let sv = hal::SemaphoreValue::new;
    let limit = hal::Timeout::After(std::time::Duration::from_secs(30));
    let (mut value, mut executes) = (0u64, 0u32);
    for op in 0..ops {
        let queue = &queues[next(2) as usize];
        match next(4) {
            // A round trip.
            0 => {
                value += 1;
                queue.execute(&[], &cb, &[sv(&done, value)]).map_err(|e| format!("op {op}: {e}"))?;
                executes += 1;
            }
            // A chain of up to 8, each behind the one before.
            1 => {
                for _ in 0..=next(8) {
                    value += 1;
                    queue
                        .execute(&[sv(&done, value - 1)], &cb, &[sv(&done, value)])
                        .map_err(|e| format!("op {op}: {e}"))?;
                    executes += 1;
                }
            }
            // Work a host signal releases, after a short spin.
            2 => {
                let gate = hal::Semaphore::new(0);
                value += 1;
                queue.execute(&[sv(&gate, 1)], &cb, &[sv(&done, value)]).map_err(|e| format!("op {op}: {e}"))?;
                executes += 1;
                let spin = std::time::Instant::now();
                while spin.elapsed() < std::time::Duration::from_micros(next(200)) {
                    std::hint::spin_loop();
                }
                gate.signal(1).map_err(|e| format!("op {op}: {e}"))?;
            }
            // Work on each queue, the second behind the first.
            _ => {
                value += 2;
                queues[0]
                    .execute(&[sv(&done, value - 2)], &cb, &[sv(&done, value - 1)])
                    .map_err(|e| format!("op {op}: {e}"))?;
                queues[1]
                    .execute(&[sv(&done, value - 1)], &cb, &[sv(&done, value)])
                    .map_err(|e| format!("op {op}: {e}"))?;
                executes += 2;
            }
        }
        done.wait(value, limit).map_err(|e| format!("op {op}: waiting for value {value}: {e}"))?;
        let ran = data.read_as::<u32>().map_err(|e| e.to_string())?[0];
        if ran != executes {
            return Err(format!("op {op}: {ran} executes ran of {executes} made"));
        }
    }
    Ok((data.read_as::<u32>().map_err(|e| e.to_string())?[0], executes))
}

/// Multiplies each f16 of `data` by 1.5 in f16.
const HALF_WGSL: &str = r#"
enable f16;
@group(0) @binding(0) var<storage, read_write> data: array<f16>;
@compute @workgroup_size(4)
fn scale(@builtin(global_invocation_id) id: vec3<u32>) {
    data[id.x] = data[id.x] * 1.5h;
}
"#;

/// The device's value of property `name`.
fn property(device: &hal::Device, name: &str) -> String {
    let found = device.info().properties.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    found.unwrap_or_else(|| panic!("no device property {name}"))
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn f16_kernels_run_where_the_device_has_16_bit_floats_and_are_refused_elsewhere() {
    let device = device();
    let source = hal::ExecutableSource::Bytes {
        format: hal::ExecutableFormat::Spirv,
        data: std::sync::Arc::from(driver_vulkan::wgsl::compile(HALF_WGSL, "scale").unwrap()),
        entry_points: vec![hal::EntryPointInfo::new("scale", 4, 1, 0)],
    };
    if property(&device, "shader_float16") != "true" {
        let e = device.load_executable(&source).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(e.message().contains("FLOAT16"), "{e}");
        return;
    }
    let scale = device.load_executable(&source).unwrap();
    // 1.0, -2.0, 0.5, 1024.0 as f16 bits, two to a word.
    let data = host_buffer(&device, &[0xc000_3c00, 0x6400_3800]);
    let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    cb.dispatch(&scale, 0, [1, 1, 1], &[], &[BufferBinding::whole(&data)]).unwrap();
    cb.end().unwrap();
    let done = device.create_semaphore(0).unwrap();
    device.queue(0).unwrap().execute(&[], &cb, &[hal::SemaphoreValue::new(&done, 1)]).unwrap();
    done.wait(1, hal::Timeout::Infinite).unwrap();
    // 1.5, -3.0, 0.75, 1536.0.
    assert_eq!(data.read_as::<u16>().unwrap(), vec![0x3e00, 0xc200, 0x3a00, 0x6600]);
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn device_local_buffers_the_host_cannot_map_move_through_staging() {
    // Run in a child with device memory unmapped, as on a GPU whose video memory the host cannot
    // see (lavapipe's memory is all host-visible).
    common::run_in_child("unmapped_device_memory_in_child", &[(driver_vulkan::DEVICE_MEMORY_ENV, "0")]);
}

#[test]
#[ignore = "run by device_local_buffers_the_host_cannot_map_move_through_staging, in a child"]
fn unmapped_device_memory_in_child() {
    let device = device();
    assert_eq!(property(&device, "device_memory"), "unmapped");
    let queue = device.queue(0).unwrap();
    let done = device.create_semaphore(0).unwrap();
    let step = |value: u64| [hal::SemaphoreValue::new(&done, value)];
    // Allocated zeroed, though the host never touched it; not mappable.
    let buffer = device.allocate_buffer(BufferParams::device_local(), 4096).unwrap();
    assert!(buffer.map(0, 4).is_err(), "device-local memory mapped");
    let zeros = queue.read(&[], &buffer, 0, 4096, &step(1)).unwrap();
    assert!(zeros.wait_as::<u8>(hal::Timeout::Infinite).unwrap().iter().all(|&b| b == 0), "not zeroed");
    // Host writes and reads go through staging, in queue order with device commands.
    let words: Vec<u32> = (0..1024).collect();
    queue.write_values(&step(1), &buffer, 0, &words, &step(2)).unwrap();
    queue.fill(&step(2), &buffer, 16, 8, 7u32, &step(3)).unwrap();
    let read = queue.read(&step(3), &buffer, 8, 24, &step(4)).unwrap();
    assert_eq!(read.wait_as::<u32>(hal::Timeout::Infinite).unwrap(), vec![2, 3, 7, 7, 6, 7]);
    // A kernel reads and writes it; a queue allocation gets such memory too.
    let gate = host_buffer(&device, &[0, 1]);
    let cb = bump_command_buffer(&device, &buffer, &gate, 5);
    queue.execute(&step(4), &cb, &step(5)).unwrap();
    let transient = queue.alloca(&step(5), BufferParams::device_local(), 64, &step(6)).unwrap();
    queue.copy(&step(6), &buffer, 0, &transient, 0, 64, &step(7)).unwrap();
    let read = queue.read(&step(7), &transient, 0, 8, &step(8)).unwrap();
    assert_eq!(read.wait_as::<u32>(hal::Timeout::Infinite).unwrap(), vec![5, 1]);
    queue.dealloca(&step(8), &transient, &step(9)).unwrap();
    done.wait(9, hal::Timeout::Infinite).unwrap();
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn f16_values_bitcast_to_and_from_32_bit_words_come_through() {
    let device = device();
    if property(&device, "shader_float16") != "true" {
        return;
    }
    // vec2<u32> -> vec4<f16>, doubled, -> vec2<u32> (tests/spirv/half_bitcast.spvasm).
    let source = hal::ExecutableSource::Bytes {
        format: hal::ExecutableFormat::Spirv,
        data: std::sync::Arc::from(&include_bytes!("spirv/half_bitcast.spv")[..]),
        entry_points: vec![hal::EntryPointInfo::new("main", 1, 1, 0)],
    };
    let double = device.load_executable(&source).unwrap();
    // 1.0, -2.0, 0.5, 3.0 as f16 bits; then a subnormal, the largest f16, -0.0 and infinity.
    for (given, doubled) in [
        ([0xc000_3c00u32, 0x4200_3800], [0x4000u16, 0xc400, 0x3c00, 0x4600]),
        ([0x7bff_0001, 0xfc00_8000], [0x0002, 0x7c00, 0x8000, 0xfc00]),
    ] {
        let data = host_buffer(&device, &given);
        let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
        cb.dispatch(&double, 0, [1, 1, 1], &[], &[BufferBinding::whole(&data)]).unwrap();
        cb.end().unwrap();
        let done = device.create_semaphore(0).unwrap();
        device.queue(0).unwrap().execute(&[], &cb, &[hal::SemaphoreValue::new(&done, 1)]).unwrap();
        done.wait(1, hal::Timeout::Infinite).unwrap();
        assert_eq!(data.read_as::<u16>().unwrap(), doubled, "{given:x?}");
    }
}

/// A ping-pong between two queues, every hop submitted before the first runs: each queue's submit
/// thread gathers what is queued into one `vkQueueSubmit`, and must hand its gathered hops over
/// before it waits for the other queue's hop to be submitted (that queue is waiting for one of
/// them), or both wait forever.
#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn pipelined_cross_queue_hops_complete_with_submissions_gathered() {
    let device = device();
    let empty = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    empty.end().unwrap();
    let queues = [device.queue(0).unwrap(), device.queue(1).unwrap()];
    let semaphores = [device.create_semaphore(0).unwrap(), device.create_semaphore(0).unwrap()];
    const HOPS: u64 = 400;
    for hop in 0..HOPS {
        let (this, other) = ((hop % 2) as usize, ((hop + 1) % 2) as usize);
        let waits: Vec<hal::SemaphoreValue> =
            if hop == 0 { Vec::new() } else { vec![hal::SemaphoreValue::new(&semaphores[other], hop.div_ceil(2))] };
        // Hop `hop` is this queue's (hop / 2 + 1)-th and waits for the other queue's hop - 1.
        let value = hop / 2 + 1;
        queues[this].execute(&waits, &empty, &[hal::SemaphoreValue::new(&semaphores[this], value)]).unwrap();
    }
    let last = HOPS - 1;
    let waited =
        semaphores[(last % 2) as usize].wait(last / 2 + 1, hal::Timeout::After(std::time::Duration::from_secs(30)));
    if let Err(e) = waited {
        // Dropping the device would wait for its deadlocked streams: leave it, and fail.
        std::mem::forget((device, queues, semaphores, empty));
        panic!("the hops did not complete within 30 s: {e}");
    }
}

/// A submission whose wait on another queue's value does not show its own queue's earlier work
/// done stays behind that work: a dispatch held on the device by a closed gate on queue 0, then a
/// dispatch on queue 0 waiting only on a dispatch of queue 1. Where the gate does not hold the
/// first dispatch (lavapipe ends the spin at once), it is not run.
#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn work_stays_behind_its_queues_running_work_when_its_other_wait_does_not_order_it() {
    let device = device();
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
    let (data, elsewhere) = (host_buffer(&device, &[0]), host_buffer(&device, &[0]));
    let (closed, open) = (host_buffer(&device, &[0, 0]), host_buffer(&device, &[0, 1]));
    let [first, other, second] = [(); 3].map(|()| device.create_semaphore(0).unwrap());
    let sv = hal::SemaphoreValue::new;
    let seconds = |n| hal::Timeout::After(std::time::Duration::from_secs(n));
    // Everything is allocated and recorded before the gated dispatch runs: on NVIDIA a new memory
    // allocation waited for the GPU, held by that dispatch, so the test hung before opening it.
    let gated = bump_command_buffer(&device, &data, &closed, 1);
    let behind = bump_command_buffer(&device, &data, &open, 10);
    // Slow enough that queue 0's next submission waits for it on the device.
    let slow = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    let large = device.allocate_buffer(BufferParams::device_local(), 64 << 20).unwrap();
    slow.fill(&large, 0, 64 << 20, 3u32).unwrap();
    slow.dispatch(
        &device
            .load_executable(
                &SpirvCatalogue::new(driver_vulkan::wgsl::compile)
                    .source(Kernel::FillU32, ExecutableKind::Spirv)
                    .unwrap(),
            )
            .unwrap(),
        0,
        [1, 1, 1],
        &[5],
        &[BufferBinding::whole(&elsewhere)],
    )
    .unwrap();
    slow.end().unwrap();
    q0.execute(&[], &gated, &[sv(&first, 1)]).unwrap();
    q1.execute(&[], &slow, &[sv(&other, 1)]).unwrap();
    q0.execute(&[sv(&other, 1)], &behind, &[sv(&second, 1)]).unwrap();
    // Where the device runs both queues' work in one hardware queue, queue 1's work waits behind
    // the held dispatch until the gate opens: the case cannot be set up there (lavapipe has one).
    let other_ran = other.wait(1, seconds(10)).is_ok();
    if other_ran {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (held, early) = (first.query().unwrap() == 0, data.read_as::<u32>().unwrap()[0]);
    // Open the gate whatever was seen, so the device can drain.
    closed.write_values(1, &[1u32]).unwrap();
    second.wait(1, seconds(30)).unwrap();
    other.wait(1, seconds(30)).unwrap();
    assert_eq!(data.read_as::<u32>().unwrap(), vec![11]);
    if !other_ran {
        println!("not run: queue 1's work did not run while queue 0's first dispatch was held on this device");
        return;
    }
    if !held {
        println!("not run: the gate did not hold queue 0's first dispatch on this device");
        return;
    }
    assert_eq!(early, 0, "queue 0's second dispatch ran before its first finished");
}

/// Dependent read-modify-write dispatches alternating between two queues, each waiting on the other
/// queue's last value (whose submission waited on this queue's last: the order the queue's own wait
/// would give, which the driver then leaves out): every one counts.
#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn read_modify_write_hops_between_two_queues_each_count() {
    let device = device();
    let queues = [device.queue(0).unwrap(), device.queue(1).unwrap()];
    let data = host_buffer(&device, &[0]);
    let open = host_buffer(&device, &[0, 1]);
    let cbs = [bump_command_buffer(&device, &data, &open, 1), bump_command_buffer(&device, &data, &open, 1)];
    let semaphores = [device.create_semaphore(0).unwrap(), device.create_semaphore(0).unwrap()];
    const HOPS: u64 = 300;
    for hop in 0..HOPS {
        let (this, other) = ((hop % 2) as usize, ((hop + 1) % 2) as usize);
        let waits: Vec<hal::SemaphoreValue> =
            if hop == 0 { Vec::new() } else { vec![hal::SemaphoreValue::new(&semaphores[other], hop.div_ceil(2))] };
        let value = hop / 2 + 1;
        queues[this].execute(&waits, &cbs[this], &[hal::SemaphoreValue::new(&semaphores[this], value)]).unwrap();
    }
    let last = HOPS - 1;
    semaphores[(last % 2) as usize]
        .wait(last / 2 + 1, hal::Timeout::After(std::time::Duration::from_secs(30)))
        .unwrap();
    assert_eq!(data.read_as::<u32>().unwrap(), vec![HOPS as u32]);
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn alloca_and_dealloca_on_an_idle_queue_are_done_at_submission() {
    let device = device();
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1 % device.queue_count()).unwrap());
    let s = device.create_semaphore(0).unwrap();
    let sv = |value: u64| [hal::SemaphoreValue::new(&s, value)];
    let transient = q0.alloca(&[], BufferParams::device_local(), 64, &sv(1)).unwrap();
    assert_eq!(s.query().unwrap(), 1, "an alloca on an idle queue is done when the call returns");
    // Another queue uses it at once.
    q1.fill(&sv(1), &transient, 0, 64, 9u32, &sv(2)).unwrap();
    let read = q1.read(&sv(2), &transient, 0, 8, &sv(3)).unwrap();
    assert_eq!(read.wait_as::<u32>(hal::Timeout::Infinite).unwrap(), vec![9, 9]);
    s.wait(3, hal::Timeout::Infinite).unwrap();
    q0.dealloca(&sv(3), &transient, &sv(4)).unwrap();
    assert_eq!(s.query().unwrap(), 4, "a dealloca on an idle queue is done when the call returns");
    // Its memory is gone: a use after it fails that use, naming why.
    let f = device.create_semaphore(0).unwrap();
    q1.fill(&[], &transient, 0, 64, 0u32, &[hal::SemaphoreValue::new(&f, 1)]).unwrap();
    let err = f.wait(1, hal::Timeout::Infinite).unwrap_err();
    assert_eq!(err.code(), StatusCode::FailedPrecondition, "{err}");
    // Behind work still held on the queue, the alloca waits its turn.
    let gate = device.create_semaphore(0).unwrap();
    q0.barrier(&[hal::SemaphoreValue::new(&gate, 1)], &sv(5)).unwrap();
    let later = q0.alloca(&sv(5), BufferParams::device_local(), 64, &sv(6)).unwrap();
    assert_eq!(s.query().unwrap(), 4, "an alloca waiting on held work ran early");
    gate.signal(1).unwrap();
    s.wait(6, hal::Timeout::Infinite).unwrap();
    q0.dealloca(&sv(6), &later, &sv(7)).unwrap();
    s.wait(7, hal::Timeout::Infinite).unwrap();
}
