//! The kind of program a runtime is, end to end, and what one call of its reusable command buffer
//! costs: a function recorded once against binding-table slots (copy in, a kernel, copy out) and
//! called many times in a two-queue pipeline (queue 0 uploads each call's input, queue 1 runs the
//! function, submitted in reverse so every call waits for a value signalled later), a failing
//! kernel whose failure reaches the waiter, a readback awaited as a future, and a teardown with a
//! kernel still running.
//!
//! `cargo run --bin pipeline [-- CALLS [ELEMENTS]]` (default: 50 calls of 262144 `f32`s, 1 MiB).
//! It prints the mean time per call of the function. Built as this crate is, with cargo's default
//! debug settings, that is the time an embedder sees in a debug build.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use hal::{
    BindingRef, BufferBinding, BufferParams, BufferRef, CommandBufferMode, EntryPointInfo, ExecutableSource,
    NativeEntryPoint, NativeInvocation, SemaphoreValue as SV, StatusCode, Timeout,
};

/// Threads per workgroup of the kernels.
const WORKGROUP: u32 = 256;
/// The longest any wait here may take.
const LONG: Timeout = Timeout::After(Duration::from_secs(120));

fn main() -> hal::Result<()> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u32>());
    let calls = args.next().transpose().ok().flatten().unwrap_or(50);
    let elements = args.next().transpose().ok().flatten().unwrap_or(256 * 1024);
    let per_call = run(calls, elements)?;
    println!(
        "pipeline: {calls} calls of {elements} f32s ({} KiB): {:.3} ms per call",
        elements / 256,
        per_call.as_secs_f64() * 1e3
    );
    Ok(())
}

/// Runs the program; returns the mean time per call of the recorded function.
pub fn run(calls: u32, elements: u32) -> hal::Result<Duration> {
    let device = driver_cpu_sim::create_device()?;
    let (upload, compute) = (device.queue(0)?, device.queue(1)?);
    let n = elements as usize;
    let kernels = device.load_executable(&ExecutableSource::Native(vec![
        // `x = 2x + 1` over the binding, one thread per element.
        NativeEntryPoint::new(
            EntryPointInfo::new("scale", WORKGROUP, 1, 0),
            Arc::new(move |wg: &NativeInvocation<'_>| {
                let data = &wg.bindings[0];
                let first = (wg.workgroup_id[0] * WORKGROUP) as usize;
                for i in first..(first + WORKGROUP as usize).min(n) {
                    let x = data.load_f32(i).ok_or("load outside the binding")?;
                    if !data.store_f32(i, 2.0 * x + 1.0) {
                        return Err(format!("store of element {i} outside the binding"));
                    }
                }
                Ok(())
            }),
        ),
        NativeEntryPoint::new(
            EntryPointInfo::new("refuse", 1, 0, 0),
            Arc::new(|_: &NativeInvocation<'_>| Err("refused on purpose".to_string())),
        ),
    ]))?;
    let bytes = u64::from(elements) * 4;

    // The function, recorded once against slots: 0 input, 1 scratch, 2 output.
    let function = device.create_command_buffer(CommandBufferMode::Reusable)?;
    function.copy(BufferRef::slot(0), 0, BufferRef::slot(1), 0, bytes)?;
    function.barrier()?;
    let grid = [elements.div_ceil(WORKGROUP), 1, 1];
    function.dispatch_refs(&kernels, 0, grid, &[], &[BindingRef::slot(1, 0, bytes)])?;
    function.barrier()?;
    function.copy(BufferRef::slot(1), 0, BufferRef::slot(2), 0, bytes)?;
    function.end()?;

    // The pipeline: every call's execute is submitted before the upload it waits for.
    let scratch = device.allocate_buffer(BufferParams::device_local(), bytes)?;
    let input = device.allocate_buffer(BufferParams::device_local(), bytes)?;
    let output = device.allocate_buffer(BufferParams::device_local(), bytes)?;
    let (uploaded, computed) = (device.create_semaphore(0)?, device.create_semaphore(0)?);
    let table = [BufferBinding::whole(&input), BufferBinding::whole(&scratch), BufferBinding::whole(&output)];
    let values: Vec<f32> = (0..elements).map(|i| (i % 1000) as f32).collect();
    let started = Instant::now();
    for call in 1..=u64::from(calls) {
        let waits = [SV::new(&uploaded, call), SV::new(&computed, call - 1)];
        compute.execute_with_bindings(&waits, &function, &table, &[SV::new(&computed, call)])?;
        upload.write_values(&[SV::new(&computed, call - 1)], &input, 0, &values, &[SV::new(&uploaded, call)])?;
    }
    computed.wait(u64::from(calls), LONG)?;
    let per_call = started.elapsed() / calls.max(1);

    // A readback, awaited as a future.
    let readback = compute.read(&[SV::new(&computed, u64::from(calls))], &output, 0, bytes, &[])?;
    let result: Vec<f32> = block_on(readback.wait_as_async::<f32>())?;
    for (i, (&got, &x)) in result.iter().zip(&values).enumerate() {
        if got != 2.0 * x + 1.0 {
            return Err(hal::Error::data_loss(format!("element {i} is {got}, expected {}", 2.0 * x + 1.0)));
        }
    }

    // A failing kernel: its failure reaches whoever waits, with the kernel's message.
    let failing = device.create_command_buffer(CommandBufferMode::OneShot)?;
    failing.dispatch(&kernels, 1, [1, 1, 1], &[], &[])?;
    failing.end()?;
    let failed = device.create_semaphore(0)?;
    compute.execute(&[], &failing, &[SV::new(&failed, 1)])?;
    let err = failed.wait(1, LONG).unwrap_err();
    assert_eq!(err.code(), StatusCode::Aborted, "{err}");
    assert!(err.message().contains("refused on purpose"), "{err}");

    // Teardown with work in flight: the last call's kernel may still run when the handles go.
    compute.execute_with_bindings(&[], &function, &table, &[])?;
    drop((function, failing, kernels, table, scratch, input, output, upload, compute, device));
    Ok(per_call)
}

/// Polls `future` on this thread until it is ready (no runtime needed for a readback).
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut Context::from_waker(&waker)) {
            return output;
        }
        std::thread::park();
    }
}
