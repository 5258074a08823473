//! A panicking native kernel fails its dispatch with the panic's message and where it was raised,
//! and prints nothing: the panic hook the program had in place never sees it. Panics elsewhere
//! still reach that hook. One test in its own binary, because the panic hook is process-global.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hal::{
    BufferBinding, BufferParams, CommandBufferMode, EntryPointInfo, ExecutableSource, NativeEntryPoint,
    NativeInvocation, SemaphoreValue as SV, StatusCode, Timeout,
};

/// Panics the program's own hook was called for.
static HOOK_CALLS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn a_kernel_panic_reaches_the_error_and_not_the_panic_hook() {
    std::panic::set_hook(Box::new(|_| {
        HOOK_CALLS.fetch_add(1, Ordering::SeqCst);
    }));
    let device = driver_cpu_sim::create_device().unwrap();
    let kernel = Arc::new(|wg: &NativeInvocation<'_>| -> Result<(), String> {
        panic!("deliberate panic in workgroup {}", wg.workgroup_id[0]);
    });
    let entry = NativeEntryPoint::new(EntryPointInfo::new("panics", 1, 1, 0), kernel);
    let executable = device.load_executable(&ExecutableSource::Native(vec![entry])).unwrap();
    let buffer = device.allocate_buffer(BufferParams::device_local(), 4).unwrap();
    let queue = device.queue(0).unwrap();
    // One workgroup runs on the stream's thread; a large grid on the workgroup pool's threads.
    for workgroups in [1, 1024] {
        let commands = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
        commands.dispatch(&executable, 0, [workgroups, 1, 1], &[], &[BufferBinding::whole(&buffer)]).unwrap();
        commands.end().unwrap();
        let done = device.create_semaphore(0).unwrap();
        queue.execute(&[], &commands, &[SV::new(&done, 1)]).unwrap();
        let err = done.wait(1, Timeout::After(Duration::from_secs(10))).unwrap_err();
        assert_eq!(err.code(), StatusCode::Aborted, "{err}");
        assert!(err.message().contains("kernel panicked: deliberate panic in workgroup"), "{err}");
        assert!(err.message().contains("kernel_panic_output.rs:"), "the error says where: {err}");
    }
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 0, "kernel panics stay out of the panic hook");

    let _ = std::thread::spawn(|| panic!("a panic outside any kernel")).join();
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 1, "other panics still reach the program's hook");
}
