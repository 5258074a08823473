//! IREE's CUDA executables on the HAL's CUDA driver.
//!
//! `iree-compile --iree-hal-target-device=cuda` emits executables in IREE's `CDA1` format: a 64-byte
//! file header, then a flatbuffer (`iree/schemas/cuda_executable_def.fbs`) of PTX modules and
//! exports, each naming its kernel, module, block size, dynamic shared memory, constant count and
//! bindings. Each module becomes one HAL executable (PTX, JIT-compiled by the driver) whose entry
//! points are the module's exports; IREE's kernel parameters (every binding's pointer, then every
//! constant as 32 bits) are the HAL's default layout, so dispatches pass straight through.
//!
//! The flatbuffer is read here (a few tables and vectors, every offset bounds-checked) rather than
//! with flatcc's generated readers, which IREE's build makes only when its own CUDA driver is built.

use hal::{EntryPointInfo, ExecutableFormat, ExecutableSource};

use crate::executable::LoadedExport;
use crate::ffi::sys;
use crate::flatbuffer::{contents, malformed, text};
use crate::gpu_executable;

/// The executable format IREE's executable caches name it by.
pub(crate) const FORMAT: &str = "PTXE";
/// The executable format IREE's compiler names it by (`hal.executable.format` queries).
pub(crate) const COMPILER_FORMAT: &str = "cuda-nvptx-fb";
/// The file identifier in the header and in the flatbuffer.
pub(crate) const IDENTIFIER: &[u8; 4] = b"CDA1";

/// One export of a parsed executable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExportDef {
    /// The name IREE looks the export up by (`export_name`, else the kernel's).
    pub name: String,
    /// The kernel's symbol in its module.
    pub kernel: String,
    /// The module (PTX image) holding the kernel.
    pub module: usize,
    /// Threads per block.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, bytes.
    pub shared_memory: u32,
    /// 32-bit constants a dispatch passes.
    pub constants: u32,
    /// Bindings a dispatch passes.
    pub bindings: u32,
}

/// A parsed executable: its exports and its modules' PTX.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExecutableDef {
    pub exports: Vec<ExportDef>,
    pub modules: Vec<Vec<u8>>,
}

