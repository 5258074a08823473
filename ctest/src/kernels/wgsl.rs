//! The SPIR-V catalogue's sources: each kernel in WGSL with IREE's Vulkan ABI (binding `i` at
//! `@group(0) @binding(i)`, the constants one push-constant block of `u32`s, `var<immediate>` in
//! naga's WGSL). `driver-vulkan` compiles them to SPIR-V in-process with naga and hands the words in
//! through [`SpirvCatalogue`]; ctest itself depends on no Vulkan crate.
//!
//! Two kernels have no WGSL form, and the catalogue says why ([`KernelCatalogue::lacks`]), so the
//! cases that need them are skipped with the reason: [`Kernel::Fault`] (SPIR-V has no instruction
//! that faults on purpose) and [`Kernel::Sleep`] (a kernel without bindings has no effect a
//! compiler must keep: lavapipe deletes every loop in one, so it cannot keep the device busy).
//! [`Kernel::Spin`] keeps a Vulkan device busy instead, for as long as its workgroups take.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hal::{ExecutableFormat, ExecutableKind, ExecutableSource, Result};

use super::{Kernel, KernelCatalogue, REVERSE_SHARED_BYTES, kind_not_provided};

/// The WGSL source of `kernel` (`None` for the kernels WGSL cannot express); its entry points are
/// those of [`Kernel::entry_points`].
pub fn wgsl_source(kernel: Kernel) -> Option<&'static str> {
    Some(match kernel {
        Kernel::FillU32 => FILL_U32,
        Kernel::AddF32 => ADD_F32,
        Kernel::ScaleOffsetF32 => SCALE_OFFSET_F32,
        Kernel::MultiEntry => MULTI_ENTRY,
        Kernel::GridIds => GRID_IDS,
        Kernel::Fault => return None,
        Kernel::Sleep => return None,
        Kernel::MixedParams => MIXED_PARAMS,
        Kernel::ReverseShared => REVERSE_SHARED,
        Kernel::Spin => SPIN,
    })
}

const FILL_U32: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
struct Constants { value: u32 }
var<immediate> c: Constants;
@compute @workgroup_size(64)
fn fill_u32(@builtin(global_invocation_id) id: vec3<u32>) {
    out[id.x] = c.value;
}
"#;

const ADD_F32: &str = r#"
@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn add_f32(@builtin(global_invocation_id) id: vec3<u32>) {
    out[id.x] = a[id.x] + b[id.x];
}
"#;

const SCALE_OFFSET_F32: &str = r#"
@group(0) @binding(0) var<storage, read_write> data: array<f32>;
struct Constants { scale: u32, offset: u32 }
var<immediate> c: Constants;
@compute @workgroup_size(64)
fn scale_offset_f32(@builtin(global_invocation_id) id: vec3<u32>) {
    data[id.x] = data[id.x] * bitcast<f32>(c.scale) + bitcast<f32>(c.offset);
}
"#;

const MULTI_ENTRY: &str = r#"
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
struct Constants { c: u32 }
var<immediate> k: Constants;
@compute @workgroup_size(64)
fn set_index(@builtin(global_invocation_id) id: vec3<u32>) {
    data[id.x] = id.x;
}
@compute @workgroup_size(64)
fn add_u32(@builtin(global_invocation_id) id: vec3<u32>) {
    data[id.x] = data[id.x] + k.c;
}
@compute @workgroup_size(32)
fn mul_u32(@builtin(global_invocation_id) id: vec3<u32>) {
    data[id.x] = data[id.x] * k.c;
}
"#;

const GRID_IDS: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(1)
fn grid_ids(@builtin(workgroup_id) w: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
    out[w.x + w.y * n.x + w.z * n.x * n.y] = 0x80000000u | w.x | (w.y << 10u) | (w.z << 20u);
}
"#;

const MIXED_PARAMS: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<storage, read_write> in_: array<u32>;
struct Constants { n: u32, lo: u32, hi: u32 }
var<immediate> c: Constants;
@compute @workgroup_size(64)
fn mixed_params(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= c.n) {
        return;
    }
    out[id.x] = in_[id.x] + c.lo + 2u * c.hi;
}
"#;

