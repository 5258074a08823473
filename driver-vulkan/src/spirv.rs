//! SPIR-V modules as the driver takes them: parsed and validated by naga, reflected, and written
//! again by naga before any Vulkan call sees them.
//!
//! Vulkan drivers do not validate SPIR-V: a module with one word changed can crash the process
//! inside `vkCreateComputePipelines`. So the bytes an embedder passes never reach the driver.
//! naga's SPIR-V front end parses them into its IR, its validator checks that IR (types, control
//! flow, every expression and store), and its SPIR-V back end writes the module the driver
//! compiles. The front end skips what it does not model (names, debug instructions, decorations
//! without meaning for compute), so the accepted bytes themselves could still carry words a driver
//! trips over; the written module holds only what was validated.
//!
//! The reflection names each compute entry point's workgroup size, the resources it uses
//! (descriptor set, binding, kind) and its push-constant block's size, for the checks against the
//! entry points an embedder declares (`executable.rs`).

use hal::{Error, Result};
use naga::valid::{Capabilities, GlobalUse, ValidationFlags, Validator};

/// The SPIR-V magic number, the first word of every module.
const MAGIC: u32 = 0x0723_0203;

/// What a module's resource variable is, as far as the HAL's binding model cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceKind {
    /// A storage buffer: what every HAL binding is.
    StorageBuffer,
    /// A uniform buffer.
    UniformBuffer,
    /// An image, sampler or acceleration structure.
    Handle,
}

impl std::fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ResourceKind::StorageBuffer => "a storage buffer",
            ResourceKind::UniformBuffer => "a uniform buffer",
            ResourceKind::Handle => "an image, sampler or acceleration structure",
        })
    }
}

/// One resource variable an entry point uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// `DescriptorSet`.
    pub set: u32,
    /// `Binding`.
    pub binding: u32,
    /// Its storage class.
    pub kind: ResourceKind,
}

/// One entry point of a module, as reflected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleEntryPoint {
    /// Its name (`OpEntryPoint`).
    pub name: String,
    /// Its execution model where it is not `GLCompute` (the driver runs compute entry points only).
    pub other_stage: Option<String>,
    /// `LocalSize`.
    pub workgroup_size: [u32; 3],
    /// The resources it uses (reads, writes or queries), by set then binding.
    pub resources: Vec<Resource>,
    /// The bytes of its push-constant block (0 where it uses none).
    pub push_constant_bytes: u32,
    /// The bytes of workgroup (shared) memory its variables take.
    pub workgroup_memory_bytes: u64,
}

/// A module that passed validation: its entry points, and the words the driver is given.
#[derive(Debug)]
pub struct ValidatedModule {
    /// Every entry point, compute or not.
    pub entry_points: Vec<ModuleEntryPoint>,
    /// The module as naga wrote it from the validated IR.
    pub words: Vec<u32>,
}

/// What the validator may accept beyond plain compute: the features the device enabled.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShaderFeatures {
    /// 64-bit integers (`shaderInt64`).
    pub int64: bool,
    /// 64-bit floats (`shaderFloat64`).
    pub float64: bool,
}

impl ShaderFeatures {
    fn capabilities(self) -> Capabilities {
        let mut caps = Capabilities::IMMEDIATES;
        caps.set(Capabilities::SHADER_INT64, self.int64);
        caps.set(Capabilities::FLOAT64, self.float64);
        caps
    }
}

/// Validates and reflects `data` (a SPIR-V module's bytes). `InvalidArgument` with the parser's
/// or validator's message for anything that is not a valid module naga can express.
pub fn validate(data: &[u8], features: ShaderFeatures) -> Result<ValidatedModule> {
    check_header(data)?;
    // naga's SPIR-V front end still panics on some malformed modules (an `unwrap` on a layout or
    // a lookup) instead of returning its error. It works on this call's data alone, so a panic
    // leaves nothing half-changed behind: it is caught and refused like any parse error (where
    // the embedder builds with `panic = "abort"`, it aborts instead).
    let parsed = std::panic::catch_unwind(|| translate(data, features));
    parsed.unwrap_or_else(|panic| {
        let said = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(Error::invalid_argument(format!("vulkan: invalid SPIR-V module (the SPIR-V parser gave up: {said})")))
    })
}

