//! The stencil kernel, `jacobi_step`, in each driver's format with one ABI (the HAL's dispatch
//! ABI): bindings `src`, `dst` (a half's ping-pong buffers, each `rows + 2` rows of `width` f32:
//! a halo row, the half's rows, a halo row), then the 32-bit constants `width`, `rows`,
//! `row_offset` (the global row of the half's first row) and `total_rows` (the whole grid's rows).
//! The grid is `[ceil(width / 256), rows, 1]` workgroups of 256 x 1 x 1 threads: one thread per
//! cell, one workgroup row per grid row. Each cell of the half's rows gets the average of its four
//! neighbours; cells on the grid's border keep their value (a fixed-temperature boundary).
//!
//! Every driver computes [`stencil_point`]'s exact operations in the same order (the PTX uses
//! `add.rn`/`mul.rn`, which are never fused into an FMA), so results match the CPU reference bit for
//! bit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use hal::{
    DeviceInfo, EntryPointInfo, ExecutableFormat, ExecutableKind, ExecutableSource, NativeBinding, NativeEntryPoint,
    NativeInvocation, Result,
};

/// The entry point's name in every format.
pub const ENTRY_POINT: &str = "jacobi_step";

/// Threads per workgroup (x); the workgroup is `[WORKGROUP_X, 1, 1]`.
pub const WORKGROUP_X: u32 = 256;

/// Buffer bindings per dispatch: `src`, `dst`.
pub const BINDINGS: usize = 2;

/// 32-bit constants per dispatch: `width`, `rows`, `row_offset`, `total_rows`.
pub const CONSTANTS: usize = 4;

/// One cell's new value from its four neighbours: the one formula the kernels and the CPU reference
/// share, operation for operation.
#[inline]
pub fn stencil_point(up: f32, down: f32, left: f32, right: f32) -> f32 {
    ((up + down) + (left + right)) * 0.25
}

/// Whether the cell at `row`, `col` of a `total_rows` x `width` grid is on the fixed border.
#[inline]
pub fn is_border(row: u32, col: u32, total_rows: u32, width: u32) -> bool {
    row == 0 || row + 1 == total_rows || col == 0 || col + 1 == width
}

/// Grid rows one native workgroup computes: it reads each of its `NATIVE_ROWS + 2` rows once for
/// `NATIVE_ROWS` output rows (the PTX's workgroup computes one row and leaves neighbour reuse to the
/// GPU's caches). 256 x 4 threads stay within a workgroup's 1024; taller tiles (128 x 8, 64 x 16)
/// measured no faster on cpu-sim (`docs/decisions.md#cpu-sim-native-stencil`).
pub const NATIVE_ROWS: u32 = 4;

/// The workgroup count of a dispatch over a half of `rows` rows of `width` cells, for an entry point
/// whose workgroup is `workgroup_size` (256 x 1 for the PTX, 256 x [`NATIVE_ROWS`] native).
pub fn workgroups(width: u32, rows: u32, workgroup_size: [u32; 3]) -> [u32; 3] {
    [width.div_ceil(workgroup_size[0].max(1)), rows.div_ceil(workgroup_size[1].max(1)), 1]
}

/// The entry point's ABI: the PTX's form, one row of 256 cells per workgroup.
pub fn entry_point_info() -> EntryPointInfo {
    EntryPointInfo::new(ENTRY_POINT, WORKGROUP_X, BINDINGS, CONSTANTS)
}

/// The native form's ABI: the same bindings and constants, 256 x [`NATIVE_ROWS`] cells per
/// workgroup.
pub fn native_entry_point_info() -> EntryPointInfo {
    entry_point_info().with_workgroup_size([WORKGROUP_X, NATIVE_ROWS, 1])
}

