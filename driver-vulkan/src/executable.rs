//! SPIR-V executables with IREE's Vulkan ABI: binding `i` of a dispatch is the storage buffer at
//! set 0, binding `i`; the constants are one push-constant block of 32-bit words at offset 0; an
//! entry point is the module's export of that name. A compute pipeline per entry point is created
//! at load; its workgroup size is the module's (`LocalSize`), checked against the declared one.
//! Its set 0 takes pushed descriptors; a second pipeline whose set 0 is an update-after-bind set
//! (for recordings replayed with each execute's binding table, see `bound.rs`) is created the first
//! time such a recording dispatches the entry point.

use std::any::Any;
use std::sync::{Arc, OnceLock};

use ash::vk;
use hal::driver::ExecutableBackend;
use hal::{DeviceInfo, EntryPointInfo, Error, ExecutableFormat, ExecutableKind, ExecutableSource, Result};

use crate::error::from_vk;
use crate::gpu::Gpu;

/// One entry point's pipeline and the layouts it was built with.
pub struct Pipeline {
    pub(crate) pipeline: vk::Pipeline,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    pub(crate) bindings: usize,
    pub(crate) constants: usize,
}

/// A loaded SPIR-V module.
pub struct VulkanExecutable {
    gpu: Arc<Gpu>,
    entry_points: Vec<EntryPointInfo>,
    pub(crate) pipelines: Vec<Pipeline>,
    /// The module, kept to build the update-after-bind pipelines when first needed.
    words: Vec<u32>,
    /// Per entry point, its pipeline whose set 0 is an update-after-bind set, once built.
    bound: Vec<OnceLock<Result<Pipeline>>>,
}

impl VulkanExecutable {
    /// Loads `source` (SPIR-V bytes) and creates a pipeline per entry point.
    pub fn load(gpu: &Arc<Gpu>, source: &ExecutableSource, info: &DeviceInfo) -> Result<Self> {
        let (data, entry_points) = match source {
            ExecutableSource::Bytes { format: ExecutableFormat::Spirv, data, entry_points } => (data, entry_points),
            other => {
                return Err(Error::unimplemented(format!(
                    "vulkan cannot load executables of kind {}; it loads SPIR-V (ExecutableFormat::Spirv)",
                    ExecutableKind::of(other)
                )));
            }
        };
        let words = spirv_words(data)?;
        let module_entries = entry_point_sizes(&words)?;
        if entry_points.is_empty() {
            return Err(Error::invalid_argument("vulkan: an executable needs at least one entry point"));
        }
        let limits = &gpu.physical.limits;
        for entry in entry_points {
            entry.check()?;
            // A declared parameter layout (`params`) orders pointers and scalars for pointer ABIs;
            // SPIR-V reaches bindings through descriptors and constants through push constants, so
            // only the counts matter here.
            let Some((_, size)) = module_entries.iter().find(|(name, _)| *name == entry.name) else {
                let names: Vec<&str> = module_entries.iter().map(|(n, _)| n.as_str()).collect();
                return Err(Error::not_found(format!(
                    "vulkan: the SPIR-V module has no entry point '{}' (it has: {})",
                    entry.name,
                    names.join(", ")
                )));
            };
            if let Some(size) = size
                && *size != entry.workgroup_size
            {
                return Err(Error::invalid_argument(format!(
                    "vulkan: entry point '{}' declares workgroup size {:?}, its SPIR-V has {size:?}",
                    entry.name, entry.workgroup_size
                )));
            }
            let threads = entry.workgroup_size.iter().map(|&d| u64::from(d)).product::<u64>();
            if entry.workgroup_size.contains(&0)
                || threads > u64::from(info.max_workgroup_threads)
                || entry.workgroup_size.iter().zip(&info.max_workgroup_size).any(|(s, m)| s > m)
            {
                return Err(Error::invalid_argument(format!(
                    "vulkan: entry point '{}': workgroup size {:?} is outside the device's limits ({:?}, {} threads)",
                    entry.name, entry.workgroup_size, info.max_workgroup_size, info.max_workgroup_threads
                )));
            }
            let push_bytes = entry.constant_count as u64 * 4;
            if push_bytes > u64::from(limits.max_push_constants_size) {
                return Err(Error::resource_exhausted(format!(
                    "vulkan: entry point '{}': {} constants need {push_bytes} bytes of push constants, the device \
                     has {}",
                    entry.name, entry.constant_count, limits.max_push_constants_size
                )));
            }
            if entry.binding_count as u64 > u64::from(limits.max_per_stage_descriptor_storage_buffers) {
                return Err(Error::resource_exhausted(format!(
                    "vulkan: entry point '{}': {} bindings, the device takes {} storage buffers per stage",
                    entry.name, entry.binding_count, limits.max_per_stage_descriptor_storage_buffers
                )));
            }
            if entry.dynamic_workgroup_memory > limits.max_compute_shared_memory_size {
                return Err(Error::resource_exhausted(format!(
                    "vulkan: entry point '{}' asks for {} bytes of workgroup memory, the device gives {}",
                    entry.name, entry.dynamic_workgroup_memory, limits.max_compute_shared_memory_size
                )));
            }
        }
        let create = vk::ShaderModuleCreateInfo::default().code(&words);
        // SAFETY: `words` is a SPIR-V module (magic checked); the driver validates the rest.
        let module = unsafe { gpu.device.create_shader_module(&create, None) }
            .map_err(|e| from_vk("vkCreateShaderModule", e))?;
        let bound = entry_points.iter().map(|_| OnceLock::new()).collect();
        let mut executable =
            VulkanExecutable { gpu: gpu.clone(), entry_points: entry_points.clone(), pipelines: vec![], words, bound };
        let built = entry_points.iter().try_for_each(|entry| {
            executable.pipelines.push(build_pipeline(gpu, module, entry, SetKind::Pushed)?);
            Ok(())
        });
        // SAFETY: pipelines keep what they need of the module; it is no longer used.
        unsafe { gpu.device.destroy_shader_module(module, None) };
        built.map(|()| executable)
    }

