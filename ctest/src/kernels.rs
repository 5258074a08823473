//! The kernel catalogue: the kernels the suite needs, named by meaning, each with an ABI the suite
//! fixes (entry point names, bindings, constants, workgroup size). A driver supplies each one in its
//! own format through a [`KernelCatalogue`]; the suite checks the loaded entry points against the
//! ABI before using them.
//!
//! Element-wise kernels index element `workgroup_id.x * workgroup_size.x + local_x` of each binding
//! (`blockIdx.x * blockDim.x + threadIdx.x` in CUDA) and are dispatched with `[n / size, 1, 1]`
//! workgroups over exactly `n` elements, so no kernel needs a bound check (IREE's ABI passes none).
//! Floating-point cases use values whose results are exact, so fused multiply-add and separate
//! multiply and add agree.

pub mod cuda;
pub mod native;
pub mod wgsl;

use hal::{Device, DeviceInfo, EntryPointInfo, Executable, ExecutableKind, ExecutableSource, Result};

/// Threads per workgroup of the element-wise kernels.
pub const ELEMENTWISE_WORKGROUP: u32 = 64;

/// Threads per workgroup of [`Kernel::MultiEntry`]'s `mul_u32` (differs on purpose, so a driver
/// that ignores per-entry workgroup sizes is caught).
pub const MUL_WORKGROUP: u32 = 32;

/// What [`Kernel::GridIds`] writes for workgroup `(x, y, z)`: a marker bit and the packed id.
pub fn grid_id_value(x: u32, y: u32, z: u32) -> u32 {
    0x8000_0000 | x | (y << 10) | (z << 20)
}

/// A kernel the suite needs, by meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// `fill_u32(out: u32[], value: u32)`: `out[i] = value`. 1 binding, 1 constant, workgroup 64.
    FillU32,
    /// `add_f32(a: f32[], b: f32[], out: f32[])`: `out[i] = a[i] + b[i]`. 3 bindings, 0 constants,
    /// workgroup 64.
    AddF32,
    /// `scale_offset_f32(data: f32[], scale: u32, offset: u32)`, constants are `f32` bits:
    /// `data[i] = data[i] * scale + offset` in place. 1 binding, 2 constants, workgroup 64.
    ScaleOffsetF32,
    /// Three entry points over one `u32` binding, in this ordinal order:
    /// `set_index(data)`: `data[i] = i` (0 constants, workgroup 64);
    /// `add_u32(data, c)`: `data[i] += c` (1 constant, workgroup 64);
    /// `mul_u32(data, c)`: `data[i] *= c` (1 constant, workgroup [`MUL_WORKGROUP`]).
    MultiEntry,
    /// `grid_ids(out: u32[])`: workgroup `(x, y, z)` of a grid `(cx, cy, cz)` writes
    /// [`grid_id_value`]`(x, y, z)` at `x + y*cx + z*cx*cy`. 1 binding, 0 constants, workgroup 1.
    GridIds,
    /// `fault(data: u32[])`: fails on purpose (cpu-sim: returns an error; CUDA: `__trap()`) and writes
    /// nothing. 1 binding, 0 constants, workgroup 1.
    Fault,
    /// `sleep_us(us)`: keeps the device busy for about `us` microseconds (cpu-sim: the workgroup
    /// sleeps; CUDA: spins on `%globaltimer`), so a case can have slow device work in flight.
    /// 0 bindings, 1 constant, workgroup 1; dispatch it with `[1, 1, 1]`.
    Sleep,
    /// `mixed_params(out: u32*, n: u32, in: u32*, add: u64, scratch: void*)`, Triton's shape (a
    /// scalar between pointers, a trailing scratch pointer): for `i < n`,
    /// `out[i] = in[i] + lo(add) + 2 * hi(add)`, or [`SCRATCH_NOT_NULL`] when `scratch` is not
    /// null. 2 bindings (out, in), 3 constants (n, then add's low and high words), declared as
    /// [`mixed_params_layout`]; workgroup 64.
    MixedParams,
    /// `reverse_shared(data: u32*)`: each workgroup of 64 reverses its 64 elements through dynamic
    /// workgroup memory, staged at the far end of [`REVERSE_SHARED_BYTES`] (past CUDA's default
    /// 48 KiB, so a launch with less memory faults). 1 binding, 0 constants, workgroup 64.
    ReverseShared,
    /// `spin(out: u32[], rounds: u32)`: each workgroup runs `rounds` rounds of an integer hash of
    /// its linear workgroup id and folds the result into `out[0]` (with an atomic xor; the value
    /// left there is not specified). Device work whose length grows with the workgroups dispatched:
    /// it keeps a device busy where no kernel can wait on a clock (SPIR-V), and it has an effect, so
    /// a compiler keeps its loop. Keep `rounds` at most [`SPIN_MAX_ROUNDS`]. 1 binding (4 bytes or
    /// more), 1 constant, workgroup 1.
    Spin,
}

