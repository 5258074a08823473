//! How to build a CUDA device: [`CudaOptions`], their defaults, the `HAL_CUDA_*` variables that
//! change them without a rebuild ([`CudaOptions::from_env`]), and how completion threads wait
//! ([`CompletionWait`], one of the options; events carry it out, see `src/event.rs`).

use std::time::Duration;

use hal::{Error, Result};

/// How to build a CUDA device.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Queues, each with its own non-blocking stream and completion thread.
    pub queue_count: usize,
    /// How completion threads wait for events.
    pub completion_wait: CompletionWait,
    /// While a completion wait spins, the time between two `cuEventQuery` calls (each takes driver
    /// locks that submitting threads need).
    pub poll_interval: std::time::Duration,
    /// One-shot command buffers with at least this many commands (barriers not counted) replay as
    /// CUDA graphs; shorter ones launch directly (a buffer executed once pays a graph's
    /// instantiation for a single launch).
    pub graph_min_commands: usize,
    /// The same for reusable command buffers, which pay the instantiation once for every execute. A
    /// one-kernel graph launch costs less than the kernel launch itself (figures in
    /// `docs/decisions.md#one-command-buffers-replay-as-graphs`), so by default even one command replays as a graph.
    pub reusable_graph_min_commands: usize,
    /// Executable instances of one command buffer's graph kept for executes with binding tables:
    /// an execute whose table matches one launches it without node updates; otherwise the least
    /// recently launched is updated in place. 1 updates a single instance every time. The default,
    /// 16, covers a runtime cycling its buffers over up to 16 tables (each instance holds the
    /// graph's executable copy on the device).
    pub bound_graph_instances: usize,
    /// Time every submission on the device with a pair of timing events; the time appears as
    /// `device_ns` on the submission's `complete` span (see the crate docs, "Device timings per submission"). Costs two event
    /// records per submission.
    pub submission_timings: bool,
    /// Indirect dispatches in command buffers that replay as graphs become graph nodes whose grid
    /// a kernel sets on the device (see the crate docs, "Indirect dispatches"); needs CUDA 12.4 and
    /// CUDA's device runtime library. Off, or where that is missing, the host reads each count
    /// and launches (one host round trip per dispatch).
    pub indirect_on_device: bool,
    /// Completion threads and host waiters learn that work finished from a word of pinned memory
    /// each mark's stream writes after its record, instead of querying the event (see
    /// `src/progress_word.rs`): no driver lock taken while work is in flight, one more stream write
    /// per record.
    pub completion_word: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            queue_count: 4,
            completion_wait: CompletionWait::default(),
            poll_interval: std::time::Duration::from_micros(10),
            graph_min_commands: 2,
            reusable_graph_min_commands: 1,
            bound_graph_instances: 16,
            submission_timings: false,
            indirect_on_device: true,
            completion_word: false,
        }
    }
}

/// The environment variable that picks [`CudaOptions::completion_wait`] for [`CudaOptions::from_env`].
pub const ENV_COMPLETION: &str = "HAL_CUDA_COMPLETION";
/// The environment variable that turns on [`CudaOptions::submission_timings`] (`1`) in
/// [`CudaOptions::from_env`].
pub const ENV_TIMINGS: &str = "HAL_CUDA_TIMINGS";
/// The environment variable that picks where indirect dispatches read their counts
/// ([`CudaOptions::indirect_on_device`]): `device` (the default) or `host`, for
/// [`CudaOptions::from_env`].
pub const ENV_INDIRECT: &str = "HAL_CUDA_INDIRECT";
/// The environment variable that turns on [`CudaOptions::completion_word`] (`1`) or off (`0`), for
/// [`CudaOptions::from_env`].
pub const ENV_COMPLETION_WORD: &str = "HAL_CUDA_COMPLETION_WORD";
/// The environment variable that sets [`CudaOptions::poll_interval`], in microseconds (1 to 10000),
/// for [`CudaOptions::from_env`].
pub const ENV_POLL_US: &str = "HAL_CUDA_POLL_US";
/// The environment variable that sets the polling budget of
/// [`CompletionWait::PollThenSleep`], in microseconds (0 to
/// 10000: how long a completion thread queries `poll_interval` apart before it sleeps between
/// queries), for [`CudaOptions::from_env`]. It applies to the `poll` completion only.
pub const ENV_POLL_BUDGET_US: &str = "HAL_CUDA_POLL_BUDGET_US";
/// The environment variable that sets [`CudaOptions::bound_graph_instances`] (1 to 64), for
/// [`CudaOptions::from_env`].
pub const ENV_GRAPH_INSTANCES: &str = "HAL_CUDA_GRAPH_INSTANCES";

