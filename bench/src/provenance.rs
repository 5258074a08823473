//! What a result file was measured with: the commit the binary was built from (baked in by
//! `bench/build.rs`) and the machine it ran on (CPU, cores, OS and kernel, and the device and driver
//! version the HAL reports). A table rendered from the file ([`crate::tables`]) names both.

use serde_json::{Value, json};

/// The commit the bench was built from (`git rev-parse HEAD`), or `unknown` where it was built
/// without git.
pub const COMMIT: &str = env!("BENCH_COMMIT");

/// `true` where a tracked file differed from [`COMMIT`] when the bench was built, `false` where
/// none did, `unknown` without git.
pub const COMMIT_DIRTY: &str = env!("BENCH_COMMIT_DIRTY");

/// `{"hash": ..., "dirty": true|false|null}`.
pub fn commit() -> Value {
    let dirty = match COMMIT_DIRTY {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => Value::Null,
    };
    json!({ "hash": COMMIT, "dirty": dirty })
}

/// The machine and the device: `cpu` (the model name in /proc/cpuinfo), `cores` (the cores this
/// process may use), `os` (`PRETTY_NAME` of /etc/os-release), `kernel` (`ostype osrelease` from
/// /proc/sys/kernel), `load_average` (/proc/loadavg when the run starts), `driver`, `device` and `driver_version` (the device's `driver_version`
/// property; `null` where the driver reports none, as cpu-sim).
pub fn machine(info: &hal::DeviceInfo) -> Value {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let cpu = read("/proc/cpuinfo").and_then(|text| {
        text.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    });
    let os = read("/etc/os-release").and_then(|text| {
        text.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")).map(|v| v.trim_matches('"').to_string())
    });
    let kernel = match (read("/proc/sys/kernel/ostype"), read("/proc/sys/kernel/osrelease")) {
        (Some(t), Some(r)) => Some(format!("{} {}", t.trim(), r.trim())),
        _ => None,
    };
    // Other work on the machine when the run started (1, 5 and 15 minutes), which the figures share
    // the cores with.
    let load = read("/proc/loadavg").map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let driver_version = info.properties.iter().find(|(k, _)| k == "driver_version").map(|(_, v)| v.clone());
    json!({
        "cpu": cpu.unwrap_or_else(|| std::env::consts::ARCH.to_string()),
        "cores": cores,
        "os": os.unwrap_or_else(|| std::env::consts::OS.to_string()),
        "kernel": kernel.unwrap_or_else(|| "unknown".to_string()),
        "load_average": load,
        "driver": info.driver,
        "device": info.name,
        "driver_version": driver_version,
    })
}
