//! What `load_executable` costs on the first Vulkan device, per real module: the median of
//! `LOADS` loads of each SPIR-V module under `tests/spirv/` (IREE's and glslang's), with its entry
//! points declared as the module uses them.
//!
//! `cargo run --release -p timeline-hal-vulkan --example load_cost [LOADS]`

use std::time::Instant;

use hal::{EntryPointInfo, ExecutableFormat, ExecutableSource};

/// Each module's entry point: file, name, workgroup size, bindings, constants.
const MODULES: &[(&str, &str, [u32; 3], usize, usize)] = &[
    ("glsl_reduce.spv", "main", [256, 1, 1], 1, 0),
    ("glsl_scale.spv", "main", [64, 1, 1], 2, 3),
    ("iree_chain_0.spv", "chain_dispatch_0_elementwise_1024_f32", [64, 1, 1], 2, 0),
    ("iree_chain_split_0.spv", "chain_dispatch_0_elementwise_1024_f32", [64, 1, 1], 2, 0),
    ("iree_matmul_0.spv", "matmul_dispatch_0_matmul_64x32x128_f32", [4, 16, 1], 3, 0),
    ("iree_mlp_0.spv", "mlp_dispatch_0_matmul_4x128x64_f32", [16, 4, 1], 4, 0),
    ("iree_mlp_1.spv", "mlp_dispatch_1_matmul_4x10x128_f32", [16, 4, 1], 4, 0),
];

fn main() -> Result<(), String> {
    let loads: usize = std::env::args().nth(1).map_or(Ok(50), |n| n.parse().map_err(|e| format!("LOADS: {e}")))?;
    let mut registry = hal::Registry::new();
    driver_vulkan::register(&mut registry);
    let device = registry.create_device(driver_vulkan::DRIVER_NAME, 0).map_err(|e| e.to_string())?;
    println!("{} loads of each module on '{}'", loads, device.info().name);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/spirv");
    for &(file, name, size, bindings, constants) in MODULES {
        let data = std::fs::read(dir.join(file)).map_err(|e| format!("{file}: {e}"))?;
        let entry = EntryPointInfo::new(name, size[0], bindings, constants).with_workgroup_size(size);
        let source =
            ExecutableSource::Bytes { format: ExecutableFormat::Spirv, data: data.into(), entry_points: vec![entry] };
        let mut micros: Vec<f64> = (0..loads)
            .map(|_| {
                let started = Instant::now();
                let loaded = device.load_executable(&source);
                let took = started.elapsed().as_secs_f64() * 1e6;
                loaded.map(|_| took).map_err(|e| format!("{file}: {e}"))
            })
            .collect::<Result<_, _>>()?;
        micros.sort_by(f64::total_cmp);
        println!("{file:<24} median {:>9.1} us  min {:>9.1} us", micros[micros.len() / 2], micros[0]);
    }
    Ok(())
}