// Workgroup memory in WGSL is declared in the module; the tile sits at the end of 64 KiB as in
// the other catalogues' kernels.
const REVERSE_SHARED: &str = r#"
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
var<workgroup> tile: array<u32, 16384>;
@compute @workgroup_size(64)
fn reverse_shared(@builtin(local_invocation_id) l: vec3<u32>, @builtin(workgroup_id) w: vec3<u32>) {
    let words = 16384u;
    let base = w.x * 64u;
    tile[words - 1u - l.x] = data[base + l.x];
    workgroupBarrier();
    data[base + l.x] = tile[words - 64u + l.x];
}
"#;

// The loop's result reaches memory, so no compiler may delete the loop (as lavapipe does in a kernel
// without bindings).
const SPIN: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<atomic<u32>>;
struct Constants { rounds: u32 }
var<immediate> c: Constants;
@compute @workgroup_size(1)
fn spin(@builtin(workgroup_id) w: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
    var x = w.x + w.y * n.x + w.z * n.x * n.y;
    for (var i = 0u; i < c.rounds; i = i + 1u) {
        x = x * 1664525u + 1013904223u;
        x = x ^ (x >> 15u);
    }
    atomicXor(&out[0], x);
}
"#;

/// Compiles WGSL (`source`) named `program` to SPIR-V bytes.
type Compile = dyn Fn(&str, &str) -> Result<Vec<u8>> + Send + Sync;

/// A catalogue of SPIR-V compiled from [`wgsl_source`] by a driver-supplied compiler (naga), each
/// kernel compiled once and kept.
pub struct SpirvCatalogue {
    compile: Arc<Compile>,
    compiled: Mutex<HashMap<Kernel, Arc<[u8]>>>,
    workgroup_memory: u32,
}

impl SpirvCatalogue {
    /// A catalogue whose SPIR-V comes from `compile(source, program_name)`.
    pub fn new(compile: impl Fn(&str, &str) -> Result<Vec<u8>> + Send + Sync + 'static) -> Self {
        SpirvCatalogue { compile: Arc::new(compile), compiled: Mutex::new(HashMap::new()), workgroup_memory: u32::MAX }
    }

    /// The same catalogue for a device that gives a workgroup `bytes` of memory (Vulkan's
    /// `maxComputeSharedMemorySize`): below [`REVERSE_SHARED_BYTES`] it has no
    /// [`Kernel::ReverseShared`].
    pub fn with_workgroup_memory_limit(mut self, bytes: u32) -> Self {
        self.workgroup_memory = bytes;
        self
    }
}

impl KernelCatalogue for SpirvCatalogue {
    fn kinds(&self) -> Vec<ExecutableKind> {
        vec![ExecutableKind::Spirv]
    }

    fn source(&self, kernel: Kernel, kind: ExecutableKind) -> Result<ExecutableSource> {
        if kind != ExecutableKind::Spirv {
            return Err(kind_not_provided("SPIR-V catalogue", kernel, kind));
        }
        let Some(source) = wgsl_source(kernel) else {
            let reason = self.lacks(kernel).unwrap_or_else(|| "no WGSL form".to_string());
            return Err(hal::Error::unimplemented(format!("SPIR-V catalogue: no {kernel:?} kernel ({reason})")));
        };
        let cached = self.compiled.lock().unwrap_or_else(|p| p.into_inner()).get(&kernel).cloned();
        let data = match cached {
            Some(data) => data,
            None => {
                let data: Arc<[u8]> = Arc::from((self.compile)(source, kernel.name())?);
                self.compiled.lock().unwrap_or_else(|p| p.into_inner()).insert(kernel, data.clone());
                data
            }
        };
        Ok(ExecutableSource::Bytes { format: ExecutableFormat::Spirv, data, entry_points: kernel.entry_points() })
    }

    fn lacks(&self, kernel: Kernel) -> Option<String> {
        let reason = match kernel {
            Kernel::Fault => {
                "SPIR-V has no instruction that faults on purpose (out-of-bounds accesses are discarded under \
                 robust buffer access), so no case can make a Vulkan device fault"
            }
            Kernel::Sleep => {
                "a kernel without bindings has no effect a SPIR-V compiler must keep (lavapipe deletes any loop \
                 in one, counted or not), so none keeps the device busy for a given time"
            }
            Kernel::ReverseShared if self.workgroup_memory < REVERSE_SHARED_BYTES => {
                return Some(format!(
                    "the device gives a workgroup {} bytes of memory, the kernel's ABI declares {REVERSE_SHARED_BYTES}",
                    self.workgroup_memory
                ));
            }
            _ => return None,
        };
        Some(reason.to_string())
    }
}

impl std::fmt::Debug for SpirvCatalogue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpirvCatalogue")
    }
}
