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

use std::sync::Arc;

use hal::{EntryPointInfo, ExecutableFormat, ExecutableSource};

use crate::executable::LoadedExport;
use crate::ffi::{self, code, iree_status_t, sys};

/// The executable format IREE's executable caches name it by.
pub(crate) const FORMAT: &str = "PTXE";
/// The executable format IREE's compiler names it by (`hal.executable.format` queries).
pub(crate) const COMPILER_FORMAT: &str = "cuda-nvptx-fb";
/// The file identifier in the header and in the flatbuffer.
const IDENTIFIER: &[u8; 4] = b"CDA1";
/// Bytes of IREE's executable file header (magic, version, content size, reserved words).
const HEADER_BYTES: usize = 64;

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

fn malformed(what: impl std::fmt::Display) -> hal::Error {
    hal::Error::invalid_argument(format!("IREE CUDA executable: {what}"))
}

/// Bytes of a flatbuffer, read with bounds checks.
struct Flat<'a>(&'a [u8]);

impl<'a> Flat<'a> {
    fn bytes(&self, at: usize, len: usize) -> Result<&'a [u8], hal::Error> {
        at.checked_add(len)
            .and_then(|end| self.0.get(at..end))
            .ok_or_else(|| malformed(format!("{len} bytes at offset {at} lie past its {} bytes", self.0.len())))
    }
    fn u16(&self, at: usize) -> Result<u16, hal::Error> {
        Ok(u16::from_le_bytes(self.bytes(at, 2)?.try_into().expect("2 bytes")))
    }
    fn u32(&self, at: usize) -> Result<u32, hal::Error> {
        Ok(u32::from_le_bytes(self.bytes(at, 4)?.try_into().expect("4 bytes")))
    }
    /// The position an offset field at `at` points to (offsets count from the field).
    fn follow(&self, at: usize) -> Result<usize, hal::Error> {
        at.checked_add(self.u32(at)? as usize).ok_or_else(|| malformed(format!("an offset at {at} overflows")))
    }
    fn table(&self, at: usize) -> Result<Table<'_, 'a>, hal::Error> {
        let back = i32::from_le_bytes(self.bytes(at, 4)?.try_into().expect("4 bytes"));
        let vtable = (at as i64 - i64::from(back))
            .try_into()
            .map_err(|_| malformed(format!("the table at {at} has its vtable before the buffer")))?;
        let vtable_len = self.u16(vtable)?;
        Ok(Table { flat: self, at, vtable, vtable_len })
    }
    /// A vector at `at`: its length and where its elements start.
    fn vector(&self, at: usize) -> Result<(usize, usize), hal::Error> {
        Ok((self.u32(at)? as usize, at + 4))
    }
}

/// One flatbuffer table.
struct Table<'f, 'a> {
    flat: &'f Flat<'a>,
    at: usize,
    vtable: usize,
    vtable_len: u16,
}

impl<'a> Table<'_, 'a> {
    /// Where field `index` lies, if present.
    fn field(&self, index: usize) -> Result<Option<usize>, hal::Error> {
        let slot = 4 + 2 * index;
        if slot + 2 > self.vtable_len as usize {
            return Ok(None);
        }
        let offset = self.flat.u16(self.vtable + slot)?;
        Ok((offset != 0).then_some(self.at + offset as usize))
    }
    fn u32_or(&self, index: usize, default: u32) -> Result<u32, hal::Error> {
        self.field(index)?.map_or(Ok(default), |at| self.flat.u32(at))
    }
    fn string(&self, index: usize) -> Result<Option<&'a [u8]>, hal::Error> {
        let Some(at) = self.field(index)? else { return Ok(None) };
        let (len, start) = self.flat.vector(self.flat.follow(at)?)?;
        self.flat.bytes(start, len).map(Some)
    }
    /// The tables of a vector-of-tables field (empty when absent).
    fn tables(&self, index: usize) -> Result<Vec<Table<'_, 'a>>, hal::Error> {
        let Some(at) = self.field(index)? else { return Ok(Vec::new()) };
        let (len, start) = self.flat.vector(self.flat.follow(at)?)?;
        self.flat.bytes(start, len.checked_mul(4).ok_or_else(|| malformed("a vector's length overflows"))?)?;
        (0..len).map(|i| self.flat.follow(start + 4 * i).and_then(|t| self.flat.table(t))).collect()
    }
    /// The length of a vector field whose elements are `element` bytes (0 when absent).
    fn vector_len(&self, index: usize, element: usize) -> Result<usize, hal::Error> {
        let Some(at) = self.field(index)? else { return Ok(0) };
        let (len, start) = self.flat.vector(self.flat.follow(at)?)?;
        self.flat.bytes(start, len.checked_mul(element).ok_or_else(|| malformed("a vector's length overflows"))?)?;
        Ok(len)
    }
}

