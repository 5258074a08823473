//! Diagnostic: chains N executes of a one-dispatch indirect command buffer and reports how far the
//! chain got within a deadline (and the device's report if it stalls).
use std::time::{Duration, Instant};

use bench::workloads::Env;
use hal::{SemaphoreValue as SV, Timeout};

fn main() -> hal::Result<()> {
    let driver = std::env::args().nth(1).unwrap_or_else(|| "cpu-sim".into());
    let registry = bench::registry();
    let env = Env::new(registry.create_device(&driver, 0)?)?;
    let cb = env.indirect_dispatch()?;
    let q = env.device.queue(0)?;
    for n in [1u64, 2, 10, 100, 1000] {
        let s = env.device.create_semaphore(0)?;
        let start = Instant::now();
        for i in 0..n {
            q.execute(&[SV::new(&s, i)], &cb, &[SV::new(&s, i + 1)])?;
        }
        let submitted = start.elapsed();
        match s.wait(n, Timeout::After(Duration::from_secs(5))) {
            Ok(()) => println!(
                "n={n}: {:.2} us/execute (submit {:.2})",
                start.elapsed().as_secs_f64() * 1e6 / n as f64,
                submitted.as_secs_f64() * 1e6 / n as f64
            ),
            Err(e) => {
                println!("n={n}: STALLED at {:?}: {e}\n{}", s.query(), env.device.report());
                std::process::exit(1);
            }
        }
    }
    Ok(())
}
