//! The CUDA catalogue's sources: each kernel as CUDA C with `extern "C"` entry points that follow
//! the dispatch ABI (one pointer per binding, then each 32-bit constant). `driver-cuda` compiles them
//! to PTX with NVRTC at run time and hands the PTX in through [`CudaCatalogue`]; ctest itself does not
//! depend on any CUDA crate.
//!
//! ```ignore
//! // In driver-cuda's src/cts.rs, its `cts` feature (compile_ptx: NVRTC through cudarc, CUDA C ->
//! // PTX text; the real fixture, `driver_cuda::cts::fixture`, also places the devices):
//! fn cuda_fixture() -> ctest::Fixture {
//!     let catalogue = ctest::kernels::cuda::CudaCatalogue::new(compile_ptx);
//!     let mut registry = hal::Registry::new();
//!     driver_cuda::register(&mut registry);
//!     ctest::Fixture::from_registry(registry, "cuda", catalogue).with_sticky_faults()
//! }
//! ctest::instantiate_cts!(cuda, cuda_fixture); // in its tests/cts.rs
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hal::{ExecutableFormat, ExecutableKind, ExecutableSource, Result};

use super::{Kernel, KernelCatalogue, kind_not_provided};

/// The CUDA C source of `kernel`; its entry points are those of [`Kernel::entry_points`].
pub fn cuda_source(kernel: Kernel) -> &'static str {
    match kernel {
        Kernel::FillU32 => FILL_U32,
        Kernel::AddF32 => ADD_F32,
        Kernel::ScaleOffsetF32 => SCALE_OFFSET_F32,
        Kernel::MultiEntry => MULTI_ENTRY,
        Kernel::GridIds => GRID_IDS,
        Kernel::Fault => FAULT,
        Kernel::Sleep => SLEEP_US,
        Kernel::MixedParams => MIXED_PARAMS,
        Kernel::ReverseShared => REVERSE_SHARED,
        Kernel::Spin => SPIN,
    }
}

const FILL_U32: &str = r#"
extern "C" __global__ void fill_u32(unsigned int* out, unsigned int value) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = value;
}
"#;

const ADD_F32: &str = r#"
extern "C" __global__ void add_f32(const float* a, const float* b, float* out) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = a[i] + b[i];
}
"#;

const SCALE_OFFSET_F32: &str = r#"
extern "C" __global__ void scale_offset_f32(float* data, unsigned int scale, unsigned int offset) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    data[i] = data[i] * __uint_as_float(scale) + __uint_as_float(offset);
}
"#;

const MULTI_ENTRY: &str = r#"
extern "C" __global__ void set_index(unsigned int* data) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    data[i] = i;
}
extern "C" __global__ void add_u32(unsigned int* data, unsigned int c) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    data[i] += c;
}
extern "C" __global__ void mul_u32(unsigned int* data, unsigned int c) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    data[i] *= c;
}
"#;

const GRID_IDS: &str = r#"
extern "C" __global__ void grid_ids(unsigned int* out) {
    unsigned int linear = blockIdx.x + blockIdx.y * gridDim.x + blockIdx.z * gridDim.x * gridDim.y;
    out[linear] = 0x80000000u | blockIdx.x | (blockIdx.y << 10) | (blockIdx.z << 20);
}
"#;

const FAULT: &str = r#"
extern "C" __global__ void fault(unsigned int* data) {
    __trap();
}
"#;

const SLEEP_US: &str = r#"
extern "C" __global__ void sleep_us(unsigned int us) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < 1000ull * us);
}
"#;

const MIXED_PARAMS: &str = r#"
extern "C" __global__ void mixed_params(unsigned int* out, unsigned int n, const unsigned int* in,
                                        unsigned long long add, void* scratch) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int lo = (unsigned int)add, hi = (unsigned int)(add >> 32);
    out[i] = scratch != 0 ? 0xDEADBEEFu : in[i] + lo + 2u * hi;
}
"#;

// 64 KiB of dynamic shared memory; the block stages its values at the far end.
const REVERSE_SHARED: &str = r#"
extern "C" __global__ void reverse_shared(unsigned int* data) {
    extern __shared__ unsigned int tile[];
    const unsigned int words = 64u * 1024u / 4u;
    unsigned int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    tile[words - 1u - t] = data[base + t];
    __syncthreads();
    data[base + t] = tile[words - blockDim.x + t];
}
"#;

const SPIN: &str = r#"
extern "C" __global__ void spin(unsigned int* out, unsigned int rounds) {
    unsigned int x = blockIdx.x + blockIdx.y * gridDim.x + blockIdx.z * gridDim.x * gridDim.y;
    for (unsigned int i = 0; i < rounds; ++i) {
        x = x * 1664525u + 1013904223u;
        x ^= x >> 15;
    }
    atomicXor(out, x);
}
"#;

/// Compiles CUDA C (`source`) named `program` to PTX text.
type Compile = dyn Fn(&str, &str) -> Result<Vec<u8>> + Send + Sync;

/// A catalogue of PTX compiled from [`cuda_source`] by a driver-supplied compiler (NVRTC), each
/// kernel compiled once and kept.
pub struct CudaCatalogue {
    compile: Arc<Compile>,
    compiled: Mutex<HashMap<Kernel, Arc<[u8]>>>,
}

impl CudaCatalogue {
    /// A catalogue whose PTX comes from `compile(source, program_name)`.
    pub fn new(compile: impl Fn(&str, &str) -> Result<Vec<u8>> + Send + Sync + 'static) -> Self {
        CudaCatalogue { compile: Arc::new(compile), compiled: Mutex::new(HashMap::new()) }
    }
}

impl KernelCatalogue for CudaCatalogue {
    fn kinds(&self) -> Vec<ExecutableKind> {
        vec![ExecutableKind::Ptx]
    }

    fn source(&self, kernel: Kernel, kind: ExecutableKind) -> Result<ExecutableSource> {
        if kind != ExecutableKind::Ptx {
            return Err(kind_not_provided("CUDA catalogue", kernel, kind));
        }
        let cached = self.compiled.lock().unwrap_or_else(|p| p.into_inner()).get(&kernel).cloned();
        let data = match cached {
            Some(data) => data,
            None => {
                let data: Arc<[u8]> = Arc::from((self.compile)(cuda_source(kernel), kernel.name())?);
                self.compiled.lock().unwrap_or_else(|p| p.into_inner()).insert(kernel, data.clone());
                data
            }
        };
        Ok(ExecutableSource::Bytes { format: ExecutableFormat::Ptx, data, entry_points: kernel.entry_points() })
    }
}

impl std::fmt::Debug for CudaCatalogue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CudaCatalogue")
    }
}