    /// Entry point `entry_point`'s pipeline whose set 0 is an update-after-bind descriptor set,
    /// built on first use (the device must have `update_after_bind`).
    pub(crate) fn bound_pipeline(&self, entry_point: u32) -> Result<&Pipeline> {
        let (Some(slot), Some(entry)) =
            (self.bound.get(entry_point as usize), self.entry_points.get(entry_point as usize))
        else {
            return Err(Error::out_of_range(format!("vulkan: the executable has no entry point {entry_point}")));
        };
        slot.get_or_init(|| {
            let create = vk::ShaderModuleCreateInfo::default().code(&self.words);
            // SAFETY: the module was created from these words at load.
            let module = unsafe { self.gpu.device.create_shader_module(&create, None) }
                .map_err(|e| from_vk("vkCreateShaderModule", e))?;
            let built = build_pipeline(&self.gpu, module, entry, SetKind::UpdateAfterBind);
            // SAFETY: the pipeline keeps what it needs of the module.
            unsafe { self.gpu.device.destroy_shader_module(module, None) };
            built
        })
        .as_ref()
        .map_err(Clone::clone)
    }
}

/// How a pipeline's set 0 gets its descriptors.
#[derive(Clone, Copy)]
enum SetKind {
    /// Pushed into the command buffer (`VK_KHR_push_descriptor`) where the device has it.
    Pushed,
    /// A set allocated from an update-after-bind pool, written before each submission.
    UpdateAfterBind,
}

fn build_pipeline(gpu: &Gpu, module: vk::ShaderModule, entry: &EntryPointInfo, kind: SetKind) -> Result<Pipeline> {
    let device = &gpu.device;
    let bindings: Vec<vk::DescriptorSetLayoutBinding<'_>> = (0..entry.binding_count as u32)
        .map(|i| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(i)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    let binding_flags = vec![vk::DescriptorBindingFlags::UPDATE_AFTER_BIND; bindings.len()];
    let mut binding_info = vk::DescriptorSetLayoutBindingFlagsCreateInfo::default().binding_flags(&binding_flags);
    let mut info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
    info = match kind {
        SetKind::Pushed if gpu.push.is_some() => info.flags(vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR),
        SetKind::Pushed => info,
        SetKind::UpdateAfterBind => {
            info.flags(vk::DescriptorSetLayoutCreateFlags::UPDATE_AFTER_BIND_POOL).push_next(&mut binding_info)
        }
    };
    // SAFETY: a valid create info; destroyed by `Pipeline`'s owner.
    let set_layout = unsafe { device.create_descriptor_set_layout(&info, None) }
        .map_err(|e| from_vk("vkCreateDescriptorSetLayout", e))?;
    let ranges = [vk::PushConstantRange::default()
        .stage_flags(vk::ShaderStageFlags::COMPUTE)
        .offset(0)
        .size(entry.constant_count as u32 * 4)];
    let set_layouts = [set_layout];
    let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
    if entry.constant_count > 0 {
        layout_info = layout_info.push_constant_ranges(&ranges);
    }
    // SAFETY: as above.
    let layout = match unsafe { device.create_pipeline_layout(&layout_info, None) } {
        Ok(layout) => layout,
        Err(e) => {
            // SAFETY: unused.
            unsafe { device.destroy_descriptor_set_layout(set_layout, None) };
            return Err(from_vk("vkCreatePipelineLayout", e));
        }
    };
    let name = std::ffi::CString::new(entry.name.as_str())
        .map_err(|_| Error::invalid_argument(format!("vulkan: entry point name {:?} holds a NUL", entry.name)))?;
    let stage =
        vk::PipelineShaderStageCreateInfo::default().stage(vk::ShaderStageFlags::COMPUTE).module(module).name(&name);
    let create = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(layout)];
    // SAFETY: the module and layout are live; the entry point exists in the module (checked).
    match unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &create, None) } {
        Ok(pipelines) => Ok(Pipeline {
            pipeline: pipelines[0],
            layout,
            set_layout,
            bindings: entry.binding_count,
            constants: entry.constant_count,
        }),
        Err((_, e)) => {
            // SAFETY: unused.
            unsafe {
                device.destroy_pipeline_layout(layout, None);
                device.destroy_descriptor_set_layout(set_layout, None);
            }
            Err(from_vk(&format!("vkCreateComputePipelines('{}')", entry.name), e).context("vulkan: bad SPIR-V?"))
        }
    }
}

