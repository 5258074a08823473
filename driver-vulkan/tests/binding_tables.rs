//! Binding-table executes on Vulkan. On a device with `descriptorBindingStorageBufferUpdateAfterBind`
//! a command buffer is recorded once per stream and replayed, each execute writing its own table's
//! buffers into the recording's update-after-bind descriptor sets; without it, it is recorded at
//! each execute. Each test runs in a child process of this binary with
//! [`driver_vulkan::UPDATE_AFTER_BIND_ENV`] set, and expects the path the device then reports
//! ([`driver_vulkan::BINDING_TABLE_EXECUTES`]). On lavapipe, which lacks the feature, the replay
//! tests force the replay path (lavapipe reads descriptors when a submission runs), with the
//! validation layer told to pass over that one missing feature only. Where no device was found at
//! build time the tests are ignored (see `build.rs`).

use std::process::Command;

use hal::{BindingRef, BufferBinding, BufferParams, BufferRef, CommandBufferMode, SemaphoreValue, StatusCode, Timeout};

mod common;

fn device() -> hal::Device {
    let mut registry = hal::Registry::new();
    driver_vulkan::register(&mut registry);
    registry.create_device(driver_vulkan::DRIVER_NAME, 0).expect("a Vulkan device")
}

/// Whether the device replays binding-table executes (else it records them at each execute).
fn replays(device: &hal::Device) -> bool {
    let property = device.info().properties.iter().find(|(name, _)| name == driver_vulkan::BINDING_TABLE_EXECUTES);
    match property.map(|(_, value)| value.as_str()) {
        Some("replayed") => true,
        Some("recorded") => false,
        other => panic!("{}: {other:?}", driver_vulkan::BINDING_TABLE_EXECUTES),
    }
}

/// The validation message a forced replay path on a device without
/// `descriptorBindingStorageBufferUpdateAfterBind` gets, and only that one.
const MISSING_FEATURE_VUID: &str =
    "VUID-VkDescriptorSetLayoutBindingFlagsCreateInfo-descriptorBindingStorageBufferUpdateAfterBind-03008";

/// Runs test `name` of this binary (ignored, so only run this way) in a child; fails with its
/// output unless it passed. `replay`: with the replay path where the device has the feature, and
/// forced on lavapipe; else with it turned off.
fn in_child(name: &str, replay: bool) {
    let forced = replay && device().info().name.starts_with("llvmpipe");
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut child = Command::new(exe);
    child.args([name, "--exact", "--include-ignored", "--nocapture"]);
    match (replay, forced) {
        (false, _) => child.env(driver_vulkan::UPDATE_AFTER_BIND_ENV, "0"),
        (true, false) => child.env(driver_vulkan::UPDATE_AFTER_BIND_ENV, "1"),
        (true, true) => child
            .env(driver_vulkan::UPDATE_AFTER_BIND_ENV, "force")
            .env("VK_LAYER_MESSAGE_ID_FILTER", MISSING_FEATURE_VUID),
    };
    let output = child.output().expect("run this test binary");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{name} did not run: {text}");
    println!("{text}");
}

/// Writes word 0 of `input` plus its constant to word 0 of `output`.
const ADD_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> input: array<u32>;
@group(0) @binding(1) var<storage, read_write> output: array<u32>;
struct Constants { add: u32 }
var<immediate> c: Constants;
@compute @workgroup_size(1)
fn add() {
    output[0] = input[0] + c.add;
}
"#;

/// The constant the kernel adds.
const ADD: u32 = 7;

/// A reusable command buffer adding [`ADD`] to slot 0's first word into slot 1's.
fn add_command_buffer(device: &hal::Device) -> hal::CommandBuffer {
    let source = hal::ExecutableSource::Bytes {
        format: hal::ExecutableFormat::Spirv,
        data: std::sync::Arc::from(driver_vulkan::wgsl::compile(ADD_WGSL, "add").unwrap()),
        entry_points: vec![hal::EntryPointInfo::new("add", 1, 2, 1)],
    };
    let add = device.load_executable(&source).unwrap();
    let cb = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    cb.dispatch_refs(&add, 0, [1, 1, 1], &[ADD], &[BindingRef::slot(0, 0, 4), BindingRef::slot(1, 0, 4)]).unwrap();
    cb.end().unwrap();
    cb
}

