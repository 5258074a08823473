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

use crate::spirv_bitcasts::rewrite_half_bitcasts;
use crate::spirv_conversions::{Instruction, instructions, normalize, words_of};

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
    /// 16-bit floats, in registers and in storage buffers (`shaderFloat16` with
    /// `storageBuffer16BitAccess` and `uniformAndStorageBuffer16BitAccess`).
    pub float16: bool,
}

impl ShaderFeatures {
    fn capabilities(self) -> Capabilities {
        // Packing f32 pairs into f16 words (GLSL.std.450's PackHalf2x16 and UnpackHalf2x16) is
        // core SPIR-V for Vulkan; naga asks for a flag.
        let mut caps = Capabilities::IMMEDIATES | Capabilities::SHADER_FLOAT16_IN_FLOAT32;
        caps.set(Capabilities::SHADER_INT64, self.int64);
        caps.set(Capabilities::FLOAT64, self.float64);
        caps.set(Capabilities::SHADER_FLOAT16, self.float16);
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
    // Conversions and bitcasts naga would misread or refuse are rewritten first (see
    // `spirv_conversions` and `spirv_bitcasts`).
    let given = words_of(data);
    let converted = normalize(&given);
    let rewritten = rewrite_half_bitcasts(converted.as_deref().unwrap_or(&given)).or(converted);
    let normalized = rewritten.map(|w| w.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
    let mut module = naga::front::spv::parse_u8_slice(normalized.as_deref().unwrap_or(data), &options)
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
    let hidden = hide_non_finite_literals(&mut module);
    let info = validator
        .validate(&module)
        .map_err(|e| Error::invalid_argument(format!("vulkan: invalid SPIR-V module: {}", e.emit_to_string(""))))?;
    restore_literals(&mut module, hidden);
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
        // Compute shaders have no stage inputs or outputs of 16 bits.
        use_storage_input_output_16: false,
        // An index past an array in workgroup, private or function memory is clamped: nothing
        // bounds those accesses otherwise, and on a CPU device (lavapipe) one lands in the
        // process's own memory. Buffer accesses are bounded by robustBufferAccess.
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: naga::proc::BoundsCheckPolicy::Restrict,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut words = naga::back::spv::write_vec(&module, &info, &writer, None).map_err(|e| {
        Error::invalid_argument(format!("vulkan: the SPIR-V module cannot be written for the driver: {e}"))
    })?;
    if uses_nan_aware_min_max(&given) {
        make_min_max_nan_aware(&mut words);
    }
    Ok(ValidatedModule { entry_points, words })
}

/// Where a float literal of the module lives: the module's constant expressions (`None`) or those
/// of function `Some(i)` (the functions, then the entry points' functions).
type LiteralPlace = (Option<usize>, naga::Handle<naga::Expression>, naga::Literal);

/// SPIR-V and Vulkan take NaN and infinite float constants (IREE's reductions start a maximum at
/// -inf), but naga's validator refuses them (WGSL has none): they are swapped for 0.0 while it
/// looks and put back before the module is written. Nothing the validator checks depends on a
/// float's value.
fn hide_non_finite_literals(module: &mut naga::Module) -> Vec<LiteralPlace> {
    fn non_finite(literal: &naga::Literal) -> Option<naga::Literal> {
        match *literal {
            naga::Literal::F32(v) if !v.is_finite() => Some(naga::Literal::F32(0.0)),
            naga::Literal::F64(v) if !v.is_finite() => Some(naga::Literal::F64(0.0)),
            naga::Literal::AbstractFloat(v) if !v.is_finite() => Some(naga::Literal::AbstractFloat(0.0)),
            _ => None,
        }
    }
    fn hide(place: Option<usize>, arena: &mut naga::Arena<naga::Expression>, hidden: &mut Vec<LiteralPlace>) {
        let found: Vec<_> = arena
            .iter()
            .filter_map(|(h, e)| match e {
                naga::Expression::Literal(l) => non_finite(l).map(|zero| (h, *l, zero)),
                _ => None,
            })
            .collect();
        for (handle, original, zero) in found {
            *arena.get_mut(handle) = naga::Expression::Literal(zero);
            hidden.push((place, handle, original));
        }
    }
    let mut hidden = Vec::new();
    hide(None, &mut module.global_expressions, &mut hidden);
    let functions = module.functions.iter_mut().map(|(_, f)| f);
    for (i, function) in functions.chain(module.entry_points.iter_mut().map(|e| &mut e.function)).enumerate() {
        hide(Some(i), &mut function.expressions, &mut hidden);
    }
    hidden
}

/// Puts back what [`hide_non_finite_literals`] swapped out.
fn restore_literals(module: &mut naga::Module, hidden: Vec<LiteralPlace>) {
    for (place, handle, literal) in hidden {
        let arena = match place {
            None => &mut module.global_expressions,
            Some(i) => {
                let count = module.functions.len();
                let function = match i.checked_sub(count) {
                    None => module.functions.iter_mut().nth(i).map(|(_, f)| f),
                    Some(e) => module.entry_points.get_mut(e).map(|e| &mut e.function),
                };
                match function {
                    Some(f) => &mut f.expressions,
                    None => continue,
                }
            }
        };
        *arena.get_mut(handle) = naga::Expression::Literal(literal);
    }
}

/// GLSL.std.450's float minimum, maximum and clamp, and their NaN-aware forms (`N*`: a NaN operand
/// gives the other one).
const GLSL_F_MIN_MAX_CLAMP: [u32; 3] = [37, 40, 43];
const GLSL_N_MIN_MAX_CLAMP: [u32; 3] = [79, 80, 81];
const OP_EXT_INST_IMPORT: u32 = 11;
const OP_EXT_INST: u32 = 12;

/// The id GLSL.std.450 is imported as, if it is.
fn glsl_std_450(words: &[u32]) -> Option<u32> {
    instructions(words).find_map(|Instruction { at, op, count }| {
        if op != OP_EXT_INST_IMPORT || count < 3 {
            return None;
        }
        let name: Vec<u8> = words[at + 2..at + count].iter().flat_map(|w| w.to_le_bytes()).collect();
        name.starts_with(b"GLSL.std.450\0").then(|| words[at + 1])
    })
}

/// Where `words` calls GLSL.std.450: the word of each call's instruction number.
fn glsl_std_450_calls(words: &[u32]) -> Vec<usize> {
    let Some(set) = glsl_std_450(words) else { return Vec::new() };
    instructions(words)
        .filter(|i| i.op == OP_EXT_INST && i.count >= 5 && words[i.at + 3] == set)
        .map(|i| i.at + 4)
        .collect()
}

/// Whether a module (its words, as given) uses GLSL.std.450's NMin, NMax or NClamp.
fn uses_nan_aware_min_max(words: &[u32]) -> bool {
    glsl_std_450_calls(words).into_iter().any(|site| GLSL_N_MIN_MAX_CLAMP.contains(&words[site]))
}

/// naga reads NMin, NMax and NClamp as its plain minimum, maximum and clamp, and writes those as
/// FMin, FMax and FClamp, whose result is undefined for a NaN operand. A module that relies on the
/// NaN-aware forms (IREE's reductions start a maximum at NaN) then computes garbage, so the written
/// module's float min, max and clamp become the NaN-aware ones again. That is always sound: the
/// NaN-aware result is one of those FMin/FMax/FClamp allow.
fn make_min_max_nan_aware(words: &mut [u32]) {
    for site in glsl_std_450_calls(words) {
        if let Some(i) = GLSL_F_MIN_MAX_CLAMP.iter().position(|&f| f == words[site]) {
            words[site] = GLSL_N_MIN_MAX_CLAMP[i];
        }
    }
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

    #[test]
    fn non_finite_float_constants_pass_and_are_written_unchanged() {
        // WGSL has no NaN or infinity: compile a marker value, then patch its SPIR-V word.
        let source = "@group(0) @binding(0) var<storage, read_write> out: array<f32>;
            @compute @workgroup_size(1) fn main() { out[0] = max(out[0], -1234.5); }";
        let marker = (-1234.5f32).to_bits();
        let spirv = crate::wgsl::compile(source, "marker").expect("compiles");
        for value in [f32::NEG_INFINITY, f32::INFINITY, f32::NAN] {
            let mut words = words_of(&spirv);
            let at = words.iter().position(|&w| w == marker).expect("the marker constant is in the module");
            words[at] = value.to_bits();
            let module = validate(&bytes(&words), ShaderFeatures::default())
                .unwrap_or_else(|e| panic!("a module holding {value} is refused: {e}"));
            assert!(module.words.contains(&value.to_bits()), "{value} is not in the written module");
        }
    }

    #[test]
    fn f16_modules_need_the_float16_feature() {
        let source = "enable f16;
            @group(0) @binding(0) var<storage, read_write> out: array<f16>;
            @compute @workgroup_size(1) fn main() { out[0] = out[0] * 1.5h; }";
        let spirv = crate::wgsl::compile(source, "half").expect("compiles");
        let e = validate(&spirv, ShaderFeatures::default()).unwrap_err();
        assert_eq!(e.code(), hal::StatusCode::InvalidArgument, "{e}");
        assert!(e.message().contains("FLOAT16"), "{e}");
        let module = validate(&spirv, ShaderFeatures { float16: true, ..ShaderFeatures::default() }).expect("valid");
        // OpCapability (17) Float16 (9) is declared; StorageInputOutput16 (4436), which compute
        // does not need, is not.
        let capabilities: Vec<u32> = crate::spirv_conversions::instructions(&module.words)
            .filter(|i| i.op == 17)
            .map(|i| module.words[i.at + 1])
            .collect();
        assert!(capabilities.contains(&9), "{capabilities:?}");
        assert!(!capabilities.contains(&4436), "{capabilities:?}");
    }

    #[test]
    fn nan_aware_min_and_max_survive_the_rewrite() {
        let source = "@group(0) @binding(0) var<storage, read_write> out: array<f32>;
            @compute @workgroup_size(1) fn main() { out[0] = max(out[0], -1234.5); out[1] = min(out[1], 2.0); }";
        let spirv = crate::wgsl::compile(source, "minmax").expect("compiles");
        let words = words_of(&spirv);
        // The GLSL.std.450 instruction each call makes.
        let ext = |words: &[u32]| -> Vec<u32> { glsl_std_450_calls(words).into_iter().map(|s| words[s]).collect() };
        assert!(ext(&words).contains(&40) && ext(&words).contains(&37), "FMax and FMin: {:?}", ext(&words));
        // As written by a compiler that wants the NaN-aware forms.
        let mut nan_aware = words.clone();
        make_min_max_nan_aware(&mut nan_aware);
        assert!(uses_nan_aware_min_max(&nan_aware));
        let module = validate(&bytes(&nan_aware), ShaderFeatures::default()).expect("valid");
        let written = ext(&module.words);
        assert!(written.contains(&80) && written.contains(&79), "NMax and NMin written: {written:?}");
        assert!(!written.contains(&40) && !written.contains(&37), "FMax or FMin left: {written:?}");
        // A module using the plain forms keeps them.
        assert!(!uses_nan_aware_min_max(&words));
        let plain = validate(&spirv, ShaderFeatures::default()).expect("valid");
        assert!(!ext(&plain.words).contains(&80), "NMax written for a module that used FMax");
    }
}
