//! The cpu-sim catalogue: each kernel as native Rust closures (`ExecutableSource::Native`). A
//! closure runs one workgroup and loops over its threads; an access outside a binding is reported as
//! an error (a fault) rather than ignored, so a suite bug shows.

use std::sync::Arc;

use hal::{
    EntryPointInfo, ExecutableKind, ExecutableSource, NativeBinding, NativeEntryPoint, NativeInvocation, Result,
};

use super::{Kernel, KernelCatalogue, grid_id_value, kind_not_provided};

/// The native kernels cpu-sim runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct NativeCatalogue;

impl KernelCatalogue for NativeCatalogue {
    fn kinds(&self) -> Vec<ExecutableKind> {
        vec![ExecutableKind::Native]
    }

    fn source(&self, kernel: Kernel, kind: ExecutableKind) -> Result<ExecutableSource> {
        if kind != ExecutableKind::Native {
            return Err(kind_not_provided("native catalogue", kernel, kind));
        }
        let infos = kernel.entry_points();
        let kernels: Vec<hal::NativeKernel> = match kernel {
            Kernel::FillU32 => vec![Arc::new(fill_u32)],
            Kernel::AddF32 => vec![Arc::new(add_f32)],
            Kernel::ScaleOffsetF32 => vec![Arc::new(scale_offset_f32)],
            Kernel::MultiEntry => vec![Arc::new(set_index), Arc::new(add_u32), Arc::new(mul_u32)],
            Kernel::GridIds => vec![Arc::new(grid_ids)],
            Kernel::Fault => vec![Arc::new(fault)],
            Kernel::Sleep => vec![Arc::new(sleep_us)],
            Kernel::MixedParams => vec![Arc::new(mixed_params)],
            Kernel::ReverseShared => vec![Arc::new(reverse_shared)],
            Kernel::Spin => vec![Arc::new(spin)],
        };
        let entries = infos
            .into_iter()
            .zip(kernels)
            .map(|(info, kernel): (EntryPointInfo, hal::NativeKernel)| NativeEntryPoint::new(info, kernel))
            .collect();
        Ok(ExecutableSource::Native(entries))
    }
}

type KernelResult = std::result::Result<(), String>;

/// The global element indices of this workgroup's threads (1-D in x).
fn elements(inv: &NativeInvocation<'_>) -> std::ops::Range<usize> {
    let size = inv.workgroup_size[0] as usize;
    let first = inv.workgroup_id[0] as usize * size;
    first..first + size
}

/// Elements a kernel handles per bulk load or store (its stack buffers).
const CHUNK: usize = 256;

/// Runs `f(first, count)` over this workgroup's elements in chunks of at most [`CHUNK`], so a kernel
/// checks each binding range once per chunk rather than once per element.
fn for_chunks(inv: &NativeInvocation<'_>, mut f: impl FnMut(usize, usize) -> KernelResult) -> KernelResult {
    let range = elements(inv);
    let mut first = range.start;
    while first < range.end {
        let count = (range.end - first).min(CHUNK);
        f(first, count)?;
        first += count;
    }
    Ok(())
}

fn load(binding: &NativeBinding, first: usize, out: &mut [u32]) -> KernelResult {
    if binding.load_u32s(first, out) {
        Ok(())
    } else {
        Err(format!("load of elements [{first}, {first}+{}) outside a binding of {} bytes", out.len(), binding.len()))
    }
}

fn store(binding: &NativeBinding, first: usize, values: &[u32]) -> KernelResult {
    if binding.store_u32s(first, values) {
        Ok(())
    } else {
        Err(format!(
            "store of elements [{first}, {first}+{}) outside a binding of {} bytes",
            values.len(),
            binding.len()
        ))
    }
}

/// `data[i] = op(data[i])` over this workgroup's elements.
fn map_in_place(inv: &NativeInvocation<'_>, data: &NativeBinding, op: impl Fn(u32) -> u32) -> KernelResult {
    let mut chunk = [0u32; CHUNK];
    for_chunks(inv, |first, count| {
        let chunk = &mut chunk[..count];
        load(data, first, chunk)?;
        for value in chunk.iter_mut() {
            *value = op(*value);
        }
        store(data, first, chunk)
    })
}

fn fill_u32(inv: &NativeInvocation<'_>) -> KernelResult {
    let values = [inv.constants[0]; CHUNK];
    for_chunks(inv, |first, count| store(&inv.bindings[0], first, &values[..count]))
}

fn add_f32(inv: &NativeInvocation<'_>) -> KernelResult {
    let [a, b, out] = [&inv.bindings[0], &inv.bindings[1], &inv.bindings[2]];
    let (mut x, mut y) = ([0u32; CHUNK], [0u32; CHUNK]);
    for_chunks(inv, |first, count| {
        let (x, y) = (&mut x[..count], &mut y[..count]);
        load(a, first, x)?;
        load(b, first, y)?;
        for (sum, addend) in x.iter_mut().zip(y.iter()) {
            *sum = (f32::from_bits(*sum) + f32::from_bits(*addend)).to_bits();
        }
        store(out, first, x)
    })
}

