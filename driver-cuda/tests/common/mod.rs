//! Shared by the CUDA test binaries: what a test does without a GPU, the kernels (CUDA C compiled to
//! PTX at run time with NVRTC; ctest's catalogue is the driver's, `driver_cuda::cts`) and small
//! helpers.
//!
//! Every CUDA test (and `cts.rs`'s instantiation) carries, word for word:
//!
//! ```text
//! #[cfg_attr(
//!     not(any(hal_cuda_found, hal_cuda_required)),
//!     ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
//! )]
//! ```
//!
//! (a literal: libtest drops a reason made by a macro; `.ci/run` counts the lines `ignored, no CUDA
//! driver`). Where `build.rs` found no driver library, cargo so lists each as ignored with the
//! reason. When one runs anyway and finds no usable GPU or NVRTC, [`not_run`] decides: under
//! `HAL_REQUIRE_CUDA=1` the test fails, otherwise it says `not run: ...` on stderr and returns.

#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hal::driver::Driver;
use hal::{Buffer, BufferParams, Device, EntryPointInfo, Executable, ExecutableFormat, ExecutableSource, Timeout};

/// A generous timeout for waits that must succeed.
pub const T: Timeout = Timeout::After(Duration::from_secs(20));

/// Set to `1` on a GPU machine: a CUDA test that finds no usable GPU (or no NVRTC) fails.
pub const REQUIRE_CUDA_ENV: &str = "HAL_REQUIRE_CUDA";

/// Whether `HAL_REQUIRE_CUDA=1`; a value other than `1`, `0` or empty fails the test that reads it.
pub fn cuda_required() -> bool {
    match std::env::var(REQUIRE_CUDA_ENV) {
        Ok(value) if value == "1" => true,
        Ok(value) if value == "0" || value.is_empty() => false,
        Err(std::env::VarError::NotPresent) => false,
        Ok(value) => panic!("{REQUIRE_CUDA_ENV}='{value}': expected 1 (a missing GPU fails the CUDA tests) or 0"),
        Err(std::env::VarError::NotUnicode(value)) => panic!("{REQUIRE_CUDA_ENV}={value:?}: expected 1 or 0"),
    }
}

/// A CUDA test cannot run here because of `reason`: fails under `HAL_REQUIRE_CUDA=1`; otherwise
/// prints `not run: <test>: <reason>` and the caller returns. The line goes to the process's stderr
/// directly, past libtest's capture, so that a run that did nothing says so.
pub fn not_run(reason: &str) {
    let test = std::thread::current().name().unwrap_or("a CUDA test").to_string();
    if cuda_required() {
        panic!("{REQUIRE_CUDA_ENV}=1 but {test} cannot run: {reason}");
    }
    let _ = writeln!(std::io::stderr(), "not run: {test}: {reason}");
}

/// `true` when CUDA is usable here; otherwise [`not_run`] (the test returns, or fails when required).
pub fn require_cuda() -> bool {
    match driver_cuda::CudaDriver::default().probe() {
        Ok(()) => true,
        Err(reason) => {
            not_run(&format!("CUDA not available: {reason}"));
            false
        }
    }
}

/// ctest's CUDA catalogue, compiled with NVRTC once per process (`driver_cuda::cts::catalogue`).
pub fn ctest_catalogue() -> driver_cuda::cts::SharedCatalogue {
    driver_cuda::cts::catalogue()
}

/// The test kernels. Dispatch ABI: bindings (pointers) first, then 32-bit constants.
pub const KERNELS: &str = r#"
extern "C" __global__ void fill_u32(unsigned* out, unsigned n, unsigned value) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
extern "C" __global__ void add_f32(const float* a, const float* b, float* c, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
extern "C" __global__ void scale_offset_f32(const float* in, float* out, unsigned n, float scale, float offset) {
    unsigned i = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    i = i * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * scale + offset;
}
extern "C" __global__ void add_one_u32(unsigned* data, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += 1;
}
extern "C" __global__ void grid_ids(unsigned* out) {
    if (threadIdx.x != 0) return;
    unsigned linear = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    out[linear] = blockIdx.x | (blockIdx.y << 10) | (blockIdx.z << 20);
}
extern "C" __global__ void sleep_us(unsigned us) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < 1000ull * us);
}
extern "C" __global__ void noop() {}
extern "C" __global__ void trap_now(unsigned* out) {
    out[0] = 1;
    asm volatile("trap;");
}
"#;