/// A device, an [`add_command_buffer`], a semaphore at 0 and queue 0: what most tests start with.
fn add_setup() -> (hal::Device, hal::CommandBuffer, hal::Semaphore, hal::Queue) {
    let device = device();
    let cb = add_command_buffer(&device);
    let done = device.create_semaphore(0).unwrap();
    let queue = device.queue(0).unwrap();
    (device, cb, done, queue)
}

fn host_buffer(device: &hal::Device, words: &[u32]) -> hal::Buffer {
    let buffer = device.allocate_buffer(BufferParams::host_visible(), 4 * words.len() as u64).unwrap();
    buffer.write_values(0, words).unwrap();
    buffer
}

/// Slot `n`'s table entry: 4 bytes at byte 256 of `buffer` (every device's storage-buffer offset
/// alignment divides 256), so the table's offsets reach the descriptors too.
fn at_256(buffer: &hal::Buffer) -> BufferBinding {
    BufferBinding::range(buffer, 256, 4)
}

/// A buffer of 65 words whose word 64 (byte 256) is `value`.
fn word_at_256(device: &hal::Device, value: u32) -> hal::Buffer {
    let mut words = vec![0u32; 65];
    words[64] = value;
    host_buffer(device, &words)
}

/// 20 executes, one after another, each with buffers of its own: each result right, and the
/// number of times the command buffer was recorded into Vulkan.
fn twenty_executes_with_their_own_buffers(device: &hal::Device) -> Option<u64> {
    let cb = add_command_buffer(device);
    let done = device.create_semaphore(0).unwrap();
    let queue = device.queue(0).unwrap();
    for call in 1..=20u32 {
        let (input, output) = (word_at_256(device, 100 * call), word_at_256(device, 0));
        let table = [at_256(&input), at_256(&output)];
        let value = u64::from(call);
        queue.execute_with_bindings(&[], &cb, &table, &[SemaphoreValue::new(&done, value)]).unwrap();
        done.wait(value, Timeout::Infinite).unwrap();
        assert_eq!(output.read_as::<u32>().unwrap()[64], 100 * call + ADD, "execute {call} saw its own buffers");
    }
    driver_vulkan::recordings_of(&cb)
}

/// The expected recording count: `replayed` where the device replays binding-table executes.
fn expected(device: &hal::Device, replayed: u64) -> Option<u64> {
    replays(device).then_some(replayed)
}

macro_rules! vulkan_test {
    ($(#[doc = $doc:literal])* fn $name:ident() $body:block) => {
        $(#[doc = $doc])*
        #[test]
        #[cfg_attr(
            not(any(hal_vulkan_found, hal_vulkan_required)),
            ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
        )]
        fn $name() $body
    };
}

vulkan_test! {
    fn a_binding_table_command_buffer_executed_many_times_is_recorded_once() {
        in_child("child_executes_one_after_another", true);
    }
}

/// 20 executes one after another, each with buffers of its own.
#[test]
#[ignore = "run in a child process by a_binding_table_command_buffer_executed_many_times_is_recorded_once"]
fn child_executes_one_after_another() {
    let device = device();
    let recorded = twenty_executes_with_their_own_buffers(&device);
    assert_eq!(recorded, expected(&device, 1), "executes one after another replay one recording");
}

vulkan_test! {
    fn binding_table_executes_in_flight_together_each_see_their_own_buffers() {
        in_child("child_executes_in_flight_together", true);
    }
}

