//! The C ABI between the cpu-sim driver and a shared library of native kernels.
//!
//! A kernel library (any language; `cpu-sim-example-kernels` is one in Rust) exports one symbol,
//! [`KERNEL_TABLE_SYMBOL`] (`hal_cpu_sim_kernel_table`), a [`KernelTableFn`]. A C library includes
//! `thal_kernel.h` (in `hal-c/include`, installed with the C library), which declares these types as
//! `thal_kernel_args_t`, `thal_kernel_entry_t` and `thal_kernel_table_t`:
//!
//! ```c
//! typedef struct thal_kernel_args_t {
//!   uint32_t workgroup_id[3], workgroup_count[3], workgroup_size[3];
//!   const uint32_t *constants; uint32_t constant_count;
//!   uint8_t *const *bindings; const uint64_t *binding_lengths; uint32_t binding_count;
//!   /* ABI version 2: the tail of KernelCall */
//!   void (*set_error)(const struct thal_kernel_args_t *args, const char *message);
//!   void *error_context;
//! } thal_kernel_args_t;
//! typedef struct {
//!   const char *name;            /* NUL-terminated UTF-8, unique in the table */
//!   uint32_t workgroup_size[3];  /* each nonzero */
//!   uint32_t binding_count, constant_count;
//!   int32_t (*function)(const thal_kernel_args_t *); /* 0 = success, anything else = failure */
//! } thal_kernel_entry_t;
//! typedef struct { uint32_t abi_version; uint32_t count; const thal_kernel_entry_t *entries; } thal_kernel_table_t;
//! const thal_kernel_table_t *hal_cpu_sim_kernel_table(void);
//! ```
//!
//! Rules both sides keep:
//! - the table, its entries and their names stay valid and unchanged while the library is loaded;
//!   `abi_version` is 1 or 2 (a driver refuses any other; [`ABI_VERSION`] is the newest);
//! - `function` runs one workgroup and may run concurrently with other workgroups of the same dispatch
//!   on other threads; the `KernelArgs` and the arrays it points to are valid only during the call;
//! - a binding is `binding_lengths[i]` bytes at `bindings[i]` (the buffer address plus the binding
//!   offset), with no alignment promise beyond the buffer's 64-byte base plus that offset;
//! - accesses to binding memory that may race (other workgroups, host mappings, the driver's
//!   transfers, which all use relaxed atomics) must be atomic too: in Rust, relaxed
//!   `AtomicU32::from_ptr` loads and stores for 4-byte-aligned elements, `AtomicU8` otherwise (the
//!   rule of `hal::NativeBinding`); in C, `__atomic_load_n`/`__atomic_store_n` with
//!   `__ATOMIC_RELAXED`;
//! - `function` must not unwind (a Rust panic across `extern "C"` aborts the process); it reports
//!   failure by returning nonzero, which fails the dispatch.
//!
//! Version 2 adds a failure message. The `*const KernelArgs` a function receives is the start of a
//! [`KernelCall`], whose tail holds `set_error`: a function of a version-2 table may call
//! `args->set_error(args, message)` (in Rust, [`set_error`]) during its call, on the thread running
//! it, and then return nonzero; the dispatch's error is then `kernel '<name>' failed (status <s>):
//! <message>` instead of `kernel '<name>' returned status <s>`. The last message set counts; the
//! driver copies it (at most [`MAX_ERROR_MESSAGE`] bytes, invalid UTF-8 replaced), so it may live on
//! the kernel's stack. A message set by a function that returns 0 is ignored. A version-1 table's
//! functions never look past `binding_count` and keep working unchanged.
//!
//! Grid convention used by the example kernels (a convention, not part of the ABI): a workgroup of
//! `x*y*z` threads handles that many consecutive elements starting at
//! [`KernelArgs::linear_workgroup_id`] times [`KernelArgs::workgroup_threads`].

use std::ffi::{CStr, c_char, c_void};

