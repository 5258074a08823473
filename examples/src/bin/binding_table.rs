//! One recorded "function" run 100 times with different buffers through a binding table, as a
//! compiler runtime runs a compiled function on every call with that call's tensors.
//!
//! The function is recorded once against three slots: slot 0 is the call's input (host-visible),
//! slot 1 scratch (device-local), slot 2 the call's output (host-visible). It uploads (copies slot 0
//! to slot 1), runs three dependent dispatches of `add_constant` on slot 1 (+1, +10, +100), and
//! reads back (copies slot 1 to slot 2). Each call passes new input and output buffers; every
//! output is checked against a CPU reference (`input + 111`).
//!
//! `cargo run --bin binding_table [-- DRIVER]` (default: cpu-sim).

use hal::{BindingRef, BufferBinding, BufferParams, BufferRef, CommandBufferMode, SemaphoreValue as SV, Timeout};
use timeline_hal_examples::{WORKGROUP, add_constant};

/// Elements per call.
const COUNT: u32 = 4096;
/// Calls of the function.
const CALLS: u64 = 100;

/// Runs the example on the driver named by the first argument (cpu-sim by default).
fn main() -> hal::Result<()> {
    let driver = std::env::args().nth(1).unwrap_or_else(|| hal::DEFAULT_DRIVER.to_string());
    run(&driver)
}

/// The example on driver `driver`.
pub fn run(driver: &str) -> hal::Result<()> {
    let device = timeline_hal_examples::open_device(driver)?;
    let executable = device.load_executable(&add_constant(device.info(), COUNT)?)?;
    let entry = executable.entry_point("add_constant")?;
    let bytes = u64::from(COUNT) * 4;

    // Recorded once: upload, three dispatches, readback, all against slots.
    let function = device.create_command_buffer(CommandBufferMode::Reusable)?;
    function.set_label("add 111")?;
    function.copy(BufferRef::slot(0), 0, BufferRef::slot(1), 0, bytes)?;
    for addend in [1, 10, 100] {
        function.barrier()?;
        let scratch = [BindingRef::slot(1, 0, bytes)];
        function.dispatch_refs(&executable, entry, [COUNT.div_ceil(WORKGROUP), 1, 1], &[addend], &scratch)?;
    }
    function.barrier()?;
    function.copy(BufferRef::slot(1), 0, BufferRef::slot(2), 0, bytes)?;
    function.end()?;

    // Called 100 times, each with its own buffers, one after another on one queue.
    let (queue, calls) = (device.queue(0)?, device.create_semaphore(0)?);
    let scratch = device.allocate_buffer(BufferParams::device_local(), bytes)?;
    let mut outputs = Vec::new();
    for call in 0..CALLS {
        let input = device.allocate_buffer(BufferParams::host_visible(), bytes)?;
        let values: Vec<u32> = (0..COUNT).map(|i| call as u32 * 100_000 + i).collect();
        input.write_values(0, &values)?;
        let output = device.allocate_buffer(BufferParams::host_visible(), bytes)?;
        let table = [BufferBinding::whole(&input), BufferBinding::whole(&scratch), BufferBinding::whole(&output)];
        queue.execute_with_bindings(&[SV::new(&calls, call)], &function, &table, &[SV::new(&calls, call + 1)])?;
        outputs.push((values, output));
    }
    calls.wait(CALLS, Timeout::After(std::time::Duration::from_secs(60)))?;

    // Checked against the CPU reference.
    for (call, (input, output)) in outputs.iter().enumerate() {
        let expected: Vec<u32> = input.iter().map(|v| v + 111).collect();
        let got = output.read_as::<u32>()?;
        if got != expected {
            return Err(hal::Error::data_loss(format!("call {call}: output differs from the CPU reference")));
        }
    }
    println!(
        "ok: '{}' ran {CALLS} times on {} '{}' with a new binding table each time; every output matches the CPU reference",
        function.label().unwrap_or("function"),
        device.info().driver,
        device.info().name
    );
    Ok(())
}
