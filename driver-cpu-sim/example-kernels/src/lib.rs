//! A shared library of native kernels for the cpu-sim driver: the worked example of its kernel ABI
//! (`cpu-sim-kernel-abi`) and the fixture its loader tests use.
//!
//! Built as a `cdylib` (`libcpu_sim_example_kernels.so`), load it with
//! `ExecutableSource::SharedLibrary(path)`. Each kernel treats its bindings as arrays of 32-bit
//! elements; workgroup `w` (in x-fastest order, [`KernelArgs::linear_workgroup_id`]) handles the
//! `x*y*z` elements (one per thread of its declared workgroup size) from `w * x*y*z`; elements past
//! the end of a binding are skipped, as a GPU kernel guards `if (i < n)`.
//!
//! | entry point | bindings | constants | does |
//! | --- | --- | --- | --- |
//! | `fill_u32` | out | value | `out[i] = value` |
//! | `add_f32` | a, b, c | - | `c[i] = a[i] + b[i]` |
//! | `scale_offset_f32` | in, out | scale bits, offset bits | `out[i] = in[i] * scale + offset` |
//! | `fail_on_purpose` | - | - | returns [`FAIL_ON_PURPOSE_STATUS`] |
//!
//! Kernels return nonzero for missing bindings or constants instead of panicking: a panic cannot
//! cross the `extern "C"` boundary.

use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

use cpu_sim_kernel_abi::{ABI_VERSION, KernelArgs, KernelEntry, KernelTable};

/// Workgroup size (x) of every kernel here.
pub const WORKGROUP_SIZE: u32 = 64;

/// What `fail_on_purpose` returns.
pub const FAIL_ON_PURPOSE_STATUS: i32 = 42;

/// Returned when a binding or constant the kernel needs is missing.
const BAD_ARGS_STATUS: i32 = -1;

static ENTRIES: [KernelEntry; 4] = [
    KernelEntry {
        name: c"fill_u32".as_ptr(),
        workgroup_size: [WORKGROUP_SIZE, 1, 1],
        binding_count: 1,
        constant_count: 1,
        function: Some(fill_u32),
    },
    KernelEntry {
        name: c"add_f32".as_ptr(),
        workgroup_size: [WORKGROUP_SIZE, 1, 1],
        binding_count: 3,
        constant_count: 0,
        function: Some(add_f32),
    },
    KernelEntry {
        name: c"scale_offset_f32".as_ptr(),
        workgroup_size: [WORKGROUP_SIZE, 1, 1],
        binding_count: 2,
        constant_count: 2,
        function: Some(scale_offset_f32),
    },
    KernelEntry {
        name: c"fail_on_purpose".as_ptr(),
        workgroup_size: [1, 1, 1],
        binding_count: 0,
        constant_count: 0,
        function: Some(fail_on_purpose),
    },
];

static TABLE: KernelTable =
    KernelTable { abi_version: ABI_VERSION, count: ENTRIES.len() as u32, entries: ENTRIES.as_ptr() };

/// The exported kernel table (`cpu_sim_kernel_abi::KERNEL_TABLE_SYMBOL`).
#[unsafe(no_mangle)]
pub extern "C" fn hal_cpu_sim_kernel_table() -> *const KernelTable {
    &TABLE
}

/// The same table, for in-process use through the rlib.
pub fn kernel_table() -> &'static KernelTable {
    &TABLE
}

/// A binding viewed as `u32` elements. Workgroups run on several threads and may touch the same
/// element, so every access is a relaxed atomic (`AtomicU32` when the binding is 4-byte aligned,
/// `AtomicU8` per byte otherwise): the rule of `hal::NativeBinding`.
struct Elements {
    ptr: *mut u8,
    len: u64,
}