#[test]
#[ignore = "run in a child process by binding_table_executes_in_flight_together_each_see_their_own_buffers"]
fn child_executes_in_flight_together() {
    let (device, cb, done, queue) = add_setup();
    // The first execute is held on the device until the second was issued.
    let mut gate = common::DeviceGate::on(&device, &queue);
    let (first_in, first_out) = (word_at_256(&device, 1000), word_at_256(&device, 0));
    let (second_in, second_out) = (word_at_256(&device, 2000), word_at_256(&device, 0));
    let first = [at_256(&first_in), at_256(&first_out)];
    let behind_gate = [SemaphoreValue::new(gate.passed(), 1)];
    queue.execute_with_bindings(&behind_gate, &cb, &first, &[SemaphoreValue::new(&done, 1)]).unwrap();
    let second = [at_256(&second_in), at_256(&second_out)];
    queue.execute_with_bindings(&[], &cb, &second, &[SemaphoreValue::new(&done, 2)]).unwrap();
    let want = expected(&device, 2);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while driver_vulkan::recordings_of(&cb) != want && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let in_flight = driver_vulkan::recordings_of(&cb);
    assert_eq!(done.query().unwrap(), 0, "nothing completed before the gate opened");
    gate.open();
    done.wait(2, Timeout::Infinite).unwrap();
    assert_eq!(first_out.read_as::<u32>().unwrap()[64], 1000 + ADD, "the first execute wrote its own output");
    assert_eq!(second_out.read_as::<u32>().unwrap()[64], 2000 + ADD, "the second execute wrote its own output");
    assert_eq!(in_flight, want, "two executes in flight need two recordings");
}

/// An input and an output buffer for each of `executes` executes, the input's word `100 * n` for
/// execute `n` (from 1).
fn buffers_for(device: &hal::Device, executes: u32) -> Vec<(hal::Buffer, hal::Buffer)> {
    (1..=executes).map(|n| (word_at_256(device, 100 * n), word_at_256(device, 0))).collect()
}

/// Checks that execute `n` (from 1) of [`buffers_for`]'s buffers wrote its own output.
fn check_outputs(buffers: &[(hal::Buffer, hal::Buffer)]) {
    for (n, (_, output)) in (1..).zip(buffers) {
        assert_eq!(output.read_as::<u32>().unwrap()[64], 100 * n + ADD, "execute {n} saw its own buffers");
    }
}

/// Executes `cb` once per pair of `buffers` in a chain, signalling `done` to `start + 1`, `start +
/// 2`, ...: the first execute waits on `first`, each later one on the one before.
fn execute_chain(
    queue: &hal::Queue,
    cb: &hal::CommandBuffer,
    done: &hal::Semaphore,
    buffers: &[(hal::Buffer, hal::Buffer)],
    start: u64,
    first: SemaphoreValue,
) {
    let mut wait = first;
    for (value, (input, output)) in (start..).zip(buffers) {
        let table = [at_256(input), at_256(output)];
        queue.execute_with_bindings(&[wait], cb, &table, &[SemaphoreValue::new(done, value + 1)]).unwrap();
        wait = SemaphoreValue::new(done, value + 1);
    }
}

vulkan_test! {
    fn a_chain_deeper_than_the_kept_recordings_has_each_execute_see_its_own_buffers() {
        in_child("child_deep_chain", true);
    }
}

/// 64 executes chained without a host wait, each with buffers of its own, after one waited
/// execute: past the kept recordings, executes replay those that came free and record others.
#[test]
#[ignore = "run in a child process by a_chain_deeper_than_the_kept_recordings_has_each_execute_see_its_own_buffers"]
fn child_deep_chain() {
    let (device, cb, done, queue) = add_setup();
    let warm = buffers_for(&device, 1);
    let table = [at_256(&warm[0].0), at_256(&warm[0].1)];
    queue.execute_with_bindings(&[], &cb, &table, &[SemaphoreValue::new(&done, 1)]).unwrap();
    done.wait(1, Timeout::Infinite).unwrap();
    let buffers = buffers_for(&device, 64);
    execute_chain(&queue, &cb, &done, &buffers, 1, SemaphoreValue::new(&done, 1));
    done.wait(65, Timeout::Infinite).unwrap();
    check_outputs(&buffers);
    let recorded = driver_vulkan::recordings_of(&cb);
    assert_eq!(recorded.is_some(), replays(&device), "recorded {recorded:?}");
    assert!(recorded.is_none_or(|recorded| (1..=65).contains(&recorded)), "recorded {recorded:?}");
}

