//! The conformance suite on cpu-sim: one test per case, named `cpu_sim::<area>::<case>`.

ctest::instantiate_cts!(cpu_sim, driver_cpu_sim::cts::fixture);
