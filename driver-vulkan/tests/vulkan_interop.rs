//! Interop with Vulkan code outside the HAL, on the driver's own `VkDevice`: the test plays an
//! embedder that makes its own buffer, timeline semaphore and command buffer through `ash` on the
//! native handles (`driver_vulkan::interop`), imports the buffer as a HAL buffer, and orders its
//! work with HAL queues both ways (`Queue::wait_external`, `Queue::signal_external`, its own
//! `vkQueueSubmit` through `interop::with_queue`). Also: the release of an imported buffer, what
//! the import refuses, and a value that never comes (a timeout, then a bounded teardown whose
//! wait fails with `Cancelled`).
//!
//! Sharing through opaque file descriptors (`driver_vulkan::interop::allocate_exportable_buffer`,
//! `export_memory`, `create_exportable_timeline`, `import_timeline_fd`, and
//! `ExternalMemory::OpaqueFd` imports) round trips on the one device: exported memory imported as
//! another HAL buffer, an exported timeline imported as another semaphore; and every import closes
//! its descriptor whatever happens.
//!
//! Where no Vulkan device was found at build time the tests are ignored; run anyway without one,
//! each prints a `not run:` line and passes, or fails under `HAL_REQUIRE_VULKAN=1`. A device that
//! cannot export or import what a sharing test needs (as its
//! `vkGetPhysicalDeviceExternal*Properties` report) makes that test print `not run:` too, or fail
//! under `HAL_REQUIRE_VULKAN_EXPORT=1`. Under `HAL_VULKAN_VALIDATION=1` a validation error aborts
//! the test binary.

mod common;

use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use driver_vulkan::ash;
use driver_vulkan::ash::vk::{self, Handle};
use driver_vulkan::interop::{self, VulkanHandles};
use hal::{
    BufferBinding, BufferParams, CommandBufferMode, Error, ExternalMemory, ExternalTimepoint, SemaphoreValue as SV,
    StatusCode, Timeout,
};

/// Long enough for lavapipe on a loaded machine; a hang shows as a failure, not a stuck run.
const T: Timeout = Timeout::After(Duration::from_secs(30));

/// The device and the embedder on it, or `None` with a `not run:` line where Vulkan is not usable
/// here (a panic under `HAL_REQUIRE_VULKAN=1`, from the fixture).
fn setup(test: &str) -> Option<(hal::Device, Embedder)> {
    let fixture = common::vulkan_fixture();
    if let Some(reason) = fixture.unavailable() {
        eprintln!("not run: vulkan_interop::{test}: {reason}");
        return None;
    }
    let device = fixture.create_device().expect("a Vulkan device");
    let embedder = Embedder::of(&device);
    Some((device, embedder))
}

/// The embedder: its own objects on the driver's `VkDevice`, made and destroyed through `ash`.
struct Embedder {
    native: VulkanHandles,
}

/// A buffer of the embedder's, bound to host-visible coherent memory it maps itself.
struct TheirBuffer {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    bytes: *mut u8,
    size: u64,
}

impl Embedder {
    fn of(device: &hal::Device) -> Embedder {
        // SAFETY: the test destroys only what it makes, and touches the HAL's queues only through
        // `with_queue`.
        Embedder { native: unsafe { interop::handles(device) }.expect("the Vulkan handles") }
    }

    fn vk(&self) -> &ash::Device {
        self.native.device()
    }

    /// `size` bytes, zeroed, with the usage an import needs.
    fn buffer(&self, size: u64) -> TheirBuffer {
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST
            | vk::BufferUsageFlags::INDIRECT_BUFFER;
        let info = vk::BufferCreateInfo::default().size(size).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a valid create info; destroyed by `destroy_buffer`.
        let buffer = unsafe { self.vk().create_buffer(&info, None) }.expect("vkCreateBuffer");
        // SAFETY: a live buffer of this device.
        let requirements = unsafe { self.vk().get_buffer_memory_requirements(buffer) };
        // SAFETY: a plain query of the physical device.
        let properties =
            unsafe { self.native.instance().get_physical_device_memory_properties(self.native.physical_device()) };
        let wanted = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let type_index = (0..properties.memory_type_count)
            .find(|&i| {
                requirements.memory_type_bits & (1 << i) != 0
                    && properties.memory_types[i as usize].property_flags.contains(wanted)
            })
            .expect("a host-visible coherent memory type");
        let allocate =
            vk::MemoryAllocateInfo::default().allocation_size(requirements.size).memory_type_index(type_index);
        // SAFETY: a valid allocate info; freed by `destroy_buffer`.
        let memory = unsafe { self.vk().allocate_memory(&allocate, None) }.expect("vkAllocateMemory");
        // SAFETY: fresh memory of the buffer's requirements.
        unsafe { self.vk().bind_buffer_memory(buffer, memory, 0) }.expect("vkBindBufferMemory");
        // SAFETY: host-visible memory, mapped once, whole.
        let bytes = unsafe { self.vk().map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
            .expect("vkMapMemory")
            .cast::<u8>();
        // SAFETY: the mapping holds `size` bytes; nothing uses the buffer yet.
        unsafe { std::ptr::write_bytes(bytes, 0, size as usize) };
        TheirBuffer { buffer, memory, bytes, size }
    }

    fn destroy_buffer(&self, buffer: TheirBuffer) {
        // SAFETY: no work uses the buffer any more (the callers waited, and its release ran).
        unsafe {
            self.vk().destroy_buffer(buffer.buffer, None);
            self.vk().free_memory(buffer.memory, None);
        }
    }

    /// A timeline semaphore at `initial`.
    fn timeline(&self, initial: u64) -> vk::Semaphore {
        let mut kind =
            vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(initial);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: a valid create info; destroyed by `destroy_semaphore`.
        unsafe { self.vk().create_semaphore(&info, None) }.expect("vkCreateSemaphore")
    }

    fn destroy_semaphore(&self, semaphore: vk::Semaphore) {
        // SAFETY: nothing waits on or signals it any more.
        unsafe { self.vk().destroy_semaphore(semaphore, None) };
    }

    fn counter(&self, semaphore: vk::Semaphore) -> u64 {
        // SAFETY: a live timeline semaphore of this device.
        unsafe { self.vk().get_semaphore_counter_value(semaphore) }.expect("vkGetSemaphoreCounterValue")
    }

    fn signal(&self, semaphore: vk::Semaphore, value: u64) {
        let info = vk::SemaphoreSignalInfo::default().semaphore(semaphore).value(value);
        // SAFETY: a live timeline semaphore below `value`, with no signal pending.
        unsafe { self.vk().signal_semaphore(&info) }.expect("vkSignalSemaphore");
    }

    /// Whether `semaphore` reaches `value` within `timeout`.
    fn reaches(&self, semaphore: vk::Semaphore, value: u64, timeout: Duration) -> bool {
        let (semaphores, values) = ([semaphore], [value]);
        let info = vk::SemaphoreWaitInfo::default().semaphores(&semaphores).values(&values);
        // SAFETY: a live timeline semaphore; the arrays outlive the call.
        match unsafe { self.vk().wait_semaphores(&info, timeout.as_nanos() as u64) } {
            Ok(()) => true,
            Err(vk::Result::TIMEOUT) => false,
            Err(e) => panic!("vkWaitSemaphores: {e:?}"),
        }
    }
}

impl TheirBuffer {
    /// The embedder's view of its bytes (through its own mapping).
    fn bytes(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.size as usize];
        // SAFETY: the mapping holds `size` bytes; the callers read only once the device's writes are
        // done (their semaphores reached), and the memory is coherent.
        unsafe { std::ptr::copy_nonoverlapping(self.bytes, out.as_mut_ptr(), out.len()) };
        out
    }