vulkan_test! {
    fn a_chain_deeper_than_the_kept_recordings_held_behind_a_gate_records_the_rest_and_runs_once_opened() {
        in_child("child_deep_chain_behind_a_gate", true);
    }
}

/// 40 executes chained behind a gate that opens only once all were recorded: the submit thread,
/// whose kept recordings all wait on the gate, records the rest without waiting for them.
#[test]
#[ignore = "run in a child process by a_chain_deeper_than_the_kept_recordings_held_behind_a_gate_records_the_rest_and_runs_once_opened"]
fn child_deep_chain_behind_a_gate() {
    let (device, cb, done, queue) = add_setup();
    let buffers = buffers_for(&device, 40);
    let mut gate = common::DeviceGate::on(&device, &queue);
    execute_chain(&queue, &cb, &done, &buffers, 0, SemaphoreValue::new(gate.passed(), 1));
    let want = expected(&device, 40);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while driver_vulkan::recordings_of(&cb) != want && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let recorded = driver_vulkan::recordings_of(&cb);
    assert_eq!(done.query().unwrap(), 0, "nothing completed before the gate opened");
    gate.open();
    done.wait(40, Timeout::Infinite).unwrap();
    check_outputs(&buffers);
    assert_eq!(recorded, want, "every execute behind the closed gate was recorded while it was closed");
}

vulkan_test! {
    fn executes_in_flight_together_with_tables_a_recording_holds_replay_it_while_it_is_pending() {
        in_child("child_pending_recordings_replayed_for_their_tables", true);
    }
}

/// 40 executes behind a gate, chained, alternating two tables that pass a word back and forth
/// (A to B, then B to A), each adding to it: a recording whose sets hold an execute's table is
/// replayed while pending, so two recordings serve all 40, and each execute still sees the one
/// before it.
#[test]
#[ignore = "run in a child process by executes_in_flight_together_with_tables_a_recording_holds_replay_it_while_it_is_pending"]
fn child_pending_recordings_replayed_for_their_tables() {
    let (device, cb, done, queue) = add_setup();
    let (a, b) = (word_at_256(&device, 5), word_at_256(&device, 0));
    let (forth, back) = ([at_256(&a), at_256(&b)], [at_256(&b), at_256(&a)]);
    let mut gate = common::DeviceGate::on(&device, &queue);
    let mut wait = SemaphoreValue::new(gate.passed(), 1);
    for value in 0..40u64 {
        let table = if value % 2 == 0 { &forth } else { &back };
        queue.execute_with_bindings(&[wait], &cb, table, &[SemaphoreValue::new(&done, value + 1)]).unwrap();
        wait = SemaphoreValue::new(&done, value + 1);
    }
    // Time for the queue to issue them all while the gate holds the first.
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(done.query().unwrap(), 0, "nothing completed before the gate opened");
    gate.open();
    done.wait(40, Timeout::Infinite).unwrap();
    assert_eq!(a.read_as::<u32>().unwrap()[64], 5 + 40 * ADD, "every execute added to the word the one before left");
    assert_eq!(driver_vulkan::recordings_of(&cb), expected(&device, 2), "one recording per table");
}

/// Replays [`child_random_tables`] with the seed it names (the test prints the seed it ran with).
const TABLE_STRESS_SEED_ENV: &str = "HAL_TABLE_STRESS_SEED";

vulkan_test! {
    fn random_chains_of_binding_table_executes_each_see_their_own_table() {
        in_child("child_random_tables", true);
    }
}

vulkan_test! {
    fn random_chains_of_binding_table_executes_recorded_at_each_execute_each_see_their_own_table() {
        in_child("child_random_tables", false);
    }
}

