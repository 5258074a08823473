//! `hal devices`: every driver of the registry with its devices and their properties (and how
//! `--device` spells each), or the reason it is unavailable; then the drivers this build leaves out.

use std::fmt::Write;

use crate::counts::count;
use hal::{DeviceInfo, ExecutableKind, MemoryType, Registry};

/// The listing `hal devices` prints: one block per driver of `registry`, or one line with the reason
/// it has no devices; then one line per driver not built in ([`crate::drivers_not_built_in`]).
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    for listing in registry.list() {
        match &listing.devices {
            Ok(devices) => {
                let _ = writeln!(out, "{}: {}", listing.name, count(devices.len() as u64, "device", "devices"));
                for info in devices {
                    render_device(&mut out, &listing.name, info);
                }
            }
            Err(reason) => {
                let _ = writeln!(
                    out,
                    "{}: unavailable: {}",
                    listing.name,
                    crate::unavailable_reason(&listing.name, reason)
                );
            }
        }
    }
    for (name, why) in crate::drivers_not_built_in() {
        let _ = writeln!(out, "{name}: {why}");
    }
    out
}

fn render_device(out: &mut String, driver: &str, info: &DeviceInfo) {
    let _ = writeln!(out, "  device {}: {}", info.ordinal, info.name);
    let _ = writeln!(out, "    select with:           --device {driver}:{}", info.ordinal);
    let _ = writeln!(out, "    stable id:             {} (also --device {})", info.stable_id, info.stable_id);
    let _ = writeln!(out, "    queues:                {}", info.queue_count);
    let types: Vec<String> = info.memory_types.iter().map(|t| memory_type_name(*t)).collect();
    let _ = writeln!(out, "    memory types:          {}", types.join("; "));
    let _ = writeln!(out, "    max allocation:        {}", bytes(info.max_allocation_size));
    let _ = writeln!(out, "    max workgroup threads: {}", info.max_workgroup_threads);
    let _ = writeln!(out, "    max workgroup size:    {:?}", info.max_workgroup_size);
    let _ = writeln!(out, "    max workgroup count:   {:?}", info.max_workgroup_count);
    let _ = writeln!(out, "    executable formats:    {}", ExecutableKind::list(&info.executable_kinds));
    for (name, value) in &info.properties {
        let _ = writeln!(out, "    {:<22} {}", format!("{name}:"), property_value(driver, name, value));
    }
}

/// Driver properties that are byte counts, printed as sizes like the rest of the listing.
const BYTE_PROPERTIES: [&str; 5] = [
    "memory_limit",
    "total_memory_bytes",
    "largest_memory_heap",
    "max_storage_buffer_range",
    "max_compute_shared_memory_size",
];

/// A property's value as the listing prints it: byte counts as sizes; cpu-sim's pool threads with
/// the workgroup runners its device name counts (the pool and the stream thread running a dispatch).
fn property_value(driver: &str, name: &str, value: &str) -> String {
    match value.parse::<u64>() {
        Ok(n) if BYTE_PROPERTIES.contains(&name) => bytes(n),
        Ok(n) if driver == driver_cpu_sim::DRIVER_NAME && name == "workgroup_threads" => format!(
            "{} beside the stream thread running a dispatch: {}",
            count(n, "pool thread", "pool threads"),
            count(n + 1, "workgroup runner", "workgroup runners")
        ),
        _ => value.to_string(),
    }
}

/// `DEVICE_LOCAL | HOST_VISIBLE | ...`, flag names joined.
fn memory_type_name(memory_type: MemoryType) -> String {
    let names: Vec<&str> = memory_type.iter_names().map(|(name, _)| name).filter(|n| *n != "HOST_LOCAL").collect();
    names.join(" | ")
}

/// A byte count with a binary unit: exact where it is a whole number of the unit (`4 GiB`), else to
/// one decimal (`1.5 KiB`).
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 { format!("{value} {}", UNITS[unit]) } else { format!("{value:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_cpu_sim_with_properties_and_cuda_either_way() {
        let text = render(&crate::registry());
        assert!(text.starts_with("cpu-sim: 1 device\n"), "{text}");
        assert!(text.contains("queues:"), "{text}");
        assert!(text.contains("workgroup_threads:"), "{text}");
        assert!(text.contains("    select with:           --device cpu-sim:0\n"), "{text}");
        assert!(text.contains("    executable formats:    native, shared-library\n"), "{text}");
        if cfg!(feature = "cuda") {
            assert!(text.contains("\ncuda: unavailable: ") || text.contains("\ncuda: "), "{text}");
        } else {
            assert!(text.contains("\ncuda: not built in (this hal was built without the `cuda` feature)\n"), "{text}");
        }
        if !cfg!(feature = "vulkan") {
            assert!(
                text.contains("\nvulkan: not built in (this hal was built without the `vulkan` feature)\n"),
                "{text}"
            );
        }
    }

    #[test]
    fn memory_types_and_sizes_read_well() {
        assert_eq!(
            memory_type_name(MemoryType::DEVICE_LOCAL | MemoryType::HOST_VISIBLE),
            "DEVICE_LOCAL | HOST_VISIBLE"
        );
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(4 << 30), "4 GiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(property_value("cuda", "total_memory_bytes", "85899345920"), "80 GiB");
        assert_eq!(property_value("cpu-sim", "memory_limit", "8589934592"), "8 GiB");
        assert_eq!(
            property_value("cpu-sim", "workgroup_threads", "1"),
            "1 pool thread beside the stream thread running a dispatch: 2 workgroup runners"
        );
        assert_eq!(property_value("cuda", "pci_bus_id", "23"), "23");
    }
}
