//! Times `N` chained executes of a reusable one-dispatch command buffer on Vulkan device 0:
//! `cargo run --release -p timeline-hal-vulkan --example replay_timing [N]`.

use std::time::Instant;

use hal::{BufferBinding, BufferParams, CommandBufferMode, SemaphoreValue, Timeout};

const ADD_ONE_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@compute @workgroup_size(1)
fn add_one() {
    data[0] += 1u;
}
"#;

fn main() -> hal::Result<()> {
    let count: u64 = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(2000);
    let mut registry = hal::Registry::new();
    driver_vulkan::register(&mut registry);
    let device = registry.create_device(driver_vulkan::DRIVER_NAME, 0)?;
    let source = hal::ExecutableSource::Bytes {
        format: hal::ExecutableFormat::Spirv,
        data: std::sync::Arc::from(driver_vulkan::wgsl::compile(ADD_ONE_WGSL, "add_one")?),
        entry_points: vec![hal::EntryPointInfo::new("add_one", 1, 1, 0)],
    };
    let add_one = device.load_executable(&source)?;
    let data = device.allocate_buffer(BufferParams::host_visible(), 4)?;
    data.write_values(0, &[0u32])?;
    let cb = device.create_command_buffer(CommandBufferMode::Reusable)?;
    cb.dispatch(&add_one, 0, [1, 1, 1], &[], &[BufferBinding::whole(&data)])?;
    cb.end()?;
    let queue = device.queue(0)?;
    let done = device.create_semaphore(0)?;
    let start = Instant::now();
    for value in 1..=count {
        queue.execute(&[SemaphoreValue::new(&done, value - 1)], &cb, &[SemaphoreValue::new(&done, value)])?;
    }
    done.wait(count, Timeout::Infinite)?;
    let elapsed = start.elapsed();
    assert_eq!(data.read_as::<u32>()?, vec![count as u32], "every execute ran");
    println!(
        "{count} chained executes: {:.1} ms, {:.1} us each",
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e6 / count as f64
    );
    Ok(())
}
