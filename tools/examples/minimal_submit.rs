//! The smallest complete use of the HAL: choose a driver by name, load a kernel, record a command
//! buffer, submit it between an upload and a readback ordered by one timeline semaphore, wait, and
//! check the result.
//!
//! `cargo run -p tools --example minimal_submit [-- DRIVER]` (default: cpu-sim). The kernel is given
//! as native code for cpu-sim and as PTX for cuda, with the same ABI: one binding, one constant.

use std::sync::Arc;

use hal::{
    BufferBinding, BufferParams, CommandBufferMode, EntryPointInfo, ExecutableFormat, ExecutableSource,
    NativeEntryPoint, NativeInvocation, SemaphoreValue as SV, Timeout,
};

/// Elements in the buffer.
const COUNT: u32 = 1000;
/// Threads per workgroup.
const WORKGROUP: u32 = 128;

/// `add_constant(data, addend)`: `data[i] += addend` for `i < COUNT`, one thread per element.
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
    setp.ge.u32 %p1, %r5, 1000;
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

/// The kernel in the format of `driver`.
fn add_constant(driver: &str) -> ExecutableSource {
    let info = EntryPointInfo::new("add_constant", WORKGROUP, 1, 1);
    if driver == "cuda" {
        return ExecutableSource::Bytes {
            format: ExecutableFormat::Ptx,
            data: Arc::from(ADD_PTX.as_bytes()),
            entry_points: vec![info],
        };
    }
    ExecutableSource::Native(vec![NativeEntryPoint::new(
        info,
        Arc::new(|wg: &NativeInvocation<'_>| {
            let data = &wg.bindings[0];
            for thread in 0..wg.workgroup_size[0] {
                let i = (wg.workgroup_id[0] * wg.workgroup_size[0] + thread) as usize;
                if i < COUNT as usize {
                    let value = data.load_u32(i).ok_or("index outside the binding")?;
                    data.store_u32(i, value + wg.constants[0]);
                }
            }
            Ok(())
        }),
    )])
}

/// Runs the example on the driver named by the first argument (cpu-sim by default).
fn main() -> hal::Result<()> {
    let driver = std::env::args().nth(1).unwrap_or_else(|| hal::DEFAULT_DRIVER.to_string());
    run(&driver)
}

/// The example on driver `driver`.
pub fn run(driver: &str) -> hal::Result<()> {
    // 1. Choose a driver: the registry with every driver of this build, then one by name.
    let device = tools::open_device(driver)?;
    println!("device: {} '{}'", device.info().driver, device.info().name);

    // 2. Load the kernel and 3. record a reusable command buffer that runs it over COUNT elements.
    let executable = device.load_executable(&add_constant(&device.info().driver))?;
    let entry = executable.entry_point("add_constant")?;
    let data = device.allocate_buffer(BufferParams::device_local(), u64::from(COUNT) * 4)?;
    let commands = device.create_command_buffer(CommandBufferMode::Reusable)?;
    commands.dispatch(&executable, entry, [COUNT.div_ceil(WORKGROUP), 1, 1], &[5], &[BufferBinding::whole(&data)])?;
    commands.end()?;

    // 4. Submit: upload -> add 5 -> add 5 again -> read back, each waiting on the value the one before
    // signals. Nothing here blocks; the host waits once, at the end.
    let queue = device.queue(0)?;
    let timeline = device.create_semaphore(0)?;
    let input: Vec<u8> = (0..COUNT).flat_map(|i| i.to_le_bytes()).collect();
    queue.write(&[], input, &data, 0, &[SV::new(&timeline, 1)])?;
    queue.execute(&[SV::new(&timeline, 1)], &commands, &[SV::new(&timeline, 2)])?;
    queue.execute(&[SV::new(&timeline, 2)], &commands, &[SV::new(&timeline, 3)])?;
    let readback = queue.read(&[SV::new(&timeline, 3)], &data, 0, u64::from(COUNT) * 4, &[SV::new(&timeline, 4)])?;

    // 5. Wait for the last value (or the failure that stopped the chain), then use the bytes.
    timeline.wait(4, Timeout::After(std::time::Duration::from_secs(30)))?;
    let bytes = readback.take().expect("the read signalled, so its bytes are there");
    let values: Vec<u32> = bytes.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    assert_eq!(values.len(), COUNT as usize);
    for (i, value) in values.iter().enumerate() {
        assert_eq!(*value, i as u32 + 10, "element {i}");
    }
    println!("ok: {COUNT} elements, each incremented by 5 twice, in semaphore order");
    Ok(())
}
