//! The conformance suite on cpu-sim: one test per case, named `cpu_sim::<area>::<case>`.

ctest::instantiate_cts!(cpu_sim, || ctest::Fixture::cpu_sim());
