"""Fixtures of the timeline_hal suite: a cpu-sim device, the example kernel library, and a Vulkan
device where one is present (lavapipe counts)."""

import os
from pathlib import Path
from typing import Iterator, Optional

import pytest

import timeline_hal as hal

#: The repository's root (the suite lives in hal-python/tests of the workspace).
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def device() -> Iterator[hal.Device]:
    yield hal.device("cpu-sim")


def _kernel_library() -> Optional[Path]:
    """The cpu-sim example kernel library: TIMELINE_HAL_KERNELS, or cargo's debug build of
    cpu-sim-example-kernels in CARGO_TARGET_DIR or the workspace's target directory."""
    named = os.environ.get("TIMELINE_HAL_KERNELS")
    if named:
        return Path(named)
    name = "libcpu_sim_example_kernels.so"
    targets = [Path(os.environ["CARGO_TARGET_DIR"])] if os.environ.get("CARGO_TARGET_DIR") else []
    targets.append(ROOT / "target")
    for target in targets:
        candidate = target / "debug" / name
        if candidate.exists():
            return candidate
    return None


@pytest.fixture
def kernels() -> Path:
    library = _kernel_library()
    if library is None or not library.exists():
        pytest.skip("the example kernel library is not built (cargo build -p cpu-sim-example-kernels)")
    return library


@pytest.fixture
def vulkan() -> Iterator[hal.Device]:
    listing = {d["name"]: d for d in hal.drivers()}
    driver = listing.get("vulkan")
    if driver is None:
        pytest.skip("this build of timeline_hal has no Vulkan driver")
    if not driver["available"]:
        if os.environ.get("HAL_REQUIRE_VULKAN") == "1":
            pytest.fail(f"HAL_REQUIRE_VULKAN=1 but the Vulkan driver is unavailable: {driver['reason']}")
        pytest.skip(f"no Vulkan device: {driver['reason']}")
    yield hal.device("vulkan")