/// The forms this kernel comes in, preferred first: native kernels, PTX, then SPIR-V (compiled from
/// [`JACOBI_WGSL`] in builds with the `vulkan` feature).
#[cfg(feature = "vulkan")]
pub const KINDS: &[ExecutableKind] = &[ExecutableKind::Native, ExecutableKind::Ptx, ExecutableKind::Spirv];
/// The forms this kernel comes in, preferred first: native kernels, then PTX.
#[cfg(not(feature = "vulkan"))]
pub const KINDS: &[ExecutableKind] = &[ExecutableKind::Native, ExecutableKind::Ptx];

/// The executable for the device `info` describes, in the first of [`KINDS`] it loads (native
/// kernels on cpu-sim, PTX on CUDA, SPIR-V on Vulkan); `Unimplemented`, naming the kinds it loads,
/// when it loads none.
pub fn source_for(info: &DeviceInfo) -> Result<ExecutableSource> {
    match info.choose_executable_kind(KINDS)? {
        ExecutableKind::Ptx => Ok(ExecutableSource::Bytes {
            format: ExecutableFormat::Ptx,
            data: Arc::from(JACOBI_PTX.as_bytes()),
            entry_points: vec![entry_point_info()],
        }),
        #[cfg(feature = "vulkan")]
        ExecutableKind::Spirv => Ok(ExecutableSource::Bytes {
            format: ExecutableFormat::Spirv,
            data: Arc::from(driver_vulkan::wgsl::compile(JACOBI_WGSL, ENTRY_POINT)?),
            entry_points: vec![entry_point_info()],
        }),
        _ => Ok(native_source()),
    }
}

/// `jacobi_step` in WGSL for Vulkan (compiled to SPIR-V in-process with naga): IREE's Vulkan ABI
/// (`src`, `dst` at set 0, bindings 0 and 1; the constants one push-constant block), one thread per
/// cell as in [`JACOBI_PTX`], and [`stencil_point`]'s operations in its order (an add, an add, an
/// add, then a multiply: nothing a compiler may fuse into an FMA).
pub const JACOBI_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> src: array<f32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
struct Constants { width: u32, rows: u32, row_offset: u32, total_rows: u32 }
var<immediate> c: Constants;

@compute @workgroup_size(256, 1, 1)
fn jacobi_step(@builtin(global_invocation_id) id: vec3<u32>, @builtin(workgroup_id) group: vec3<u32>) {
    let col = id.x;
    let local = group.y;
    if (col >= c.width || local >= c.rows) {
        return;
    }
    let row = c.row_offset + local;
    let at = (local + 1u) * c.width + col;
    if (row == 0u || row + 1u == c.total_rows || col == 0u || col + 1u == c.width) {
        dst[at] = src[at];
        return;
    }
    let vertical = src[at - c.width] + src[at + c.width];
    let horizontal = src[at - 1u] + src[at + 1u];
    dst[at] = (vertical + horizontal) * 0.25;
}
"#;

/// The cpu-sim executable: [`jacobi_workgroup`] as a native kernel.
pub fn native_source() -> ExecutableSource {
    ExecutableSource::Native(vec![NativeEntryPoint::new(native_entry_point_info(), Arc::new(jacobi_workgroup))])
}

