//! `bench`: `cargo run --release -p bench -- [--driver NAME] [--quick] [--scaling] [--max-threads N]
//! [--json FILE] [--svg FILE] [--peer-ordinal N] [--all-cpus]`, the same bench and options as `hal bench` (which
//! also picks a device by ordinal).
//!
//! Without a GPU, `--driver cuda` prints the driver's `Unavailable` reason on one line and exits
//! with status 1.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use bench::alloc_count::CountingAllocator;
use bench::session::{self, Failure, Options};
use clap::Parser;

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// The HAL's benchmarks, each beside a baseline measured in the same run
#[derive(Parser)]
#[command(name = "bench", version)]
struct Cli {
    /// The driver: cpu-sim, cuda or vulkan (device 0; `hal bench --device DRIVER:ORDINAL` picks another)
    #[arg(long, value_name = "NAME", default_value = hal::DEFAULT_DRIVER)]
    driver: String,
    /// The GPU ordinal of the second device the cross-device rows hop to (the same GPU by default)
    #[arg(long, value_name = "ORDINAL", default_value_t = 0)]
    peer_ordinal: usize,
    #[command(flatten)]
    options: Options,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let registry = bench::registry();
    let device = match registry.create_device(&cli.driver, 0) {
        Ok(device) => device,
        Err(e) => {
            eprintln!("bench: cannot open '{}': {e}", cli.driver);
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let mut progress = |name: &str| eprintln!("  running {name}... ({:.1} s so far)", started.elapsed().as_secs_f64());
    // A second device of the driver (on CUDA, of the same GPU unless --peer-ordinal) for the
    // cross-device rows.
    let peer = registry.create_device(&cli.driver, cli.peer_ordinal).ok();
    match session::run(device, peer, &cli.options, &mut std::io::stdout(), &mut progress) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`bench | head`): nothing left to say.
        Err(Failure::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            let _ = std::io::stdout().flush();
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
