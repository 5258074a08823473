//! Keeps the submit threads off the CPUs that take the GPU's interrupts.
//!
//! A submit thread hands work to the next one by watching for a value's signal to be issued,
//! yielding between looks (see `host_waits`). On the CPU that services the GPU driver's interrupts
//! (one CPU for all of them on NVIDIA's), every completion the device reports interrupts such a
//! watcher, and the threads the interrupt wakes run there first: its yields come back late, its
//! watches run out, and it sleeps between hand-offs. A process whose submit thread the kernel
//! placed there runs cross-queue work at about half speed for its whole life (fan-out rounds of
//! 103-123 us instead of 45-46 on an H200, where raw Vulkan in the same process took 46), because the
//! scheduler sees nothing to balance. So each submit thread narrows its own CPU set to leave those
//! CPUs out, where at least two CPUs are left; [`AVOID_INTERRUPT_CPUS_ENV`] `=0` leaves it where it is.
//!
//! The CPUs are those the kernel currently routes the GPU driver's interrupt lines to
//! (`/proc/interrupts` names the lines, `/proc/irq/N/effective_affinity_list` gives their CPUs),
//! counting only lines that have fired. Linux only; elsewhere nothing is done.

/// `0` leaves the submit threads on every CPU the process may use; `1` or unset keeps them off
/// the CPUs that take the GPU driver's interrupts.
pub const AVOID_INTERRUPT_CPUS_ENV: &str = "HAL_VULKAN_AVOID_INTERRUPT_CPUS";

/// The interrupt handler names of GPU kernel drivers, as `/proc/interrupts` lists them.
const GPU_HANDLERS: [&str; 6] = ["nvidia", "amdgpu", "i915", "xe", "nouveau", "radeon"];

/// The interrupt lines of `interrupts` (the text of `/proc/interrupts`) that a GPU driver handles
/// and that have fired at least once.
pub(crate) fn gpu_interrupt_lines(interrupts: &str) -> Vec<u32> {
    let mut lines = Vec::new();
    for line in interrupts.lines().skip(1) {
        let mut fields = line.split_whitespace();
        let Some(Ok(irq)) = fields.next().and_then(|f| f.strip_suffix(':')).map(str::parse::<u32>) else {
            continue;
        };
        let rest: Vec<&str> = fields.collect();
        let fired = rest.iter().map_while(|f| f.parse::<u64>().ok()).any(|count| count > 0);
        let handled_by_gpu = rest.iter().rev().take(2).any(|f| GPU_HANDLERS.contains(&f.trim_end_matches(',')));
        if fired && handled_by_gpu {
            lines.push(irq);
        }
    }
    lines
}

/// The CPUs of a kernel CPU list (`0-3,8,10-11`); `None` if it does not parse.
pub(crate) fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (first.parse::<usize>().ok()?, last.parse::<usize>().ok()?);
                if first > last {
                    return None;
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// The fewest CPUs a submit thread keeps: with fewer, a device's submit threads would crowd one CPU,
/// which costs more than the interrupts do.
const CPUS_KEPT: usize = 2;

/// Which of `allowed` (the CPUs a thread may run on) to leave out to keep off `avoid`: `None` where
/// none of them is in `avoid`, or fewer than [`CPUS_KEPT`] would be left.
pub(crate) fn cpus_to_leave_out(allowed: &[usize], avoid: &[usize]) -> Option<Vec<usize>> {
    let left_out: Vec<usize> = allowed.iter().copied().filter(|cpu| avoid.contains(cpu)).collect();
    (!left_out.is_empty() && allowed.len() - left_out.len() >= CPUS_KEPT).then_some(left_out)
}

/// The CPUs the GPU driver's interrupts go to now, read once per process.
#[cfg(target_os = "linux")]
fn interrupt_cpus() -> &'static [usize] {
    static CPUS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    CPUS.get_or_init(|| {
        let Ok(interrupts) = std::fs::read_to_string("/proc/interrupts") else { return Vec::new() };
        let mut cpus: Vec<usize> = gpu_interrupt_lines(&interrupts)
            .into_iter()
            .filter_map(|irq| {
                let dir = format!("/proc/irq/{irq}");
                std::fs::read_to_string(format!("{dir}/effective_affinity_list"))
                    .or_else(|_| std::fs::read_to_string(format!("{dir}/smp_affinity_list")))
                    .ok()
                    .and_then(|text| parse_cpu_list(&text))
            })
            .flatten()
            .collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    })
}

/// Narrows the calling thread's CPU set to leave out the CPUs that take the GPU driver's
/// interrupts, unless that would leave fewer than [`CPUS_KEPT`]; returns the CPUs left out. Failures leave the thread
/// as it was (placement is a matter of speed, never of correctness).
#[cfg(target_os = "linux")]
pub(crate) fn keep_this_thread_off() -> Vec<usize> {
    keep_thread_off(0, interrupt_cpus())
}

