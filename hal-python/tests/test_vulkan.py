"""The same API on the Vulkan driver (lavapipe in CI); skipped where no Vulkan device is found."""

import numpy as np
import pytest

import timeline_hal as hal
from conftest import ROOT


def test_vulkan_transfers_and_mapping(vulkan):
    queue, done = vulkan.queue(0), vulkan.semaphore()
    host, local = vulkan.allocate(64, memory="host"), vulkan.allocate(64)
    queue.fill(local, 0x0A0B0C0D, signals=[(done, 1)])
    queue.copy(local, host, waits=[(done, 1)], signals=[(done, 2)])
    done.wait(2, timeout=30)
    assert (hal.to_numpy(host, np.uint32) == 0x0A0B0C0D).all()
    assert (np.from_dlpack(host).view(np.uint32) == 0x0A0B0C0D).all()


def test_vulkan_spirv_dispatch(vulkan):
    spirv = (ROOT / "driver-vulkan" / "tests" / "spirv" / "glsl_scale.spv").read_bytes()
    exe = vulkan.load_executable(
        spirv, [{"name": "main", "bindings": 2, "constants": 3, "workgroup_size": 64}]
    )
    n = 200
    source = hal.from_numpy(np.arange(n, dtype=np.float32), vulkan)
    target = vulkan.allocate(4 * n, memory="host")
    cb = vulkan.command_buffer()
    cb.dispatch(exe, "main", (n + 63) // 64, constants=[n, 3.0, 1.0], bindings=[source, target])
    cb.end()
    done = vulkan.semaphore()
    vulkan.queue(0).execute(cb, signals=[(done, 1)])
    done.wait(1, timeout=30)
    assert np.array_equal(hal.to_numpy(target, np.float32), np.arange(n, dtype=np.float32) * 3.0 + 1.0)


SAXPY = """
@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
struct Constants { n: u32, a: f32 }
var<immediate> c: Constants;
@compute @workgroup_size(64)
fn saxpy(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < c.n) { y[id.x] = c.a * x[id.x] + y[id.x]; }
}
"""


def test_vulkan_wgsl_dispatch(vulkan):
    exe = vulkan.load_executable(
        SAXPY, [{"name": "saxpy", "bindings": 2, "constants": 2, "workgroup_size": 64}], format="wgsl"
    )
    n = 100
    x = hal.from_numpy(np.arange(n, dtype=np.float32), vulkan)
    y = hal.from_numpy(np.ones(n, dtype=np.float32), vulkan)
    cb = vulkan.command_buffer()
    cb.dispatch(exe, "saxpy", 2, constants=[n, 2.0], bindings=[x, y])
    cb.end()
    done = vulkan.semaphore()
    vulkan.queue(0).execute(cb, signals=[(done, 1)])
    done.wait(1, timeout=30)
    assert np.array_equal(hal.to_numpy(y, np.float32), 2.0 * np.arange(n, dtype=np.float32) + 1.0)
    with pytest.raises(hal.InvalidArgumentError):
        vulkan.load_executable("fn broken(", [{"name": "broken"}], format="wgsl")