/// Parses, validates and reflects `data`, then writes the module the driver gets.
fn translate(data: &[u8], features: ShaderFeatures) -> Result<ValidatedModule> {
    let declared_entry_points = check_layout(data)?;
    let options = naga::front::spv::Options {
        adjust_coordinate_space: false,
        strict_capabilities: true,
        block_ctx_dump_prefix: None,
    };
    let module = naga::front::spv::parse_u8_slice(data, &options)
        .map_err(|e| Error::invalid_argument(format!("vulkan: invalid SPIR-V module: {e}")))?;
    if module.entry_points.len() != declared_entry_points {
        // The front end leaves out an entry point whose function the module does not define.
        return Err(Error::invalid_argument(format!(
            "vulkan: invalid SPIR-V module: {declared_entry_points} OpEntryPoint instructions, {} of them name a \
             function the module defines",
            module.entry_points.len()
        )));
    }
    if !module.overrides.is_empty() {
        return Err(Error::invalid_argument(format!(
            "vulkan: the SPIR-V module has {} specialization constants; the driver takes modules without them",
            module.overrides.len()
        )));
    }
    let mut validator = Validator::new(ValidationFlags::all(), features.capabilities());
    let info = validator
        .validate(&module)
        .map_err(|e| Error::invalid_argument(format!("vulkan: invalid SPIR-V module: {}", e.emit_to_string(""))))?;
    let entry_points = module
        .entry_points
        .iter()
        .enumerate()
        .map(|(index, entry)| reflect(&module, entry, info.get_entry_point(index)))
        .collect();
    // The module as it was written: no zeroing of workgroup memory or loop counters added (each
    // costs every dispatch, and SPIR-V asks for neither); integer divisions keep naga's guard
    // against a zero divisor, which a driver's compiler can otherwise fold into a crash.
    let writer = naga::back::spv::Options {
        lang_version: (1, 3),
        flags: naga::back::spv::WriterFlags::empty(),
        zero_initialize_workgroup_memory: naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: false,
        ..Default::default()
    };
    let words = naga::back::spv::write_vec(&module, &info, &writer, None).map_err(|e| {
        Error::invalid_argument(format!("vulkan: the SPIR-V module cannot be written for the driver: {e}"))
    })?;
    Ok(ValidatedModule { entry_points, words })
}

/// The header's five words: `InvalidArgument` naming what is wrong with them.
fn check_header(data: &[u8]) -> Result<()> {
    if data.len() < 20 || !data.len().is_multiple_of(4) {
        return Err(Error::invalid_argument(format!(
            "vulkan: {} bytes are not a SPIR-V module (a header of 5 words and whole words after it)",
            data.len()
        )));
    }
    let word = |i: usize| u32::from_le_bytes([data[4 * i], data[4 * i + 1], data[4 * i + 2], data[4 * i + 3]]);
    if word(0) != MAGIC {
        return Err(Error::invalid_argument(format!(
            "vulkan: not a SPIR-V module (magic {:#010x}, expected {MAGIC:#010x} little-endian)",
            word(0)
        )));
    }
    let version = word(1);
    let (major, minor) = ((version >> 16) & 0xff, (version >> 8) & 0xff);
    if version & 0xff00_00ff != 0 || major != 1 || minor > 6 {
        return Err(Error::invalid_argument(format!(
            "vulkan: SPIR-V version word {version:#010x} is not a version 1.0 to 1.6"
        )));
    }
    if word(3) == 0 {
        return Err(Error::invalid_argument("vulkan: the SPIR-V module's id bound is 0"));
    }
    Ok(())
}