thread_local! {
    /// Per-thread scratch rows, reused by every workgroup the thread runs (no allocation and no
    /// zeroing per workgroup).
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One workgroup of `jacobi_step` on cpu-sim: columns `workgroup_id.x * size.x ..` of the
/// `size.y` rows from `workgroup_id.y * size.y` of the half (what `size.y` rows of the PTX's blocks
/// do). It walks down its rows with three scratch rows (above, the row, below): each row it reads
/// is copied in once with [`NativeBinding::load_f32s`] (one range check a row, relaxed atomic
/// loads, so racing workgroups are sound); each output row is computed in chunks the compiler
/// vectorizes (each cell still [`stencil_point`]'s exact operations) and stored with relaxed atomic
/// stores straight from the chunk.
pub fn jacobi_workgroup(inv: &NativeInvocation<'_>) -> std::result::Result<(), String> {
    let ([src, dst], &[width, rows, row_offset, total_rows]) = (inv.bindings, inv.constants) else {
        return Err(format!(
            "{ENTRY_POINT}: needs {BINDINGS} bindings and {CONSTANTS} constants, got {} and {}",
            inv.bindings.len(),
            inv.constants.len()
        ));
    };
    let [threads, group_rows, _] = inv.workgroup_size;
    if threads == 0 || group_rows == 0 {
        return Err(format!("{ENTRY_POINT}: workgroup of {threads} x {group_rows} threads"));
    }
    let first_row = inv.workgroup_id[1].saturating_mul(group_rows);
    if first_row >= rows {
        return Ok(());
    }
    let row_count = (rows - first_row).min(group_rows) as usize;
    let first_col = inv.workgroup_id[0].saturating_mul(threads);
    let end_col = first_col.saturating_add(threads).min(width);
    if first_col >= end_col {
        return Ok(());
    }
    let (w, first, count) = (width as usize, first_col as usize, (end_col - first_col) as usize);
    // Each scratch row holds this segment with one neighbour either side where the grid has one:
    // element `lead + i` is column `first + i`.
    let lead = usize::from(first > 0);
    let span = lead + count + usize::from(end_col < width);
    let edges = (first_col == 0, end_col == width);
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        if scratch.len() < 3 * span + count {
            scratch.resize(3 * span + count, 0.0);
        }
        let (ring, out) = scratch.split_at_mut(3 * span);
        let out = &mut out[..count];
        // Buffer row `first_row + k` is grid row `row_offset + first_row + k - 1` (row 0 is the
        // halo); ring slot `k % 3` holds it while rows `k - 1 ..= k + 1` need it.
        let buffer_row = |k: usize| (first_row as usize + k) * w + first - lead;
        for k in 0..2 {
            load_row(src, buffer_row(k), &mut ring[k * span..(k + 1) * span])?;
        }
        for r in 0..row_count {
            let below = (r + 2) % 3;
            load_row(src, buffer_row(r + 2), &mut ring[below * span..(below + 1) * span])?;
            let slot = |k: usize| &ring[(k % 3) * span..(k % 3 + 1) * span];
            let (up, mid, down) = (slot(r), slot(r + 1), slot(r + 2));
            let global_row = row_offset + first_row + r as u32;
            let at = (first_row as usize + r + 1) * w + first;
            let border_row = global_row == 0 || global_row + 1 == total_rows;
            let stored = match dst.as_atomic_u32() {
                Some(words) if !border_row && at + count <= words.len() => {
                    store_step_row(&up[lead..], mid, lead, &down[lead..], &words[at..at + count], edges);
                    true
                }
                _ => {
                    if border_row {
                        out.copy_from_slice(&mid[lead..lead + count]);
                    } else {
                        step_row(&up[lead..], mid, lead, &down[lead..], out, edges);
                    }
                    dst.store_f32s(at, out)
                }
            };
            if !stored {
                return Err(out_of_range(dst, at, count));
            }
        }
        Ok(())
    })
}

/// Cells a chunk of [`store_step_row`] computes together (two 128-bit or one 256-bit vector).
const CHUNK: usize = 8;

/// [`step_row`] straight into `words` (a relaxed atomic store per cell), in chunks of [`CHUNK`]
/// cells computed as one array so the arithmetic stays vectorized.
#[inline]
fn store_step_row(up: &[f32], row: &[f32], lead: usize, down: &[f32], words: &[AtomicU32], edges: (bool, bool)) {
    let count = words.len();
    let lo = usize::from(edges.0);
    let hi = if edges.1 { count.saturating_sub(1) } else { count };
    let store = |i: usize, value: f32| words[i].store(value.to_bits(), Ordering::Relaxed);
    if edges.0 && count > 0 {
        store(0, row[lead]);
    }
    let mut i = lo;
    while i + CHUNK <= hi {
        let cells = chunk(&up[i..], &down[i..], &row[lead + i - 1..]);
        for (word, value) in words[i..i + CHUNK].iter().zip(cells) {
            word.store(value.to_bits(), Ordering::Relaxed);
        }
        i += CHUNK;
    }
    while i < hi {
        store(i, stencil_point(up[i], down[i], row[lead + i - 1], row[lead + i + 1]));
        i += 1;
    }
    if edges.1 && hi < count {
        store(count - 1, row[lead + count - 1]);
    }
}