impl CudaOptions {
    /// The defaults, changed by the environment: `HAL_CUDA_COMPLETION` = `poll` (the default),
    /// `spin`, `blocking`, `spin-then-block` or `host-callback`; `HAL_CUDA_TIMINGS` = `1` or `0`;
    /// `HAL_CUDA_POLL_US` = microseconds between a completion thread's event queries (default 10);
    /// `HAL_CUDA_POLL_BUDGET_US` = microseconds a `poll` completion thread queries before it sleeps;
    /// `HAL_CUDA_INDIRECT` = `device` (the default) or `host`; `HAL_CUDA_COMPLETION_WORD` = `0` (the
    /// default) or `1`; `HAL_CUDA_GRAPH_INSTANCES` = graph instances kept per command buffer for
    /// executes with binding tables (1 to 64).
    /// [`crate::register`] and [`crate::create_device`] use it, so an embedding application can switch
    /// modes without a rebuild. An unknown value is an `InvalidArgument` naming the variable.
    pub fn from_env() -> Result<Self> {
        CudaOptions::from_lookup(|name| std::env::var(name).ok())
    }

    /// The defaults changed by the variables `lookup` finds (`None`: not set); see
    /// [`from_env`](Self::from_env).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut options = CudaOptions::default();
        if let Some(value) = lookup(ENV_COMPLETION) {
            options.completion_wait = match value.as_str() {
                "poll" => CompletionWait::default(),
                "spin" => CompletionWait::Spin,
                "blocking" => CompletionWait::Blocking,
                "spin-then-block" => CompletionWait::SpinThenBlock(std::time::Duration::from_micros(100)),
                "host-callback" => CompletionWait::HostCallback,
                other => {
                    return Err(Error::invalid_argument(format!(
                        "cuda: {ENV_COMPLETION}='{other}' is not one of poll, spin, blocking, spin-then-block, \
                         host-callback"
                    )));
                }
            };
        }
        if let Some(value) = lookup(ENV_TIMINGS) {
            options.submission_timings = match value.as_str() {
                "1" => true,
                "0" => false,
                other => {
                    return Err(Error::invalid_argument(format!("cuda: {ENV_TIMINGS}='{other}' is not 0 or 1")));
                }
            };
        }
        if let Some(value) = lookup(ENV_COMPLETION_WORD) {
            options.completion_word = match value.as_str() {
                "1" => true,
                "0" => false,
                other => {
                    return Err(Error::invalid_argument(format!(
                        "cuda: {ENV_COMPLETION_WORD}='{other}' is not 0 or 1"
                    )));
                }
            };
        }
        if let Some(value) = lookup(ENV_INDIRECT) {
            options.indirect_on_device = match value.as_str() {
                "device" => true,
                "host" => false,
                other => {
                    return Err(Error::invalid_argument(format!(
                        "cuda: {ENV_INDIRECT}='{other}' is not device or host"
                    )));
                }
            };
        }
        if let Some(value) = lookup(ENV_GRAPH_INSTANCES) {
            options.bound_graph_instances = match value.parse::<usize>() {
                Ok(count) if (1..=64).contains(&count) => count,
                _ => {
                    return Err(Error::invalid_argument(format!(
                        "cuda: {ENV_GRAPH_INSTANCES}='{value}' is not a number of graph instances from 1 to 64"
                    )));
                }
            };
        }
        if let Some(value) = lookup(ENV_POLL_US) {
            options.poll_interval = micros(ENV_POLL_US, &value, 1)?;
        }
        if let Some(value) = lookup(ENV_POLL_BUDGET_US) {
            let budget = micros(ENV_POLL_BUDGET_US, &value, 0)?;
            match options.completion_wait {
                CompletionWait::PollThenSleep(_) => options.completion_wait = CompletionWait::PollThenSleep(budget),
                other => {
                    return Err(Error::invalid_argument(format!(
                        "cuda: {ENV_POLL_BUDGET_US}='{value}' applies to the poll completion, not {other:?}"
                    )));
                }
            }
        }
        Ok(options)
    }
}

/// `value` of the variable `name` as microseconds from `min` to 10000, or an `InvalidArgument`
/// naming both.
fn micros(name: &str, value: &str, min: u64) -> Result<std::time::Duration> {
    match value.parse::<u64>() {
        Ok(us) if (min..=10_000).contains(&us) => Ok(std::time::Duration::from_micros(us)),
        _ => Err(Error::invalid_argument(format!(
            "cuda: {name}='{value}' is not a number of microseconds from {min} to 10000"
        ))),
    }
}