fn text(bytes: &[u8], what: &str) -> Result<String, hal::Error> {
    String::from_utf8(bytes.to_vec()).map_err(|_| malformed(format!("{what} is not UTF-8")))
}

/// The bytes an executable takes (header and flatbuffer), checked: `None` when `data` does not
/// start with this format's header.
pub(crate) fn inferred_size(data: &[u8]) -> Result<Option<usize>, hal::Error> {
    if data.len() < 4 || &data[..4] != IDENTIFIER {
        return Ok(None);
    }
    if data.len() < HEADER_BYTES {
        return Err(malformed(format!("{} bytes, less than its {HEADER_BYTES}-byte header", data.len())));
    }
    let version = u32::from_le_bytes(data[4..8].try_into().expect("4 bytes"));
    if version != 0 {
        return Err(hal::Error::new(
            hal::StatusCode::Unimplemented,
            format!("IREE CUDA executable: version {version} (this bridge reads version 0)"),
        ));
    }
    let content = u64::from_le_bytes(data[8..16].try_into().expect("8 bytes"));
    let available = (data.len() - HEADER_BYTES) as u64;
    if content == 0 || content > available {
        return Err(malformed(format!("its header says {content} bytes follow; {available} do")));
    }
    Ok(Some(HEADER_BYTES + content as usize))
}

