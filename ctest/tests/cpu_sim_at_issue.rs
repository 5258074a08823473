//! The conformance suite on cpu-sim with light work run on the submitting thread (as IREE's devices
//! on cpu-sim run it): one test per case, named `cpu_sim_at_issue::<area>::<case>`.

ctest::instantiate_cts!(cpu_sim_at_issue, driver_cpu_sim::cts::fixture_with_light_work_at_issue);