impl Elements {
    /// Binding `index` of `args`, or `None` when missing.
    ///
    /// # Safety
    /// `args` is a valid `KernelArgs` as the driver passes it.
    unsafe fn of(args: &KernelArgs, index: u32) -> Option<Elements> {
        // SAFETY: forwarded from the caller.
        let (ptr, bytes) = unsafe { args.binding(index) }?;
        if ptr.is_null() {
            return None;
        }
        Some(Elements { ptr, len: bytes / 4 })
    }

    fn load(&self, index: u64) -> Option<u32> {
        if index >= self.len {
            return None;
        }
        let at = index as usize * 4;
        // SAFETY: `index < len` elements of the binding, which the driver keeps alive for the call;
        // every racing access to it (other workgroups, the driver's transfers) is atomic.
        Some(unsafe {
            if self.ptr.cast::<u32>().is_aligned() {
                AtomicU32::from_ptr(self.ptr.add(at).cast::<u32>()).load(Ordering::Relaxed)
            } else {
                // A misaligned binding (unaligned binding offset): byte by byte.
                u32::from_ne_bytes(std::array::from_fn(|b| {
                    AtomicU8::from_ptr(self.ptr.add(at + b)).load(Ordering::Relaxed)
                }))
            }
        })
    }

    fn store(&self, index: u64, value: u32) {
        if index >= self.len {
            return;
        }
        let at = index as usize * 4;
        // SAFETY: as in `load`.
        unsafe {
            if self.ptr.cast::<u32>().is_aligned() {
                AtomicU32::from_ptr(self.ptr.add(at).cast::<u32>()).store(value, Ordering::Relaxed);
            } else {
                for (b, byte) in value.to_ne_bytes().into_iter().enumerate() {
                    AtomicU8::from_ptr(self.ptr.add(at + b)).store(byte, Ordering::Relaxed);
                }
            }
        }
    }
}

/// The element range of this workgroup.
fn elements_of(args: &KernelArgs) -> std::ops::Range<u64> {
    let threads = args.workgroup_threads();
    let start = args.linear_workgroup_id().saturating_mul(threads);
    start..start.saturating_add(threads)
}

/// Converts a raw argument pointer to a reference, or `None` when null.
///
/// # Safety
/// `args` is null or points to a valid `KernelArgs` for the duration of the call.
unsafe fn args_ref<'a>(args: *const KernelArgs) -> Option<&'a KernelArgs> {
    // SAFETY: forwarded from the caller.
    unsafe { args.as_ref() }
}

/// `out[i] = value`.
///
/// # Safety
/// `args` is as the kernel ABI promises.
unsafe extern "C" fn fill_u32(args: *const KernelArgs) -> i32 {
    // SAFETY: the driver passes valid args (the ABI's contract), and they stay valid for the call.
    let Some(args) = (unsafe { args_ref(args) }) else { return BAD_ARGS_STATUS };
    // SAFETY: as above.
    let (Some(out), Some(value)) = (unsafe { Elements::of(args, 0) }, unsafe { args.constant(0) }) else {
        return BAD_ARGS_STATUS;
    };
    for i in elements_of(args) {
        out.store(i, value);
    }
    0
}

/// `c[i] = a[i] + b[i]`.
///
/// # Safety
/// `args` is as the kernel ABI promises.
unsafe extern "C" fn add_f32(args: *const KernelArgs) -> i32 {
    // SAFETY: the driver passes valid args (the ABI's contract), and they stay valid for the call.
    let Some(args) = (unsafe { args_ref(args) }) else { return BAD_ARGS_STATUS };
    // SAFETY: as above.
    let (Some(a), Some(b), Some(c)) =
        (unsafe { Elements::of(args, 0) }, unsafe { Elements::of(args, 1) }, unsafe { Elements::of(args, 2) })
    else {
        return BAD_ARGS_STATUS;
    };
    for i in elements_of(args) {
        if let (Some(x), Some(y)) = (a.load(i), b.load(i)) {
            c.store(i, (f32::from_bits(x) + f32::from_bits(y)).to_bits());
        }
    }
    0
}

