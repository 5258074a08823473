//! The Vulkan library and instance, loaded once per process: `Entry::load` opens the loader at run
//! time, so a machine without one gets `Unavailable` with the reason. With
//! [`VALIDATION_ENV`]` = 1` the instance enables the Khronos validation layer and fails the process
//! on its first error message.

use std::ffi::{CStr, c_void};
use std::sync::{Arc, OnceLock};

use ash::vk;
use hal::{Error, Result};

/// Set to `1` to run under `VK_LAYER_KHRONOS_validation`; any validation error then aborts the
/// process after printing the message, so a test run with it is clean or fails.
pub const VALIDATION_ENV: &str = "HAL_VULKAN_VALIDATION";

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// The Vulkan version the instance is created for (`VkApplicationInfo::apiVersion`): what the
/// driver and, through [`crate::interop`], an embedder may use of the device.
pub const API_VERSION: u32 = vk::API_VERSION_1_2;

/// The loaded library and an instance, shared by every device of the process.
pub struct Instance {
    /// The loader's entry points (kept open while the instance lives).
    pub(crate) entry: ash::Entry,
    pub(crate) instance: ash::Instance,
    /// The instance extensions enabled (debug utils under the validation layer).
    pub(crate) extensions: Vec<&'static CStr>,
    /// The layers enabled (the validation layer, where asked for).
    pub(crate) layers: Vec<&'static CStr>,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: the instance and messenger were created here and every device made from the
        // instance holds an `Arc` of it, so none is left.
        unsafe {
            if let Some((utils, messenger)) = self.debug.take() {
                utils.destroy_debug_utils_messenger(messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// The process's instance, created at the first call; the error says why there is none.
pub fn instance() -> Result<Arc<Instance>> {
    static INSTANCE: OnceLock<std::result::Result<Arc<Instance>, Error>> = OnceLock::new();
    INSTANCE.get_or_init(|| Instance::create().map(Arc::new)).clone()
}

fn vk_error(call: &str, result: vk::Result) -> Error {
    crate::error::from_vk(call, result)
}

impl Instance {
    fn create() -> Result<Instance> {
        let validation = match std::env::var(VALIDATION_ENV).as_deref() {
            Ok("1") => true,
            Ok("0" | "") | Err(_) => false,
            Ok(other) => {
                return Err(Error::invalid_argument(format!("vulkan: {VALIDATION_ENV}='{other}' is not 0 or 1")));
            }
        };
        // SAFETY: loading the Vulkan loader runs only its initialisers; nothing else is assumed.
        let entry = unsafe { ash::Entry::load() }
            .map_err(|e| Error::unavailable(format!("vulkan: the Vulkan loader (libvulkan.so.1) did not load: {e}")))?;
        // SAFETY: a plain query of the loaded entry points.
        let version = unsafe { entry.try_enumerate_instance_version() }
            .map_err(|e| vk_error("vkEnumerateInstanceVersion", e))?
            .unwrap_or(vk::API_VERSION_1_0);
        if version < vk::API_VERSION_1_2 {
            return Err(Error::unavailable(format!(
                "vulkan: the loader offers Vulkan {}.{}, timeline semaphores need 1.2",
                vk::api_version_major(version),
                vk::api_version_minor(version)
            )));
        }
        let mut layers = Vec::new();
        let mut extensions = Vec::new();
        if validation {
            // SAFETY: a plain query of the loaded entry points.
            let available = unsafe { entry.enumerate_instance_layer_properties() }
                .map_err(|e| vk_error("vkEnumerateInstanceLayerProperties", e))?;
            if !available.iter().any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER)) {
                return Err(Error::unavailable(format!(
                    "vulkan: {VALIDATION_ENV}=1 but the layer {} is not installed (vulkan-validationlayers)",
                    VALIDATION_LAYER.to_string_lossy()
                )));
            }
            layers.push(VALIDATION_LAYER);
            extensions.push(ash::ext::debug_utils::NAME);
        }
        let layer_names: Vec<_> = layers.iter().map(|name| name.as_ptr()).collect();
        let extension_names: Vec<_> = extensions.iter().map(|name| name.as_ptr()).collect();
        let app = vk::ApplicationInfo::default()
            .application_name(c"timeline-hal")
            .engine_name(c"timeline-hal")
            .api_version(API_VERSION);
        let create = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layer_names)
            .enabled_extension_names(&extension_names);
        // SAFETY: the create info and the strings it points to outlive the call.
        let instance = unsafe { entry.create_instance(&create, None) }.map_err(|e| match e {
            vk::Result::ERROR_INCOMPATIBLE_DRIVER => Error::unavailable(
                "vulkan: vkCreateInstance: no Vulkan driver (ERROR_INCOMPATIBLE_DRIVER; install mesa-vulkan-drivers, \
                 or set VK_DRIVER_FILES to the driver's ICD file)",
            ),
            e => vk_error("vkCreateInstance", e),
        })?;
        let debug = if validation {
            let utils = ash::ext::debug_utils::Instance::new(&entry, &instance);
            let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
                .message_severity(
                    vk::DebugUtilsMessageSeverityFlagsEXT::ERROR | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
                )
                .message_type(
                    vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                        | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
                )
                .pfn_user_callback(Some(validation_message));
            // SAFETY: the instance has the debug-utils extension enabled (above).
            match unsafe { utils.create_debug_utils_messenger(&info, None) } {
                Ok(messenger) => Some((utils, messenger)),
                Err(e) => {
                    // SAFETY: nothing was made from the instance yet.
                    unsafe { instance.destroy_instance(None) };
                    return Err(vk_error("vkCreateDebugUtilsMessengerEXT", e));
                }
            }
        } else {
            None
        };
        Ok(Instance { entry, instance, extensions, layers, debug })
    }
}

/// The validation layer's messages: warnings are logged; an error is printed and aborts the
/// process, so that a run under the layer cannot pass with an error in it.
unsafe extern "system" fn validation_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _kind: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes a valid callback-data pointer whose message is a C string (or null).
    let message = unsafe { data.as_ref().and_then(|d| d.message_as_c_str()) }
        .map(|m| m.to_string_lossy().into_owned())
        .unwrap_or_default();
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        eprintln!("vulkan validation error: {message}");
        std::process::abort();
    }
    tracing::warn!(%message, "vulkan validation");
    vk::FALSE
}