/// 300 chained executes over six buffers, each execute's table a random (source, destination)
/// pair: 30 tables, more than the kept recordings, so executes replay pending recordings that hold
/// their table, write idle ones and record past the bound. The host waits now and then (leaving
/// recordings idle) and checks every buffer against what it must hold by then: an execute that ran
/// with another execute's table leaves a word that differs, in that buffer and those copied from it.
#[test]
#[ignore = "run in a child process by random_chains_of_binding_table_executes_each_see_their_own_table"]
fn child_random_tables() {
    let seed = common::seed_from(TABLE_STRESS_SEED_ENV);
    println!("seed {seed} ({TABLE_STRESS_SEED_ENV}={seed} replays it)");
    let (device, cb, done, queue) = add_setup();
    let mut expected: Vec<u32> = (0..6).map(|n| 1000 * n).collect();
    let buffers: Vec<hal::Buffer> = expected.iter().map(|&word| word_at_256(&device, word)).collect();
    let check = |expected: &[u32], value: u64| {
        for (n, (buffer, want)) in buffers.iter().zip(expected).enumerate() {
            let word = buffer.read_as::<u32>().unwrap()[64];
            assert_eq!(word, *want, "buffer {n} after execute {value} (seed {seed}: {TABLE_STRESS_SEED_ENV}={seed})");
        }
    };
    let mut rng = common::Rng::new(seed);
    for value in 0..300u64 {
        let source = rng.below(6) as usize;
        let target = (source + 1 + rng.below(5) as usize) % 6;
        let table = [at_256(&buffers[source]), at_256(&buffers[target])];
        let (wait, signal) = (SemaphoreValue::new(&done, value), SemaphoreValue::new(&done, value + 1));
        queue.execute_with_bindings(&[wait], &cb, &table, &[signal]).unwrap();
        expected[target] = expected[source].wrapping_add(ADD);
        if rng.below(8) == 0 {
            done.wait(value + 1, Timeout::Infinite).unwrap();
            check(&expected, value + 1);
        }
    }
    done.wait(300, Timeout::Infinite).unwrap();
    check(&expected, 300);
}

vulkan_test! {
    fn a_table_offset_off_the_binding_alignment_is_refused_at_the_execute_and_later_executes_still_run() {
        in_child("child_misaligned_table_offset", true);
    }
}

#[test]
#[ignore = "run in a child process by a_table_offset_off_the_binding_alignment_is_refused_at_the_execute_and_later_executes_still_run"]
fn child_misaligned_table_offset() {
    let device = device();
    let cb = add_command_buffer(&device);
    let queue = device.queue(0).unwrap();
    let (input, output) = (word_at_256(&device, 5), word_at_256(&device, 0));
    // Replayed first, so the refused execute leases the recording the next one replays.
    let ok = [at_256(&input), at_256(&output)];
    let done = device.create_semaphore(0).unwrap();
    queue.execute_with_bindings(&[], &cb, &ok, &[SemaphoreValue::new(&done, 1)]).unwrap();
    done.wait(1, Timeout::Infinite).unwrap();
    let refused = device.create_semaphore(0).unwrap();
    let misaligned = [BufferBinding::range(&input, 4, 4), at_256(&output)];
    let e = queue.execute_with_bindings(&[], &cb, &misaligned, &[SemaphoreValue::new(&refused, 1)]).unwrap_err();
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    let alignment = device.info().binding_alignment.to_string();
    assert!(e.message().contains("binding alignment") && e.message().contains(&alignment), "{e}");
    assert!(e.message().contains("binding 0"), "{e}");
    // Refused at the call: nothing was submitted, so its signal stays where it was.
    assert_eq!(refused.query().unwrap(), 0);
    input.write_values(64, &[9u32]).unwrap();
    queue.execute_with_bindings(&[], &cb, &ok, &[SemaphoreValue::new(&done, 2)]).unwrap();
    done.wait(2, Timeout::Infinite).unwrap();
    assert_eq!(output.read_as::<u32>().unwrap()[64], 9 + ADD);
    assert_eq!(driver_vulkan::recordings_of(&cb), expected(&device, 1));
}

vulkan_test! {
    fn executes_repeating_alternating_and_replacing_tables_each_see_their_own_buffers() {
        in_child("child_repeated_and_alternating_tables", true);
    }
}

