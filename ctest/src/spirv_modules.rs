//! SPIR-V modules an embedder gets wrong: truncated or with a malformed header, or whose interface
//! is wider than the entry points declared for it. Each is refused at load with `InvalidArgument`
//! and the reason, before a driver compiles it; a module loaded with no entry points declared
//! takes them from the module. Devices that load no SPIR-V skip these cases.

use std::sync::Arc;

use hal::{EntryPointInfo, ExecutableFormat, ExecutableKind, ExecutableSource, StatusCode};

use crate::check::{CaseError, CaseResult, Context, expect_code};
use crate::context::{Cx, from_bytes, to_bytes};
use crate::kernels::Kernel;
use crate::{ensure, ensure_eq};

/// The catalogue's SPIR-V of `kernel`, or a skip where the device loads no SPIR-V.
fn spirv_of(cx: &Cx, kernel: Kernel) -> Result<Vec<u32>, CaseError> {
    if !cx.device().info().loads(ExecutableKind::Spirv) {
        return Err(CaseError::Skip("the device loads no SPIR-V".into()));
    }
    match cx.fixture().catalogue().source(kernel, ExecutableKind::Spirv).ctx("the catalogue's SPIR-V")? {
        ExecutableSource::Bytes { data, .. } => Ok(from_bytes(&data)),
        other => Err(CaseError::Fail(format!("the catalogue gave {:?} for SPIR-V", ExecutableKind::of(&other)))),
    }
}

fn load(cx: &Cx, words: &[u32], entry_points: Vec<EntryPointInfo>) -> hal::Result<hal::Executable> {
    let data: Arc<[u8]> = Arc::from(to_bytes(words));
    cx.device().load_executable(&ExecutableSource::Bytes { format: ExecutableFormat::Spirv, data, entry_points })
}

/// Every truncation of a module at an instruction boundary, a header with id bound 0, one with an
/// unknown version, and a module with an instruction's word count past its end: each is
/// `InvalidArgument`, and the whole module still loads after them.
pub(crate) fn malformed_modules_refused_at_load(cx: &Cx) -> CaseResult {
    let words = spirv_of(cx, Kernel::FillU32)?;
    let declared = Kernel::FillU32.entry_points();
    let mut at = 5;
    while at < words.len() {
        let what = format!("cut after word {at} of {}", words.len());
        let e = expect_code(load(cx, &words[..at], declared.clone()), StatusCode::InvalidArgument, &what)?;
        ensure!(e.message().contains("SPIR-V"), "cut after word {at}: {e}");
        at += ((words[at] >> 16) as usize).max(1);
    }
    let mut bound_zero = words.clone();
    bound_zero[3] = 0;
    expect_code(load(cx, &bound_zero, declared.clone()), StatusCode::InvalidArgument, "id bound 0")?;
    let mut version = words.clone();
    version[1] = 0x0009_0000;
    expect_code(load(cx, &version, declared.clone()), StatusCode::InvalidArgument, "version 9.0")?;
    let mut overlong = words.clone();
    overlong[5] = (overlong[5] & 0xffff) | (u32::MAX << 16);
    expect_code(load(cx, &overlong, declared.clone()), StatusCode::InvalidArgument, "a word count past the end")?;
    load(cx, &words, declared).ctx("the whole module").map(drop)
}

/// A module that uses more than its declared entry point says (a binding past the declared count,
/// a push-constant block larger than the declared constants, another workgroup size) is refused
/// at load with both sides named.
pub(crate) fn interface_wider_than_declared_refused_at_load(cx: &Cx) -> CaseResult {
    let words = spirv_of(cx, Kernel::AddF32)?;
    let abi = &Kernel::AddF32.entry_points()[0];
    let fewer = EntryPointInfo::new(abi.name.clone(), abi.workgroup_size[0], 2, 0);
    let e = expect_code(load(cx, &words, vec![fewer]), StatusCode::InvalidArgument, "3 bindings declared as 2")?;
    ensure!(e.message().contains("binding 2") && e.message().contains("2 bindings"), "message: {e}");
    let words = spirv_of(cx, Kernel::ScaleOffsetF32)?;
    let abi = &Kernel::ScaleOffsetF32.entry_points()[0];
    let one = EntryPointInfo::new(abi.name.clone(), abi.workgroup_size[0], 1, 1);
    let e = expect_code(load(cx, &words, vec![one]), StatusCode::InvalidArgument, "8 constant bytes as 1 constant")?;
    ensure!(e.message().contains("8 bytes") && e.message().contains("1 constants"), "message: {e}");
    let wider = EntryPointInfo::new(abi.name.clone(), abi.workgroup_size[0] * 2, 1, 2);
    let e = expect_code(load(cx, &words, vec![wider]), StatusCode::InvalidArgument, "another workgroup size")?;
    ensure!(e.message().contains("workgroup size"), "message: {e}");
    load(cx, &words, Kernel::ScaleOffsetF32.entry_points()).ctx("as declared").map(drop)
}

/// A module loaded with no entry points declared takes them from the module: each compute entry
/// point with its workgroup size, the bindings it uses and its push constants.
pub(crate) fn interface_taken_from_the_module_when_undeclared(cx: &Cx) -> CaseResult {
    for kernel in [Kernel::FillU32, Kernel::AddF32, Kernel::ScaleOffsetF32] {
        let words = spirv_of(cx, kernel)?;
        let exe = load(cx, &words, Vec::new()).ctx(format!("{kernel:?} without entry points"))?;
        ensure_eq!(exe.entry_points(), kernel.entry_points().as_slice(), "{kernel:?}'s entry points from the module");
    }
    Ok(())
}
