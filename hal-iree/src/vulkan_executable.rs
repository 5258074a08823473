//! IREE's Vulkan executables on the HAL's Vulkan driver.
//!
//! `iree-compile --iree-hal-target-device=vulkan` emits executables in IREE's `VKE1` format: a
//! 64-byte file header, then a flatbuffer (`iree/schemas/vulkan_executable_def.fbs`) of SPIR-V shader
//! modules, descriptor-set and pipeline layouts, and pipelines (an entry point of a module with a
//! layout). IREE's descriptor ABI (storage buffers at set 0, bindings 0..n-1; constants as one push
//! constant block of 32-bit words) is the HAL Vulkan driver's own, so each module becomes one HAL
//! SPIR-V executable whose entry points are its pipelines; a layout outside that ABI (another set,
//! a gap in the bindings, uniform buffers) or IREE's buffer-device-address ABI is `UNIMPLEMENTED`
//! with what it asked for.

use hal::{EntryPointInfo, ExecutableFormat, ExecutableSource};

use crate::executable::LoadedExport;
use crate::ffi::sys;
use crate::flatbuffer::{Table, contents, malformed, text};
use crate::gpu_executable;

/// The executable format IREE's executable caches and compiler name it by.
pub(crate) const FORMAT: &str = "vulkan-spirv-fb";
/// The file identifier in the header and in the flatbuffer.
pub(crate) const IDENTIFIER: &[u8; 4] = b"VKE1";
/// `VK_DESCRIPTOR_TYPE_STORAGE_BUFFER`.
const STORAGE_BUFFER: u32 = 7;

/// One pipeline (export) of a parsed executable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PipelineDef {
    /// The SPIR-V entry point, also the name IREE looks it up by.
    pub entry_point: String,
    /// The shader module holding it.
    pub module: usize,
    /// Storage buffers at set 0, bindings 0..n-1.
    pub bindings: u32,
    /// 32-bit push constants.
    pub constants: u32,
}

/// A parsed executable: its pipelines and its modules' SPIR-V words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExecutableDef {
    pub pipelines: Vec<PipelineDef>,
    pub modules: Vec<Vec<u32>>,
}

fn unsupported(what: impl std::fmt::Display) -> hal::Error {
    hal::Error::unimplemented(format!(
        "IREE Vulkan executable: {what} (the HAL's Vulkan ABI is storage buffers at set 0, bindings 0..n-1, and one push-constant block)"
    ))
}

/// The binding count of a pipeline layout, checked against the HAL's ABI.
fn binding_count(set_layouts: &[Table<'_, '_>], ordinals: &[u32], pipeline: usize) -> Result<u32, hal::Error> {
    match ordinals {
        [] => Ok(0),
        [set] => {
            let layout = set_layouts
                .get(*set as usize)
                .ok_or_else(|| malformed(format!("pipeline {pipeline} names descriptor set layout {set}")))?;
            let mut numbers = Vec::new();
            for binding in layout.tables(0)? {
                let kind = binding.u32_or(1, 0)?;
                if kind != STORAGE_BUFFER || binding.u32_or(2, 1)? != 1 {
                    return Err(unsupported(format!("pipeline {pipeline} binds descriptor type {kind} (or an array)")));
                }
                numbers.push(binding.u32_or(0, 0)?);
            }
            numbers.sort_unstable();
            if numbers.iter().enumerate().any(|(i, &n)| n != i as u32) {
                return Err(unsupported(format!("pipeline {pipeline} binds set 0 bindings {numbers:?}")));
            }
            Ok(numbers.len() as u32)
        }
        more => Err(unsupported(format!("pipeline {pipeline} uses {} descriptor sets", more.len()))),
    }
}

/// Parses an executable in IREE's Vulkan format.
pub(crate) fn parse(data: &[u8]) -> Result<ExecutableDef, hal::Error> {
    let flat = contents(data, IDENTIFIER)?;
    let root = flat.table(flat.follow(0)?)?;
    let set_layouts = root.tables(1)?;
    let pipeline_layouts = root.tables(2)?;
    let modules = root.tables(3)?.iter().map(|module| module.u32s(0)).collect::<Result<Vec<_>, _>>()?;
    let mut pipelines = Vec::new();
    for (i, pipeline) in root.tables(0)?.iter().enumerate() {
        let module = pipeline.u32_or(0, 0)? as usize;
        if module >= modules.len() {
            return Err(malformed(format!("pipeline {i} names shader module {module} of {}", modules.len())));
        }
        let entry_point = text(
            pipeline.string(1)?.ok_or_else(|| malformed(format!("pipeline {i} has no entry point")))?,
            "an entry point",
        )?;
        if pipeline.u8_or(5, 0)? != 0 {
            return Err(unsupported(format!("pipeline {i} ('{entry_point}') uses the buffer-device-address ABI")));
        }
        let layout_index = pipeline.u32_or(2, 0)? as usize;
        let layout = pipeline_layouts
            .get(layout_index)
            .ok_or_else(|| malformed(format!("pipeline {i} names pipeline layout {layout_index}")))?;
        let bindings = binding_count(&set_layouts, &layout.u32s(0)?, i)?;
        let mut constant_bytes = 0u32;
        for range in layout.structs(1, 12)? {
            let word = |k: usize| u32::from_le_bytes([range[k], range[k + 1], range[k + 2], range[k + 3]]);
            let (offset, size) = (word(4), word(8));
            if offset != constant_bytes {
                return Err(unsupported(format!("pipeline {i} has a push-constant range at byte {offset}")));
            }
            constant_bytes = offset + size;
        }
        pipelines.push(PipelineDef { entry_point, module, bindings, constants: constant_bytes / 4 });
    }
    Ok(ExecutableDef { pipelines, modules })
}

