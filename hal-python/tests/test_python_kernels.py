"""cpu-sim kernels written in Python: one call a workgroup, bindings as memoryviews of the bound
bytes (no copy), constants, several entry points, and the failures: a kernel that raises, and one
that keeps a view past its call."""

import numpy as np
import pytest

import timeline_hal as hal

SCALE = {"name": "scale", "bindings": 2, "constants": 2, "workgroup_size": 64}


def scale(inv):
    """out[i] = in[i] * factor over this workgroup's 64 elements (n, factor bits as constants)."""
    n, factor = inv.constants[0], np.uint32(inv.constants[1]).view(np.float32)
    start = inv.workgroup_id[0] * 64
    end = min(start + 64, n)
    source = np.frombuffer(inv.bindings[0], np.float32)
    target = np.frombuffer(inv.bindings[1], np.float32)
    target[start:end] = source[start:end] * factor


def run(device, exe, entry, groups, constants, bindings):
    queue, done = device.queue(0), device.semaphore()
    cb = device.command_buffer()
    cb.dispatch(exe, entry, groups, constants=constants, bindings=bindings)
    cb.end()
    queue.execute(cb, signals=[(done, 1)])
    return done


def test_a_python_kernel_runs_once_a_workgroup_on_the_bound_memory(device):
    n = 1000
    exe = device.load_executable(scale, [SCALE])
    assert exe.entry_points == ["scale"]
    source = hal.from_numpy(np.arange(n, dtype=np.float32), device)
    target = device.allocate(4 * n, memory="host")
    done = run(device, exe, "scale", (n + 63) // 64, [n, 2.5], [source, target])
    done.wait(1, timeout=30)
    assert np.array_equal(hal.to_numpy(target, np.float32), np.arange(n, dtype=np.float32) * 2.5)


def test_the_invocation_describes_the_workgroup(device):
    seen = []

    def record(inv):
        seen.append((inv.entry, inv.workgroup_id, inv.workgroup_count, inv.workgroup_size, inv.constants, len(inv.bindings), [len(b) for b in inv.bindings]))

    info = {"name": "record", "bindings": 1, "constants": 1, "workgroup_size": (4, 2, 1)}
    exe = device.load_executable(record, [info])
    buffer = device.allocate(256, memory="host")
    run(device, exe, 0, (2, 3, 1), [7], [(buffer, 64, 128)]).wait(1, timeout=30)
    assert len(seen) == 6
    assert {s[1] for s in seen} == {(x, y, 0) for x in range(2) for y in range(3)}
    assert all(s[0] == "record" and s[2] == (2, 3, 1) and s[3] == (4, 2, 1) and s[4] == (7,) for s in seen)
    assert all(s[5] == 1 and s[6] == [128] for s in seen)


def test_one_callable_an_entry_point(device):
    def fill(value):
        def kernel(inv):
            inv.bindings[0][:] = bytes([value]) * len(inv.bindings[0])

        return kernel

    entries = [{"name": "ones", "bindings": 1}, {"name": "twos", "bindings": 1}]
    exe = device.load_executable([fill(1), fill(2)], entries)
    buffer = device.allocate(64, memory="host")
    run(device, exe, "twos", 1, [], [buffer]).wait(1, timeout=30)
    assert buffer.read() == bytes([2]) * 64
    with pytest.raises(TypeError):
        device.load_executable([fill(1)], entries)
    with pytest.raises(ValueError):
        device.load_executable(fill(1))


def test_a_kernel_that_raises_fails_the_dispatch_with_its_message(device):
    def broken(inv):
        raise ValueError(f"no good at workgroup {inv.workgroup_id[0]}")

    exe = device.load_executable(broken, [{"name": "broken", "bindings": 1}])
    done = run(device, exe, 0, 4, [], [device.allocate(16, memory="host")])
    with pytest.raises(hal.HalError) as raised:
        done.wait(1, timeout=30)
    assert "Python kernel 'broken' raised ValueError: no good at workgroup" in raised.value.message


def test_a_kernel_that_keeps_a_view_fails_the_dispatch(device):
    kept = []

    def keeps_the_view(inv):
        kept.append(inv.bindings[0])

    def keeps_the_invocation(inv):
        kept.append(inv)

    for name, kernel in (("view", keeps_the_view), ("invocation", keeps_the_invocation)):
        exe = device.load_executable(kernel, [{"name": name, "bindings": 1}])
        done = run(device, exe, 0, 1, [], [device.allocate(16, memory="host")])
        with pytest.raises(hal.HalError) as raised:
            done.wait(1, timeout=30)
        assert f"Python kernel '{name}' kept a reference to binding 0" in raised.value.message
    with pytest.raises(ValueError):
        bytes(kept[0])  # released: no access to the device's memory any more
    with pytest.raises(ValueError):
        bytes(kept[1].bindings[0])