/// The most rounds [`Kernel::Spin`] may be given: lavapipe ends any shader loop after 65535
/// iterations, so a longer spin comes from more workgroups, not more rounds.
pub const SPIN_MAX_ROUNDS: u32 = 65_535;

/// What [`Kernel::MixedParams`] writes when its scratch pointer is not null.
pub const SCRATCH_NOT_NULL: u32 = 0xDEAD_BEEF;

/// The dynamic workgroup memory [`Kernel::ReverseShared`] declares: 64 KiB.
pub const REVERSE_SHARED_BYTES: u32 = 64 * 1024;

/// [`Kernel::MixedParams`]' parameter layout: out, n, in, add (64-bit), a null scratch pointer.
pub fn mixed_params_layout() -> [hal::KernelParam; 5] {
    use hal::KernelParam as P;
    [P::Binding(0), P::Constant32(0), P::Binding(1), P::Constant64(1), P::NullPointer]
}

impl Kernel {
    /// Every kernel of the catalogue.
    pub const ALL: [Kernel; 10] = [
        Kernel::FillU32,
        Kernel::AddF32,
        Kernel::ScaleOffsetF32,
        Kernel::MultiEntry,
        Kernel::GridIds,
        Kernel::Fault,
        Kernel::Sleep,
        Kernel::MixedParams,
        Kernel::ReverseShared,
        Kernel::Spin,
    ];

    /// A short name (also the program name a compiled catalogue may use).
    pub fn name(self) -> &'static str {
        match self {
            Kernel::FillU32 => "fill_u32",
            Kernel::AddF32 => "add_f32",
            Kernel::ScaleOffsetF32 => "scale_offset_f32",
            Kernel::MultiEntry => "multi_entry",
            Kernel::GridIds => "grid_ids",
            Kernel::Fault => "fault",
            Kernel::Sleep => "sleep_us",
            Kernel::MixedParams => "mixed_params",
            Kernel::ReverseShared => "reverse_shared",
            Kernel::Spin => "spin",
        }
    }

    /// The ABI: entry points in ordinal order, with workgroup sizes, binding and constant counts.
    pub fn entry_points(self) -> Vec<EntryPointInfo> {
        let e = ELEMENTWISE_WORKGROUP;
        match self {
            Kernel::FillU32 => vec![EntryPointInfo::new("fill_u32", e, 1, 1)],
            Kernel::AddF32 => vec![EntryPointInfo::new("add_f32", e, 3, 0)],
            Kernel::ScaleOffsetF32 => vec![EntryPointInfo::new("scale_offset_f32", e, 1, 2)],
            Kernel::MultiEntry => vec![
                EntryPointInfo::new("set_index", e, 1, 0),
                EntryPointInfo::new("add_u32", e, 1, 1),
                EntryPointInfo::new("mul_u32", MUL_WORKGROUP, 1, 1),
            ],
            Kernel::GridIds => vec![EntryPointInfo::new("grid_ids", 1, 1, 0)],
            Kernel::Fault => vec![EntryPointInfo::new("fault", 1, 1, 0)],
            Kernel::Sleep => vec![EntryPointInfo::new("sleep_us", 1, 0, 1)],
            Kernel::MixedParams => {
                vec![EntryPointInfo::new("mixed_params", e, 2, 3).with_params(mixed_params_layout())]
            }
            Kernel::ReverseShared => {
                vec![EntryPointInfo::new("reverse_shared", e, 1, 0).with_dynamic_workgroup_memory(REVERSE_SHARED_BYTES)]
            }
            Kernel::Spin => vec![EntryPointInfo::new("spin", 1, 1, 1)],
        }
    }
}