/// Moves every thread of this process off the CPUs that take the GPU driver's interrupts (each
/// keeping at least two CPUs, as a submit thread does; threads started later inherit their
/// creator's set), and returns the CPUs left out of any thread's set: what `taskset` leaving those
/// CPUs out would do, from inside the process.
///
/// Not only the HAL's threads run slower there. On an H200 with NVIDIA's Vulkan driver, where one
/// CPU took all of the GPU's interrupts, 9 of 25 processes of the bench's quick run ran some rows
/// two to four times slower for the HAL and raw Vulkan alike (one-dispatch chains, fan-out, round
/// trips of about 50 us instead of 16), and none of 28 runs (three of them full) with every thread kept off the
/// interrupts' CPUs. An application whose own threads submit or wait for the GPU may call this
/// once, best before it creates a device. Linux only; elsewhere, and where the interrupt lines
/// cannot be read, it does nothing and returns no CPUs.
#[cfg(target_os = "linux")]
pub fn keep_process_off_interrupt_cpus() -> Vec<usize> {
    let avoid = interrupt_cpus();
    if avoid.is_empty() {
        return Vec::new();
    }
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut left_out: Vec<usize> = tasks
        .filter_map(|task| task.ok()?.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .flat_map(|tid| keep_thread_off(tid, avoid))
        .collect();
    left_out.sort_unstable();
    left_out.dedup();
    left_out
}

/// Elsewhere than Linux the threads stay where they are.
#[cfg(not(target_os = "linux"))]
pub fn keep_process_off_interrupt_cpus() -> Vec<usize> {
    Vec::new()
}

/// Narrows thread `tid`'s CPU set (0: the calling thread) to leave out `avoid`, unless that would
/// leave fewer than [`CPUS_KEPT`]; the CPUs left out (none where nothing changed or a call failed).
#[cfg(target_os = "linux")]
fn keep_thread_off(tid: libc::pid_t, avoid: &[usize]) -> Vec<usize> {
    if avoid.is_empty() {
        return Vec::new();
    }
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most its size
    // into it, for thread `tid` (a thread that ended since is an error return).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above: the set is ours and its size is passed.
    if unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Vec::new();
    }
    let limit = libc::CPU_SETSIZE as usize;
    // SAFETY: CPU_ISSET reads a bit of the set, each index below CPU_SETSIZE.
    let allowed: Vec<usize> = (0..limit).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) }).collect();
    let Some(left_out) = cpus_to_leave_out(&allowed, avoid) else { return Vec::new() };
    for &cpu in &left_out {
        // SAFETY: CPU_CLR clears a bit of the set, the index below CPU_SETSIZE.
        unsafe { libc::CPU_CLR(cpu, &mut set) };
    }
    // SAFETY: the set is ours, its size is passed; it applies to thread `tid` only.
    if unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Vec::new();
    }
    left_out
}

/// Elsewhere than Linux the thread stays where it is.
#[cfg(not(target_os = "linux"))]
pub(crate) fn keep_this_thread_off() -> Vec<usize> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERRUPTS: &str = "           CPU0       CPU1       CPU2       CPU3
  0:         21          0          0          0   IO-APIC   2-edge      timer
 44:          0          0      64960          0  PCI-MSIX-0000:18:00.0    0-edge      nvidia
 45:          0          0          0          0  PCI-MSIX-0000:18:00.0    1-edge      nvidia
 46:        310          0          0          0  PCI-MSI 524288-edge      nvme0q0
 47:          0          9          0          0  PCI-MSI 1048576-edge      amdgpu
NMI:          0          0          0          0   Non-maskable interrupts
";

    #[test]
    fn only_gpu_lines_that_fired_count() {
        assert_eq!(gpu_interrupt_lines(INTERRUPTS), vec![44, 47]);
        assert!(gpu_interrupt_lines("").is_empty());
        assert!(gpu_interrupt_lines("CPU0\n garbage line\n 12: x y nvidia\n").is_empty());
    }

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("14\n"), Some(vec![14]));
        assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
    }

    #[test]
    fn a_thread_keeps_at_least_one_cpu() {
        assert_eq!(cpus_to_leave_out(&[0, 1, 2, 3], &[2]), Some(vec![2]));
        assert_eq!(cpus_to_leave_out(&[0, 1, 2, 3], &[1, 3, 9]), Some(vec![1, 3]));
        assert_eq!(cpus_to_leave_out(&[0, 1], &[5]), None, "none of its cpus takes them");
        assert_eq!(cpus_to_leave_out(&[14], &[14]), None, "its only cpu takes them");
        assert_eq!(cpus_to_leave_out(&[0, 14], &[14]), None, "one cpu would be left");
        assert_eq!(cpus_to_leave_out(&[0, 1, 14], &[14]), Some(vec![14]));
        assert_eq!(cpus_to_leave_out(&[3, 14], &[3, 14]), None, "every cpu takes them");
        assert_eq!(cpus_to_leave_out(&[0, 1], &[]), None);
    }

    /// The CPUs thread `tid` may run on.
    #[cfg(target_os = "linux")]
    fn cpus_of(tid: libc::pid_t) -> Vec<usize> {
        // SAFETY: as in `keep_thread_off`.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: the set is ours and its size is passed.
        assert_eq!(unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }, 0);
        // SAFETY: each index is below CPU_SETSIZE.
        (0..libc::CPU_SETSIZE as usize).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) }).collect()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn another_thread_is_moved_off_the_cpus_given_keeping_two() {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid_tx.send(unsafe { libc::gettid() }).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = tid_rx.recv().unwrap();
        let before = cpus_of(tid);
        let avoid = [before[0]];
        let left_out = keep_thread_off(tid, &avoid);
        if before.len() > CPUS_KEPT {
            assert_eq!(left_out, avoid);
            let after = cpus_of(tid);
            assert_eq!(after.len(), before.len() - 1);
            assert!(!after.contains(&avoid[0]), "{after:?}");
        } else {
            assert!(left_out.is_empty(), "{} cpus: it keeps them all", before.len());
            assert_eq!(cpus_of(tid), before);
        }
        assert_eq!(cpus_of(0), before, "the calling thread is left where it was");
        assert!(keep_thread_off(tid, &[]).is_empty());
        done_tx.send(()).unwrap();
        other.join().unwrap();
    }
}
