//! Profiling aid: executes a 10-dispatch command buffer with binding tables in a tight chain.
//!
//! `table_profile [DRIVER] [TABLES] [EXECUTES] [ROUNDS]`: cycling over `TABLES` tables (1: the same
//! table every execute; 0: a command buffer with its bindings fixed, no table), `ROUNDS` rounds of
//! `EXECUTES` chained executes (20 000 and 5 by default). On Vulkan each round also prints how many
//! times the command buffer was recorded and what the host threads did (`vkQueueSubmit` calls and
//! the time in them).
use bench::workloads::{Env, Timing, chain, chain_with_tables};
use hal::{BufferBinding, BufferParams};

fn main() -> hal::Result<()> {
    let driver = std::env::args().nth(1).unwrap_or_else(|| "cpu-sim".into());
    let registry = bench::registry();
    let device = registry.create_device(&driver, 0)?;
    let env = Env::new(device)?;
    let cycle: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let cb = if cycle == 0 { env.dispatches(10)? } else { env.dispatches_on_slot(10)? };
    let tables: Vec<[BufferBinding; 1]> = (0..16)
        .map(|_| Ok([BufferBinding::whole(&env.device.allocate_buffer(BufferParams::device_local(), 4)?)]))
        .collect::<hal::Result<_>>()?;
    let executes: u64 = std::env::args().nth(3).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let rounds: usize = std::env::args().nth(4).and_then(|s| s.parse().ok()).unwrap_or(5);
    for _ in 0..rounds {
        let before = Counts::of(&env, &cb);
        let t: Timing = if cycle == 0 {
            chain(&env, &cb, executes)?
        } else {
            chain_with_tables(&env, &cb, &tables[..cycle.min(tables.len())], executes)?
        };
        println!(
            "{:.2} us/execute (submit {:.2}){}",
            t.total.as_secs_f64() * 1e6 / executes as f64,
            t.submit.as_secs_f64() * 1e6 / executes as f64,
            Counts::of(&env, &cb).since(&before)
        );
    }
    Ok(())
}

/// What the Vulkan driver did for the command buffer and on the device's host threads.
#[derive(Default)]
struct Counts {
    recorded: u64,
    #[cfg(feature = "vulkan")]
    threads: driver_vulkan::HostThreadCounts,
}

impl Counts {
    #[cfg(feature = "vulkan")]
    fn of(env: &Env, cb: &hal::CommandBuffer) -> Counts {
        Counts {
            recorded: driver_vulkan::recordings_of(cb).unwrap_or(0),
            threads: driver_vulkan::host_thread_counts(&env.device).unwrap_or_default(),
        }
    }

    #[cfg(not(feature = "vulkan"))]
    fn of(_: &Env, _: &hal::CommandBuffer) -> Counts {
        Counts::default()
    }

    /// What happened since `earlier`, as a suffix of the round's line.
    fn since(&self, earlier: &Counts) -> String {
        #[cfg(feature = "vulkan")]
        {
            let t = self.threads.since(&earlier.threads);
            if t.submit_calls > 0 {
                return format!(
                    "; recorded {}, vkQueueSubmit calls {} ({:.2} us each, {} by the caller), submit-thread sleeps {}",
                    self.recorded - earlier.recorded,
                    t.submit_calls,
                    t.submit_time.as_secs_f64() * 1e6 / t.submit_calls as f64,
                    t.issued_by_callers,
                    t.submit_thread_sleeps
                );
            }
        }
        let _ = earlier;
        String::new()
    }
}
