//! Where the bench's threads run. On Vulkan every thread of the process is kept off the CPUs that
//! take the GPU's interrupts (`driver_vulkan::keep_process_off_interrupt_cpus`): a process with a
//! thread there ran some rows two to four times slower, for the HAL and raw Vulkan alike, which
//! made its ratios compare placements rather than code (`docs/benchmarks.md`, "Where the threads
//! run"). `--all-cpus` leaves them where the kernel puts them.

use crate::session::Options;
use crate::workloads::VULKAN_DRIVER;

/// Keeps the process's threads off the GPU's interrupt CPUs where `driver` and `options` ask for
/// it; a line for the report saying what was done, or nothing where placement does not apply.
pub fn place(driver: &str, options: &Options) -> Option<String> {
    (driver == VULKAN_DRIVER).then(|| place_on_vulkan(options.all_cpus))
}

/// Moves every thread of the process off the CPUs that take the GPU's interrupts, unless
/// `all_cpus` (Vulkan builds; nothing otherwise), and says what was done, in a line for a report.
pub fn place_on_vulkan(all_cpus: bool) -> String {
    if all_cpus {
        return "threads: on every CPU (--all-cpus)".to_string();
    }
    match left_out() {
        cpus if cpus.is_empty() => "threads: on every CPU (no GPU interrupt lines to keep off)".to_string(),
        cpus => {
            let cpus: Vec<String> = cpus.iter().map(usize::to_string).collect();
            format!("threads: kept off CPUs {} (they take the GPU's interrupts)", cpus.join(","))
        }
    }
}

#[cfg(feature = "vulkan")]
fn left_out() -> Vec<usize> {
    driver_vulkan::keep_process_off_interrupt_cpus()
}

#[cfg(not(feature = "vulkan"))]
fn left_out() -> Vec<usize> {
    Vec::new()
}