impl Drop for VulkanExecutable {
    fn drop(&mut self) {
        let bound = self.bound.iter().filter_map(|slot| slot.get().and_then(|p| p.as_ref().ok()));
        for p in self.pipelines.iter().chain(bound) {
            // SAFETY: submissions hold the executable until they complete, so nothing uses these.
            unsafe {
                self.gpu.device.destroy_pipeline(p.pipeline, None);
                self.gpu.device.destroy_pipeline_layout(p.layout, None);
                self.gpu.device.destroy_descriptor_set_layout(p.set_layout, None);
            }
        }
    }
}

impl ExecutableBackend for VulkanExecutable {
    fn entry_points(&self) -> &[EntryPointInfo] {
        &self.entry_points
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The module's words: `InvalidArgument` for bytes that are not SPIR-V.
fn spirv_words(data: &[u8]) -> Result<Vec<u32>> {
    const MAGIC: u32 = 0x0723_0203;
    if data.len() < 20 || !data.len().is_multiple_of(4) {
        return Err(Error::invalid_argument(format!(
            "vulkan: {} bytes are not a SPIR-V module (a header of 5 words and whole words after it)",
            data.len()
        )));
    }
    let words: Vec<u32> = data.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
    if words[0] != MAGIC {
        return Err(Error::invalid_argument(format!(
            "vulkan: not a SPIR-V module (magic {:#010x}, expected {MAGIC:#010x} little-endian)",
            words[0]
        )));
    }
    Ok(words)
}

/// The module's GLCompute entry points with their `LocalSize` where it is a literal (`None` where
/// the size is a specialization constant, `LocalSizeId`). `words` is the module's 32-bit words.
pub fn entry_point_sizes(words: &[u32]) -> Result<Vec<(String, Option<[u32; 3]>)>> {
    const OP_ENTRY_POINT: u32 = 15;
    const OP_EXECUTION_MODE: u32 = 16;
    const GL_COMPUTE: u32 = 5;
    const LOCAL_SIZE: u32 = 17;
    let mut ids = Vec::new();
    let mut sizes = Vec::new();
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        let opcode = words[at] & 0xffff;
        if count == 0 || at + count > words.len() {
            return Err(Error::invalid_argument(format!("vulkan: malformed SPIR-V instruction at word {at}")));
        }
        let operands = &words[at + 1..at + count];
        match opcode {
            OP_ENTRY_POINT if operands.len() >= 3 && operands[0] == GL_COMPUTE => {
                let bytes: Vec<u8> = operands[2..].iter().flat_map(|w| w.to_le_bytes()).collect();
                let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
                ids.push((operands[1], String::from_utf8_lossy(&bytes[..end]).into_owned()));
            }
            OP_EXECUTION_MODE if operands.len() == 5 && operands[1] == LOCAL_SIZE => {
                sizes.push((operands[0], [operands[2], operands[3], operands[4]]));
            }
            _ => {}
        }
        at += count;
    }
    Ok(ids.into_iter().map(|(id, name)| (name, sizes.iter().find(|(i, _)| *i == id).map(|(_, s)| *s))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_are_not_spirv_are_refused_naming_the_magic() {
        let e = spirv_words(b"this is not an executable.......").unwrap_err();
        assert_eq!(e.code(), hal::StatusCode::InvalidArgument);
        assert!(e.message().contains("magic"), "{e}");
        assert!(spirv_words(b"short").is_err());
    }
}
