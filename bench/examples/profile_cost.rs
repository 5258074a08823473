//! What profiling costs: a reusable 10-dispatch command buffer executed in a dependent chain with
//! profiling off, timing queue operations, and timing every dispatch; then one profiled execute's
//! records (per-dispatch device durations and the clock's uncertainty).
//!
//! `cargo run --release -p bench --example profile_cost [driver]` (default cpu-sim).
use bench::workloads::{Env, chain};
use hal::{ProfileOptions, SemaphoreValue, Timeout};

const OPS: u64 = 5000;

fn main() -> hal::Result<()> {
    let driver = std::env::args().nth(1).unwrap_or_else(|| "cpu-sim".into());
    let device = bench::registry().create_device(&driver, 0)?;
    let env = Env::new(device.clone())?;
    let cb = env.dispatches(10)?;
    let modes: [(&str, Option<ProfileOptions>); 3] = [
        ("off", None),
        ("queue operations", Some(ProfileOptions::queue_operations())),
        ("every dispatch", Some(ProfileOptions::everything())),
    ];
    println!("{driver}: chained executes of a 10-dispatch command buffer, {OPS} per sample, us/execute");
    for round in 0..3 {
        for (name, options) in &modes {
            if let Some(options) = options {
                device.begin_profiling(options.clone())?;
            }
            let timing = chain(&env, &cb, OPS)?;
            let records = match options {
                Some(_) => device.end_profiling()?.queue_operations.len(),
                None => 0,
            };
            println!(
                "round {round} {name:>17}: {:7.2} us/execute (submit {:5.2}), {records} queue-operation records",
                timing.total.as_secs_f64() * 1e6 / OPS as f64,
                timing.submit.as_secs_f64() * 1e6 / OPS as f64
            );
        }
    }
    device.begin_profiling(ProfileOptions::everything())?;
    let done = device.create_semaphore(0)?;
    device.queue(0)?.execute(&[], &cb, &[SemaphoreValue::new(&done, 1)])?;
    done.wait(1, Timeout::After(std::time::Duration::from_secs(10)))?;
    let profile = device.end_profiling()?;
    print!("{profile}");
    let durations: Vec<String> =
        profile.dispatches.iter().map(|d| format!("{:.2}", d.duration().as_secs_f64() * 1e6)).collect();
    println!("dispatch durations (us): {}", durations.join(" "));
    println!("clock uncertainty: {:?}", profile.clock.uncertainty);
    Ok(())
}
