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
    /// The bytes of workgroup (shared) memory the module's variables take (all of them: the
    /// module the driver gets declares each).
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
    if let Some(entry) = module.entry_points.iter().find(|e| e.name.is_empty() || e.name.contains(char::is_control)) {
        // Vulkan takes an entry point's name as a C string of printable UTF-8.
        return Err(Error::invalid_argument(format!(
            "vulkan: invalid SPIR-V module: entry point name {:?} is empty or holds control characters",
            entry.name
        )));
    }
    if let Some(entry) = module.entry_points.iter().find(|e| reads_workgroup_size_variable(&module, e)) {
        // Vulkan has `WorkgroupSize` only as a constant; naga would write it as an input variable.
        return Err(Error::invalid_argument(format!(
            "vulkan: invalid SPIR-V module: entry point '{}' reads the WorkgroupSize built-in as a variable",
            entry.name
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
    check_struct_layouts(&module)?;
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
        // An index past an array in workgroup, private or function memory is clamped: nothing
        // bounds those accesses otherwise, and on a CPU device (lavapipe) one lands in the
        // process's own memory. Buffer accesses are bounded by robustBufferAccess.
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: naga::proc::BoundsCheckPolicy::Restrict,
            ..Default::default()
        },
        ..Default::default()
    };
    let words = naga::back::spv::write_vec(&module, &info, &writer, None).map_err(|e| {
        Error::invalid_argument(format!("vulkan: the SPIR-V module cannot be written for the driver: {e}"))
    })?;
    Ok(ValidatedModule { entry_points, words })
}

/// Word `i` of `data` (little-endian); `data` holds at least `4 * (i + 1)` bytes.
fn word_at(data: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([data[4 * i], data[4 * i + 1], data[4 * i + 2], data[4 * i + 3]])
}

/// The header's five words: `InvalidArgument` naming what is wrong with them.
fn check_header(data: &[u8]) -> Result<()> {
    if data.len() < 20 || !data.len().is_multiple_of(4) {
        return Err(Error::invalid_argument(format!(
            "vulkan: {} bytes are not a SPIR-V module (a header of 5 words and whole words after it)",
            data.len()
        )));
    }
    let word = |i: usize| word_at(data, i);
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
    let word = |i: usize| word_at(data, i);
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

/// Every struct's members in order, each starting at or after the end of the one before it and
/// ending within the struct: naga's validator lets an `Offset` past the struct or behind the
/// previous member through, and its writer then emits a layout Vulkan refuses.
fn check_struct_layouts(module: &naga::Module) -> Result<()> {
    for (_, ty) in module.types.iter() {
        let naga::TypeInner::Struct { members, .. } = &ty.inner else { continue };
        let mut end = 0u64;
        for (index, member) in members.iter().enumerate() {
            let offset = u64::from(member.offset);
            let size = u64::from(module.types[member.ty].inner.size(module.to_ctx()));
            let align = scalar_alignment(module, member.ty, 0);
            if offset < end || offset + size > u64::from(u32::MAX) || !offset.is_multiple_of(align) {
                return Err(Error::invalid_argument(format!(
                    "vulkan: invalid SPIR-V module: member {index} of struct {:?} at offset {offset} ({size} bytes) \
                     overlaps the member before it (which ends at {end}), runs past 4 GiB or is not a multiple of \
                     its scalars' {align} bytes",
                    ty.name.as_deref().unwrap_or("")
                )));
            }
            end = offset + size;
        }
    }
    Ok(())
}

/// The widest scalar inside `ty` (the least a member's offset must be a multiple of), 1 for types
/// without scalars; `depth` bounds the walk through nested types.
fn scalar_alignment(module: &naga::Module, ty: naga::Handle<naga::Type>, depth: u32) -> u64 {
    use naga::TypeInner as T;
    if depth > 64 {
        return 1;
    }
    match &module.types[ty].inner {
        T::Scalar(scalar) | T::Vector { scalar, .. } | T::Matrix { scalar, .. } | T::Atomic(scalar) => {
            u64::from(scalar.width).max(1)
        }
        T::Array { base, .. } => scalar_alignment(module, *base, depth + 1),
        T::Struct { members, .. } => {
            members.iter().map(|m| scalar_alignment(module, m.ty, depth + 1)).max().unwrap_or(1)
        }
        _ => 1,
    }
}

/// The bytes a workgroup variable of type `ty` takes: a driver lays workgroup memory out by its
/// types' own sizes, whatever `ArrayStride` the module states, so the larger of the two counts.
fn workgroup_size(module: &naga::Module, ty: naga::Handle<naga::Type>, depth: u32) -> u64 {
    use naga::TypeInner as T;
    let stated = u64::from(module.types[ty].inner.size(module.to_ctx()));
    if depth > 64 {
        return stated;
    }
    let natural = match &module.types[ty].inner {
        T::Array { base, size: naga::ArraySize::Constant(count), stride } => {
            count.get() as u64 * workgroup_size(module, *base, depth + 1).max(u64::from(*stride))
        }
        T::Struct { members, .. } => members.iter().map(|m| workgroup_size(module, m.ty, depth + 1)).sum(),
        _ => stated,
    };
    stated.max(natural)
}

/// Whether an argument of `entry` (or a member of one) is the `WorkgroupSize` built-in.
fn reads_workgroup_size_variable(module: &naga::Module, entry: &naga::EntryPoint) -> bool {
    let is_size =
        |binding: &Option<naga::Binding>| matches!(binding, Some(naga::Binding::BuiltIn(naga::BuiltIn::WorkGroupSize)));
    entry.function.arguments.iter().any(|argument| {
        is_size(&argument.binding)
            || match &module.types[argument.ty].inner {
                naga::TypeInner::Struct { members, .. } => members.iter().any(|m| is_size(&m.binding)),
                _ => false,
            }
    })
}

fn reflect(module: &naga::Module, entry: &naga::EntryPoint, uses: &naga::valid::FunctionInfo) -> ModuleEntryPoint {
    let mut resources = Vec::new();
    let (mut push_constant_bytes, mut workgroup_memory_bytes) = (0, 0u64);
    for (handle, var) in module.global_variables.iter() {
        if var.space == naga::AddressSpace::WorkGroup {
            // Counted whether this entry point uses it or not: the module written for the driver
            // declares every variable, and drivers count what a module declares.
            workgroup_memory_bytes += workgroup_size(module, var.ty, 0);
            continue;
        }
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