/// Loads `def` on `device`: one HAL SPIR-V executable per module; the pipelines in IREE's order.
pub(crate) fn load(device: &hal::Device, def: &ExecutableDef) -> Result<Vec<LoadedExport>, hal::Error> {
    let mut exports: Vec<Option<LoadedExport>> = vec![None; def.pipelines.len()];
    for (module, words) in def.modules.iter().enumerate() {
        let members: Vec<(usize, &PipelineDef)> =
            def.pipelines.iter().enumerate().filter(|(_, p)| p.module == module).collect();
        if members.is_empty() {
            continue;
        }
        let sizes = driver_vulkan::spirv_entry_points(words)?;
        let mut entry_points = Vec::new();
        let mut blocks = Vec::new();
        for (_, pipeline) in &members {
            // The size the module declares (a specialization-constant size is not checked by the
            // driver; IREE's dispatches do not override it).
            let size = sizes.iter().find(|(name, _)| *name == pipeline.entry_point).and_then(|(_, s)| *s);
            let size = size.unwrap_or([1, 1, 1]);
            entry_points.push(
                EntryPointInfo::new(
                    pipeline.entry_point.clone(),
                    size[0],
                    pipeline.bindings as usize,
                    pipeline.constants as usize,
                )
                .with_workgroup_size(size),
            );
            blocks.push(size);
        }
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let source = ExecutableSource::Bytes { format: ExecutableFormat::Spirv, data: bytes.into(), entry_points };
        let executable = device
            .load_executable(&source)
            .map_err(|e| e.context(format!("shader module {module} of an IREE Vulkan executable")))?;
        for (entry, ((index, pipeline), size)) in members.into_iter().zip(blocks).enumerate() {
            exports[index] = Some(LoadedExport {
                executable: executable.clone(),
                entry: entry as u32,
                constant_count: pipeline.constants,
                binding_count: pipeline.bindings,
                workgroup_constants: false,
                workgroup_size: size,
            });
        }
    }
    Ok(exports.into_iter().map(|e| e.expect("every pipeline names a module (checked by parse)")).collect())
}

/// Parses and loads `data` on `device` as an IREE executable.
pub(crate) fn create(device: &hal::Device, data: &[u8]) -> Result<*mut sys::iree_hal_executable_t, hal::Error> {
    let def = parse(data)?;
    let exports = load(device, &def)?;
    Ok(gpu_executable::create(def.pipelines.into_iter().map(|p| p.entry_point).collect(), exports))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/cts/executables-vulkan").join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn parses_iree_compiler_output() {
        let def = parse(&compiled("command_buffer_dispatch_multi_entrypoint_test.bin")).unwrap();
        let names: Vec<_> = def.pipelines.iter().map(|p| p.entry_point.as_str()).collect();
        assert_eq!(names, ["negate", "double_it"]);
        assert!(def.pipelines.iter().all(|p| (p.bindings, p.constants) == (2, 0)), "{def:?}");
        assert!(def.modules.iter().all(|m| m.first() == Some(&0x0723_0203)), "SPIR-V magic");
        let def = parse(&compiled("command_buffer_dispatch_constants_bindings_test.bin")).unwrap();
        assert_eq!((def.pipelines[0].bindings, def.pipelines[0].constants), (2, 2));
        // Every entry point is in its module.
        for name in [
            "command_buffer_dispatch_constants_test.bin",
            "command_buffer_dispatch_test.bin",
            "executable_cache_test.bin",
            "executable_test.bin",
        ] {
            let def = parse(&compiled(name)).unwrap();
            for p in &def.pipelines {
                let entries = driver_vulkan::spirv_entry_points(&def.modules[p.module]).unwrap();
                assert!(entries.iter().any(|(n, _)| *n == p.entry_point), "{name}: {p:?}");
            }
        }
        // Truncations are refused or parsed, never a panic.
        let data = compiled("command_buffer_dispatch_test.bin");
        for cut in crate::flatbuffer::HEADER_BYTES..data.len() {
            let mut short = data[..cut].to_vec();
            short[8..16].copy_from_slice(&((cut - crate::flatbuffer::HEADER_BYTES) as u64).to_le_bytes());
            let _ = parse(&short);
        }
    }
}
