//! SPIR-V executables with IREE's Vulkan ABI: binding `i` of a dispatch is the storage buffer at
//! set 0, binding `i`; the constants are one push-constant block of 32-bit words at offset 0; an
//! entry point is the module's export of that name. The module is validated and reflected first
//! (`spirv.rs`): each declared entry point must match the module's (workgroup size, the bindings
//! and push constants it uses), and where none is declared they are taken from the module. A
//! compute pipeline per entry point is created at load from the module naga wrote.
//! Its set 0 takes pushed descriptors; a second pipeline whose set 0 is an update-after-bind set
//! (for recordings replayed with each execute's binding table, see `commands/bound.rs`) is created
//! the first time such a recording dispatches the entry point.

use std::any::Any;
use std::sync::{Arc, OnceLock};

use ash::vk;
use hal::driver::ExecutableBackend;
use hal::{DeviceInfo, EntryPointInfo, Error, ExecutableFormat, ExecutableKind, ExecutableSource, Result};

use crate::error::from_vk;
use crate::gpu::{Gpu, PhysicalInfo};
use crate::spirv::{self, ModuleEntryPoint, ResourceKind, ShaderFeatures};

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
    /// Loads `source` (SPIR-V bytes): validates and reflects the module (`spirv.rs`), checks each
    /// declared entry point against the module's (or takes them from the module where none is
    /// declared) and the device's limits, then creates a pipeline per entry point from the module
    /// naga wrote.
    pub fn load(gpu: &Arc<Gpu>, source: &ExecutableSource, info: &DeviceInfo) -> Result<Self> {
        let (data, declared) = match source {
            ExecutableSource::Bytes { format: ExecutableFormat::Spirv, data, entry_points } => (data, entry_points),
            other => {
                return Err(Error::unimplemented(format!(
                    "vulkan cannot load executables of kind {}; it loads SPIR-V (ExecutableFormat::Spirv)",
                    ExecutableKind::of(other)
                )));
            }
        };
        let module = spirv::validate(data, gpu.physical.shader_features)?;
        let entry_points = if declared.is_empty() { from_module(&module.entry_points)? } else { declared.clone() };
        for entry in &entry_points {
            entry.check()?;
            // A declared parameter layout (`params`) orders pointers and scalars for pointer ABIs;
            // SPIR-V reaches bindings through descriptors and constants through push constants, so
            // only the counts matter here.
            let found = find_entry(&module.entry_points, &entry.name)?;
            check_interface(entry, found)?;
            check_limits(entry, found, info, &gpu.physical)?;
        }
        let words = module.words;
        let create = vk::ShaderModuleCreateInfo::default().code(&words);
        // SAFETY: `words` is the module naga wrote from IR its validator accepted.
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

/// The module's entry point `name`; `NotFound` listing the ones it has.
fn find_entry<'m>(module: &'m [ModuleEntryPoint], name: &str) -> Result<&'m ModuleEntryPoint> {
    module.iter().find(|e| e.name == name).ok_or_else(|| {
        let names: Vec<&str> = module.iter().map(|e| e.name.as_str()).collect();
        Error::not_found(format!(
            "vulkan: the SPIR-V module has no entry point '{name}' (it has: {})",
            names.join(", ")
        ))
    })
}

/// The entry points of a module loaded with none declared: every compute entry point, with the
/// bindings, constants and workgroup size it uses.
fn from_module(module: &[ModuleEntryPoint]) -> Result<Vec<EntryPointInfo>> {
    let compute: Vec<EntryPointInfo> = module
        .iter()
        .filter(|e| e.other_stage.is_none())
        .map(|e| {
            let bindings = e.resources.iter().map(|r| r.binding as usize + 1).max().unwrap_or(0);
            let constants = e.push_constant_bytes.div_ceil(4) as usize;
            EntryPointInfo::new(e.name.clone(), 1, bindings, constants).with_workgroup_size(e.workgroup_size)
        })
        .collect();
    if compute.is_empty() {
        return Err(Error::invalid_argument("vulkan: the SPIR-V module has no compute entry point"));
    }
    Ok(compute)
}