/// How completion threads wait for an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionWait {
    /// `cuEventSynchronize` on spin-waited events.
    Spin,
    /// `cuEventSynchronize` on `BLOCKING_SYNC` events.
    Blocking,
    /// Poll `cuEventQuery` for up to the duration, then block (`BLOCKING_SYNC` events).
    SpinThenBlock(Duration),
    /// Poll `cuEventQuery` for up to the duration, then keep polling with sleeps that grow to
    /// `MAX_POLL_SLEEP` (100 us) between queries; plain events (no interrupt-armed `BLOCKING_SYNC` records).
    PollThenSleep(Duration),
    /// A host function on a per-queue callback stream wakes the thread (`cuLaunchHostFunc` after a
    /// `cuStreamWaitEvent`; at most one outstanding per queue, see the crate docs, "Completion"). Host
    /// threads that wait for a value poll as `PollThenSleep(100us)` does.
    HostCallback,
}

impl Default for CompletionWait {
    /// `PollThenSleep(0)`: from the first query on, sleeps growing from 10 us to 100 us between
    /// queries, on plain events. Fewer queries leave the driver lock to the submitting threads, and
    /// host waiters query their own event, so the completion thread's later wake-up costs them
    /// nothing (the comparison of the modes is in `docs/decisions.md#completion-thread-default`).
    fn default() -> Self {
        CompletionWait::PollThenSleep(Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hal::StatusCode;

    /// `from_lookup` over a fixed list of variables.
    fn options(vars: &[(&str, &str)]) -> Result<CudaOptions> {
        CudaOptions::from_lookup(|name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn options_from_environment_values() {
        let defaults = options(&[]).unwrap();
        assert_eq!(defaults.completion_wait, CompletionWait::default());
        assert!(!defaults.submission_timings);
        assert_eq!(defaults.poll_interval, std::time::Duration::from_micros(10));
        let callback = options(&[(ENV_COMPLETION, "host-callback"), (ENV_TIMINGS, "1")]).unwrap();
        assert_eq!(callback.completion_wait, CompletionWait::HostCallback);
        assert!(callback.submission_timings);
        let spin = options(&[(ENV_COMPLETION, "spin"), (ENV_TIMINGS, "0")]).unwrap();
        assert_eq!(spin.completion_wait, CompletionWait::Spin);
        assert_eq!(options(&[(ENV_COMPLETION, "blocking")]).unwrap().completion_wait, CompletionWait::Blocking);
        let slow = options(&[(ENV_POLL_US, "50")]).unwrap();
        assert_eq!(slow.poll_interval, std::time::Duration::from_micros(50));
        let sleepy = options(&[(ENV_POLL_BUDGET_US, "0")]).unwrap();
        assert_eq!(sleepy.completion_wait, CompletionWait::PollThenSleep(std::time::Duration::ZERO));
        assert!(defaults.indirect_on_device && !defaults.completion_word);
        let other = options(&[(ENV_INDIRECT, "host"), (ENV_COMPLETION_WORD, "1")]).unwrap();
        assert!(!other.indirect_on_device && other.completion_word);
        assert!(options(&[(ENV_INDIRECT, "device"), (ENV_COMPLETION_WORD, "0")]).unwrap().indirect_on_device);
        assert_eq!(options(&[(ENV_GRAPH_INSTANCES, "16")]).unwrap().bound_graph_instances, 16);
        assert_eq!(options(&[(ENV_GRAPH_INSTANCES, "1")]).unwrap().bound_graph_instances, 1);
    }

    #[test]
    fn bad_environment_values_are_named_errors() {
        let e = options(&[(ENV_COMPLETION, "callback")]).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        assert!(e.message().contains("HAL_CUDA_COMPLETION='callback'"), "{e}");
        let e = options(&[(ENV_TIMINGS, "yes")]).unwrap_err();
        assert!(e.message().contains("HAL_CUDA_TIMINGS='yes'"), "{e}");
        for bad in ["0", "65", "many", "-1"] {
            let e = options(&[(ENV_GRAPH_INSTANCES, bad)]).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument);
            assert!(e.message().contains(&format!("HAL_CUDA_GRAPH_INSTANCES='{bad}'")), "{e}");
        }
        for bad in ["0", "10001", "fast", "-5"] {
            let e = options(&[(ENV_POLL_US, bad)]).unwrap_err();
            assert!(e.message().contains(&format!("HAL_CUDA_POLL_US='{bad}'")), "{e}");
        }
        let e = options(&[(ENV_POLL_BUDGET_US, "10001")]).unwrap_err();
        assert!(e.message().contains("HAL_CUDA_POLL_BUDGET_US='10001'"), "{e}");
        let e = options(&[(ENV_COMPLETION, "spin"), (ENV_POLL_BUDGET_US, "0")]).unwrap_err();
        assert!(e.message().contains("applies to the poll completion, not Spin"), "{e}");
        let e = options(&[(ENV_INDIRECT, "gpu")]).unwrap_err();
        assert!(e.message().contains("HAL_CUDA_INDIRECT='gpu'"), "{e}");
        let e = options(&[(ENV_COMPLETION_WORD, "yes")]).unwrap_err();
        assert!(e.message().contains("HAL_CUDA_COMPLETION_WORD='yes'"), "{e}");
    }
}
