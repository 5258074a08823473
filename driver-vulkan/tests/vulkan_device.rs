//! What the Vulkan driver does beyond the conformance suite: its storage-range limit, and a clean
//! `Unavailable` where there is no Vulkan device. Where no device was found at build time the tests
//! that need one are ignored (see `build.rs`).

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
const BUMP_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@group(0) @binding(1) var<storage, read_write> gate: array<atomic<u32>>;
struct Constants { add: u32 }
var<immediate> c: Constants;
@compute @workgroup_size(1)
fn bump() {
    var spins = 0u;
    while atomicLoad(&gate[1]) == 0u && spins < 4000000000u {
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
    let (data, gate) = (host_buffer(&device, &[0]), host_buffer(&device, &[0, 0]));
    let cb = bump_command_buffer(&device, &data, &gate, 1);
    let done = device.create_semaphore(0).unwrap();
    let queue = device.queue(0).unwrap();
    // The first execute spins on the closed gate, so the second is submitted while it is pending:
    // nothing in the recording changes per execute, so it is pending twice, never recorded again
    // (and the submit thread never waits for the first to finish before submitting the second).
    queue.execute(&[], &cb, &[hal::SemaphoreValue::new(&done, 1)]).unwrap();
    queue.execute(&[], &cb, &[hal::SemaphoreValue::new(&done, 2)]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let in_flight = driver_vulkan::recordings_of(&cb);
    gate.write_values(1, &[1u32]).unwrap();
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
    let failed = device.create_semaphore(0).unwrap();
    queue.execute(&[], &refused, &[hal::SemaphoreValue::new(&failed, 1)]).unwrap();
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
