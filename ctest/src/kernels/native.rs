//! The cpu-sim catalogue: each kernel as native Rust closures (`ExecutableSource::Native`). A
//! closure runs one workgroup and loops over its threads; an access outside a binding is reported as
//! an error (a fault) rather than ignored, so a suite bug shows.

use std::sync::Arc;

use hal::{EntryPointInfo, ExecutableSource, NativeBinding, NativeEntryPoint, NativeInvocation, Result};

use super::{Kernel, KernelCatalogue, grid_id_value};

/// The native kernels cpu-sim runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct NativeCatalogue;

impl KernelCatalogue for NativeCatalogue {
    fn source(&self, kernel: Kernel) -> Result<ExecutableSource> {
        let infos = kernel.entry_points();
        let kernels: Vec<hal::NativeKernel> = match kernel {
            Kernel::FillU32 => vec![Arc::new(fill_u32)],
            Kernel::AddF32 => vec![Arc::new(add_f32)],
            Kernel::ScaleOffsetF32 => vec![Arc::new(scale_offset_f32)],
            Kernel::MultiEntry => vec![Arc::new(set_index), Arc::new(add_u32), Arc::new(mul_u32)],
            Kernel::GridIds => vec![Arc::new(grid_ids)],
            Kernel::Fault => vec![Arc::new(fault)],
            Kernel::Sleep => vec![Arc::new(sleep_us)],
        };
        let entries = infos
            .into_iter()
            .zip(kernels)
            .map(|(info, kernel): (EntryPointInfo, hal::NativeKernel)| NativeEntryPoint { info, kernel })
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

fn load(binding: &NativeBinding, index: usize) -> std::result::Result<u32, String> {
    binding
        .load_u32(index)
        .ok_or_else(|| format!("load of element {index} outside a binding of {} bytes", binding.len()))
}

fn store(binding: &NativeBinding, index: usize, value: u32) -> KernelResult {
    if binding.store_u32(index, value) {
        Ok(())
    } else {
        Err(format!("store of element {index} outside a binding of {} bytes", binding.len()))
    }
}

fn fill_u32(inv: &NativeInvocation<'_>) -> KernelResult {
    let value = inv.constants[0];
    elements(inv).try_for_each(|i| store(&inv.bindings[0], i, value))
}

fn add_f32(inv: &NativeInvocation<'_>) -> KernelResult {
    let [a, b, out] = [&inv.bindings[0], &inv.bindings[1], &inv.bindings[2]];
    elements(inv).try_for_each(|i| {
        let sum = f32::from_bits(load(a, i)?) + f32::from_bits(load(b, i)?);
        store(out, i, sum.to_bits())
    })
}

fn scale_offset_f32(inv: &NativeInvocation<'_>) -> KernelResult {
    let (scale, offset) = (f32::from_bits(inv.constants[0]), f32::from_bits(inv.constants[1]));
    let data = &inv.bindings[0];
    elements(inv).try_for_each(|i| store(data, i, (f32::from_bits(load(data, i)?) * scale + offset).to_bits()))
}

fn set_index(inv: &NativeInvocation<'_>) -> KernelResult {
    elements(inv).try_for_each(|i| store(&inv.bindings[0], i, i as u32))
}

fn add_u32(inv: &NativeInvocation<'_>) -> KernelResult {
    let data = &inv.bindings[0];
    elements(inv).try_for_each(|i| store(data, i, load(data, i)?.wrapping_add(inv.constants[0])))
}

fn mul_u32(inv: &NativeInvocation<'_>) -> KernelResult {
    let data = &inv.bindings[0];
    elements(inv).try_for_each(|i| store(data, i, load(data, i)?.wrapping_mul(inv.constants[0])))
}

fn grid_ids(inv: &NativeInvocation<'_>) -> KernelResult {
    let [x, y, z] = inv.workgroup_id;
    let [cx, cy, _] = inv.workgroup_count;
    let linear = x as usize + y as usize * cx as usize + z as usize * cx as usize * cy as usize;
    store(&inv.bindings[0], linear, grid_id_value(x, y, z))
}

fn fault(inv: &NativeInvocation<'_>) -> KernelResult {
    let [x, y, z] = inv.workgroup_id;
    Err(format!("ctest fault kernel trapped on purpose in workgroup [{x},{y},{z}]"))
}

fn sleep_us(inv: &NativeInvocation<'_>) -> KernelResult {
    std::thread::sleep(std::time::Duration::from_micros(u64::from(inv.constants[0])));
    Ok(())
}
