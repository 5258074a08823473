//! One Vulkan logical device: its queues, its memory allocator and the limits the driver checks.
//! Every object the driver makes holds an `Arc<Gpu>`, so the device is destroyed last.

use std::ffi::CStr;
use std::sync::{Arc, Mutex, Weak};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};
use hal::driver::lock;
use hal::{Error, Result};

use crate::error::from_vk;
use crate::instance::Instance;
use crate::memory::Block;
use crate::one_shot::OneShotContext;
use crate::spirv::ShaderFeatures;

/// What the driver needs to know of a physical device.
#[derive(Clone, Debug)]
pub struct PhysicalInfo {
    pub(crate) physical: vk::PhysicalDevice,
    pub(crate) name: String,
    pub(crate) uuid: [u8; 16],
    pub(crate) api_version: u32,
    pub(crate) driver_version: u32,
    pub(crate) limits: vk::PhysicalDeviceLimits,
    pub(crate) queue_family: u32,
    pub(crate) family_queues: u32,
    /// `timestampValidBits` of the queue family (0: no timestamps).
    pub(crate) timestamp_bits: u32,
    pub(crate) push_descriptors: bool,
    /// `maxPushDescriptors` where the device pushes descriptors: the most bindings a dispatch has.
    pub(crate) max_push_descriptors: Option<u32>,
    /// The most storage buffers of an update-after-bind descriptor set, where binding-table
    /// executes replay recordings with such sets (see [`UPDATE_AFTER_BIND_ENV`]).
    pub(crate) update_after_bind: Option<u32>,
    /// Whether the device has `descriptorBindingStorageBufferUpdateAfterBind` (enabled when used).
    pub(crate) update_after_bind_feature: bool,
    /// `minImportedHostPointerAlignment` where the device has `VK_EXT_external_memory_host`.
    pub(crate) host_import_alignment: Option<u64>,
    pub(crate) heap_bytes: u64,
    /// The 64-bit shader types the device has (`shaderInt64`, `shaderFloat64`), enabled when it
    /// is created so that modules using them validate and run.
    pub(crate) shader_features: ShaderFeatures,
    /// Whether the device has `robustBufferAccess` (every Vulkan device should): enabled, so a
    /// kernel's access past its binding's range never reaches other memory.
    pub(crate) robust_buffer_access: bool,
    /// The largest single allocation (`maxMemoryAllocationSize`, at most the largest heap).
    pub(crate) max_allocation: u64,
    /// What the device shares through opaque file descriptors (its extensions enabled when
    /// present).
    pub(crate) fd_sharing: FdSharing,
    /// The driver closes the descriptor of an import it refuses (Mesa's lavapipe does, though
    /// Vulkan says a failed import leaves it with the application): the driver must not close it
    /// again.
    pub(crate) closes_refused_fds: bool,
    /// Whether device-local memory is mapped where it is host-visible (see [`DEVICE_MEMORY_ENV`]).
    pub(crate) map_device_memory: bool,
    /// The device's memory types, each as its property flags and its heap's size: what
    /// `device_info` shows, so a user sees where buffers go.
    pub(crate) memory_types: Vec<(vk::MemoryPropertyFlags, u64)>,
}

/// What a device can share with other APIs (CUDA, another `VkDevice`) through opaque POSIX file
/// descriptors, as it reports: its extensions (enabled at device creation where present), and for
/// the buffers and timeline semaphores the driver makes, whether their payloads export and import
/// (`vkGetPhysicalDeviceExternalBufferProperties`, `vkGetPhysicalDeviceExternalSemaphoreProperties`
/// with `VK_EXTERNAL_*_HANDLE_TYPE_OPAQUE_FD_BIT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FdSharing {
    /// `VK_KHR_external_memory_fd` is enabled.
    pub memory_fd_extension: bool,
    /// `VK_KHR_external_semaphore_fd` is enabled.
    pub semaphore_fd_extension: bool,
    /// A storage buffer's memory exports as an opaque fd.
    pub memory_export: bool,
    /// A storage buffer's memory imports from an opaque fd.
    pub memory_import: bool,
    /// Such memory must be a dedicated allocation (`VK_EXTERNAL_MEMORY_FEATURE_DEDICATED_ONLY_BIT`).
    pub memory_dedicated_only: bool,
    /// A timeline semaphore exports as an opaque fd.
    pub timeline_export: bool,
    /// A timeline semaphore imports from an opaque fd.
    pub timeline_import: bool,
}