/// A driver's kernels: the [`ExecutableSource`] of each catalogue kernel, in one or more
/// [`ExecutableKind`]s, declaring exactly [`Kernel::entry_points`]. The suite loads each kernel in
/// the first of [`kinds`](Self::kinds) the device lists in `DeviceInfo::executable_kinds`
/// ([`choose_kind`]), never by the driver's name.
pub trait KernelCatalogue: Send + Sync {
    /// The kinds [`source`](Self::source) can give, preferred first.
    fn kinds(&self) -> Vec<ExecutableKind>;

    /// The source of `kernel` as `kind`, one of [`kinds`](Self::kinds) (an error if the catalogue
    /// cannot provide it).
    fn source(&self, kernel: Kernel, kind: ExecutableKind) -> Result<ExecutableSource>;

    /// Why the catalogue has no form of `kernel` at all (the SPIR-V catalogue has no `Fault`:
    /// SPIR-V has no instruction that faults on purpose); `None` (the default) when it has one.
    /// Cases that need such a kernel are skipped with the reason.
    fn lacks(&self, kernel: Kernel) -> Option<String> {
        let _ = kernel;
        None
    }
}

/// The catalogue of a driver that loads no kernels (an inline or skeleton driver): the cases that
/// need a kernel skip, and every other case runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoKernels;

impl KernelCatalogue for NoKernels {
    fn kinds(&self) -> Vec<ExecutableKind> {
        Vec::new()
    }

    fn source(&self, kernel: Kernel, kind: ExecutableKind) -> Result<ExecutableSource> {
        Err(kind_not_provided("no kernels", kernel, kind))
    }
}

/// The kind to load `catalogue`'s kernels as on the device `info` describes: the first of the
/// catalogue's kinds the device loads, or `Unimplemented` naming the kinds on both sides.
pub fn choose_kind(catalogue: &dyn KernelCatalogue, info: &DeviceInfo) -> Result<ExecutableKind> {
    info.choose_executable_kind(&catalogue.kinds()).map_err(|e| e.context("the suite's kernel catalogue"))
}

/// Loads `catalogue`'s `kernel` on `device`, in the kind [`choose_kind`] picks; an error names the
/// kernel and the step that failed.
pub fn load(catalogue: &dyn KernelCatalogue, device: &Device, kernel: Kernel) -> Result<Executable> {
    let kind =
        choose_kind(catalogue, device.info()).map_err(|e| e.context(format!("choosing a kind for {kernel:?}")))?;
    let source =
        catalogue.source(kernel, kind).map_err(|e| e.context(format!("catalogue source of {kernel:?} as {kind}")))?;
    device.load_executable(&source).map_err(|e| e.context(format!("load_executable({kernel:?})")))
}

/// The error for a kind `catalogue_name` does not provide.
pub(crate) fn kind_not_provided(catalogue_name: &str, kernel: Kernel, kind: ExecutableKind) -> hal::Error {
    hal::Error::unimplemented(format!("{catalogue_name}: no {kernel:?} kernel as {kind}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::native::NativeCatalogue;

    #[test]
    fn kind_is_chosen_by_what_the_device_loads() {
        let mut info = driver_cpu_sim::device_info(&driver_cpu_sim::CpuSimOptions::default());
        assert_eq!(choose_kind(&NativeCatalogue, &info), Ok(ExecutableKind::Native));
        info.executable_kinds = vec![ExecutableKind::Ptx, ExecutableKind::Cubin];
        let err = choose_kind(&NativeCatalogue, &info).unwrap_err();
        assert_eq!(err.code(), hal::StatusCode::Unimplemented);
        assert!(err.message().contains("loads executables of kinds [ptx, cubin]"), "{err}");
        assert!(err.message().contains("available as [native]"), "{err}");
        let err = NativeCatalogue.source(Kernel::FillU32, ExecutableKind::Ptx).unwrap_err();
        assert_eq!(err.code(), hal::StatusCode::Unimplemented);
    }
}
