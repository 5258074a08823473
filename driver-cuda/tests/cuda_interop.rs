//! Interop with CUDA code outside the HAL: a kernel launched through cudarc's own API on a stream of
//! its own (standing in for cuBLAS, PyTorch or an embedder's kernels) reads a HAL buffer and writes
//! memory it allocated itself, imported as a HAL buffer; HAL semaphores order it both ways on the
//! device (`Queue::signal_external`, `Queue::wait_external`). Also: the release of imported memory,
//! what the import refuses, a foreign stream that never finishes (a timeout, then a cancelled wait at
//! teardown, bounded), a HAL failure releasing the foreign stream, and the per-hop cost beside a
//! plain CUDA event wait (printed as `MEASURED:` lines).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use cudarc::driver::sys::{self, CUdeviceptr};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use hal::{BufferParams, Error, ExternalMemory, ExternalTimepoint, SemaphoreValue as SV, StatusCode, Timeout};

/// The foreign kernels: `out[i] = in[i] * 3 + 7` after spinning `delay_us` (so a missing order shows
/// as stale bytes), and a one-thread no-op for the per-hop cost.
const FOREIGN: &str = r#"
extern "C" __global__ void scale_add(const unsigned* in, unsigned* out, unsigned n, unsigned delay_us) {
    if (delay_us != 0 && blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned long long start, now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < 1000ull * delay_us);
    }
    __syncthreads();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 3u + 7u;
}
extern "C" __global__ void tick(unsigned* word) { word[0] += 1; }
"#;

/// Another library: its own context handle (the GPU's primary context, as cuBLAS and PyTorch use),
/// stream and module.
struct Foreign {
    _context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    scale_add: CudaFunction,
    tick: CudaFunction,
}

impl Foreign {
    fn new() -> Option<Foreign> {
        let context = CudaContext::new(0).expect("cudarc context on GPU 0");
        let ptx = match cudarc::nvrtc::compile_ptx(FOREIGN) {
            Ok(ptx) => ptx,
            Err(e) => {
                not_run(&format!("NVRTC could not compile the foreign kernels: {e:?}"));
                return None;
            }
        };
        let module = context.load_module(ptx).expect("load the foreign module");
        let stream = context.new_stream().expect("a foreign stream");
        Some(Foreign {
            scale_add: module.load_function("scale_add").expect("scale_add"),
            tick: module.load_function("tick").expect("tick"),
            stream,
            _context: context,
        })
    }

    fn raw_stream(&self) -> ExternalTimepoint {
        ExternalTimepoint::CudaStream(self.stream.cu_stream() as u64)
    }

    fn scale_add(&self, input: CUdeviceptr, output: CUdeviceptr, n: u32, delay_us: u32) {
        let mut launch = self.stream.launch_builder(&self.scale_add);
        launch.arg(&input).arg(&output).arg(&n).arg(&delay_us);
        // SAFETY: the arguments match the kernel's parameters; both ranges hold `n` words and stay
        // allocated until the test synchronizes.
        unsafe { launch.launch(LaunchConfig::for_num_elems(n)) }.expect("launch scale_add");
    }

    fn tick(&self, word: CUdeviceptr) {
        let mut launch = self.stream.launch_builder(&self.tick);
        launch.arg(&word);
        // SAFETY: `word` is a live 4-byte device word.
        unsafe { launch.launch(LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 }) }
            .expect("launch tick");
    }

    /// Blocks until the foreign stream drained, at most `limit`.
    fn drained_within(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            // SAFETY: a live stream of the current context.
            match unsafe { sys::cuStreamQuery(self.stream.cu_stream()) } {
                sys::CUresult::CUDA_SUCCESS => return true,
                sys::CUresult::CUDA_ERROR_NOT_READY if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(100))
                }
                _ => return false,
            }
        }
    }
}

/// `bytes` of device memory allocated outside the HAL (freed by the caller).
fn foreign_alloc(bytes: usize) -> CUdeviceptr {
    // SAFETY: a plain allocation in the current (primary) context.
    unsafe { cudarc::driver::result::malloc_sync(bytes) }.expect("cuMemAlloc")
}

fn foreign_free(pointer: CUdeviceptr) {
    // SAFETY: allocated by `foreign_alloc`, no work uses it any more (the callers drained).
    unsafe { cudarc::driver::result::free_sync(pointer) }.expect("cuMemFree");
}