impl FdSharing {
    /// What `physical` reports; nothing without the extensions.
    fn query(vk: &ash::Instance, physical: vk::PhysicalDevice, memory_fd: bool, semaphore_fd: bool) -> FdSharing {
        let mut sharing =
            FdSharing { memory_fd_extension: memory_fd, semaphore_fd_extension: semaphore_fd, ..FdSharing::default() };
        if memory_fd {
            let info = vk::PhysicalDeviceExternalBufferInfo::default()
                .usage(crate::memory::BUFFER_USAGE)
                .handle_type(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD);
            let mut out = vk::ExternalBufferProperties::default();
            // SAFETY: a plain query of a physical device of this instance (Vulkan 1.1 core).
            unsafe { vk.get_physical_device_external_buffer_properties(physical, &info, &mut out) };
            let features = out.external_memory_properties.external_memory_features;
            sharing.memory_export = features.contains(vk::ExternalMemoryFeatureFlags::EXPORTABLE);
            sharing.memory_import = features.contains(vk::ExternalMemoryFeatureFlags::IMPORTABLE);
            sharing.memory_dedicated_only = features.contains(vk::ExternalMemoryFeatureFlags::DEDICATED_ONLY);
        }
        if semaphore_fd {
            let mut kind = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
            let info = vk::PhysicalDeviceExternalSemaphoreInfo::default()
                .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD)
                .push_next(&mut kind);
            let mut out = vk::ExternalSemaphoreProperties::default();
            // SAFETY: as above; the chain lives on this stack frame.
            unsafe { vk.get_physical_device_external_semaphore_properties(physical, &info, &mut out) };
            let features = out.external_semaphore_features;
            sharing.timeline_export = features.contains(vk::ExternalSemaphoreFeatureFlags::EXPORTABLE);
            sharing.timeline_import = features.contains(vk::ExternalSemaphoreFeatureFlags::IMPORTABLE);
        }
        sharing
    }
}

/// The physical devices that can run the driver (Vulkan 1.2 with timeline semaphores and a compute
/// queue), in the loader's order.
pub fn physical_devices(instance: &Instance) -> Result<Vec<PhysicalInfo>> {
    // SAFETY: a plain query of a live instance.
    let physicals = unsafe { instance.instance.enumerate_physical_devices() }
        .map_err(|e| from_vk("vkEnumeratePhysicalDevices", e))?;
    let mut out = Vec::new();
    for physical in physicals {
        if let Some(info) = describe(instance, physical)? {
            out.push(info);
        }
    }
    Ok(out)
}