/// One after another on one recording: the same table again (whose descriptors the recording
/// holds already), two tables alternating, a table changing one of its two entries, and a table
/// of buffers allocated after another table's were freed (perhaps in the very same place).
#[test]
#[ignore = "run in a child process by executes_repeating_alternating_and_replacing_tables_each_see_their_own_buffers"]
fn child_repeated_and_alternating_tables() {
    let (device, cb, done, queue) = add_setup();
    let (a_in, a_out) = (word_at_256(&device, 0), word_at_256(&device, 0));
    let mut value = 0u64;
    let mut run = |input: &hal::Buffer, output: &hal::Buffer, word: u32| {
        input.write_values(64, &[word]).unwrap();
        output.write_values(64, &[0u32]).unwrap();
        value += 1;
        let table = [at_256(input), at_256(output)];
        queue.execute_with_bindings(&[], &cb, &table, &[SemaphoreValue::new(&done, value)]).unwrap();
        done.wait(value, Timeout::Infinite).unwrap();
        assert_eq!(output.read_as::<u32>().unwrap()[64], word + ADD, "execute {value} (input {word})");
    };
    {
        let (b_in, b_out) = (word_at_256(&device, 0), word_at_256(&device, 0));
        for (n, (input, output)) in
            [(&a_in, &a_out), (&a_in, &a_out), (&b_in, &b_out), (&a_in, &a_out), (&b_in, &b_out), (&b_in, &b_out)]
                .into_iter()
                .enumerate()
        {
            run(input, output, 10 + n as u32);
        }
        // One entry changes, the other stays.
        run(&a_in, &b_out, 30);
        run(&b_in, &b_out, 31);
    }
    // B's buffers are gone; new ones may take their memory.
    let (c_in, c_out) = (word_at_256(&device, 0), word_at_256(&device, 0));
    run(&c_in, &c_out, 40);
    run(&a_in, &a_out, 41);
    run(&c_in, &c_out, 42);
    run(&c_in, &c_out, 43);
    assert_eq!(
        driver_vulkan::recordings_of(&cb),
        expected(&device, 1),
        "executes one after another replay one recording"
    );
}

vulkan_test! {
    fn a_fill_whose_slot_moves_between_executes_fills_each_executes_buffer() {
        in_child("child_fill_on_a_moving_slot", true);
    }
}

#[test]
#[ignore = "run in a child process by a_fill_whose_slot_moves_between_executes_fills_each_executes_buffer"]
fn child_fill_on_a_moving_slot() {
    let device = device();
    let cb = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    cb.fill(BufferRef::slot(0), 0, 8, 0xA5u8).unwrap();
    cb.end().unwrap();
    let done = device.create_semaphore(0).unwrap();
    let queue = device.queue(0).unwrap();
    for call in 1..=3u64 {
        // A recording bakes a fill's buffer into its commands: one whose slot moved is recorded anew.
        let target = host_buffer(&device, &[0, 0, 0]);
        let table = [BufferBinding::whole(&target)];
        queue.execute_with_bindings(&[], &cb, &table, &[SemaphoreValue::new(&done, call)]).unwrap();
        done.wait(call, Timeout::Infinite).unwrap();
        assert_eq!(target.read_as::<u32>().unwrap(), vec![0xA5A5_A5A5, 0xA5A5_A5A5, 0], "execute {call}");
    }
}

vulkan_test! {
    fn with_update_after_bind_off_binding_table_executes_are_recorded_each_time() {
        in_child("child_executes_with_update_after_bind_off", false);
    }
}

#[test]
#[ignore = "run in a child process by with_update_after_bind_off_binding_table_executes_are_recorded_each_time"]
fn child_executes_with_update_after_bind_off() {
    let device = device();
    assert!(!replays(&device), "{} is 0", driver_vulkan::UPDATE_AFTER_BIND_ENV);
    assert_eq!(twenty_executes_with_their_own_buffers(&device), None, "recorded at each execute");
}
