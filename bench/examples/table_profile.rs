//! Profiling aid: executes a 10-dispatch command buffer with binding tables in a tight chain.
//!
//! `table_profile [DRIVER] [TABLES] [EXECUTES] [ROUNDS]`: cycling over `TABLES` tables (1: the same
//! table every execute), `ROUNDS` rounds of `EXECUTES` chained executes (20 000 and 5 by default).
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
    let executes: u64 = std::env::args().nth(3).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let rounds: usize = std::env::args().nth(4).and_then(|s| s.parse().ok()).unwrap_or(5);
    for _ in 0..rounds {
        let t = chain_with_tables(&env, &cb, &tables[..cycle.clamp(1, tables.len())], executes)?;
        println!(
            "{:.2} us/execute (submit {:.2})",
            t.total.as_secs_f64() * 1e6 / executes as f64,
            t.submit.as_secs_f64() * 1e6 / executes as f64
        );
    }
    Ok(())
}
