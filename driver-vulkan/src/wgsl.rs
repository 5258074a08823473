//! WGSL compiled to SPIR-V in-process with naga, so kernels need no external compiler. Push
//! constants are `var<immediate>` in naga's WGSL.

use hal::{Error, Result};

/// Compiles `source` (WGSL, every entry point) to SPIR-V bytes; errors name `name` and naga's
/// message.
pub fn compile(source: &str, name: &str) -> Result<Vec<u8>> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| Error::invalid_argument(format!("wgsl '{name}': {}", e.emit_to_string(source))))?;
    // f16 (`enable f16;`) compiles here; a device without 16-bit floats refuses the module when
    // it is loaded.
    let capabilities = naga::valid::Capabilities::IMMEDIATES | naga::valid::Capabilities::SHADER_FLOAT16;
    let mut validator = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities);
    let info = validator
        .validate(&module)
        .map_err(|e| Error::invalid_argument(format!("wgsl '{name}': {}", e.emit_to_string(source))))?;
    let options = naga::back::spv::Options {
        lang_version: (1, 3),
        flags: naga::back::spv::WriterFlags::empty(),
        use_storage_input_output_16: false,
        ..Default::default()
    };
    let words = naga::back::spv::write_vec(&module, &info, &options, None)
        .map_err(|e| Error::internal(format!("wgsl '{name}': SPIR-V output: {e}")))?;
    Ok(words.iter().flat_map(|w| w.to_le_bytes()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wgsl_with_push_constants_compiles_to_spirv() {
        let source = "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n\
                      struct C { v: u32 }\nvar<immediate> c: C;\n\
                      @compute @workgroup_size(64) fn k(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = c.v; }";
        let bytes = compile(source, "k").unwrap();
        assert_eq!(&bytes[..4], &0x0723_0203u32.to_le_bytes());
        let e = compile("fn (", "bad").unwrap_err();
        assert!(e.message().contains("wgsl 'bad'"), "{e}");
    }
}