fn scale_offset_f32(inv: &NativeInvocation<'_>) -> KernelResult {
    let (scale, offset) = (f32::from_bits(inv.constants[0]), f32::from_bits(inv.constants[1]));
    map_in_place(inv, &inv.bindings[0], |bits| (f32::from_bits(bits) * scale + offset).to_bits())
}

fn set_index(inv: &NativeInvocation<'_>) -> KernelResult {
    let mut chunk = [0u32; CHUNK];
    for_chunks(inv, |first, count| {
        for (at, value) in chunk[..count].iter_mut().enumerate() {
            *value = (first + at) as u32;
        }
        store(&inv.bindings[0], first, &chunk[..count])
    })
}

fn add_u32(inv: &NativeInvocation<'_>) -> KernelResult {
    map_in_place(inv, &inv.bindings[0], |value| value.wrapping_add(inv.constants[0]))
}

fn mul_u32(inv: &NativeInvocation<'_>) -> KernelResult {
    map_in_place(inv, &inv.bindings[0], |value| value.wrapping_mul(inv.constants[0]))
}

fn grid_ids(inv: &NativeInvocation<'_>) -> KernelResult {
    let [x, y, z] = inv.workgroup_id;
    let [cx, cy, _] = inv.workgroup_count;
    let linear = x as usize + y as usize * cx as usize + z as usize * cx as usize * cy as usize;
    store(&inv.bindings[0], linear, &[grid_id_value(x, y, z)])
}

fn fault(inv: &NativeInvocation<'_>) -> KernelResult {
    let [x, y, z] = inv.workgroup_id;
    Err(format!("ctest fault kernel trapped on purpose in workgroup [{x},{y},{z}]"))
}

/// A native kernel sees bindings and constants in dispatch order whatever the declared layout
/// (the layout is the GPU calling convention); its scratch pointer is always null.
fn mixed_params(inv: &NativeInvocation<'_>) -> KernelResult {
    let (out, input) = (&inv.bindings[0], &inv.bindings[1]);
    let (n, lo, hi) = (inv.constants[0] as usize, inv.constants[1], inv.constants[2]);
    let mut values = [0u32; CHUNK];
    for_chunks(inv, |first, count| {
        let count = count.min(n.saturating_sub(first));
        let values = &mut values[..count];
        load(input, first, values)?;
        for value in values.iter_mut() {
            *value = value.wrapping_add(lo).wrapping_add(hi.wrapping_mul(2));
        }
        store(out, first, values)
    })
}

/// Stages the workgroup's values at the far end of its workgroup memory, then reads them back
/// reversed, as the CUDA kernel does (a workgroup's threads run one after another here, so the
/// two phases are two loops).
fn reverse_shared(inv: &NativeInvocation<'_>) -> KernelResult {
    let tile = inv.workgroup_memory;
    let size = inv.workgroup_size[0] as usize;
    if tile.len() < size {
        return Err(format!("reverse_shared: {} words of workgroup memory, needs {size}", tile.len()));
    }
    let first = elements(inv).start;
    let mut values = vec![0u32; size];
    load(&inv.bindings[0], first, &mut values)?;
    let words = tile.len();
    for (t, value) in values.iter().enumerate() {
        tile[words - 1 - t].store(*value, std::sync::atomic::Ordering::Relaxed);
    }
    for (t, value) in values.iter_mut().enumerate() {
        *value = tile[words - size + t].load(std::sync::atomic::Ordering::Relaxed);
    }
    store(&inv.bindings[0], first, &values)
}

fn sleep_us(inv: &NativeInvocation<'_>) -> KernelResult {
    std::thread::sleep(std::time::Duration::from_micros(u64::from(inv.constants[0])));
    Ok(())
}

/// Folds the hash into `out[0]` with a load and a store: workgroups that run at once may lose each
/// other's part, which the ABI allows (the value is not specified).
fn spin(inv: &NativeInvocation<'_>) -> KernelResult {
    let [x, y, z] = inv.workgroup_id;
    let [cx, cy, _] = inv.workgroup_count;
    let mut hash = x.wrapping_add(y.wrapping_mul(cx)).wrapping_add(z.wrapping_mul(cx).wrapping_mul(cy));
    for _ in 0..inv.constants[0] {
        hash = std::hint::black_box(hash.wrapping_mul(1_664_525).wrapping_add(1_013_904_223));
        hash ^= hash >> 15;
    }
    let mut word = [0u32];
    load(&inv.bindings[0], 0, &mut word)?;
    store(&inv.bindings[0], 0, &[word[0] ^ hash])
}