fn setup() -> Option<(hal::Device, Foreign)> {
    if !require_cuda() {
        return None;
    }
    let device = device();
    let foreign = Foreign::new()?;
    Some((device, foreign))
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn a_foreign_kernel_reads_a_hal_buffer_and_writes_imported_memory_ordered_both_ways() {
    let Some((device, foreign)) = setup() else { return };
    let queue = device.queue(0).unwrap();
    let n: u32 = 1 << 20;
    let bytes = u64::from(n) * 4;
    let input: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let hal_input = device.allocate_buffer(BufferParams::device_local(), bytes).unwrap();
    let their_output = foreign_alloc(bytes as usize);
    let released = Arc::new(AtomicUsize::new(0));
    let imported = {
        let released = released.clone();
        // SAFETY: freed only after the release ran (checked below).
        unsafe {
            device.import_external_memory(
                ExternalMemory::CudaDevicePointer { address: their_output, length: bytes },
                BufferParams::device_local(),
                move || {
                    released.fetch_add(1, Ordering::SeqCst);
                },
            )
        }
        .unwrap()
    };
    // SAFETY: used only while `hal_input` lives, ordered by the external timepoints below.
    let (input_pointer, input_len) = unsafe { driver_cuda::interop::buffer_pointer(&hal_input) }.unwrap();
    assert_eq!(input_len, bytes);

    for round in 0..3u32 {
        let s = device.create_semaphore(0).unwrap();
        // HAL: a fill the foreign kernel must not overtake (the write lands after a 2 ms kernel
        // would have read stale words), then the input.
        queue.fill(&[], &imported, 0, bytes, 0xDEAD_BEEFu32, &[]).unwrap();
        let values: Vec<u32> = input.iter().map(|v| v ^ round).collect();
        queue.write_values(&[], &hal_input, 0, &values, &[SV::new(&s, 1)]).unwrap();
        // The foreign stream's next work waits for s = 1 on the device.
        // SAFETY: the foreign stream outlives the waits (it is dropped after the device).
        unsafe { queue.signal_external(&[SV::new(&s, 1)], foreign.raw_stream(), &[]) }.unwrap();
        foreign.scale_add(input_pointer, their_output, n, 2000);
        // s = 2 once the foreign kernel is done, on the device.
        // SAFETY: as above.
        unsafe { queue.wait_external(&[], foreign.raw_stream(), &[SV::new(&s, 2)]) }.unwrap();
        let got = queue.read(&[SV::new(&s, 2)], &imported, 0, bytes, &[]).unwrap().wait_as::<u32>(T).unwrap();
        let expected: Vec<u32> = values.iter().map(|v| v.wrapping_mul(3).wrapping_add(7)).collect();
        let wrong = got.iter().zip(&expected).filter(|(g, e)| g != e).count();
        assert_eq!(wrong, 0, "round {round}: {wrong} of {n} words differ from the CPU (first: {:#x})", got[0]);
    }
    assert!(foreign.drained_within(Duration::from_secs(10)));
    device.wait_semaphores(hal::WaitMode::All, &[], T).unwrap();
    assert_eq!(released.load(Ordering::SeqCst), 0, "the buffer is alive: not released yet");
    drop(imported);
    device.queue(0).unwrap().barrier(&[], &[]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while released.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(released.load(Ordering::SeqCst), 1, "the release runs exactly once");
    drop(hal_input);
    drop(device);
    foreign_free(their_output);
    println!("MEASURED: 3 rounds of HAL -> foreign kernel -> HAL over {n} words, bit-exact against the CPU");
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn the_release_waits_for_queued_uses_and_runs_once() {
    let Some((device, _foreign)) = setup() else { return };
    let queue = device.queue(0).unwrap();
    let pointer = foreign_alloc(4096);
    let released = Arc::new(AtomicUsize::new(0));
    let buffer = {
        let released = released.clone();
        // SAFETY: freed after the release ran.
        unsafe {
            device.import_external_memory(
                ExternalMemory::CudaDevicePointer { address: pointer, length: 4096 },
                BufferParams::device_local(),
                move || {
                    released.fetch_add(1, Ordering::SeqCst);
                },
            )
        }
        .unwrap()
    };
    let gate = device.create_semaphore(0).unwrap();
    let done = device.create_semaphore(0).unwrap();
    queue.fill(&[SV::new(&gate, 1)], &buffer, 0, 4096, 5u8, &[SV::new(&done, 1)]).unwrap();
    drop(buffer);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(released.load(Ordering::SeqCst), 0, "a queued fill still uses the memory");
    gate.signal(1).unwrap();
    done.wait(1, T).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while released.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(released.load(Ordering::SeqCst), 1);
    drop(device);
    foreign_free(pointer);
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn imports_that_are_not_device_memory_of_this_gpu_are_refused_and_released() {
    let Some((device, _foreign)) = setup() else { return };
    let pointer = foreign_alloc(4096);
    let released = Arc::new(AtomicUsize::new(0));
    let import = |memory: ExternalMemory, params: BufferParams| -> Error {
        let released = released.clone();
        // SAFETY: every import here is refused (asserted).
        unsafe {
            device.import_external_memory(memory, params, move || {
                released.fetch_add(1, Ordering::SeqCst);
            })
        }
        .expect_err("refused")
    };
    let device_local = BufferParams::device_local();
    let past_end = import(ExternalMemory::CudaDevicePointer { address: pointer + 64, length: 4096 }, device_local);
    assert_eq!(past_end.code(), StatusCode::OutOfRange, "{past_end}");
    assert!(past_end.message().contains("past the end"), "{past_end}");
    let unknown = import(ExternalMemory::CudaDevicePointer { address: 0x1000, length: 16 }, device_local);
    assert!(unknown.message().contains("cuPointerGetAttribute"), "{unknown}");
    let host_vec = vec![0u8; 4096];
    let host =
        import(ExternalMemory::CudaDevicePointer { address: host_vec.as_ptr() as u64, length: 16 }, device_local);
    assert!(!host.message().is_empty(), "{host}");
    let visible =
        import(ExternalMemory::CudaDevicePointer { address: pointer, length: 16 }, BufferParams::host_visible());
    assert_eq!(visible.code(), StatusCode::InvalidArgument, "{visible}");
    let vulkan = import(ExternalMemory::VulkanBuffer { buffer: 1, offset: 0, length: 16 }, device_local);
    assert_eq!(vulkan.code(), StatusCode::Unimplemented, "{vulkan}");
    let empty = import(ExternalMemory::CudaDevicePointer { address: pointer, length: 0 }, device_local);
    assert_eq!(empty.code(), StatusCode::InvalidArgument, "{empty}");
    assert_eq!(released.load(Ordering::SeqCst), 6, "every refused import released at once");
    drop(device);
    foreign_free(pointer);
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn streams_of_another_context_are_refused_and_the_default_streams_order() {
    let Some((device, foreign)) = setup() else { return };
    let queue = device.queue(0).expect("queue 0");
    // A context of the embedder's own (not the primary one the HAL and PyTorch share), and a stream of it.
    let mut other: sys::CUcontext = std::ptr::null_mut();
    let mut stream: sys::CUstream = std::ptr::null_mut();
    // SAFETY: out-pointers are live locals; creating makes `other` current, popped again at once
    // after its stream exists.
    unsafe {
        assert_eq!(sys::cuCtxCreate_v4(&mut other, std::ptr::null_mut(), 0, 0), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuStreamCreate(&mut stream, 0), sys::CUresult::CUDA_SUCCESS);
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        assert_eq!(sys::cuCtxPopCurrent_v2(&mut popped), sys::CUresult::CUDA_SUCCESS);
    }
    let done = device.create_semaphore(0).expect("semaphore");
    for (name, result) in [
        // SAFETY: the stream is live; the call is refused before anything is enqueued (asserted).
        ("wait", unsafe {
            queue.wait_external(&[], ExternalTimepoint::CudaStream(stream as u64), &[SV::new(&done, 1)])
        }),
        // SAFETY: as above.
        ("signal", unsafe {
            queue.signal_external(&[], ExternalTimepoint::CudaStream(stream as u64), &[SV::new(&done, 1)])
        }),
    ] {
        let error = result.expect_err(name);
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{name}: {error}");
        assert!(error.message().contains("another") || error.message().contains("belongs to"), "{name}: {error}");
    }
    assert_eq!(done.query().expect("query"), 0, "a refused timepoint signals nothing");
    // SAFETY: nothing was enqueued on the stream; the context is made current to destroy its stream.
    unsafe {
        assert_eq!(sys::cuCtxPushCurrent_v2(other), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuStreamDestroy_v2(stream), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuCtxDestroy_v2(other), sys::CUresult::CUDA_SUCCESS);
    }
    // The legacy (0x1) and per-thread (0x2) default streams are the primary context's (PyTorch's
    // default stream is the legacy one): a slow foreign kernel on each, then a HAL read after a
    // wait for that stream sees the kernel's output.
    let n: u32 = 1 << 16;
    let bytes = u64::from(n) * 4;
    let hal_input = device.allocate_buffer(BufferParams::device_local(), bytes).expect("input");
    // SAFETY: used only while `hal_input` lives, ordered by the waits below.
    let (input, _) = unsafe { driver_cuda::interop::buffer_pointer(&hal_input) }.expect("pointer");
    let output = foreign_alloc(bytes as usize);
    // SAFETY: freed after the device is dropped (which drains its uses).
    let imported = unsafe {
        device.import_external_memory(
            ExternalMemory::CudaDevicePointer { address: output, length: bytes },
            BufferParams::device_local(),
            || {},
        )
    }
    .expect("import");
    for (round, (handle, label)) in [(1u64, "legacy"), (2u64, "per-thread")].into_iter().enumerate() {
        let values: Vec<u32> = (0..n).map(|i| i ^ (round as u32 + 1)).collect();
        queue.fill(&[], &imported, 0, bytes, 0xDEAD_BEEFu32, &[]).expect("fill");
        let written = device.create_semaphore(0).expect("semaphore");
        queue.write_values(&[], &hal_input, 0, &values, &[SV::new(&written, 1)]).expect("write");
        written.wait(1, T).expect("written");
        let (delay_us, threads) = (20_000u32, 256u32);
        let mut args: [*mut std::ffi::c_void; 4] = [
            (&input as *const CUdeviceptr).cast_mut().cast(),
            (&output as *const CUdeviceptr).cast_mut().cast(),
            (&n as *const u32).cast_mut().cast(),
            (&delay_us as *const u32).cast_mut().cast(),
        ];
        // SAFETY: the arguments match `scale_add`'s parameters and outlive the call; both ranges
        // hold n words until the device is dropped; the handle is a default stream of the
        // primary context, current on this thread through cudarc's context.
        let launched = unsafe {
            foreign._context.bind_to_thread().expect("bind");
            sys::cuLaunchKernel(
                foreign.scale_add.cu_function(),
                n.div_ceil(threads),
                1,
                1,
                threads,
                1,
                1,
                0,
                handle as usize as sys::CUstream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(launched, sys::CUresult::CUDA_SUCCESS, "{label}: launch");
        let seen = device.create_semaphore(0).expect("semaphore");
        // SAFETY: the default streams live as long as the context.
        unsafe { queue.wait_external(&[], ExternalTimepoint::CudaStream(handle), &[SV::new(&seen, 1)]) }.expect(label);
        let got = queue.read(&[SV::new(&seen, 1)], &imported, 0, bytes, &[]).expect("read").wait_as::<u32>(T);
        let got = got.expect(label);
        let wrong = (0..n as usize).filter(|&i| got[i] != values[i].wrapping_mul(3).wrapping_add(7)).count();
        assert_eq!(wrong, 0, "{label} default stream: {wrong} of {n} words stale (first {:#x})", got[0]);
    }
    drop((imported, hal_input, queue));
    drop(device);
    foreign_free(output);
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn a_foreign_stream_that_never_finishes_is_a_timeout_then_a_bounded_cancelled_teardown() {
    let Some((device, foreign)) = setup() else { return };
    let queue = device.queue(1).unwrap();
    // The foreign stream blocks on a word of the test's that is written only at the end (or when
    // the test fails: the guard's drop), so the process's other tests never find it blocked.
    let mut blocker = Blocker::new();
    let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
    // SAFETY: a live stream and a live mapped word.
    let waited = unsafe { sys::cuStreamWaitValue64_v2(foreign.stream.cu_stream(), blocker.device, 1, geq) };
    assert_eq!(waited, sys::CUresult::CUDA_SUCCESS);

    let s = device.create_semaphore(0).unwrap();
    // SAFETY: the foreign stream outlives the device.
    unsafe { queue.wait_external(&[], foreign.raw_stream(), &[SV::new(&s, 1)]) }.unwrap();
    let timeout = s.wait(1, Timeout::After(Duration::from_millis(100))).expect_err("the foreign work never finishes");
    assert_eq!(timeout.code(), StatusCode::DeadlineExceeded, "{timeout}");
    // Another queue keeps working meanwhile.
    let other = device.create_semaphore(0).unwrap();
    device.queue(0).unwrap().barrier(&[], &[SV::new(&other, 1)]).unwrap();
    other.wait(1, T).unwrap();

    let start = Instant::now();
    drop(queue);
    drop(device);
    let teardown = start.elapsed();
    println!("MEASURED: teardown with a queue waiting on a foreign stream that never finishes: {teardown:?}");
    assert!(teardown < Duration::from_secs(5), "teardown is bounded: {teardown:?}");
    let status = s.wait(1, T).expect_err("the wait was cancelled");
    assert_eq!(status.code(), StatusCode::Cancelled, "{status}");

    // The foreign stream still has its write of the device's word queued (behind the blocker): the
    // word's memory outlives the device until that write has run.
    assert!(driver_cuda::interop::outstanding_foreign_uses() >= 1, "the foreign write is still queued");
    // The test's own blocker ends; the foreign stream drains and everything is freed.
    blocker.release();
    assert!(foreign.drained_within(Duration::from_secs(5)), "the foreign stream drains once released");
    assert_eq!(driver_cuda::interop::outstanding_foreign_uses(), 0, "freed once the foreign stream passed");
    blocker.free();
}

/// A word of pinned memory a foreign stream can be made to wait on; written (releasing it) when
/// dropped, so a failing test leaves no stream blocked. Freed only after the release, once nothing
/// waits on it: the stream that waited is drained first by the test, or, on a failure, the memory
/// is left to the process's end.
struct Blocker {
    host: *mut u64,
    device: CUdeviceptr,
    released: bool,
}

impl Blocker {
    fn new() -> Blocker {
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: 8 bytes of pinned memory, written before any stream waits on it.
        let host = unsafe { cudarc::driver::result::malloc_host(8, flags) }.expect("cuMemHostAlloc").cast::<u64>();
        // SAFETY: just allocated.
        unsafe { host.write_volatile(0) };
        let mut device: CUdeviceptr = 0;
        // SAFETY: `host` is mapped pinned memory.
        let mapped = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host.cast(), 0) };
        assert_eq!(mapped, sys::CUresult::CUDA_SUCCESS);
        Blocker { host, device, released: false }
    }

    /// Releases the waiter.
    fn release(&mut self) {
        // SAFETY: the mapped word, written whole.
        unsafe { self.host.write_volatile(1) };
        self.released = true;
    }

    /// Frees the word, once the stream that waited on it drained.
    fn free(mut self) {
        self.release();
        // SAFETY: nothing waits on the word any more (the caller drained the stream).
        unsafe { cudarc::driver::result::free_host(self.host.cast()) }.expect("cuMemFreeHost");
    }
}

impl Drop for Blocker {
    fn drop(&mut self) {
        if !self.released {
            // SAFETY: as in `release`; the memory stays allocated (a stream may still read it).
            unsafe { self.host.write_volatile(1) };
        }
    }
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn a_hal_failure_or_teardown_releases_a_foreign_stream_waiting_on_the_hal() {
    let Some((device, foreign)) = setup() else { return };
    let queue = device.queue(0).unwrap();
    let word = foreign_alloc(4);
    // A wait whose semaphore fails: the foreign stream is released and runs on.
    let s = device.create_semaphore(0).unwrap();
    // SAFETY: the foreign stream outlives the device.
    unsafe { queue.signal_external(&[SV::new(&s, 1)], foreign.raw_stream(), &[]) }.unwrap();
    foreign.tick(word);
    std::thread::sleep(Duration::from_millis(20));
    assert!(!foreign.drained_within(Duration::ZERO), "the foreign stream waits for s = 1");
    s.fail(Error::aborted("the producer gave up"));
    assert!(foreign.drained_within(Duration::from_secs(5)), "a failed wait releases the foreign stream");

    // A wait on a value that never comes, and the device dropped: released too, bounded, and the
    // operation's own signal fails.
    let never = device.create_semaphore(0).unwrap();
    let after = device.create_semaphore(0).unwrap();
    // SAFETY: as above.
    unsafe { queue.signal_external(&[SV::new(&never, 5)], foreign.raw_stream(), &[SV::new(&after, 1)]) }.unwrap();
    foreign.tick(word);
    let start = Instant::now();
    drop(queue);
    drop(device);
    assert!(foreign.drained_within(Duration::from_secs(5)), "teardown releases the foreign stream");
    println!("MEASURED: teardown with a foreign stream waiting on a HAL value that never comes: {:?}", start.elapsed());
    assert_eq!(after.wait(1, T).expect_err("cancelled").code(), StatusCode::Cancelled);
    assert_eq!(never.query().unwrap(), 0, "the semaphore it waited on is the embedder's, untouched");
    foreign_free(word);
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn per_hop_cost_beside_a_plain_cuda_event_wait() {
    let Some((device, foreign)) = setup() else { return };
    let queue = device.queue(0).unwrap();
    let word = foreign_alloc(4);
    let hal_word = device.allocate_buffer(BufferParams::device_local(), 4).unwrap();
    let rounds = 2000u64;
    let s = device.create_semaphore(0).unwrap();
    // Warm up, then time: HAL fill -> foreign kernel -> HAL fill, two hops a round.
    let mut value = 0;
    let mut round_trip = |count: u64| {
        let start = Instant::now();
        for _ in 0..count {
            queue.fill(&[], &hal_word, 0, 4, 1u32, &[SV::new(&s, value + 1)]).unwrap();
            // SAFETY: the foreign stream outlives the device.
            unsafe { queue.signal_external(&[SV::new(&s, value + 1)], foreign.raw_stream(), &[]) }.unwrap();
            foreign.tick(word);
            // SAFETY: as above.
            unsafe { queue.wait_external(&[], foreign.raw_stream(), &[SV::new(&s, value + 2)]) }.unwrap();
            value += 2;
        }
        s.wait(value, T).unwrap();
        start.elapsed()
    };
    round_trip(200);
    let hal = round_trip(rounds);

    // The same with plain CUDA: a memset on a second stream, events recorded and waited both ways.
    let context = CudaContext::new(0).unwrap();
    let other = context.new_stream().unwrap();
    let plain = |count: u64| {
        // Two events of the current context, destroyed below.
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
        let (a, b) = (
            cudarc::driver::result::event::create(flags).unwrap(),
            cudarc::driver::result::event::create(flags).unwrap(),
        );
        let start = Instant::now();
        for _ in 0..count {
            // SAFETY: live streams, events and word.
            unsafe {
                sys::cuMemsetD32Async(word, 1, 1, other.cu_stream());
                sys::cuEventRecord(a, other.cu_stream());
                sys::cuStreamWaitEvent(foreign.stream.cu_stream(), a, 0);
            }
            foreign.tick(word);
            // SAFETY: as above.
            unsafe {
                sys::cuEventRecord(b, foreign.stream.cu_stream());
                sys::cuStreamWaitEvent(other.cu_stream(), b, 0);
            }
        }
        other.synchronize().unwrap();
        let elapsed = start.elapsed();
        // SAFETY: the streams drained; the events are used no more.
        unsafe {
            cudarc::driver::result::event::destroy(a).unwrap();
            cudarc::driver::result::event::destroy(b).unwrap();
        }
        elapsed
    };
    plain(200);
    let raw = plain(rounds);
    let per_hop = |d: Duration| d.as_secs_f64() * 1e6 / (2 * rounds) as f64;
    println!(
        "MEASURED: per hop (HAL <-> foreign stream, {rounds} rounds of 2 hops): HAL external timepoints {:.2} us, \
         plain CUDA events {:.2} us, ratio {:.2}",
        per_hop(hal),
        per_hop(raw),
        hal.as_secs_f64() / raw.as_secs_f64()
    );
    assert!(foreign.drained_within(Duration::from_secs(5)));
    drop(hal_word);
    drop(device);
    foreign_free(word);
}
