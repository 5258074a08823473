//! Profiling aid: executes a 10-dispatch command buffer with binding tables in a tight chain.
use bench::workloads::{Env, chain_with_tables};
use hal::{BufferBinding, BufferParams};

fn main() -> hal::Result<()> {
    let driver = std::env::args().nth(1).unwrap_or_else(|| "cpu-sim".into());
    let registry = bench::registry();
    let device = registry.create_device(&driver, 0)?;
    let env = Env::new(device)?;
    let cb = env.dispatches_on_slot(10)?;
    let tables: Vec<[BufferBinding; 1]> = (0..16)
        .map(|_| Ok([BufferBinding::whole(&env.device.allocate_buffer(BufferParams::device_local(), 4)?)]))
        .collect::<hal::Result<_>>()?;
    let cycle: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    for _ in 0..5 {
        let t = chain_with_tables(&env, &cb, &tables[..cycle], 20000)?;
        println!(
            "{:.2} us/execute (submit {:.2})",
            t.total.as_secs_f64() * 1e6 / 20000.0,
            t.submit.as_secs_f64() * 1e6 / 20000.0
        );
    }
    Ok(())
}