/// The instructions a module must have: each word count within the module, at least one
/// `OpCapability` and `OpEntryPoint`, and one `OpMemoryModel` (naga's front end takes a module
/// without them as an empty one).
fn check_layout(data: &[u8]) -> Result<usize> {
    const OP_CAPABILITY: u32 = 17;
    const OP_MEMORY_MODEL: u32 = 14;
    const OP_ENTRY_POINT: u32 = 15;
    let words = data.len() / 4;
    let word = |i: usize| u32::from_le_bytes([data[4 * i], data[4 * i + 1], data[4 * i + 2], data[4 * i + 3]]);
    let (mut capabilities, mut memory_models, mut entry_points) = (0, 0, 0);
    let mut at = 5;
    while at < words {
        let (count, opcode) = ((word(at) >> 16) as usize, word(at) & 0xffff);
        if count == 0 || at + count > words {
            return Err(Error::invalid_argument(format!(
                "vulkan: invalid SPIR-V module: the instruction at word {at} has a word count of {count}, the module \
                 has {words} words"
            )));
        }
        match opcode {
            OP_CAPABILITY => capabilities += 1,
            OP_MEMORY_MODEL => memory_models += 1,
            OP_ENTRY_POINT => entry_points += 1,
            _ => {}
        }
        at += count;
    }
    if capabilities == 0 || memory_models != 1 || entry_points == 0 {
        return Err(Error::invalid_argument(format!(
            "vulkan: invalid SPIR-V module: {capabilities} OpCapability, {memory_models} OpMemoryModel and \
             {entry_points} OpEntryPoint instructions (a module has at least one, exactly one, at least one)"
        )));
    }
    Ok(entry_points)
}

fn reflect(module: &naga::Module, entry: &naga::EntryPoint, uses: &naga::valid::FunctionInfo) -> ModuleEntryPoint {
    let mut resources = Vec::new();
    let (mut push_constant_bytes, mut workgroup_memory_bytes) = (0, 0u64);
    for (handle, var) in module.global_variables.iter() {
        if uses[handle] == GlobalUse::empty() {
            continue;
        }
        let kind = match var.space {
            naga::AddressSpace::Storage { .. } => ResourceKind::StorageBuffer,
            naga::AddressSpace::Uniform => ResourceKind::UniformBuffer,
            naga::AddressSpace::Handle => ResourceKind::Handle,
            naga::AddressSpace::Immediate => {
                push_constant_bytes = module.types[var.ty].inner.size(module.to_ctx());
                continue;
            }
            naga::AddressSpace::WorkGroup => {
                workgroup_memory_bytes += u64::from(module.types[var.ty].inner.size(module.to_ctx()));
                continue;
            }
            _ => continue,
        };
        // The validator requires a binding on every resource variable; none is a set past `u32`.
        let (set, binding) = var.binding.as_ref().map_or((u32::MAX, u32::MAX), |b| (b.group, b.binding));
        resources.push(Resource { set, binding, kind });
    }
    resources.sort_by_key(|r| (r.set, r.binding));
    ModuleEntryPoint {
        name: entry.name.clone(),
        other_stage: (entry.stage != naga::ShaderStage::Compute).then(|| format!("{:?}", entry.stage)),
        workgroup_size: entry.workgroup_size,
        resources,
        push_constant_bytes,
        workgroup_memory_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn bytes_that_are_not_spirv_are_refused_naming_the_magic() {
        let e = validate(b"this is not an executable.......", ShaderFeatures::default()).unwrap_err();
        assert_eq!(e.code(), hal::StatusCode::InvalidArgument);
        assert!(e.message().contains("magic"), "{e}");
        assert!(validate(b"short", ShaderFeatures::default()).is_err());
    }

    #[test]
    fn malformed_headers_are_invalid_arguments() {
        for (words, says) in [
            (vec![MAGIC, 0x0001_0000, 0, 0, 0], "id bound is 0"),
            (vec![MAGIC, 0x0009_0000, 0, 8, 0], "not a version"),
            (vec![MAGIC, 0x0001_0000, 0, 8, 0, 0xffff_ffff], "invalid SPIR-V"),
        ] {
            let e = validate(&bytes(&words), ShaderFeatures::default()).unwrap_err();
            assert_eq!(e.code(), hal::StatusCode::InvalidArgument, "{e}");
            assert!(e.message().contains(says), "{e}");
        }
    }
}
