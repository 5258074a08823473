//! Probe: per-dispatch profile times on the two CUDA replay paths. Runs `[sleep 2 ms][X][sleep
//! 200 us]` with X one of: nothing, a fill of host (pinned) memory, a fill of device memory; each
//! as a graph (the default) and replayed command by command (graphs off), and prints the measured
//! durations of the two sleeps.
use std::sync::Arc;

use driver_cuda::{CudaDriver, CudaOptions};
use hal::driver::Driver;
use hal::{
    BufferParams, CommandBufferMode, EntryPointInfo, ExecutableFormat, ExecutableSource, ProfileOptions,
    SemaphoreValue, Timeout,
};

const SLEEP_PTX: &str = r#"
.version 7.0
.target sm_75
.address_size 64
.visible .entry sleep_us(.param .u32 us)
{
    .reg .u32 %r<2>;
    .reg .u64 %rd<5>;
    .reg .pred %p;
    ld.param.u32 %r1, [us];
    cvt.u64.u32 %rd1, %r1;
    mul.lo.u64 %rd1, %rd1, 1000;
    mov.u64 %rd2, %globaltimer;
LOOP:
    mov.u64 %rd3, %globaltimer;
    sub.u64 %rd4, %rd3, %rd2;
    setp.lt.u64 %p, %rd4, %rd1;
    @%p bra LOOP;
    ret;
}
"#;

fn main() -> hal::Result<()> {
    for graphs in [true, false] {
        let mut options = CudaOptions::from_env()?;
        if !graphs {
            options.graph_min_commands = usize::MAX;
            options.reusable_graph_min_commands = usize::MAX;
        }
        let device = CudaDriver::with_options(options).create_device(0)?;
        let sleep = device.load_executable(&ExecutableSource::Bytes {
            format: ExecutableFormat::Ptx,
            data: Arc::from(SLEEP_PTX.as_bytes()),
            entry_points: vec![EntryPointInfo::new("sleep_us", 1, 0, 1)],
        })?;
        let host = device.allocate_buffer(BufferParams::host_visible(), 256)?;
        let dev = device.allocate_buffer(BufferParams::device_local(), 256)?;
        for between in ["nothing", "host fill", "device fill"] {
            let cb = device.create_command_buffer(CommandBufferMode::Reusable)?;
            cb.dispatch(&sleep, 0, [1, 1, 1], &[2000], &[])?;
            cb.barrier()?;
            match between {
                "host fill" => cb.fill(&host, 0, 4, 9u32)?,
                "device fill" => cb.fill(&dev, 0, 4, 9u32)?,
                _ => {}
            }
            cb.barrier()?;
            cb.dispatch(&sleep, 0, [1, 1, 1], &[200], &[])?;
            cb.end()?;
            let done = device.create_semaphore(0)?;
            for round in 1..=3u64 {
                device.begin_profiling(ProfileOptions::dispatches())?;
                device.queue(0)?.execute(&[], &cb, &[SemaphoreValue::new(&done, round)])?;
                done.wait(round, Timeout::After(std::time::Duration::from_secs(10)))?;
                let profile = device.end_profiling()?;
                let t: Vec<String> =
                    profile.dispatches.iter().map(|d| format!("{:.1}", d.duration().as_secs_f64() * 1e6)).collect();
                let gap = match &profile.dispatches[..] {
                    [a, b] => b.start.saturating_duration_since(a.end).as_secs_f64() * 1e6,
                    _ => f64::NAN,
                };
                println!(
                    "{:>6} {:>12} round {round}: sleeps {} us, gap {gap:.1} us",
                    if graphs { "graph" } else { "direct" },
                    between,
                    t.join(" / ")
                );
            }
        }
    }
    Ok(())
}