/// `out[i] = in[i] * scale + offset`, with `scale` and `offset` passed as `f32` bits.
///
/// # Safety
/// `args` is as the kernel ABI promises.
unsafe extern "C" fn scale_offset_f32(args: *const KernelArgs) -> i32 {
    // SAFETY: the driver passes valid args (the ABI's contract), and they stay valid for the call.
    let Some(args) = (unsafe { args_ref(args) }) else { return BAD_ARGS_STATUS };
    // SAFETY: as above.
    let found = unsafe { (Elements::of(args, 0), Elements::of(args, 1), args.constant(0), args.constant(1)) };
    let (Some(input), Some(out), Some(scale), Some(offset)) = found else {
        return BAD_ARGS_STATUS;
    };
    let (scale, offset) = (f32::from_bits(scale), f32::from_bits(offset));
    for i in elements_of(args) {
        if let Some(x) = input.load(i) {
            out.store(i, (f32::from_bits(x) * scale + offset).to_bits());
        }
    }
    0
}

/// Always fails with [`FAIL_ON_PURPOSE_STATUS`].
///
/// # Safety
/// None needed: `args` is not read.
unsafe extern "C" fn fail_on_purpose(_args: *const KernelArgs) -> i32 {
    FAIL_ON_PURPOSE_STATUS
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn table_is_well_formed() {
        let table = kernel_table();
        assert_eq!(table.abi_version, ABI_VERSION);
        assert_eq!(table.count as usize, ENTRIES.len());
        let names: Vec<&str> = ENTRIES
            .iter()
            // SAFETY: every name is a C string literal.
            .map(|e| unsafe { CStr::from_ptr(e.name) }.to_str().unwrap_or("<bad utf-8>"))
            .collect();
        assert_eq!(names, ["fill_u32", "add_f32", "scale_offset_f32", "fail_on_purpose"]);
    }

    #[test]
    fn fill_writes_its_workgroup_range_only() {
        let mut out = [0u32; 200];
        let ptrs = [out.as_mut_ptr().cast::<u8>()];
        let lens = [out.len() as u64 * 4];
        let value = [5u32];
        let args = KernelArgs {
            workgroup_id: [1, 1, 0],
            workgroup_count: [2, 2, 1],
            workgroup_size: [WORKGROUP_SIZE, 1, 1],
            constants: value.as_ptr(),
            constant_count: 1,
            bindings: ptrs.as_ptr(),
            binding_lengths: lens.as_ptr(),
            binding_count: 1,
        };
        // SAFETY: `args` describes the live arrays above.
        assert_eq!(unsafe { fill_u32(&args) }, 0);
        // Workgroup (1, 1) of a 2x2 grid is linear 3: elements 192..256, of which 192..200 exist.
        assert!(out[..192].iter().all(|&v| v == 0));
        assert!(out[192..].iter().all(|&v| v == 5));
    }

    #[test]
    fn missing_arguments_fail_instead_of_panicking() {
        let args = KernelArgs {
            workgroup_id: [0; 3],
            workgroup_count: [1; 3],
            workgroup_size: [1; 3],
            constants: std::ptr::null(),
            constant_count: 0,
            bindings: std::ptr::null(),
            binding_lengths: std::ptr::null(),
            binding_count: 0,
        };
        // SAFETY: counts are zero, so the kernels read no arrays.
        unsafe {
            assert_eq!(fill_u32(&args), BAD_ARGS_STATUS);
            assert_eq!(add_f32(&args), BAD_ARGS_STATUS);
            assert_eq!(scale_offset_f32(&args), BAD_ARGS_STATUS);
            assert_eq!(fail_on_purpose(&args), FAIL_ON_PURPOSE_STATUS);
            assert_eq!(fill_u32(std::ptr::null()), BAD_ARGS_STATUS);
        }
    }
}