/// Parses an executable in IREE's CUDA format.
pub(crate) fn parse(data: &[u8]) -> Result<ExecutableDef, hal::Error> {
    let flat = contents(data, IDENTIFIER)?;
    let root = flat.table(flat.follow(0)?)?;
    let modules = root
        .tables(1)?
        .iter()
        .enumerate()
        .map(|(i, module)| {
            module.string(0)?.map(<[u8]>::to_vec).ok_or_else(|| malformed(format!("module {i} has no PTX image")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut exports = Vec::new();
    for (i, export) in root.tables(0)?.iter().enumerate() {
        let module = export.u32_or(0, 0)? as usize;
        if module >= modules.len() {
            return Err(malformed(format!("export {i} names module {module} of {}", modules.len())));
        }
        let kernel = text(
            export.string(1)?.ok_or_else(|| malformed(format!("export {i} has no kernel name")))?,
            "a kernel name",
        )?;
        let block = match export.field(2)? {
            Some(at) => [flat.u32(at)?, flat.u32(at + 4)?, flat.u32(at + 8)?],
            None => return Err(malformed(format!("export {i} ('{kernel}') has no block size"))),
        };
        let name = match export.string(7)? {
            Some(name) => text(name, "an export name")?,
            None => kernel.clone(),
        };
        exports.push(ExportDef {
            name,
            kernel,
            module,
            block,
            shared_memory: export.u32_or(3, 0)?,
            constants: export.u32_or(4, 0)?,
            bindings: export.vector_len(5, 8)? as u32,
        });
    }
    Ok(ExecutableDef { exports, modules })
}

/// Loads `def` on `device`: one HAL executable per module; the exports in IREE's order.
pub(crate) fn load(device: &hal::Device, def: &ExecutableDef) -> Result<Vec<LoadedExport>, hal::Error> {
    let mut exports: Vec<Option<LoadedExport>> = vec![None; def.exports.len()];
    for (module, ptx) in def.modules.iter().enumerate() {
        let members: Vec<(usize, &ExportDef)> =
            def.exports.iter().enumerate().filter(|(_, e)| e.module == module).collect();
        if members.is_empty() {
            continue;
        }
        let entry_points = members
            .iter()
            .map(|(_, e)| {
                let info = EntryPointInfo::new(e.kernel.clone(), e.block[0], e.bindings as usize, e.constants as usize)
                    .with_workgroup_size(e.block)
                    .with_dynamic_workgroup_memory(e.shared_memory);
                // IREE's compiler drops every parameter of a kernel that uses none (an empty body);
                // it then takes none, whatever its layout says.
                match ptx_param_count(ptx, &e.kernel) {
                    Some(0) if e.bindings + e.constants > 0 => info.with_params([]),
                    _ => info,
                }
            })
            .collect();
        let source =
            ExecutableSource::Bytes { format: ExecutableFormat::Ptx, data: ptx.as_slice().into(), entry_points };
        let executable = device
            .load_executable(&source)
            .map_err(|e| e.context(format!("module {module} of an IREE CUDA executable")))?;
        for (entry, (index, e)) in members.into_iter().enumerate() {
            exports[index] = Some(LoadedExport {
                executable: executable.clone(),
                entry: entry as u32,
                constant_count: e.constants,
                binding_count: e.bindings,
                workgroup_constants: false,
                workgroup_size: e.block,
            });
        }
    }
    Ok(exports.into_iter().map(|e| e.expect("every export names a module (checked by parse)")).collect())
}

/// Parses and loads `data` on `device` as an IREE executable.
pub(crate) fn create(device: &hal::Device, data: &[u8]) -> Result<*mut sys::iree_hal_executable_t, hal::Error> {
    let def = parse(data)?;
    let exports = load(device, &def)?;
    Ok(gpu_executable::create(def.exports.into_iter().map(|e| e.name).collect(), exports))
}

/// How many parameters `kernel`'s `.entry` declares in `ptx`, if it is found.
fn ptx_param_count(ptx: &[u8], kernel: &str) -> Option<usize> {
    let text = std::str::from_utf8(ptx).ok()?;
    let mut rest = text;
    while let Some(at) = rest.find(".entry") {
        let after = rest[at + ".entry".len()..].trim_start();
        if let Some(tail) = after.strip_prefix(kernel)
            && tail.trim_start().starts_with('(')
        {
            let open = tail.find('(')?;
            let close = tail[open..].find(')')? + open;
            return Some(tail[open + 1..close].matches(".param").count());
        }
        rest = &rest[at + ".entry".len()..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flatbuffer::{HEADER_BYTES, inferred_size};

    /// An executable `iree-compile --compile-mode=hal-executable --iree-hal-target-device=cuda`
    /// made from IREE's CTS sources (`testdata/regenerate.sh`).
    fn compiled(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/cts/executables-cuda").join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn parses_iree_compiler_output() {
        let def = parse(&compiled("command_buffer_dispatch_multi_entrypoint_test.bin")).unwrap();
        assert_eq!(def.modules.len(), 1);
        let ptx = std::str::from_utf8(&def.modules[0]).unwrap();
        assert!(ptx.contains(".entry negate(") && ptx.contains(".entry double_it("), "{ptx}");
        let names: Vec<_> = def.exports.iter().map(|e| (e.name.as_str(), e.kernel.as_str())).collect();
        assert_eq!(names, [("negate", "negate"), ("double_it", "double_it")]);
        for export in &def.exports {
            assert_eq!((export.module, export.bindings, export.constants), (0, 2, 0), "{export:?}");
            assert!(export.block.iter().all(|&d| d >= 1), "{export:?}");
        }
        let def = parse(&compiled("command_buffer_dispatch_constants_bindings_test.bin")).unwrap();
        let export = &def.exports[0];
        assert_eq!((export.kernel.as_str(), export.bindings, export.constants), ("scale_and_offset", 2, 2));
        assert_eq!(ptx_param_count(&def.modules[0], "scale_and_offset"), Some(4));
        // Every CTS executable parses, and each export's kernel is in its module.
        for name in [
            "command_buffer_dispatch_constants_test.bin",
            "command_buffer_dispatch_indirect_parameters_test.bin",
            "command_buffer_dispatch_multi_workgroup_test.bin",
            "command_buffer_dispatch_test.bin",
            "executable_cache_test.bin",
            "executable_test.bin",
        ] {
            let def = parse(&compiled(name)).unwrap();
            assert!(!def.exports.is_empty(), "{name}");
            for export in &def.exports {
                assert!(ptx_param_count(&def.modules[export.module], &export.kernel).is_some(), "{name}: {export:?}");
            }
        }
    }

    #[test]
    fn counts_a_kernels_ptx_parameters() {
        let ptx = b".visible .entry export0()\n{\n}\n.visible .entry abs(\n\t.param .u64 .ptr .global .align 16 abs_param_0,\n\t.param .b32 abs_param_1\n)\n";
        assert_eq!(ptx_param_count(ptx, "export0"), Some(0));
        assert_eq!(ptx_param_count(ptx, "abs"), Some(2));
        assert_eq!(ptx_param_count(ptx, "ab"), None);
        assert_eq!(ptx_param_count(ptx, "missing"), None);
    }

    #[test]
    fn refuses_what_is_not_one() {
        assert_eq!(inferred_size(b"\x7fELF....", IDENTIFIER).unwrap(), None);
        let data = compiled("command_buffer_dispatch_test.bin");
        assert_eq!(inferred_size(&data, IDENTIFIER).unwrap(), Some(data.len()));
        // Truncated: the header promises more than there is.
        let err = parse(&data[..data.len() - 8]).unwrap_err();
        assert_eq!(err.code(), hal::StatusCode::InvalidArgument);
        assert!(err.to_string().contains("header says"), "{err}");
        // A later format version.
        let mut later = data.clone();
        later[4] = 1;
        assert_eq!(parse(&later).unwrap_err().code(), hal::StatusCode::Unimplemented);
        // Every truncation of the flatbuffer is refused or parsed, never a panic.
        for cut in HEADER_BYTES..data.len() {
            let mut short = data[..cut].to_vec();
            short[8..16].copy_from_slice(&((cut - HEADER_BYTES) as u64).to_le_bytes());
            let _ = parse(&short);
        }
    }
}