fn describe(instance: &Instance, physical: vk::PhysicalDevice) -> Result<Option<PhysicalInfo>> {
    let vk = &instance.instance;
    // SAFETY: plain queries of a physical device of this instance.
    let properties = unsafe { vk.get_physical_device_properties(physical) };
    if properties.api_version < vk::API_VERSION_1_2 {
        return Ok(None);
    }
    let mut features11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut features12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut features11).push_next(&mut features12);
    // SAFETY: as above; the chain lives on this stack frame.
    unsafe { vk.get_physical_device_features2(physical, &mut features) };
    let core_features = features.features;
    if features12.timeline_semaphore == vk::FALSE {
        return Ok(None);
    }
    // SAFETY: as above.
    let families = unsafe { vk.get_physical_device_queue_family_properties(physical) };
    // A compute-only family first (NVIDIA's), else any family with compute.
    let compute = |f: &vk::QueueFamilyProperties| f.queue_flags.contains(vk::QueueFlags::COMPUTE);
    let family = families
        .iter()
        .position(|f| compute(f) && !f.queue_flags.contains(vk::QueueFlags::GRAPHICS))
        .or_else(|| families.iter().position(compute));
    let Some(family) = family else { return Ok(None) };
    // SAFETY: as above.
    let extensions = unsafe { vk.enumerate_device_extension_properties(physical) }
        .map_err(|e| from_vk("vkEnumerateDeviceExtensionProperties", e))?;
    let has = |name: &CStr| extensions.iter().any(|e| e.extension_name_as_c_str() == Ok(name));
    let push_descriptors = has(ash::khr::push_descriptor::NAME);
    let fd_sharing = FdSharing::query(
        vk,
        physical,
        has(ash::khr::external_memory_fd::NAME),
        has(ash::khr::external_semaphore_fd::NAME),
    );
    // SAFETY: as above.
    let memory = unsafe { vk.get_physical_device_memory_properties(physical) };
    let heaps = memory.memory_heaps_as_slice();
    let heap_bytes = heaps.iter().map(|h| h.size).max().unwrap_or(0);
    let memory_types = memory
        .memory_types_as_slice()
        .iter()
        .map(|t| (t.property_flags, heaps.get(t.heap_index as usize).map_or(0, |h| h.size)))
        .collect();
    let name = properties.device_name_as_c_str().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut id = vk::PhysicalDeviceIDProperties::default();
    let mut maintenance3 = vk::PhysicalDeviceMaintenance3Properties::default();
    let mut host_memory = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
    let host_import = has(ash::ext::external_memory_host::NAME);
    let feature = features12.descriptor_binding_storage_buffer_update_after_bind == vk::TRUE;
    let mut properties12 = vk::PhysicalDeviceVulkan12Properties::default();
    let mut push_properties = vk::PhysicalDevicePushDescriptorPropertiesKHR::default();
    let mut properties2 = vk::PhysicalDeviceProperties2::default()
        .push_next(&mut id)
        .push_next(&mut maintenance3)
        .push_next(&mut properties12);
    if host_import {
        properties2 = properties2.push_next(&mut host_memory);
    }
    if push_descriptors {
        properties2 = properties2.push_next(&mut push_properties);
    }
    // SAFETY: as above.
    unsafe { vk.get_physical_device_properties2(physical, &mut properties2) };
    Ok(Some(PhysicalInfo {
        physical,
        name,
        uuid: id.device_uuid,
        api_version: properties.api_version,
        driver_version: properties.driver_version,
        limits: properties.limits,
        queue_family: family as u32,
        family_queues: families[family].queue_count,
        timestamp_bits: families[family].timestamp_valid_bits,
        push_descriptors,
        max_push_descriptors: push_descriptors.then_some(push_properties.max_push_descriptors),
        update_after_bind: match update_after_bind_mode()? {
            UpdateAfterBind::Off => None,
            UpdateAfterBind::WhereSupported if !feature => None,
            UpdateAfterBind::WhereSupported | UpdateAfterBind::Forced => Some(
                properties12
                    .max_per_stage_descriptor_update_after_bind_storage_buffers
                    .min(properties12.max_descriptor_set_update_after_bind_storage_buffers),
            ),
        },
        update_after_bind_feature: feature,
        host_import_alignment: host_import.then_some(host_memory.min_imported_host_pointer_alignment),
        heap_bytes,
        shader_features: ShaderFeatures {
            int64: core_features.shader_int64 == vk::TRUE,
            float64: core_features.shader_float64 == vk::TRUE,
            // naga writes every f16 module with both 16-bit storage capabilities.
            float16: features12.shader_float16 == vk::TRUE
                && features11.storage_buffer16_bit_access == vk::TRUE
                && features11.uniform_and_storage_buffer16_bit_access == vk::TRUE,
        },
        robust_buffer_access: core_features.robust_buffer_access == vk::TRUE,
        max_allocation: maintenance3.max_memory_allocation_size.min(heap_bytes),
        fd_sharing,
        closes_refused_fds: properties12.driver_id == vk::DriverId::MESA_LLVMPIPE,
        map_device_memory: map_device_memory()?,
        memory_types,
    }))
}