/// The newest ABI version, the one this crate describes: version 2 adds [`KernelCall`]'s
/// `set_error`. A table states the version its functions were written for.
pub const ABI_VERSION: u32 = 2;

/// The oldest ABI version a driver still loads: version 1, whose functions know no `set_error`.
pub const MIN_ABI_VERSION: u32 = 1;

/// The longest failure message (in bytes) the driver keeps from [`set_error`]; the rest is cut.
pub const MAX_ERROR_MESSAGE: usize = 4096;

/// The name of the symbol a kernel library exports (without a trailing NUL).
pub const KERNEL_TABLE_SYMBOL: &str = "hal_cpu_sim_kernel_table";

/// The type of [`KERNEL_TABLE_SYMBOL`]: returns the library's table (never null for a valid library).
pub type KernelTableFn = unsafe extern "C" fn() -> *const KernelTable;

/// A kernel: runs the workgroup described by `args`; returns 0 on success, nonzero on failure.
///
/// # Safety
/// `args` points to a valid [`KernelArgs`] whose arrays hold the counts it states.
pub type KernelFn = unsafe extern "C" fn(args: *const KernelArgs) -> i32;

/// The table a kernel library exports.
#[repr(C)]
#[derive(Debug)]
pub struct KernelTable {
    /// Must equal [`ABI_VERSION`].
    pub abi_version: u32,
    /// Number of entries.
    pub count: u32,
    /// `count` entries (may be null only when `count` is 0).
    pub entries: *const KernelEntry,
}

/// One kernel of a [`KernelTable`].
#[repr(C)]
#[derive(Debug)]
pub struct KernelEntry {
    /// NUL-terminated UTF-8 name, unique in its table.
    pub name: *const c_char,
    /// Threads per workgroup in x, y, z; each nonzero.
    pub workgroup_size: [u32; 3],
    /// Buffer bindings a dispatch passes.
    pub binding_count: u32,
    /// 32-bit constants a dispatch passes.
    pub constant_count: u32,
    /// The function; null (`None`) is refused by the loader.
    pub function: Option<KernelFn>,
}

// SAFETY: a table and its entries are immutable data (and pointers to immutable data and code) that
// live as long as the library; sharing them between threads only reads them.
unsafe impl Sync for KernelTable {}
// SAFETY: see `KernelTable`.
unsafe impl Sync for KernelEntry {}

/// What one call of a [`KernelFn`] receives: one workgroup of a dispatch.
#[repr(C)]
#[derive(Debug)]
pub struct KernelArgs {
    /// This workgroup's id in the grid.
    pub workgroup_id: [u32; 3],
    /// The grid size.
    pub workgroup_count: [u32; 3],
    /// The entry point's declared workgroup size.
    pub workgroup_size: [u32; 3],
    /// `constant_count` 32-bit constants.
    pub constants: *const u32,
    /// Number of constants.
    pub constant_count: u32,
    /// `binding_count` binding addresses.
    pub bindings: *const *mut u8,
    /// `binding_count` binding lengths in bytes.
    pub binding_lengths: *const u64,
    /// Number of bindings.
    pub binding_count: u32,
}

/// Records `message` as the failure message of the call that received `args`: the driver's
/// callback behind [`KernelCall::set_error`]. `message` is a NUL-terminated string (null is ignored).
pub type SetErrorFn = unsafe extern "C" fn(args: *const KernelArgs, message: *const c_char);

/// What the `*const KernelArgs` a kernel function receives points to (ABI version 2): the arguments,
/// then the failure-message callback and its state. A version-1 function reads only `args`.
#[repr(C)]
#[derive(Debug)]
pub struct KernelCall {
    /// The workgroup's arguments; a function's `args` pointer points here.
    pub args: KernelArgs,
    /// Sets the call's failure message: `set_error(args, message)`, during the call, on the thread
    /// running it.
    pub set_error: SetErrorFn,
    /// The driver's state for `set_error`; kernels leave it alone.
    pub error_context: *mut c_void,
}