/// The declared entry point against what the module's entry point uses: the same workgroup size,
/// only storage buffers of set 0 below the declared binding count, a push-constant block within
/// the declared constants. Each refusal names both sides.
fn check_interface(entry: &EntryPointInfo, module: &ModuleEntryPoint) -> Result<()> {
    let name = &entry.name;
    if let Some(stage) = &module.other_stage {
        return Err(Error::invalid_argument(format!(
            "vulkan: entry point '{name}' of the SPIR-V module is a {stage} entry point, not a compute one"
        )));
    }
    if module.workgroup_size != entry.workgroup_size {
        return Err(Error::invalid_argument(format!(
            "vulkan: entry point '{name}' declares workgroup size {:?}, its SPIR-V has {:?}",
            entry.workgroup_size, module.workgroup_size
        )));
    }
    for resource in &module.resources {
        let (set, binding) = (resource.set, resource.binding);
        if resource.kind != ResourceKind::StorageBuffer || set != 0 {
            return Err(Error::invalid_argument(format!(
                "vulkan: entry point '{name}' uses {} at descriptor set {set}, binding {binding}; dispatch bindings \
                 are the storage buffers of set 0",
                resource.kind
            )));
        }
        if binding as usize >= entry.binding_count {
            return Err(Error::invalid_argument(format!(
                "vulkan: entry point '{name}' uses binding {binding} of set 0, but is declared with {} bindings",
                entry.binding_count
            )));
        }
    }
    let declared_bytes = entry.constant_count as u64 * 4;
    if u64::from(module.push_constant_bytes) > declared_bytes {
        return Err(Error::invalid_argument(format!(
            "vulkan: entry point '{name}' has a push-constant block of {} bytes, but is declared with {} constants \
             ({declared_bytes} bytes)",
            module.push_constant_bytes, entry.constant_count
        )));
    }
    Ok(())
}

/// The entry point against the device's limits: workgroup size, push constants, storage buffers
/// per stage and workgroup memory.
fn check_limits(
    entry: &EntryPointInfo,
    module: &ModuleEntryPoint,
    info: &DeviceInfo,
    physical: &PhysicalInfo,
) -> Result<()> {
    let limits = &physical.limits;
    let name = &entry.name;
    let threads = entry.workgroup_size.iter().map(|&d| u64::from(d)).product::<u64>();
    if entry.workgroup_size.contains(&0)
        || threads > u64::from(info.max_workgroup_threads)
        || entry.workgroup_size.iter().zip(&info.max_workgroup_size).any(|(s, m)| s > m)
    {
        return Err(Error::invalid_argument(format!(
            "vulkan: entry point '{name}': workgroup size {:?} is outside the device's limits ({:?}, {} threads)",
            entry.workgroup_size, info.max_workgroup_size, info.max_workgroup_threads
        )));
    }
    let push_bytes = entry.constant_count as u64 * 4;
    if push_bytes > u64::from(limits.max_push_constants_size) {
        return Err(Error::resource_exhausted(format!(
            "vulkan: entry point '{name}': {} constants need {push_bytes} bytes of push constants, the device has {}",
            entry.constant_count, limits.max_push_constants_size
        )));
    }
    // Set 0 holds every binding: pushed where the device pushes descriptors, else a set of its own.
    let (most, what) = match physical.max_push_descriptors {
        Some(pushed) => (pushed, "pushed descriptors (maxPushDescriptors)"),
        None => (
            limits.max_per_stage_descriptor_storage_buffers.min(limits.max_descriptor_set_storage_buffers),
            "storage buffers per stage and set",
        ),
    };
    if entry.binding_count as u64 > u64::from(most) {
        return Err(Error::resource_exhausted(format!(
            "vulkan: entry point '{name}': {} bindings, the device takes {most} {what}",
            entry.binding_count
        )));
    }
    let workgroup_memory = module.workgroup_memory_bytes + u64::from(entry.dynamic_workgroup_memory);
    if workgroup_memory > u64::from(limits.max_compute_shared_memory_size) {
        return Err(Error::resource_exhausted(format!(
            "vulkan: entry point '{name}' needs {workgroup_memory} bytes of workgroup memory ({} in its variables, \
             {} asked for), the device gives {}",
            module.workgroup_memory_bytes, entry.dynamic_workgroup_memory, limits.max_compute_shared_memory_size
        )));
    }
    Ok(())
}

/// The compute entry points of a SPIR-V module (`words`, one word each) with their workgroup sizes,
/// once the module passes validation: what a loader of another format reads to declare them.
pub fn entry_point_sizes(words: &[u32]) -> Result<Vec<(String, Option<[u32; 3]>)>> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let module = spirv::validate(&bytes, ShaderFeatures { int64: true, float64: true, float16: true })?;
    Ok(module
        .entry_points
        .into_iter()
        .filter(|e| e.other_stage.is_none())
        .map(|e| (e.name, Some(e.workgroup_size)))
        .collect())
}