/// How executes with a binding table run, read when devices are listed or created. Unset or `1`:
/// where the device has `descriptorBindingStorageBufferUpdateAfterBind`, recordings are kept and
/// replayed, each execute writing its buffers into their update-after-bind descriptor sets; where
/// it has not, they are recorded at each execute. `0`: always recorded at each execute. `force`
/// (tests only): replayed even without the feature, which Vulkan does not allow; lavapipe, which
/// lacks it but reads descriptors when a submission runs, gets the replay path exercised this way.
pub const UPDATE_AFTER_BIND_ENV: &str = "HAL_VULKAN_UPDATE_AFTER_BIND";

/// Whether device-local buffers are mapped where their memory is host-visible, read when devices
/// are listed or created. Unset or `1`: mapped there (lavapipe's only memory type, a resizable
/// BAR), so queue reads and writes of them are host copies; `0` (tests): never mapped, so they are
/// device copies through staging, as on a device whose video memory the host cannot see.
pub const DEVICE_MEMORY_ENV: &str = "HAL_VULKAN_MAP_DEVICE_MEMORY";

fn map_device_memory() -> Result<bool> {
    match std::env::var(DEVICE_MEMORY_ENV).as_deref() {
        Ok("1" | "") | Err(_) => Ok(true),
        Ok("0") => Ok(false),
        Ok(other) => Err(Error::invalid_argument(format!("vulkan: {DEVICE_MEMORY_ENV}='{other}' is not 0 or 1"))),
    }
}

impl PhysicalInfo {
    /// Whether device-local buffers are mapped: allowed, and the first device-local memory type
    /// (the one gpu-allocator gives them) is host-visible.
    pub(crate) fn device_memory_mapped(&self) -> bool {
        let first_local =
            self.memory_types.iter().find(|(flags, _)| flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL));
        self.map_device_memory
            && first_local.is_some_and(|(flags, _)| flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE))
    }
}

/// The choice [`UPDATE_AFTER_BIND_ENV`] makes.
enum UpdateAfterBind {
    Off,
    WhereSupported,
    Forced,
}

fn update_after_bind_mode() -> Result<UpdateAfterBind> {
    match std::env::var(UPDATE_AFTER_BIND_ENV).as_deref() {
        Ok("1" | "") | Err(_) => Ok(UpdateAfterBind::WhereSupported),
        Ok("0") => Ok(UpdateAfterBind::Off),
        Ok("force") => Ok(UpdateAfterBind::Forced),
        Ok(other) => {
            Err(Error::invalid_argument(format!("vulkan: {UPDATE_AFTER_BIND_ENV}='{other}' is not 0, 1 or force")))
        }
    }
}

/// A logical device and what hangs off it.
pub struct Gpu {
    /// Keeps the instance alive while the device lives.
    pub(crate) instance: Arc<Instance>,
    pub(crate) physical: PhysicalInfo,
    pub(crate) device: ash::Device,
    /// The device extensions enabled.
    pub(crate) extensions: Vec<&'static CStr>,
    /// The core features enabled.
    pub(crate) features: vk::PhysicalDeviceFeatures,
    /// Whether `descriptorBindingStorageBufferUpdateAfterBind` is enabled (Vulkan 1.2's
    /// `timelineSemaphore` always is).
    pub(crate) update_after_bind_enabled: bool,
    pub(crate) push: Option<ash::khr::push_descriptor::Device>,
    /// The most storage buffers of an update-after-bind descriptor set, where binding-table
    /// executes replay their recordings with such sets (see `commands/bound.rs`); `None`: they
    /// re-record.
    pub(crate) update_after_bind: Option<u32>,
    /// `VK_EXT_external_memory_host` and its alignment, where the device has it.
    pub(crate) external_host: Option<(ash::ext::external_memory_host::Device, u64)>,
    /// `VK_KHR_external_memory_fd`, where the device has it.
    pub(crate) memory_fd: Option<ash::khr::external_memory_fd::Device>,
    /// `VK_KHR_external_semaphore_fd`, where the device has it.
    pub(crate) semaphore_fd: Option<ash::khr::external_semaphore_fd::Device>,
    /// The timeline semaphores [`crate::interop::TimelineSemaphore`] made on this device, so that an
    /// external timepoint naming one holds it alive until its work retired.
    #[cfg(unix)]
    pub(crate) timelines: Mutex<Vec<Weak<crate::interop::shared::OwnedTimeline>>>,
    /// The Vulkan queues (a queue is externally synchronized, hence the locks); each HAL device
    /// made on this one takes [`QUEUE_COUNT`](crate::device::QUEUE_COUNT) of them from
    /// [`first_queues`](Self::first_queues), round robin.
    pub(crate) queues: Vec<Mutex<vk::Queue>>,
    /// Where the next HAL device's queues start in [`queues`](Self::queues).
    next_first_queue: std::sync::atomic::AtomicUsize,
    /// `None` only while dropping (the allocator must go before the device).
    pub(crate) allocator: Mutex<Option<Allocator>>,
    /// The block zero-length dispatch bindings reach (`commands/record.rs`), while a submission
    /// holds it.
    pub(crate) empty_binding: Mutex<Weak<Block>>,
    /// What the driver's own submit-and-wait submissions reuse (see `one_shot`).
    pub(crate) one_shot: Mutex<Option<OneShotContext>>,
}

