//! How failures look to an embedder, and how to carry on after one:
//! 1. a kernel that faults fails the semaphore its submission signals (`ABORTED`, with the kernel's
//!    message); work chained on it on another queue does not run and fails with the same status;
//!    unrelated work on the same queue completes;
//! 2. the host cancels a dependency with `Semaphore::fail`: the work waiting on it never runs;
//! 3. a wait that times out is `DEADLINE_EXCEEDED`, not a failure, and `Device::report` says what
//!    the stuck work waits for; signalling the missing value releases it;
//! 4. the device stays usable: the next round uses fresh semaphores.
//!
//! `cargo run --bin failure_handling` (cpu-sim: the kernels are native).

use std::sync::Arc;
use std::time::Duration;

use hal::{
    BufferBinding, BufferParams, CommandBufferMode, EntryPointInfo, Error, ExecutableSource, NativeEntryPoint,
    NativeInvocation, SemaphoreValue as SV, StatusCode, Timeout,
};

/// Long enough for any of these waits on a loaded machine.
const LONG: Timeout = Timeout::After(Duration::from_secs(30));

fn main() -> hal::Result<()> {
    run()
}

/// Runs the four scenarios, asserting what each one must show.
pub fn run() -> hal::Result<()> {
    let device = timeline_hal_examples::open_device("cpu-sim")?;
    let (q0, q1) = (device.queue(0)?, device.queue(1)?);
    let executable = device.load_executable(&ExecutableSource::Native(vec![
        NativeEntryPoint::new(
            EntryPointInfo::new("check_input", 1, 1, 0),
            Arc::new(|wg: &NativeInvocation<'_>| match wg.bindings[0].load_u32(0) {
                Some(0) => Err("input word 0 is zero: refusing to divide by it".to_string()),
                _ => Ok(()),
            }),
        ),
        NativeEntryPoint::new(
            EntryPointInfo::new("mark", 1, 1, 1),
            Arc::new(|wg: &NativeInvocation<'_>| match wg.bindings[0].store_u32(0, wg.constants[0]) {
                true => Ok(()),
                false => Err("the mark's binding holds no word".to_string()),
            }),
        ),
    ]))?;
    let input = device.allocate_buffer(BufferParams::host_visible(), 4)?;
    let downstream = device.allocate_buffer(BufferParams::host_visible(), 4)?;
    let unrelated = device.allocate_buffer(BufferParams::host_visible(), 4)?;
    let record = |entry: u32, constants: &[u32], buffer: &hal::Buffer| -> hal::Result<hal::CommandBuffer> {
        let cb = device.create_command_buffer(CommandBufferMode::Reusable)?;
        cb.dispatch(&executable, entry, [1, 1, 1], constants, &[BufferBinding::whole(buffer)])?;
        cb.end()?;
        Ok(cb)
    };
    let check = record(0, &[], &input)?;
    let mark_downstream = record(1, &[7], &downstream)?;
    let mark_unrelated = record(1, &[9], &unrelated)?;

    // 1. A kernel fault travels down the dependency chain, and only down it.
    let (checked, consumed, other) =
        (device.create_semaphore(0)?, device.create_semaphore(0)?, device.create_semaphore(0)?);
    q0.execute(&[], &check, &[SV::new(&checked, 1)])?; // input is all zeros: this faults
    q1.execute(&[SV::new(&checked, 1)], &mark_downstream, &[SV::new(&consumed, 1)])?;
    q0.execute(&[], &mark_unrelated, &[SV::new(&other, 1)])?;
    let fault = checked.wait(1, LONG).unwrap_err();
    assert_eq!(fault.code(), StatusCode::Aborted, "{fault}");
    assert!(fault.message().contains("refusing to divide"), "the kernel's message is kept: {fault}");
    let chained = consumed.wait(1, LONG).unwrap_err();
    assert_eq!(chained.code(), StatusCode::Aborted, "the same status travels: {chained}");
    assert!(chained.message().contains("refusing to divide"), "{chained}");
    other.wait(1, LONG)?; // unrelated work on the faulting queue still completes
    assert_eq!(downstream.read_to_vec()?, vec![0; 4], "work behind the fault never ran");
    assert_eq!(unrelated.read_to_vec()?, 9u32.to_le_bytes().to_vec());
    println!("1. kernel fault: {fault}");

    // 2. The host cancels a dependency: the gated work never runs, and its waiters see why.
    let (gate, after_gate) = (device.create_semaphore(0)?, device.create_semaphore(0)?);
    q1.execute(&[SV::new(&gate, 1)], &mark_downstream, &[SV::new(&after_gate, 1)])?;
    gate.fail(Error::cancelled("request 42 cancelled by the user"));
    let cancelled = after_gate.wait(1, LONG).unwrap_err();
    assert_eq!(cancelled.code(), StatusCode::Cancelled);
    assert!(gate.signal(2).is_err(), "a failed semaphore stays failed");
    assert_eq!(downstream.read_to_vec()?, vec![0; 4]);
    println!("2. cancelled dependency: {cancelled}");

    // 3. A timeout is not a failure; the hang report names the missing value; a signal releases it.
    let (late, released) = (device.create_semaphore(0)?, device.create_semaphore(0)?);
    q1.execute(&[SV::new(&late, 3)], &mark_downstream, &[SV::new(&released, 1)])?;
    let timeout = released.wait(1, Timeout::After(Duration::from_millis(50))).unwrap_err();
    assert_eq!(timeout.code(), StatusCode::DeadlineExceeded);
    let report = device.report();
    assert!(report.contains(&format!("semaphore {} >= 3", late.id())), "{report}");
    println!("3. timed out; the hang report says:\n{report}");
    late.signal(3)?;
    released.wait(1, LONG)?;
    assert_eq!(downstream.read_to_vec()?, 7u32.to_le_bytes().to_vec());

    // 4. Recover: fix the input and run the round again on fresh semaphores.
    input.write(0, &5u32.to_le_bytes())?;
    let (checked, consumed) = (device.create_semaphore(0)?, device.create_semaphore(0)?);
    q0.execute(&[], &check, &[SV::new(&checked, 1)])?;
    q1.execute(&[SV::new(&checked, 1)], &mark_downstream, &[SV::new(&consumed, 1)])?;
    consumed.wait(1, LONG)?;
    println!("4. recovered on fresh semaphores");
    Ok(())
}
