//! The conformance suite on the skeleton driver: every case that needs no kernel runs (the cases
//! that load one skip, since the skeleton loads none).

use ctest::Fixture;
use ctest::kernels::NoKernels;

fn skeleton_fixture() -> Fixture {
    let mut registry = hal::Registry::new();
    driver_skeleton::register(&mut registry);
    Fixture::from_registry(registry, driver_skeleton::DRIVER_NAME, NoKernels)
}

ctest::instantiate_cts!(skeleton, skeleton_fixture);