/// The logical device of `physical`, shared by every HAL device made on it while one lives (so
/// their queues can wait on each other's timelines and use each other's buffers on the device).
pub fn shared(instance: Arc<Instance>, physical: PhysicalInfo, wanted_queues: usize) -> Result<Arc<Gpu>> {
    static LIVE: Mutex<Vec<std::sync::Weak<Gpu>>> = Mutex::new(Vec::new());
    let mut live = lock(&LIVE);
    live.retain(|gpu| gpu.strong_count() > 0);
    if let Some(gpu) =
        live.iter().filter_map(std::sync::Weak::upgrade).find(|g| g.physical.physical == physical.physical)
    {
        return Ok(gpu);
    }
    let gpu = Gpu::create(instance, physical, wanted_queues)?;
    live.push(Arc::downgrade(&gpu));
    Ok(gpu)
}

impl Gpu {
    /// Creates a logical device on `physical` with up to `wanted_queues` queues.
    pub fn create(instance: Arc<Instance>, physical: PhysicalInfo, wanted_queues: usize) -> Result<Arc<Gpu>> {
        let queue_count = physical.family_queues.clamp(1, wanted_queues.max(1) as u32);
        let priorities = vec![1.0f32; queue_count as usize];
        let queue_info = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(physical.queue_family)
            .queue_priorities(&priorities)];
        let mut extensions: Vec<&'static CStr> = Vec::new();
        if physical.push_descriptors {
            extensions.push(ash::khr::push_descriptor::NAME);
        }
        if physical.host_import_alignment.is_some() {
            extensions.push(ash::ext::external_memory_host::NAME);
        }
        // Their dependencies (`VK_KHR_external_memory`, `VK_KHR_external_semaphore`) are core in
        // Vulkan 1.1.
        if physical.fd_sharing.memory_fd_extension {
            extensions.push(ash::khr::external_memory_fd::NAME);
        }
        if physical.fd_sharing.semaphore_fd_extension {
            extensions.push(ash::khr::external_semaphore_fd::NAME);
        }
        let extension_names: Vec<_> = extensions.iter().map(|name| name.as_ptr()).collect();
        let update_after_bind = physical.update_after_bind;
        let update_after_bind_enabled = update_after_bind.is_some() && physical.update_after_bind_feature;
        let float16 = physical.shader_features.float16;
        let mut features11 = vk::PhysicalDeviceVulkan11Features::default()
            .storage_buffer16_bit_access(float16)
            .uniform_and_storage_buffer16_bit_access(float16);
        let mut features12 = vk::PhysicalDeviceVulkan12Features::default()
            .timeline_semaphore(true)
            .shader_float16(float16)
            .descriptor_binding_storage_buffer_update_after_bind(update_after_bind_enabled);
        let core = vk::PhysicalDeviceFeatures::default()
            .robust_buffer_access(physical.robust_buffer_access)
            .shader_int64(physical.shader_features.int64)
            .shader_float64(physical.shader_features.float64);
        let create = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_info)
            .enabled_features(&core)
            .enabled_extension_names(&extension_names)
            .push_next(&mut features11)
            .push_next(&mut features12);
        // SAFETY: the create info and everything it points to outlive the call; the extensions and
        // features were checked to exist in `describe`.
        let device = unsafe { instance.instance.create_device(physical.physical, &create, None) }
            .map_err(|e| from_vk("vkCreateDevice", e))?;
        let queues = (0..queue_count)
            // SAFETY: the queues were requested at creation.
            .map(|i| Mutex::new(unsafe { device.get_device_queue(physical.queue_family, i) }))
            .collect();
        let push =
            physical.push_descriptors.then(|| ash::khr::push_descriptor::Device::new(&instance.instance, &device));
        let external_host = physical
            .host_import_alignment
            .map(|alignment| (ash::ext::external_memory_host::Device::new(&instance.instance, &device), alignment));
        let memory_fd = physical
            .fd_sharing
            .memory_fd_extension
            .then(|| ash::khr::external_memory_fd::Device::new(&instance.instance, &device));
        let semaphore_fd = physical
            .fd_sharing
            .semaphore_fd_extension
            .then(|| ash::khr::external_semaphore_fd::Device::new(&instance.instance, &device));
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.instance.clone(),
            device: device.clone(),
            physical_device: physical.physical,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: Default::default(),
        });
        let allocator = match allocator {
            Ok(allocator) => allocator,
            Err(e) => {
                // SAFETY: nothing was made from the device yet.
                unsafe { device.destroy_device(None) };
                return Err(Error::internal(format!("vulkan: creating the memory allocator: {e}")));
            }
        };
        Ok(Arc::new(Gpu {
            instance,
            physical,
            device,
            extensions,
            features: core,
            update_after_bind_enabled,
            push,
            update_after_bind,
            external_host,
            memory_fd,
            semaphore_fd,
            #[cfg(unix)]
            timelines: Mutex::new(Vec::new()),
            queues,
            next_first_queue: std::sync::atomic::AtomicUsize::new(0),
            allocator: Mutex::new(Some(allocator)),
            empty_binding: Mutex::new(Weak::new()),
            one_shot: Mutex::new(None),
        }))
    }

    /// Where the queues of a HAL device made now start: each device takes the next `count` Vulkan
    /// queues after the last device's, wrapping around, so two HAL devices on one GPU submit to
    /// queues of their own while it has enough (a hop between them then crosses Vulkan queues as it
    /// does between two queues of one device, instead of queueing behind itself on one).
    pub fn first_queues(&self, count: usize) -> usize {
        self.next_first_queue.fetch_add(count, std::sync::atomic::Ordering::Relaxed) % self.queues.len()
    }

    /// The Vulkan queue at `index` in [`queue_index`](Self::queue_index)'s numbering.
    pub fn queue(&self, index: u32) -> &Mutex<vk::Queue> {
        &self.queues[index as usize % self.queues.len()]
    }

    /// The index in its family of the Vulkan queue the `queue`th HAL queue of a device whose queues
    /// start at `first` (from [`first_queues`](Self::first_queues)) submits to.
    pub fn queue_index(&self, first: usize, queue: usize) -> u32 {
        ((first + queue) % self.queues.len()) as u32
    }

    /// The allocator (`FailedPrecondition` while the device is being dropped).
    pub fn with_allocator<T>(&self, f: impl FnOnce(&mut Allocator) -> Result<T>) -> Result<T> {
        let mut allocator = lock(&self.allocator);
        match allocator.as_mut() {
            Some(allocator) => f(allocator),
            None => Err(Error::failed_precondition("vulkan: the device is being destroyed")),
        }
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: every object made from the device holds an `Arc` of this `Gpu`, so none is left;
        // waiting for idle first lets nothing run on a destroyed device.
        unsafe {
            let _ = self.device.device_wait_idle();
            if let Some(context) = lock(&self.one_shot).take() {
                context.destroy(&self.device);
            }
            drop(lock(&self.allocator).take());
            self.device.destroy_device(None);
        }
    }
}