/// [`CHUNK`] cells from the first [`CHUNK`] of `up` and `down` and the first `CHUNK + 2` of
/// `row` (left neighbour first), as fixed-size arrays so the compiler vectorizes them.
#[inline(always)]
fn chunk(up: &[f32], down: &[f32], row: &[f32]) -> [f32; CHUNK] {
    let (Some(u), Some(d), Some(l), Some(r)) = (
        up.first_chunk::<CHUNK>(),
        down.first_chunk::<CHUNK>(),
        row.first_chunk::<CHUNK>(),
        row.get(2..).and_then(<[f32]>::first_chunk::<CHUNK>),
    ) else {
        return [0.0; CHUNK];
    };
    let mut cells = [0.0f32; CHUNK];
    for ((((cell, &u), &d), &l), &r) in cells.iter_mut().zip(u).zip(d).zip(l).zip(r) {
        *cell = stencil_point(u, d, l, r);
    }
    cells
}

/// One row segment: `out[i]` from `up[i]`, `down[i]` and the row's neighbours `row[lead + i ± 1]`;
/// the grid's first and last columns (`edges`) keep their value (`row[lead + i]`).
#[inline]
fn step_row(up: &[f32], row: &[f32], lead: usize, down: &[f32], out: &mut [f32], edges: (bool, bool)) {
    let count = out.len();
    let lo = usize::from(edges.0);
    let hi = if edges.1 { count.saturating_sub(1) } else { count };
    if lo < hi {
        // `row[lead + i - 1]` and `row[lead + i + 1]` exist for every interior `i` (a neighbour
        // column is loaded unless the segment touches the grid's edge, where `lo`/`hi` skip it).
        let left = &row[lead + lo - 1..lead + hi - 1];
        let right = &row[lead + lo + 1..lead + hi + 1];
        for ((((cell, &u), &d), &l), &r) in
            out[lo..hi].iter_mut().zip(&up[lo..hi]).zip(&down[lo..hi]).zip(left).zip(right)
        {
            *cell = stencil_point(u, d, l, r);
        }
    }
    if edges.0 && count > 0 {
        out[0] = row[lead];
    }
    if edges.1 && count > 0 {
        out[count - 1] = row[lead + count - 1];
    }
}

/// Loads `out.len()` elements of `binding` from element `at`.
fn load_row(binding: &NativeBinding, at: usize, out: &mut [f32]) -> std::result::Result<(), String> {
    if binding.load_f32s(at, out) { Ok(()) } else { Err(out_of_range(binding, at, out.len())) }
}

fn out_of_range(binding: &NativeBinding, at: usize, count: usize) -> String {
    format!("{ENTRY_POINT}: elements [{at}, {at}+{count}) are outside its {}-element binding", binding.len_u32())
}

/// Checks the PTX declares the entry point with the ABI's parameter count (a cheap guard for edits
/// of the hand-written text; the CUDA driver does the real check when it loads it).
pub fn check_ptx_abi() -> Result<()> {
    let entry = format!(".visible .entry {ENTRY_POINT}(");
    let Some(start) = JACOBI_PTX.find(&entry) else {
        return Err(hal::Error::internal(format!("stencil PTX: no entry point {ENTRY_POINT}")));
    };
    let params = JACOBI_PTX[start..].split(')').next().unwrap_or("");
    let (pointers, words) = (params.matches(".param .u64").count(), params.matches(".param .u32").count());
    if (pointers, words) != (BINDINGS, CONSTANTS) {
        return Err(hal::Error::internal(format!(
            "stencil PTX: {pointers} pointer and {words} u32 parameters, the ABI has {BINDINGS} and {CONSTANTS}"
        )));
    }
    Ok(())
}