/// Parses an executable in IREE's CUDA format.
pub(crate) fn parse(data: &[u8]) -> Result<ExecutableDef, hal::Error> {
    let size = inferred_size(data)?.ok_or_else(|| malformed("it does not start with the CDA1 identifier"))?;
    let flat = Flat(&data[HEADER_BYTES..size]);
    if flat.bytes(4, 4)? != IDENTIFIER {
        return Err(malformed("its flatbuffer lacks the CDA1 file identifier"));
    }
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

/// An IREE executable of this format, loaded: IREE's view (names, counts, block sizes) and the
/// HAL executables that run it.
#[repr(C)]
pub(crate) struct CudaExecutable {
    resource: sys::iree_hal_resource_t,
    names: Vec<String>,
    pub(crate) exports: Arc<[LoadedExport]>,
}

static VTABLE: sys::iree_hal_executable_vtable_t = sys::iree_hal_executable_vtable_t {
    destroy: Some(destroy),
    function_count: Some(function_count),
    function_info: Some(function_info),
    function_parameters: Some(function_parameters),
    lookup_function_by_name: Some(lookup_function_by_name),
    lookup_global_by_name: Some(lookup_global_by_name),
};

/// Parses and loads `data` on `device` as an IREE executable.
pub(crate) fn create(device: &hal::Device, data: &[u8]) -> Result<*mut sys::iree_hal_executable_t, hal::Error> {
    let def = parse(data)?;
    let exports = load(device, &def)?;
    let executable = Box::into_raw(Box::new(CudaExecutable {
        resource: sys::iree_hal_resource_t::default(),
        names: def.exports.into_iter().map(|e| e.name).collect(),
        exports: exports.into(),
    }));
    // SAFETY: a fresh allocation; this sets its reference count and vtable.
    unsafe { ffi::thal_iree_resource_initialize((&raw const VTABLE).cast(), &raw mut (*executable).resource) };
    Ok(executable.cast())
}

/// This module's executable behind `executable`, if it is one.
///
/// # Safety
/// `executable` is a live IREE executable.
pub(crate) unsafe fn downcast<'a>(executable: *mut sys::iree_hal_executable_t) -> Option<&'a CudaExecutable> {
    // SAFETY: every IREE executable starts with its resource header.
    let vtable = unsafe { (*executable.cast::<sys::iree_hal_resource_t>()).vtable };
    // SAFETY: the vtable is ours, so the executable is a `CudaExecutable`.
    (vtable == (&raw const VTABLE).cast()).then(|| unsafe { &*executable.cast::<CudaExecutable>() })
}

/// # Safety
/// IREE calls the vtable with a live executable `create` made.
unsafe fn cast<'a>(executable: *mut sys::iree_hal_executable_t) -> &'a CudaExecutable {
    // SAFETY: the caller's contract.
    unsafe { &*executable.cast::<CudaExecutable>() }
}

unsafe extern "C" fn destroy(executable: *mut sys::iree_hal_executable_t) {
    // SAFETY: IREE calls this once, with the last reference.
    drop(unsafe { Box::from_raw(executable.cast::<CudaExecutable>()) });
}

unsafe extern "C" fn function_count(executable: *mut sys::iree_hal_executable_t) -> sys::iree_host_size_t {
    // SAFETY: a live executable of ours.
    unsafe { cast(executable) }.exports.len()
}

unsafe extern "C" fn function_info(
    executable: *mut sys::iree_hal_executable_t,
    function: sys::iree_hal_executable_function_t,
    out: *mut sys::iree_hal_executable_function_info_t,
) -> iree_status_t {
    // SAFETY: a live executable of ours.
    let executable = unsafe { cast(executable) };
    let Some(export) = executable.exports.get(function.value as usize) else {
        return ffi::status(
            code::OUT_OF_RANGE,
            &format!("function {} of an executable with {}", function.value, executable.exports.len()),
        );
    };
    let info = sys::iree_hal_executable_function_info_t {
        // The name lives as long as the executable, as IREE expects.
        name: ffi::view(&executable.names[function.value as usize]),
        constant_count: export.constant_count as u16,
        binding_count: export.binding_count as u16,
        workgroup_size: export.workgroup_size,
        ..Default::default()
    };
    // SAFETY: writable, per IREE's contract.
    unsafe { *out = info };
    ffi::ok()
}

unsafe extern "C" fn function_parameters(
    _executable: *mut sys::iree_hal_executable_t,
    _function: sys::iree_hal_executable_function_t,
    _capacity: sys::iree_host_size_t,
    _out: *mut sys::iree_hal_executable_function_parameter_t,
) -> iree_status_t {
    // IREE's own CUDA driver does not reflect parameters either (the format carries no metadata).
    ffi::unimplemented("parameter reflection of CUDA executables (the format carries no parameter metadata)")
}

unsafe extern "C" fn lookup_function_by_name(
    executable: *mut sys::iree_hal_executable_t,
    name: sys::iree_string_view_t,
    out: *mut sys::iree_hal_executable_function_t,
) -> iree_status_t {
    // SAFETY: a live executable of ours and a valid view.
    let (executable, name) = unsafe { (cast(executable), ffi::text(name)) };
    match executable.names.iter().position(|n| *n == name) {
        Some(index) => {
            // SAFETY: writable, per IREE's contract.
            unsafe { *out = sys::iree_hal_executable_function_t { value: index as u64 } };
            ffi::ok()
        }
        None => ffi::status(code::NOT_FOUND, &format!("function '{name}' not found in the executable")),
    }
}

unsafe extern "C" fn lookup_global_by_name(
    _executable: *mut sys::iree_hal_executable_t,
    _name: sys::iree_string_view_t,
    _affinity: sys::iree_hal_queue_affinity_t,
    _out: *mut *mut sys::iree_hal_buffer_t,
) -> iree_status_t {
    ffi::unimplemented("executable globals are not bridged (the HAL has no API for a module's global variables)")
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(inferred_size(b"\x7fELF....").unwrap(), None);
        let data = compiled("command_buffer_dispatch_test.bin");
        assert_eq!(inferred_size(&data).unwrap(), Some(data.len()));
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