    fn external(&self, offset: u64, length: u64) -> ExternalMemory {
        ExternalMemory::VulkanBuffer { buffer: self.buffer.as_raw(), offset, length }
    }
}

fn timeline(semaphore: vk::Semaphore, value: u64) -> ExternalTimepoint {
    ExternalTimepoint::VulkanTimeline { semaphore: semaphore.as_raw(), value }
}

/// Counts the runs of a release.
fn counted_release(counter: &Arc<AtomicUsize>) -> impl FnOnce() + Send + 'static {
    let counter = counter.clone();
    move || {
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

/// Waits up to 5 s for `counter` to reach `value`.
fn settles_at(counter: &AtomicUsize, value: usize) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while counter.load(Ordering::SeqCst) < value && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    counter.load(Ordering::SeqCst) == value
}

/// `out[i] = a[i] * 3 + b[i]`.
const AXPY_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> a: array<u32>;
@group(0) @binding(1) var<storage, read_write> b: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn axpy(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&out) {
        out[id.x] = a[id.x] * 3u + b[id.x];
    }
}
"#;

fn axpy(device: &hal::Device) -> hal::Executable {
    let source = hal::ExecutableSource::Bytes {
        format: hal::ExecutableFormat::Spirv,
        data: Arc::from(driver_vulkan::wgsl::compile(AXPY_WGSL, "axpy").expect("compile axpy")),
        entry_points: vec![hal::EntryPointInfo::new("axpy", 64, 3, 0)],
    };
    device.load_executable(&source).expect("load axpy")
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect()
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn an_imported_buffer_takes_fills_writes_copies_dispatches_and_reads_at_its_offset() {
    let Some((device, embedder)) =
        setup("an_imported_buffer_takes_fills_writes_copies_dispatches_and_reads_at_its_offset")
    else {
        return;
    };
    let queue = device.queue(0).unwrap();
    let n: u64 = 1024;
    let (offset, length) = (256, 2 * 4 * n);
    let theirs = embedder.buffer(offset + length + 256);
    let released = Arc::new(AtomicUsize::new(0));
    // SAFETY: the buffer is destroyed only after the release ran (checked below).
    let imported = unsafe {
        device.import_external_memory(
            theirs.external(offset, length),
            BufferParams::device_local(),
            counted_release(&released),
        )
    }
    .unwrap();
    assert_eq!(imported.size(), length);
    // SAFETY: read only.
    let native = unsafe { interop::buffer(&imported) }.unwrap();
    assert_eq!((native.buffer, native.offset, native.size), (theirs.buffer, offset, length));
    let s = device.create_semaphore(0).unwrap();

    // A fill, read back through the HAL (a device copy: the import has no mapping here).
    queue.fill(&[], &imported, 0, length, 0xA5u8, &[SV::new(&s, 1)]).unwrap();
    let got = queue.read(&[SV::new(&s, 1)], &imported, 0, length, &[]).unwrap().wait(T).unwrap();
    assert_eq!(got, vec![0xA5; length as usize]);
    let mine = theirs.bytes();
    assert!(mine[..offset as usize].iter().all(|&b| b == 0), "nothing before the range");
    assert!(mine[(offset + length) as usize..].iter().all(|&b| b == 0), "nothing after it");
    assert_eq!(&mine[offset as usize..(offset + length) as usize], &got[..]);

    // A write (an update through staging) of `b`, a copy of `a` from a HAL buffer, a dispatch
    // reading both from the import and writing its second half.
    let a: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let b: Vec<u32> = (0..n as u32).map(|i| i ^ 0x5555).collect();
    let hal_a = device.allocate_buffer(BufferParams::device_local(), 4 * n).unwrap();
    queue.write_values(&[], &hal_a, 0, &a, &[]).unwrap();
    let b_range = imported.subspan(0, 4 * n).unwrap();
    let out_range = imported.subspan(4 * n, 4 * n).unwrap();
    queue.write_values(&[], &b_range, 0, &b, &[SV::new(&s, 2)]).unwrap();
    let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    let kernel = axpy(&device);
    let scratch = device.allocate_buffer(BufferParams::device_local(), 4 * n).unwrap();
    cb.copy(&hal_a, 0, &scratch, 0, 4 * n).unwrap();
    cb.dispatch(
        &kernel,
        0,
        [(n / 64) as u32, 1, 1],
        &[],
        &[BufferBinding::whole(&scratch), BufferBinding::whole(&b_range), BufferBinding::whole(&out_range)],
    )
    .unwrap();
    cb.end().unwrap();
    queue.execute(&[SV::new(&s, 2)], &cb, &[SV::new(&s, 3)]).unwrap();
    let got = queue.read(&[SV::new(&s, 3)], &out_range, 0, 4 * n, &[]).unwrap().wait_as::<u32>(T).unwrap();
    let expected: Vec<u32> = a.iter().zip(&b).map(|(a, b)| a.wrapping_mul(3).wrapping_add(*b)).collect();
    assert_eq!(got, expected, "the dispatch read and wrote the import at its offset");
    let mine = theirs.bytes();
    assert_eq!(words(&mine[offset as usize..(offset + 4 * n) as usize]), b, "the write landed at the offset");
    assert_eq!(words(&mine[(offset + 4 * n) as usize..(offset + length) as usize]), expected);

    // A copy out of the import into a host-visible HAL buffer.
    let host = device.allocate_buffer(BufferParams::host_visible(), 4 * n).unwrap();
    queue.copy(&[], &out_range, 0, &host, 0, 4 * n, &[SV::new(&s, 4)]).unwrap();
    s.wait(4, T).unwrap();
    assert_eq!(host.read_as::<u32>().unwrap(), expected);

    assert!(imported.map(0, 4).is_err(), "an import has no host view");
    drop((b_range, out_range, cb));
    assert_eq!(released.load(Ordering::SeqCst), 0, "the buffer is alive: not released yet");
    drop(imported);
    assert!(settles_at(&released, 1), "released exactly once");
    drop(device);
    embedder.destroy_buffer(theirs);
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn the_release_waits_for_queued_uses_and_refused_imports_release_at_once() {
    let Some((device, embedder)) = setup("the_release_waits_for_queued_uses_and_refused_imports_release_at_once")
    else {
        return;
    };
    let queue = device.queue(1).unwrap();
    let theirs = embedder.buffer(4096);
    let released = Arc::new(AtomicUsize::new(0));
    // SAFETY: destroyed after the release ran.
    let buffer = unsafe {
        device.import_external_memory(
            theirs.external(0, 4096),
            BufferParams::device_local(),
            counted_release(&released),
        )
    }
    .unwrap();
    let gate = device.create_semaphore(0).unwrap();
    let done = device.create_semaphore(0).unwrap();
    queue.fill(&[SV::new(&gate, 1)], &buffer, 0, 4096, 5u8, &[SV::new(&done, 1)]).unwrap();
    drop(buffer);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(released.load(Ordering::SeqCst), 0, "a queued fill still uses the buffer");
    gate.signal(1).unwrap();
    done.wait(1, T).unwrap();
    assert!(settles_at(&released, 1), "released once the fill is done, exactly once");
    assert_eq!(theirs.bytes(), vec![5; 4096]);

    let refused = Arc::new(AtomicUsize::new(0));
    let import = |memory: ExternalMemory, params: BufferParams| -> Error {
        // SAFETY: every import here is refused (asserted).
        unsafe { device.import_external_memory(memory, params, counted_release(&refused)) }.expect_err("refused")
    };
    let local = BufferParams::device_local();
    let null = import(ExternalMemory::VulkanBuffer { buffer: 0, offset: 0, length: 16 }, local);
    assert_eq!(null.code(), StatusCode::InvalidArgument, "{null}");
    let overflow = import(theirs.external(u64::MAX - 8, 16), local);
    assert_eq!(overflow.code(), StatusCode::OutOfRange, "{overflow}");
    let past_end = import(theirs.external(64, 1 << 20), local);
    assert_eq!(past_end.code(), StatusCode::OutOfRange, "{past_end}");
    assert!(past_end.message().contains("past the end"), "{past_end}");
    let visible = import(theirs.external(0, 16), BufferParams::host_visible());
    assert_eq!(visible.code(), StatusCode::InvalidArgument, "{visible}");
    let cuda = import(ExternalMemory::CudaDevicePointer { address: 0x1000, length: 16 }, local);
    assert_eq!(cuda.code(), StatusCode::Unimplemented, "{cuda}");
    assert!(cuda.message().contains("CUDA device pointer"), "{cuda}");
    let empty = import(theirs.external(0, 0), local);
    assert_eq!(empty.code(), StatusCode::InvalidArgument, "{empty}");
    assert_eq!(refused.load(Ordering::SeqCst), 6, "every refused import released at once");
    drop(device);
    embedder.destroy_buffer(theirs);
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn a_queue_waits_on_the_device_for_an_embedder_value_signalled_from_the_host() {
    let Some((device, embedder)) = setup("a_queue_waits_on_the_device_for_an_embedder_value_signalled_from_the_host")
    else {
        return;
    };
    let queue = device.queue(0).unwrap();
    let theirs = embedder.timeline(0);
    let s = device.create_semaphore(0).unwrap();
    // SAFETY: the semaphore outlives the signals (destroyed after the device).
    unsafe { queue.wait_external(&[], timeline(theirs, 5), &[SV::new(&s, 1)]) }.unwrap();
    let later = device.allocate_buffer(BufferParams::host_visible(), 4).unwrap();
    queue.fill(&[], &later, 0, 4, 9u32, &[SV::new(&s, 2)]).unwrap();
    let early = s.wait(1, Timeout::After(Duration::from_millis(100))).expect_err("the value has not come");
    assert_eq!(early.code(), StatusCode::DeadlineExceeded, "{early}");
    embedder.signal(theirs, 4);
    assert!(s.wait(1, Timeout::After(Duration::from_millis(50))).is_err(), "4 is not 5");
    embedder.signal(theirs, 5);
    s.wait(2, T).unwrap();
    assert_eq!(later.read_as::<u32>().unwrap(), vec![9], "later work of the queue ran after the wait");
    // A value reached already passes at once.
    // SAFETY: as above.
    unsafe { queue.wait_external(&[], timeline(theirs, 3), &[SV::new(&s, 3)]) }.unwrap();
    s.wait(3, T).unwrap();
    // Another API's kind is refused, naming it.
    // SAFETY: refused before anything is enqueued.
    let cuda = unsafe { queue.wait_external(&[], ExternalTimepoint::CudaStream(1), &[]) }.unwrap_err();
    assert_eq!(cuda.code(), StatusCode::Unimplemented, "{cuda}");
    assert!(cuda.message().contains("CUDA stream"), "{cuda}");
    // SAFETY: as above.
    let null = unsafe { queue.wait_external(&[], timeline(vk::Semaphore::null(), 1), &[]) }.unwrap_err();
    assert_eq!(null.code(), StatusCode::InvalidArgument, "{null}");
    drop(device);
    embedder.destroy_semaphore(theirs);
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn a_queue_signals_an_embedder_value_after_its_waits_and_even_when_they_fail() {
    let Some((device, embedder)) = setup("a_queue_signals_an_embedder_value_after_its_waits_and_even_when_they_fail")
    else {
        return;
    };
    let queue = device.queue(2).unwrap();
    let theirs = embedder.timeline(0);
    let gate = device.create_semaphore(0).unwrap();
    let s = device.create_semaphore(0).unwrap();
    // SAFETY: the semaphore outlives the signals (destroyed after the device).
    unsafe { queue.signal_external(&[SV::new(&gate, 1)], timeline(theirs, 7), &[SV::new(&s, 1)]) }.unwrap();
    assert!(!embedder.reaches(theirs, 7, Duration::from_millis(100)), "not before the HAL wait is reached");
    gate.signal(1).unwrap();
    assert!(embedder.reaches(theirs, 7, Duration::from_secs(30)), "signalled once the wait is reached");
    s.wait(1, T).unwrap();
    assert_eq!(embedder.counter(theirs), 7);

    // A value the semaphore has reached is refused at the call.
    // SAFETY: as above.
    let stale = unsafe { queue.signal_external(&[], timeline(theirs, 7), &[]) }.unwrap_err();
    assert_eq!(stale.code(), StatusCode::InvalidArgument, "{stale}");

    // A wait that fails: the HAL signal fails, and the embedder's value comes anyway (from the
    // host), so the embedder's queue does not hang on the HAL.
    // SAFETY: as above.
    unsafe { queue.signal_external(&[SV::new(&gate, 2)], timeline(theirs, 8), &[SV::new(&s, 2)]) }.unwrap();
    gate.fail(Error::aborted("the producer gave up"));
    let failed = s.wait(2, T).expect_err("the wait failed");
    assert_eq!(failed.code(), StatusCode::Aborted, "{failed}");
    assert!(embedder.reaches(theirs, 8, Duration::from_secs(5)), "the value came anyway");

    // A value the embedder reaches itself before the HAL's submission: not signalled again (Vulkan
    // forbids it), and the HAL signal says so.
    let (gate, s) = (device.create_semaphore(0).unwrap(), device.create_semaphore(0).unwrap());
    // SAFETY: as above.
    unsafe { queue.signal_external(&[SV::new(&gate, 1)], timeline(theirs, 10), &[SV::new(&s, 1)]) }.unwrap();
    embedder.signal(theirs, 10);
    gate.signal(1).unwrap();
    let overtaken = s.wait(1, T).expect_err("the value came first");
    assert_eq!(overtaken.code(), StatusCode::FailedPrecondition, "{overtaken}");
    assert_eq!(embedder.counter(theirs), 10);
    drop(device);
    embedder.destroy_semaphore(theirs);
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn embedder_work_submitted_through_with_queue_runs_between_hal_work_on_the_device() {
    let Some((device, embedder)) =
        setup("embedder_work_submitted_through_with_queue_runs_between_hal_work_on_the_device")
    else {
        return;
    };
    let queue = device.queue(0).unwrap();
    let vk = embedder.vk();
    // SAFETY: read only.
    let native_queue = unsafe { interop::queue(&queue) }.unwrap();
    assert_eq!(native_queue.family_index, embedder.native.queue_family_index());
    assert!(native_queue.index < embedder.native.queue_count());
    assert_eq!(embedder.native.api_version(), vk::API_VERSION_1_2);
    // SAFETY: read only.
    assert_eq!(unsafe { interop::logical_device(&device) }.unwrap(), vk.handle());
    // SAFETY: read only.
    assert_eq!(unsafe { interop::instance(&device) }.unwrap(), embedder.native.instance().handle());
    // SAFETY: read only.
    assert_eq!(unsafe { interop::physical_device(&device) }.unwrap(), embedder.native.physical_device());
    let hal_semaphore = device.create_semaphore(0).unwrap();
    let none = interop::semaphore_timeline(&hal_semaphore).unwrap_err();
    assert_eq!(none.code(), StatusCode::Unimplemented, "{none}");

    let bytes = 4096u64;
    let theirs = embedder.buffer(bytes);
    // SAFETY: destroyed after the device (and so after its release).
    let imported =
        unsafe { device.import_external_memory(theirs.external(0, bytes), BufferParams::device_local(), || {}) }
            .unwrap();
    let semaphore = embedder.timeline(0);
    // The embedder's command buffer: it adds to what the HAL filled, by copying a word it owns over
    // every other word (a transfer the HAL does not know of).
    let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(native_queue.family_index);
    // SAFETY: a valid create info; destroyed at the end.
    let pool = unsafe { vk.create_command_pool(&pool_info, None) }.unwrap();
    let allocate = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(1);
    // SAFETY: a live pool of this device.
    let cmd = unsafe { vk.allocate_command_buffers(&allocate) }.unwrap()[0];
    // SAFETY: recording a fresh command buffer: fill the second half of the buffer with 0x77s.
    unsafe {
        vk.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
        vk.cmd_fill_buffer(cmd, theirs.buffer, bytes / 2, bytes / 2, 0x7777_7777);
        vk.end_command_buffer(cmd).unwrap();
    }

    let s = device.create_semaphore(0).unwrap();
    for round in 0..3u64 {
        let base = 2 * round;
        // HAL: fill the whole buffer; the embedder's semaphore reaches base + 1 after it.
        queue.fill(&[], &imported, 0, bytes, 0x1111_1111u32 * (round as u32 + 1), &[]).unwrap();
        // SAFETY: the semaphore outlives the signals.
        unsafe { queue.signal_external(&[], timeline(semaphore, base + 1), &[SV::new(&s, 3 * round + 1)]) }.unwrap();
        // The embedder submits once the HAL's signal is submitted (so its wait never precedes its
        // signal on the shared VkQueue): waits for base + 1, fills, signals base + 2.
        s.wait(3 * round + 1, T).unwrap();
        let (waits, wait_values, signals, signal_values) = ([semaphore], [base + 1], [semaphore], [base + 2]);
        let mut timeline_info = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values)
            .signal_semaphore_values(&signal_values);
        let stages = [vk::PipelineStageFlags::ALL_COMMANDS];
        let cmds = [cmd];
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&waits)
            .wait_dst_stage_mask(&stages)
            .command_buffers(&cmds)
            .signal_semaphores(&signals)
            .push_next(&mut timeline_info);
        // SAFETY: the submission's wait is on a value already signalled, the command buffer is
        // recorded and not pending (the previous round's submission completed), the queue is held.
        unsafe { interop::with_queue(&queue, |vk_queue| vk.queue_submit(vk_queue, &[submit], vk::Fence::null())) }
            .unwrap()
            .expect("vkQueueSubmit");
        // HAL: read after the embedder's work, waiting for base + 2 on the device.
        // SAFETY: as above.
        unsafe { queue.wait_external(&[], timeline(semaphore, base + 2), &[SV::new(&s, 3 * round + 2)]) }.unwrap();
        let got =
            queue.read(&[SV::new(&s, 3 * round + 2)], &imported, 0, bytes, &[SV::new(&s, 3 * round + 3)]).unwrap();
        let got = words(&got.wait(T).unwrap());
        let half = (bytes / 8) as usize;
        let fill = 0x1111_1111u32 * (round as u32 + 1);
        assert!(got[..half].iter().all(|&w| w == fill), "round {round}: the HAL's fill");
        assert!(
            got[half..].iter().all(|&w| w == 0x7777_7777),
            "round {round}: the embedder's fill ran before the read"
        );
    }
    drop(imported);
    drop(device);
    // SAFETY: every submission completed (the HAL waited for the last one's value); `native`
    // keeps the VkDevice alive.
    unsafe { vk.destroy_command_pool(pool, None) };
    embedder.destroy_semaphore(semaphore);
    embedder.destroy_buffer(theirs);
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn a_value_that_never_comes_is_a_timeout_then_a_bounded_teardown_that_cancels_the_wait() {
    let Some((device, embedder)) =
        setup("a_value_that_never_comes_is_a_timeout_then_a_bounded_teardown_that_cancels_the_wait")
    else {
        return;
    };
    let queue = device.queue(1).unwrap();
    let never = embedder.timeline(0);
    let s = device.create_semaphore(0).unwrap();
    // SAFETY: the semaphore outlives the device.
    unsafe { queue.wait_external(&[], timeline(never, 5), &[SV::new(&s, 1)]) }.unwrap();
    // Work queued behind the wait, and a signal of the embedder's behind it.
    let behind = device.allocate_buffer(BufferParams::host_visible(), 4).unwrap();
    queue.fill(&[], &behind, 0, 4, 3u32, &[SV::new(&s, 2)]).unwrap();
    let theirs = embedder.timeline(0);
    // SAFETY: as above.
    unsafe { queue.signal_external(&[], timeline(theirs, 1), &[SV::new(&s, 3)]) }.unwrap();
    let timeout = s.wait(1, Timeout::After(Duration::from_millis(200))).expect_err("the value never comes");
    assert_eq!(timeout.code(), StatusCode::DeadlineExceeded, "{timeout}");

    let start = Instant::now();
    drop(queue);
    drop(device);
    let teardown = start.elapsed();
    println!("MEASURED: teardown with a queue waiting on an embedder value that never comes: {teardown:?}");
    assert!(teardown < Duration::from_secs(5), "teardown is bounded: {teardown:?}");
    let status = s.wait(1, T).expect_err("the wait was cancelled");
    assert_eq!(status.code(), StatusCode::Cancelled, "{status}");
    assert!(status.message().contains("signal from the host"), "{status}");
    assert_eq!(embedder.counter(never), 5, "teardown released the wait by signalling the value");
    assert!(embedder.reaches(theirs, 1, Duration::from_secs(5)), "the embedder's value behind it came");
    embedder.destroy_semaphore(never);
    embedder.destroy_semaphore(theirs);
}

/// Set to `1` where the device must share memory and timeline semaphores through file descriptors:
/// the sharing tests then fail instead of not running.
const REQUIRE_EXPORT_ENV: &str = "HAL_REQUIRE_VULKAN_EXPORT";

/// Whether `device` offers what a sharing test needs (`what`, as its report says): otherwise a
/// `not run:` line, or a panic under `HAL_REQUIRE_VULKAN_EXPORT=1`.
fn shares(test: &str, offered: bool, what: &str, sharing: &interop::FdSharing) -> bool {
    if offered {
        return true;
    }
    let reason = format!("the device does not {what} through opaque file descriptors ({sharing:?})");
    if std::env::var(REQUIRE_EXPORT_ENV).is_ok_and(|v| v == "1") {
        panic!("{REQUIRE_EXPORT_ENV}=1 but vulkan_interop::{test} cannot run: {reason}");
    }
    eprintln!("not run: vulkan_interop::{test}: {reason}");
    false
}

/// A file of the test's own, opened: its descriptor (the caller's to hand over) and its path.
fn unique_file(tag: &str) -> (OwnedFd, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("hal-vulkan-interop-{}-{tag}", std::process::id()));
    std::fs::write(&path, vec![0u8; 4096]).expect("write a scratch file");
    let file = std::fs::File::open(&path).expect("open the scratch file");
    (OwnedFd::from(file), path)
}

/// Whether descriptor `fd` still names `path` (it was not closed; a closed number reused by another
/// thread names something else).
fn still_open(fd: i32, path: &std::path::Path) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok_and(|target| target == path)
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn the_device_reports_what_it_shares_through_file_descriptors_and_its_uuid() {
    let Some((device, embedder)) = setup("the_device_reports_what_it_shares_through_file_descriptors_and_its_uuid")
    else {
        return;
    };
    let sharing = interop::fd_sharing(&device).unwrap();
    println!("MEASURED: fd sharing of '{}': {sharing:?}", device.info().name);
    let enabled = embedder.native.device_extensions();
    let has = |name: &std::ffi::CStr| enabled.contains(&name);
    assert_eq!(has(ash::khr::external_memory_fd::NAME), sharing.memory_fd_extension, "{enabled:?}");
    assert_eq!(has(ash::khr::external_semaphore_fd::NAME), sharing.semaphore_fd_extension, "{enabled:?}");
    assert!(sharing.memory_fd_extension || !(sharing.memory_export || sharing.memory_import));
    assert!(sharing.semaphore_fd_extension || !(sharing.timeline_export || sharing.timeline_import));
    let property = |name: &str| device.info().properties.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    assert_eq!(property("memory_fd_export"), Some(sharing.memory_export.to_string()));
    assert_eq!(property("timeline_fd_import"), Some(sharing.timeline_import.to_string()));

    let uuid = interop::device_uuid(&device).unwrap();
    assert_eq!(uuid, embedder.native.device_uuid());
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(device.info().stable_id, hex, "the stable id spells the deviceUUID");

    // What the device cannot do is Unimplemented, naming what is missing.
    if !sharing.memory_export {
        let e = interop::allocate_exportable_buffer(&device, 4096).unwrap_err();
        assert_eq!(e.code(), StatusCode::Unimplemented, "{e}");
        assert!(e.message().contains("VK_KHR_external_memory_fd") || e.message().contains("OPAQUE_FD"), "{e}");
    }
    if !sharing.timeline_export {
        let e = interop::create_exportable_timeline(&device, 0).unwrap_err();
        assert_eq!(e.code(), StatusCode::Unimplemented, "{e}");
        assert!(e.message().contains("VK_KHR_external_semaphore_fd") || e.message().contains("OPAQUE_FD"), "{e}");
    }
    // A CUDA semaphore is another API's kind.
    let queue = device.queue(0).unwrap();
    let cuda = ExternalTimepoint::CudaExternalSemaphore { semaphore: 1, value: 1 };
    // SAFETY: refused before anything is enqueued.
    let refused = unsafe { queue.wait_external(&[], cuda, &[]) }.unwrap_err();
    assert_eq!(refused.code(), StatusCode::Unimplemented, "{refused}");
    assert!(refused.message().contains("CUDA external semaphore"), "{refused}");
    // An ordinary buffer's memory was not allocated for export.
    let plain = device.allocate_buffer(BufferParams::device_local(), 64).unwrap();
    let e = interop::export_memory(&plain).unwrap_err();
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn exported_memory_imports_as_another_buffer_sharing_its_bytes() {
    const TEST: &str = "exported_memory_imports_as_another_buffer_sharing_its_bytes";
    let Some((device, _embedder)) = setup(TEST) else { return };
    let sharing = interop::fd_sharing(&device).unwrap();
    if !shares(TEST, sharing.memory_export && sharing.memory_import, "export and import memory", &sharing) {
        return;
    }
    let queue = device.queue(0).unwrap();
    let n: u64 = 1024;
    let exported = interop::allocate_exportable_buffer(&device, 4 * n).unwrap();
    assert_eq!(exported.size(), 4 * n);
    assert!(exported.map(0, 4).is_err(), "shared memory has no host view");
    let s = device.create_semaphore(0).unwrap();
    // A dispatch writes the exported buffer: out = a * 3 + b.
    let a: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let b: Vec<u32> = (0..n as u32).map(|i| i ^ 0x00C0_FFEE).collect();
    let hal_a = device.allocate_buffer_init(BufferParams::device_local(), &a).unwrap();
    let hal_b = device.allocate_buffer_init(BufferParams::device_local(), &b).unwrap();
    let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    let kernel = axpy(&device);
    cb.dispatch(
        &kernel,
        0,
        [(n / 64) as u32, 1, 1],
        &[],
        &[BufferBinding::whole(&hal_a), BufferBinding::whole(&hal_b), BufferBinding::whole(&exported)],
    )
    .unwrap();
    cb.end().unwrap();
    queue.execute(&[], &cb, &[SV::new(&s, 1)]).unwrap();
    let expected: Vec<u32> = a.iter().zip(&b).map(|(a, b)| a.wrapping_mul(3).wrapping_add(*b)).collect();

    // Two exports are two descriptors of the same memory.
    let first = interop::export_memory(&exported).unwrap();
    let second = interop::export_memory(&exported).unwrap();
    assert_ne!(first.fd.as_raw_fd(), second.fd.as_raw_fd());
    assert!(first.length >= 4 * n, "the memory object holds the buffer: {first:?}");
    assert_eq!((first.length, first.dedicated), (second.length, second.dedicated));
    drop(second);
    let released = Arc::new(AtomicUsize::new(0));
    // SAFETY: the memory lives while either buffer does (both APIs reference it).
    let imported = unsafe {
        device.import_external_memory(first.into_external(), BufferParams::device_local(), counted_release(&released))
    }
    .unwrap();
    let length = imported.size();
    assert!(length >= 4 * n);
    let got = queue.read(&[SV::new(&s, 1)], &imported, 0, 4 * n, &[]).unwrap().wait_as::<u32>(T).unwrap();
    assert_eq!(got, expected, "the import reads what the dispatch wrote into the export");

    // Writes through the import land in the export.
    let back: Vec<u32> = (0..n as u32).map(|i| !i).collect();
    queue.write_values(&[], &imported, 0, &back, &[]).unwrap();
    queue.fill(&[], &imported, 8, 8, 0xFFFF_FFFFu32, &[SV::new(&s, 2)]).unwrap();
    let got = queue.read(&[SV::new(&s, 2)], &exported, 0, 4 * n, &[]).unwrap().wait_as::<u32>(T).unwrap();
    let mut want = back.clone();
    want[2] = u32::MAX;
    want[3] = u32::MAX;
    assert_eq!(got, want, "the export reads what was written through the import");

    drop(imported);
    assert!(settles_at(&released, 1), "the import's release runs once, when it is dropped");
    drop((exported, cb));
    device.wait_semaphores(hal::WaitMode::All, &[SV::new(&s, 2)], T).unwrap();
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn every_opaque_fd_import_closes_its_descriptor_whatever_happens() {
    const TEST: &str = "every_opaque_fd_import_closes_its_descriptor_whatever_happens";
    let Some((device, _embedder)) = setup(TEST) else { return };
    let refused = Arc::new(AtomicUsize::new(0));
    let import = |tag: &str, length: u64, params: BufferParams| -> hal::Result<hal::Buffer> {
        let (fd, path) = unique_file(tag);
        let raw = fd.into_raw_fd();
        assert!(still_open(raw, &path));
        let memory = ExternalMemory::OpaqueFd { fd: raw, length, dedicated: false };
        // SAFETY: the descriptor is ours and handed over; every import here is refused before a
        // Vulkan call (a file is no memory object: handing it to Vulkan would break the contract).
        let result = unsafe { device.import_external_memory(memory, params, counted_release(&refused)) };
        assert!(!still_open(raw, &path), "{tag}: the descriptor was closed by the call ({result:?})");
        let _ = std::fs::remove_file(&path);
        result
    };
    let visible = import("visible", 4096, BufferParams::host_visible()).unwrap_err();
    assert_eq!(visible.code(), StatusCode::InvalidArgument, "{visible}");
    let empty = import("empty", 0, BufferParams::device_local()).unwrap_err();
    assert_eq!(empty.code(), StatusCode::InvalidArgument, "{empty}");
    let huge = import("huge", u64::MAX, BufferParams::device_local()).unwrap_err();
    assert_eq!(huge.code(), StatusCode::ResourceExhausted, "{huge}");
    // A negative descriptor names nothing to close.
    // SAFETY: refused.
    let negative = unsafe {
        device.import_external_memory(
            ExternalMemory::OpaqueFd { fd: -1, length: 4096, dedicated: false },
            BufferParams::device_local(),
            counted_release(&refused),
        )
    }
    .unwrap_err();
    assert_eq!(negative.code(), StatusCode::InvalidArgument, "{negative}");
    assert!(settles_at(&refused, 4), "every refused import released at once");
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn an_exported_timeline_imports_as_another_semaphore_that_orders_queues() {
    const TEST: &str = "an_exported_timeline_imports_as_another_semaphore_that_orders_queues";
    let Some((device, _embedder)) = setup(TEST) else { return };
    let sharing = interop::fd_sharing(&device).unwrap();
    if !shares(TEST, sharing.timeline_export && sharing.timeline_import, "export and import timelines", &sharing) {
        return;
    }
    let original = interop::create_exportable_timeline(&device, 3).unwrap();
    assert_eq!(original.value().unwrap(), 3);
    let imported = interop::import_timeline_fd(&device, original.export_fd().unwrap()).unwrap();
    assert_eq!(imported.value().unwrap(), 3, "the import shares the payload");
    assert_ne!(imported.handle(), original.handle());
    let e = imported.export_fd().unwrap_err();
    assert_eq!(e.code(), StatusCode::InvalidArgument, "an import was not created exportable: {e}");

    // SAFETY: nothing signals the semaphore but this test, in order.
    unsafe { original.signal(4) }.unwrap();
    assert!(imported.wait(4, Duration::from_secs(5)).unwrap(), "a host signal of one is seen through the other");
    // SAFETY: as above.
    let stale = unsafe { imported.signal(4) }.unwrap_err();
    assert_eq!(stale.code(), StatusCode::InvalidArgument, "{stale}");

    // Queue 0 signals 6 on the original; queue 1 waits for 6 on the import; a write behind it.
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
    let s = device.create_semaphore(0).unwrap();
    let gate = device.create_semaphore(0).unwrap();
    let out = device.allocate_buffer(BufferParams::host_visible(), 4).unwrap();
    // SAFETY: the semaphores are the driver's, held by the operations until they retired.
    unsafe { q1.wait_external(&[], imported.at(6), &[SV::new(&s, 1)]) }.unwrap();
    q1.fill(&[SV::new(&s, 1)], &out, 0, 4, 6u32, &[SV::new(&s, 2)]).unwrap();
    // SAFETY: as above.
    unsafe { q0.signal_external(&[SV::new(&gate, 1)], original.at(6), &[]) }.unwrap();
    // The handles go; the operations hold the semaphores.
    let imported_handle = imported.handle();
    drop(imported);
    assert!(s.wait(1, Timeout::After(Duration::from_millis(100))).is_err(), "6 has not come");
    gate.signal(1).unwrap();
    s.wait(2, T).unwrap();
    assert_eq!(out.read_as::<u32>().unwrap(), vec![6]);
    assert!(original.wait(6, Duration::from_secs(5)).unwrap());
    println!("MEASURED: queue 1 waited on imported timeline {imported_handle:?} for queue 0's signal of 6");
    drop(original);
    drop(device);
}

#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn two_devices_on_one_gpu_submit_to_vulkan_queues_of_their_own_where_the_family_has_enough() {
    if common::vulkan_fixture().unavailable().is_some() {
        eprintln!("not run: vulkan_interop::two_devices_on_one_gpu_submit_to_vulkan_queues_of_their_own: no device");
        return;
    }
    // In a child: the devices other tests make at the same time would take queues in between.
    common::run_in_child("two_devices_take_their_queues_in_child", &[]);
}

#[test]
#[ignore = "run by two_devices_on_one_gpu_submit_to_vulkan_queues_of_their_own_where_the_family_has_enough, in a child"]
fn two_devices_take_their_queues_in_child() {
    let Some((first, embedder)) = setup("two_devices_take_their_queues_in_child") else { return };
    let second = common::vulkan_fixture().create_device().expect("a second Vulkan device");
    let vk = embedder.vk();
    // SAFETY: read only.
    assert_eq!(unsafe { interop::logical_device(&second) }.unwrap(), vk.handle(), "one VkDevice for both");
    let count = embedder.native.queue_count();
    // SAFETY: read only.
    let families = unsafe {
        embedder.native.instance().get_physical_device_queue_family_properties(embedder.native.physical_device())
    };
    let family_queues = families[embedder.native.queue_family_index() as usize].queue_count;
    assert_eq!(count, family_queues.min(8), "VkQueues asked for: two devices' worth where the family has them");
    let indices = |device: &hal::Device| -> Vec<u32> {
        (0..device.info().queue_count)
            .map(|q| {
                // SAFETY: read only.
                let native = unsafe { interop::queue(&device.queue(q).unwrap()) }.unwrap();
                assert!(native.index < count, "queue {q}: index {} of {count}", native.index);
                // SAFETY: the queue was created with the device; reading its handle changes nothing.
                let handle = unsafe { vk.get_device_queue(native.family_index, native.index) };
                assert_eq!(native.queue, handle, "queue {q}: the handle of VkQueue {}", native.index);
                native.index
            })
            .collect()
    };
    let (a, b) = (indices(&first), indices(&second));
    let distinct = |set: &[u32]| set.iter().collect::<std::collections::BTreeSet<_>>().len();
    let per_device = a.len().min(count as usize);
    assert_eq!(distinct(&a), per_device, "the first device's queues {a:?} of {count}");
    assert_eq!(distinct(&b), per_device, "the second device's queues {b:?} of {count}");
    if count as usize >= a.len() + b.len() {
        let both: Vec<u32> = a.iter().chain(&b).copied().collect();
        assert_eq!(distinct(&both), both.len(), "queues shared between the devices: {a:?} and {b:?} of {count}");
    }
    // A hop each way between them on the device.
    let s = first.create_semaphore(0).unwrap();
    let empty = |device: &hal::Device| {
        let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
        cb.end().unwrap();
        cb
    };
    first.queue(0).unwrap().execute(&[SV::new(&s, 0)], &empty(&first), &[SV::new(&s, 1)]).unwrap();
    second.queue(0).unwrap().execute(&[SV::new(&s, 1)], &empty(&second), &[SV::new(&s, 2)]).unwrap();
    s.wait(2, T).unwrap();
}

/// Work of a queue stays behind the queue's earlier work even when its wait on another queue's
/// value would let it start (the driver leaves a queue's own order out only where a wait shows it):
/// queue 0 waits on the device for an embedder's value, queue 1 fills a large buffer, and queue 0's
/// next work waits on that fill. Where queue 1 has a `VkQueue` of its own the fill completes while
/// queue 0 is held; on one shared `VkQueue` (lavapipe) everything waits behind the value.
#[test]
#[cfg_attr(
    not(any(hal_vulkan_found, hal_vulkan_required)),
    ignore = "no Vulkan device on the build machine; with one: --include-ignored with HAL_REQUIRE_VULKAN=1"
)]
fn work_stays_behind_its_queues_held_work_when_its_other_wait_is_reached() {
    let Some((device, embedder)) = setup("work_stays_behind_its_queues_held_work_when_its_other_wait_is_reached")
    else {
        return;
    };
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
    let theirs = embedder.timeline(0);
    let (held, filled, behind) =
        (device.create_semaphore(0).unwrap(), device.create_semaphore(0).unwrap(), device.create_semaphore(0).unwrap());
    let large = device.allocate_buffer(BufferParams::device_local(), 64 << 20).unwrap();
    let later = device.allocate_buffer(BufferParams::host_visible(), 4).unwrap();
    later.write_values(0, &[0u32]).unwrap();
    // SAFETY: the semaphore outlives the signals (destroyed after the device).
    unsafe { q0.wait_external(&[], timeline(theirs, 1), &[SV::new(&held, 1)]) }.unwrap();
    q1.fill(&[], &large, 0, 64 << 20, 3u32, &[SV::new(&filled, 1)]).unwrap();
    q0.fill(&[SV::new(&filled, 1)], &later, 0, 4, 9u32, &[SV::new(&behind, 1)]).unwrap();
    let own_queue = filled.wait(1, Timeout::After(Duration::from_secs(1))).is_ok();
    let early = behind.wait(1, Timeout::After(Duration::from_millis(100))).expect_err("queue 0 is held");
    assert_eq!(early.code(), StatusCode::DeadlineExceeded, "{early}");
    assert_eq!(later.read_as::<u32>().unwrap(), vec![0], "ran before the held work (fill done: {own_queue})");
    embedder.signal(theirs, 1);
    behind.wait(1, T).unwrap();
    assert_eq!(later.read_as::<u32>().unwrap(), vec![9]);
    assert_eq!(held.query().unwrap(), 1);
    drop(device);
    embedder.destroy_semaphore(theirs);
}