/// The kernels' PTX, compiled once per process; `None` (after [`not_run`]) when NVRTC is missing
/// or fails.
pub fn ptx() -> Option<&'static str> {
    static PTX: OnceLock<Result<String, String>> = OnceLock::new();
    let compiled = PTX.get_or_init(|| {
        // SAFETY: only tries to open the NVRTC library.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err("NVRTC (libnvrtc.so) not found: the test kernels cannot be compiled".to_string());
        }
        cudarc::nvrtc::compile_ptx(KERNELS)
            .map(|ptx| ptx.to_src())
            .map_err(|e| format!("NVRTC failed to compile the test kernels: {e:?}"))
    });
    match compiled {
        Ok(ptx) => Some(ptx),
        Err(reason) => {
            not_run(reason);
            None
        }
    }
}

/// The entry points of [`KERNELS`] as the executable declares them.
pub fn entry_points() -> Vec<EntryPointInfo> {
    vec![
        EntryPointInfo::new("fill_u32", 256, 1, 2),
        EntryPointInfo::new("add_f32", 256, 3, 1),
        EntryPointInfo::new("scale_offset_f32", 64, 2, 3),
        EntryPointInfo::new("add_one_u32", 256, 1, 1),
        EntryPointInfo::new("grid_ids", 32, 1, 0),
        EntryPointInfo::new("sleep_us", 1, 0, 1),
        EntryPointInfo::new("noop", 1, 0, 0),
        EntryPointInfo::new("trap_now", 1, 1, 0),
    ]
}

/// The kernels loaded on `device`, or `None` (after [`not_run`]) without NVRTC.
pub fn kernels(device: &Device) -> Option<Executable> {
    let ptx = ptx()?;
    let source = ExecutableSource::Bytes {
        format: ExecutableFormat::Ptx,
        data: Arc::from(ptx.as_bytes()),
        entry_points: entry_points(),
    };
    Some(device.load_executable(&source).expect("load the test kernels"))
}

/// A device with default options.
pub fn device() -> Device {
    driver_cuda::create_device(0).expect("cuda device 0")
}

/// A device-local buffer of `size` bytes.
pub fn device_buffer(device: &Device, size: u64) -> Buffer {
    device.allocate_buffer(BufferParams::device_local(), size).expect("device buffer")
}

/// A host-visible buffer of `size` bytes.
pub fn host_buffer(device: &Device, size: u64) -> Buffer {
    device.allocate_buffer(BufferParams::host_visible(), size).expect("host buffer")
}

/// Little-endian `u32`s of `bytes`.
pub fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// `f32`s of `bytes`.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    u32s(bytes).into_iter().map(f32::from_bits).collect()
}

/// Bytes of `values`.
pub fn f32_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Bytes of `values`.
pub fn u32_bytes(values: impl IntoIterator<Item = u32>) -> Vec<u8> {
    values.into_iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Reads a whole buffer through the queue (works for device-local memory) and waits for it.
pub fn read_back(device: &Device, buffer: &Buffer) -> Vec<u8> {
    let queue = device.queue(0).unwrap();
    let done = device.create_semaphore(0).unwrap();
    let readback = queue.read(&[], buffer, 0, buffer.size(), &[hal::SemaphoreValue::new(&done, 1)]).unwrap();
    done.wait(1, T).expect("read back");
    readback.take().expect("read back bytes")
}

/// A device on GPU 0 built with `options`, with its CUDA backend (for the driver's own methods).
pub fn device_with(options: driver_cuda::CudaOptions) -> (Device, Arc<driver_cuda::CudaDevice>) {
    use hal::driver::DeviceExt;
    let id = hal::DeviceId::next();
    let backend = Arc::new(driver_cuda::CudaDevice::new(id, 0, &options).expect("cuda device 0"));
    // SAFETY: `id` is fresh and the CUDA device was built with it.
    (unsafe { Device::from_backend(id, backend.clone()) }, backend)
}
