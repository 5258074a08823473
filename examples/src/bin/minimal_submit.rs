//! The smallest complete use of the HAL: choose a driver by name, load a kernel, record a command
//! buffer, submit it between an upload and a readback ordered by one timeline semaphore, wait, and
//! check the result.
//!
//! `cargo run --bin minimal_submit [-- DRIVER]` (default: cpu-sim). The kernel
//! (`timeline_hal_examples::add_constant`) comes as native code and as PTX with one ABI; the device
//! says which it loads.

use hal::{BufferBinding, BufferParams, CommandBufferMode, SemaphoreValue as SV, Timeout};
use timeline_hal_examples::{WORKGROUP, add_constant};

/// Elements in the buffer.
const COUNT: u32 = 1000;

/// Runs the example on the driver named by the first argument (cpu-sim by default).
fn main() -> hal::Result<()> {
    let driver = std::env::args().nth(1).unwrap_or_else(|| hal::DEFAULT_DRIVER.to_string());
    run(&driver)
}

/// The example on driver `driver`.
pub fn run(driver: &str) -> hal::Result<()> {
    // 1. Choose a driver: the registry with every driver of this build, then one by name.
    let device = timeline_hal_examples::open_device(driver)?;
    println!("device: {} '{}'", device.info().driver, device.info().name);

    // 2. Load the kernel and 3. record a reusable command buffer that runs it over COUNT elements.
    let executable = device.load_executable(&add_constant(device.info(), COUNT)?)?;
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
    queue.write(&[], &data, 0, input, &[SV::new(&timeline, 1)])?;
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
