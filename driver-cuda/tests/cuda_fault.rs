//! A trapping kernel, in its own process: a device fault poisons the GPU's primary context for every
//! device of this process. Checks that the fault fails the submission's signals with a named CUDA
//! error, that later work fails instead of hanging, that nothing aborts, and measures what happens
//! afterwards (printed as `MEASURED:` lines; the crate docs describe the outcome).

mod common;

use std::time::Instant;

use common::*;
use hal::{BufferBinding, CommandBufferMode, SemaphoreValue as SV, StatusCode};

fn describe(result: &hal::Result<()>) -> String {
    match result {
        Ok(()) => "ok".to_string(),
        Err(e) => e.to_string(),
    }
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn trap_fails_its_submission_and_poisons_the_gpu_for_this_process() {
    if !require_cuda() {
        return;
    }
    let a = device();
    let b = device();
    let Some(exe) = kernels(&a) else { return };
    let (q0, q1, q2) = (a.queue(0).unwrap(), a.queue(1).unwrap(), a.queue(2).unwrap());
    let flag = host_buffer(&a, 4);
    let buf = device_buffer(&a, 256);
    let trap = a.create_command_buffer(CommandBufferMode::OneShot).unwrap();
    trap.dispatch(&exe, exe.entry_point("trap_now").unwrap(), [1, 1, 1], &[], &[BufferBinding::whole(&flag)]).unwrap();
    trap.end().unwrap();
    let (s, same_queue, other_queue) =
        (a.create_semaphore(0).unwrap(), a.create_semaphore(0).unwrap(), a.create_semaphore(0).unwrap());

    let start = Instant::now();
    q0.execute(&[], &trap, &[SV::new(&s, 1)]).unwrap();
    q0.fill(&[], &buf, 0, 256, 1u8, &[SV::new(&same_queue, 1)]).unwrap();
    q1.fill(&[SV::new(&s, 1)], &buf, 0, 256, 2u8, &[SV::new(&other_queue, 1)]).unwrap();
    let err = s.wait(1, T).expect_err("the trapping submission must fail");
    println!("MEASURED: trap reported after {:?}: {err}", start.elapsed());
    assert!(matches!(err.code(), StatusCode::DataLoss | StatusCode::Aborted), "{err}");
    assert!(err.message().contains("CUDA_ERROR_"), "the message names the CUDA error: {err}");

    let same = same_queue.wait(1, T);
    let other = other_queue.wait(1, T);
    println!("MEASURED: work behind the trap on its queue: {}", describe(&same));
    println!("MEASURED: work on another queue waiting on the trap: {}", describe(&other));
    assert!(same.is_err() && other.is_err(), "work after a sticky fault fails, it does not hang or succeed");

    // A later submission on an unrelated queue of the same device.
    let later = a.create_semaphore(0).unwrap();
    let submitted = q2.fill(&[], &buf, 0, 256, 3u8, &[SV::new(&later, 1)]);
    let later = later.wait(1, T);
    println!("MEASURED: later submission: call {}, signal {}", describe(&submitted), describe(&later));
    assert!(later.is_err(), "later submissions fail with the sticky status");

    // Another hal device of the same GPU shares the primary context.
    let bq = b.queue(0).unwrap();
    let bbuf = device_buffer_or_error(&b);
    match bbuf {
        Ok(bbuf) => {
            let sb = b.create_semaphore(0).unwrap();
            let submitted = bq.fill(&[], &bbuf, 0, 64, 4u8, &[SV::new(&sb, 1)]);
            let result = sb.wait(1, T);
            println!(
                "MEASURED: other device of the same GPU: call {}, signal {}",
                describe(&submitted),
                describe(&result)
            );
        }
        Err(e) => println!("MEASURED: other device of the same GPU: allocation fails: {e}"),
    }
    let flag_value = flag.read_to_vec().map(|v| u32s(&v)[0]);
    println!("MEASURED: host-visible write made before the trap reads back as {flag_value:?}");
    println!("MEASURED: resource usage after the fault: {}", a.resource_usage());

    // Teardown must not hang; measure it.
    let start = Instant::now();
    drop((q0, q1, q2, bq, trap, exe, flag, buf, s, same_queue, other_queue));
    drop(a);
    drop(b);
    println!("MEASURED: dropping both faulted devices took {:?}", start.elapsed());

    // Every device of the GPU is gone and the primary context was released: does a new one work?
    let attempt = || -> hal::Result<Vec<u8>> {
        let c = driver_cuda::create_device(0)?;
        let q = c.queue(0)?;
        let buf = c.allocate_buffer(hal::BufferParams::device_local(), 64)?;
        let done = c.create_semaphore(0)?;
        q.fill(&[], &buf, 0, 64, 9u8, &[SV::new(&done, 1)])?;
        let bytes = q.read(&[SV::new(&done, 1)], &buf, 0, 64, &[SV::new(&done, 2)])?;
        done.wait(2, T)?;
        bytes.take().ok_or_else(|| hal::Error::internal("no bytes"))
    };
    let show = |what: &str, result: &hal::Result<Vec<u8>>| match result {
        Ok(bytes) => {
            println!("MEASURED: {what}: works ({} bytes, all 9: {})", bytes.len(), bytes.iter().all(|&b| b == 9))
        }
        Err(e) => println!("MEASURED: {what}: fails: {e}"),
    };
    // CUDA documents sticky errors as needing a new process; retaining the primary context again may
    // fail too. Either way: a clear error, no panic, no hang.
    let start = Instant::now();
    let again = attempt();
    show("a new device after dropping the faulted ones", &again);
    println!("MEASURED: answered in {:?}", start.elapsed());
    if let Err(e) = again {
        assert_eq!(e.code(), StatusCode::DataLoss, "{e}");
        assert!(e.message().contains("CUDA_ERROR_"), "{e}");
    }
}

fn device_buffer_or_error(device: &hal::Device) -> hal::Result<hal::Buffer> {
    device.allocate_buffer(hal::BufferParams::device_local(), 64)
}
