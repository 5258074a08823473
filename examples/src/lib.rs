//! What the example programs share: the registry of the drivers this build has, and the kernel
//! `add_constant` in the two forms the drivers load. Copy this file with an example.

use std::sync::Arc;

use hal::{
    Device, DeviceInfo, EntryPointInfo, ExecutableFormat, ExecutableKind, ExecutableSource, NativeEntryPoint,
    NativeInvocation, Registry, Result,
};

/// Threads per workgroup of `add_constant`.
pub const WORKGROUP: u32 = 128;

/// A registry of every driver this build has: cpu-sim, and CUDA with the `cuda` feature (listed as
/// unavailable, with the reason, where there is no GPU or `libcuda`).
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    driver_cpu_sim::register(&mut registry);
    #[cfg(feature = "cuda")]
    driver_cuda::register(&mut registry);
    registry
}

/// Device 0 of driver `name`; an error names the driver.
pub fn open_device(name: &str) -> Result<Device> {
    registry().create_device(name, 0).map_err(|e| e.context(format!("opening driver '{name}'")))
}

/// `add_constant(data, addend)`'s PTX: `data[i] += addend` for `i` below `COUNT` (replaced by the
/// element count), one thread per element.
const ADD_PTX: &str = r#".version 7.0
.target sm_80
.address_size 64
.visible .entry add_constant(.param .u64 data, .param .u32 addend)
.maxntid 128, 1, 1
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [data];
    ld.param.u32 %r1, [addend];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.u32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, COUNT;
    @%p1 bra DONE;
    mul.wide.u32 %rd2, %r5, 4;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.u32 %r6, [%rd3];
    add.u32 %r7, %r6, %r1;
    st.global.u32 [%rd3], %r7;
DONE:
    ret;
}
"#;

/// `add_constant` over `count` `u32` elements (one binding, one constant), in the first form the
/// device `info` describes loads (native, then PTX); `Unimplemented` naming the kinds otherwise.
pub fn add_constant(info: &DeviceInfo, count: u32) -> Result<ExecutableSource> {
    let entry = EntryPointInfo::new("add_constant", WORKGROUP, 1, 1);
    match info.choose_executable_kind(&[ExecutableKind::Native, ExecutableKind::Ptx])? {
        ExecutableKind::Ptx => Ok(ExecutableSource::Bytes {
            format: ExecutableFormat::Ptx,
            data: Arc::from(ADD_PTX.replace("COUNT", &count.to_string()).as_bytes()),
            entry_points: vec![entry],
        }),
        _ => Ok(ExecutableSource::Native(vec![NativeEntryPoint::new(
            entry,
            Arc::new(move |wg: &NativeInvocation<'_>| {
                let data = &wg.bindings[0];
                for thread in 0..wg.workgroup_size[0] {
                    let i = (wg.workgroup_id[0] * wg.workgroup_size[0] + thread) as usize;
                    if i < count as usize {
                        let value = data.load_u32(i).ok_or("index outside the binding")?;
                        if !data.store_u32(i, value.wrapping_add(wg.constants[0])) {
                            return Err("index outside the binding".into());
                        }
                    }
                }
                Ok(())
            }),
        )])),
    }
}