/// Sets the failure message of the call that received `args` (ABI version 2): the dispatch's error
/// names the kernel and this message when the function then returns nonzero.
///
/// # Safety
/// `args` is the pointer the driver passed to a function of a version-2 table, and the call has not
/// returned yet; call it on the thread running the function.
pub unsafe fn set_error(args: *const KernelArgs, message: &CStr) {
    // SAFETY: for a version-2 table the driver passes the start of a `KernelCall` (the caller's
    // promise), so its `set_error` is there and valid during the call.
    unsafe {
        let call = args.cast::<KernelCall>();
        ((*call).set_error)(args, message.as_ptr());
    }
}

impl KernelArgs {
    /// The workgroup's index in x-fastest order: `x + y * count_x + z * count_x * count_y`.
    pub fn linear_workgroup_id(&self) -> u64 {
        let [x, y, z] = self.workgroup_id.map(u64::from);
        let [cx, cy, _] = self.workgroup_count.map(u64::from);
        x + cx * (y + cy * z)
    }

    /// Threads per workgroup: `x * y * z` of the workgroup size.
    pub fn workgroup_threads(&self) -> u64 {
        self.workgroup_size.iter().map(|&n| u64::from(n)).product()
    }

    /// Constant `index`, or `None` when out of range.
    ///
    /// # Safety
    /// `constants` points to `constant_count` readable `u32`s (as the driver guarantees during a call).
    pub unsafe fn constant(&self, index: u32) -> Option<u32> {
        if index >= self.constant_count || self.constants.is_null() {
            return None;
        }
        // SAFETY: `index < constant_count` and the caller guarantees that many constants.
        Some(unsafe { self.constants.add(index as usize).read() })
    }

    /// Binding `index` as (address, length in bytes), or `None` when out of range.
    ///
    /// # Safety
    /// `bindings` and `binding_lengths` point to `binding_count` entries each (as the driver
    /// guarantees during a call).
    pub unsafe fn binding(&self, index: u32) -> Option<(*mut u8, u64)> {
        if index >= self.binding_count || self.bindings.is_null() || self.binding_lengths.is_null() {
            return None;
        }
        // SAFETY: `index < binding_count` and the caller guarantees both arrays hold that many.
        unsafe { Some((self.bindings.add(index as usize).read(), self.binding_lengths.add(index as usize).read())) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_id_is_x_fastest() {
        let args = KernelArgs {
            workgroup_id: [1, 2, 3],
            workgroup_count: [4, 5, 6],
            workgroup_size: [8, 2, 1],
            constants: std::ptr::null(),
            constant_count: 0,
            bindings: std::ptr::null(),
            binding_lengths: std::ptr::null(),
            binding_count: 0,
        };
        assert_eq!(args.linear_workgroup_id(), 1 + 4 * (2 + 5 * 3));
        assert_eq!(args.workgroup_threads(), 16);
        // SAFETY: counts are zero, so nothing is read.
        unsafe {
            assert_eq!(args.constant(0), None);
            assert_eq!(args.binding(0), None);
        }
    }

    #[test]
    fn accessors_read_in_range() {
        let constants = [7u32, 9];
        let mut data = [0u8; 16];
        let ptrs = [data.as_mut_ptr()];
        let lens = [16u64];
        let args = KernelArgs {
            workgroup_id: [0; 3],
            workgroup_count: [1; 3],
            workgroup_size: [1; 3],
            constants: constants.as_ptr(),
            constant_count: 2,
            bindings: ptrs.as_ptr(),
            binding_lengths: lens.as_ptr(),
            binding_count: 1,
        };
        // SAFETY: the arrays above hold the stated counts.
        unsafe {
            assert_eq!(args.constant(1), Some(9));
            assert_eq!(args.constant(2), None);
            assert_eq!(args.binding(0), Some((data.as_mut_ptr(), 16)));
            assert_eq!(args.binding(1), None);
        }
    }
}