/// `jacobi_step` in PTX for CUDA (`sm_80` and later), written by hand: one thread per cell, the same
/// ABI and arithmetic as [`jacobi_workgroup`].
pub const JACOBI_PTX: &str = r#".version 7.0
.target sm_80
.address_size 64

// jacobi_step(src, dst, width, rows, row_offset, total_rows)
// thread (blockIdx.x * blockDim.x + threadIdx.x, blockIdx.y) updates column col of the half's row
// blockIdx.y + 1; rows 0 and rows + 1 of a half are its halo rows.
.visible .entry jacobi_step(
    .param .u64 src,
    .param .u64 dst,
    .param .u32 width,
    .param .u32 rows,
    .param .u32 row_offset,
    .param .u32 total_rows
)
.maxntid 256, 1, 1
{
    .reg .pred  %p<8>;
    .reg .b32   %r<16>;
    .reg .f32   %f<10>;
    .reg .b64   %rd<12>;

    ld.param.u64        %rd1, [src];
    ld.param.u64        %rd2, [dst];
    ld.param.u32        %r1, [width];
    ld.param.u32        %r2, [rows];
    ld.param.u32        %r3, [row_offset];
    ld.param.u32        %r4, [total_rows];
    cvta.to.global.u64  %rd1, %rd1;
    cvta.to.global.u64  %rd2, %rd2;

    // col = blockIdx.x * blockDim.x + threadIdx.x; threads past the last column do nothing
    mov.u32             %r5, %ctaid.x;
    mov.u32             %r6, %ntid.x;
    mov.u32             %r7, %tid.x;
    mad.lo.u32          %r8, %r5, %r6, %r7;
    setp.ge.u32         %p1, %r8, %r1;
    @%p1 bra            DONE;

    // local = blockIdx.y (the half's row - 1); global row = row_offset + local
    mov.u32             %r9, %ctaid.y;
    setp.ge.u32         %p2, %r9, %r2;
    @%p2 bra            DONE;
    add.u32             %r10, %r9, 1;
    add.u32             %r11, %r3, %r9;

    // at = (local + 1) * width + col; byte addresses of src[at] and dst[at]
    mad.lo.u32          %r12, %r10, %r1, %r8;
    mul.wide.u32        %rd3, %r12, 4;
    add.s64             %rd4, %rd1, %rd3;
    add.s64             %rd5, %rd2, %rd3;

    // border cells (first/last row of the grid, first/last column) keep their value
    setp.eq.u32         %p3, %r11, 0;
    add.u32             %r13, %r11, 1;
    setp.eq.u32         %p4, %r13, %r4;
    or.pred             %p3, %p3, %p4;
    setp.eq.u32         %p5, %r8, 0;
    or.pred             %p3, %p3, %p5;
    add.u32             %r14, %r8, 1;
    setp.eq.u32         %p6, %r14, %r1;
    or.pred             %p3, %p3, %p6;
    @%p3 bra            BORDER;

    // ((up + down) + (left + right)) * 0.25, rounded to nearest at every step (no FMA)
    mul.wide.u32        %rd6, %r1, 4;
    sub.s64             %rd7, %rd4, %rd6;
    add.s64             %rd8, %rd4, %rd6;
    ld.global.f32       %f1, [%rd7];
    ld.global.f32       %f2, [%rd8];
    ld.global.f32       %f3, [%rd4+-4];
    ld.global.f32       %f4, [%rd4+4];
    add.rn.f32          %f5, %f1, %f2;
    add.rn.f32          %f6, %f3, %f4;
    add.rn.f32          %f7, %f5, %f6;
    mul.rn.f32          %f8, %f7, 0f3E800000;
    st.global.f32       [%rd5], %f8;
    bra.uni             DONE;

BORDER:
    ld.global.f32       %f9, [%rd4];
    st.global.f32       [%rd5], %f9;

DONE:
    ret;
}
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stencil::reference;

    /// One step of the half of `rows` rows from global row `offset` of `grid` (`n` x `n`), run with
    /// [`jacobi_workgroup`] over a `workgroup_size` grid, on bindings starting `skew` bytes into
    /// their allocations (a `skew` that is not a multiple of 4 makes them misaligned); returns the
    /// half's rows.
    fn native_step(grid: &[f32], n: u32, offset: u32, rows: u32, workgroup_size: [u32; 3], skew: usize) -> Vec<f32> {
        let w = n as usize;
        let cells = (rows as usize + 2) * w;
        let mut src_bytes = vec![0u8; cells * 4 + skew];
        for local in 0..rows as usize + 2 {
            let global = offset as i64 + local as i64 - 1;
            if (0..n as i64).contains(&global) {
                for (col, value) in grid[global as usize * w..][..w].iter().enumerate() {
                    let at = skew + (local * w + col) * 4;
                    src_bytes[at..at + 4].copy_from_slice(&value.to_ne_bytes());
                }
            }
        }
        let mut dst_bytes = vec![0u8; cells * 4 + skew];
        // The bindings end with this block, before the plain reads below.
        {
            // SAFETY: both vectors outlive the bindings, and only this thread touches them meanwhile.
            let bindings = unsafe {
                [
                    NativeBinding::new(src_bytes.as_mut_ptr().add(skew), cells * 4),
                    NativeBinding::new(dst_bytes.as_mut_ptr().add(skew), cells * 4),
                ]
            };
            let constants = [n, rows, offset, n];
            let count = workgroups(n, rows, workgroup_size);
            for y in 0..count[1] {
                for x in 0..count[0] {
                    let invocation = NativeInvocation::new([x, y, 0], count, workgroup_size, &constants, &bindings);
                    jacobi_workgroup(&invocation).unwrap();
                }
            }
        }
        (w..w + rows as usize * w)
            .map(|cell| f32::from_ne_bytes(dst_bytes[skew + cell * 4..skew + cell * 4 + 4].try_into().unwrap()))
            .collect()
    }

    /// Every workgroup shape the native kernel may be declared with covers every cell of a half
    /// once and matches the CPU reference bit for bit, including partial workgroups at the right and
    /// bottom edges, one-column segments, and misaligned bindings (the element-wise store path).
    #[test]
    fn native_workgroups_of_any_shape_match_the_reference() {
        for n in [4u32, 17, 66, 300] {
            let grid = reference::initial_grid(n);
            let mut expected = vec![0.0f32; grid.len()];
            reference::step(&grid, &mut expected, n);
            let halves = [(0, n / 2), (n / 2, n - n / 2)];
            for size in [[256, 4, 1], [256, 1, 1], [64, 16, 1], [128, 8, 1], [7, 3, 1], [1, 1, 1], [1024, 1, 1]] {
                for skew in [0, 4, 1] {
                    for (offset, rows) in halves {
                        let got = native_step(&grid, n, offset, rows, size, skew);
                        let want = &expected[offset as usize * n as usize..(offset + rows) as usize * n as usize];
                        assert!(
                            got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "n {n}, workgroup {size:?}, skew {skew}, half from row {offset}"
                        );
                    }
                }
            }
        }
    }

    /// The native entry point's workgroup count covers every cell of a half, whatever its size.
    #[test]
    fn native_geometry_covers_every_cell() {
        let size = native_entry_point_info().workgroup_size;
        for (width, rows) in [(512, 256), (513, 255), (4, 2), (1, 1), (16384, 8192)] {
            let count = workgroups(width, rows, size);
            assert!(u64::from(count[0]) * u64::from(size[0]) >= u64::from(width), "{width} x {rows}");
            assert!(u64::from(count[1]) * u64::from(size[1]) >= u64::from(rows), "{width} x {rows}");
            assert!((count[0] - 1) * size[0] < width && (count[1] - 1) * size[1] < rows, "no empty workgroup");
        }
    }

    #[test]
    fn ptx_declares_the_abi() {
        check_ptx_abi().unwrap();
        assert!(JACOBI_PTX.contains(".maxntid 256, 1, 1"));
        assert!(!JACOBI_PTX.contains("fma"), "no fused multiply-add: results must match the CPU bit for bit");
    }

    /// cpu-sim's device info with `kinds` as what it loads.
    fn info_loading(kinds: &[ExecutableKind]) -> DeviceInfo {
        let mut info = driver_cpu_sim::device_info(&driver_cpu_sim::CpuSimOptions::default());
        info.executable_kinds = kinds.to_vec();
        info
    }

    #[test]
    fn source_is_chosen_by_the_kinds_the_device_loads() {
        let kind = |kinds: &[ExecutableKind]| source_for(&info_loading(kinds)).map(|s| ExecutableKind::of(&s));
        let cpu_sim = driver_cpu_sim::device_info(&driver_cpu_sim::CpuSimOptions::default());
        assert_eq!(source_for(&cpu_sim).map(|s| ExecutableKind::of(&s)), Ok(ExecutableKind::Native));
        let cuda = [ExecutableKind::Ptx, ExecutableKind::Cubin, ExecutableKind::Fatbin];
        assert_eq!(kind(&cuda), Ok(ExecutableKind::Ptx));
        // Native is preferred where both load, whatever the device's order.
        assert_eq!(kind(&[ExecutableKind::Ptx, ExecutableKind::Native]), Ok(ExecutableKind::Native));
        // The driver's name plays no part: a device named "cuda" that loads native kernels gets them.
        let mut named_cuda = cpu_sim.clone();
        named_cuda.driver = "cuda".to_string();
        assert_eq!(source_for(&named_cuda).map(|s| ExecutableKind::of(&s)), Ok(ExecutableKind::Native));
        let err = kind(&[ExecutableKind::Cubin, ExecutableKind::SharedLibrary]).unwrap_err();
        assert_eq!(err.code(), hal::StatusCode::Unimplemented);
        let offered = format!("[{}]", ExecutableKind::list(KINDS));
        assert!(err.message().contains("[cubin, shared-library]") && err.message().contains(&offered), "{err}");
        #[cfg(feature = "vulkan")]
        assert_eq!(kind(&[ExecutableKind::Spirv]), Ok(ExecutableKind::Spirv), "a Vulkan device gets SPIR-V");
    }

    #[test]
    fn formula_and_border() {
        assert_eq!(stencil_point(1.0, 2.0, 3.0, 4.0), 2.5);
        assert!(is_border(0, 5, 10, 10) && is_border(9, 5, 10, 10) && is_border(5, 0, 10, 10));
        assert!(is_border(5, 9, 10, 10) && !is_border(5, 5, 10, 10));
        let (gpu, native) = (entry_point_info().workgroup_size, native_entry_point_info().workgroup_size);
        assert_eq!(workgroups(512, 256, gpu), [2, 256, 1]);
        assert_eq!(workgroups(257, 3, gpu), [2, 3, 1]);
        // Native workgroups take NATIVE_ROWS rows each; a partial last group still covers its rows.
        assert_eq!(workgroups(512, 256, native), [2, 64, 1]);
        assert_eq!(workgroups(257, 3, native), [2, 1, 1]);
        assert_eq!(workgroups(257, 9, native), [2, 3, 1]);
    }
}
