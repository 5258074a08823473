"""The API on cpu-sim: devices, buffers, transfers, command buffers, kernels and error codes."""

import numpy as np
import pytest

import timeline_hal as hal


def test_drivers_and_devices_list_cpu_sim():
    drivers = {d["name"]: d for d in hal.drivers()}
    assert drivers["cpu-sim"]["available"] and drivers["cpu-sim"]["reason"] is None
    for name, driver in drivers.items():
        assert driver["available"] or driver["reason"], f"{name} is unavailable without a reason"
    paths = [d["path"] for d in hal.devices()]
    assert "cpu-sim:0" in paths


def test_device_paths_and_properties():
    device = hal.device()
    assert device.driver == "cpu-sim"
    assert device.queue_count >= 1
    info = device.info
    assert info["path"] == "cpu-sim:0" and "shared-library" in info["executable_kinds"]
    assert hal.device("cpu-sim:0").driver == "cpu-sim"
    assert "cpu-sim" in repr(device)


def test_unknown_driver_and_device_raise_with_codes():
    with pytest.raises(hal.NotFoundError) as missing:
        hal.device("no-such-driver:0")
    assert missing.value.code == "NOT_FOUND" and "no-such-driver" in missing.value.message
    with pytest.raises(hal.OutOfRangeError):
        hal.device("cpu-sim:7")
    with pytest.raises(hal.OutOfRangeError) as queue:
        hal.device().queue(99)
    assert isinstance(queue.value, hal.HalError) and queue.value.code == "OUT_OF_RANGE"
    assert str(queue.value).startswith("OUT_OF_RANGE: ")


def test_allocate_fill_copy_read(device):
    queue, done = device.queue(0), device.semaphore()
    a, b = device.allocate(64), device.allocate(64)
    assert (a.size, len(a), a.memory) == (64, 64, "device")
    queue.fill(a, 0x01020304, signals=[(done, 1)])
    queue.copy(a, b, waits=[(done, 1)], signals=[(done, 2)])
    data = queue.read(b, 8, 8, waits=[(done, 2)]).wait(timeout=5)
    assert data == bytes([4, 3, 2, 1]) * 2


def test_fill_patterns(device):
    queue, done = device.queue(0), device.semaphore()
    buffer = device.allocate(16, memory="host")
    queue.fill(buffer, 0xAB, 0, 4, width=1, signals=[(done, 1)])
    queue.fill(buffer, -1, 4, 4, width=2, waits=[(done, 1)], signals=[(done, 2)])
    queue.fill(buffer, 1.5, 8, 4, waits=[(done, 2)], signals=[(done, 3)])
    queue.fill(buffer, b"\x01\x02", 12, 4, waits=[(done, 3)], signals=[(done, 4)])
    done.wait(4, timeout=5)
    raw = buffer.read()
    assert raw[:8] == b"\xab" * 4 + b"\xff" * 4
    assert np.frombuffer(raw[8:12], np.float32)[0] == 1.5 and raw[12:] == b"\x01\x02" * 2
    with pytest.raises(ValueError):
        queue.fill(buffer, 256, width=1)
    with pytest.raises(hal.OutOfRangeError):
        queue.fill(buffer, 0, 8, 16)


def test_write_numpy_and_read_back(device):
    queue, done = device.queue(1), device.semaphore()
    buffer = device.allocate(40)
    values = np.arange(10, dtype=np.float32)
    queue.write(buffer, values, signals=[(done, 1)])
    data = queue.read(buffer, waits=[(done, 1)]).wait(timeout=5)
    assert np.array_equal(np.frombuffer(data, np.float32), values)
    assert np.array_equal(hal.to_numpy(buffer, np.float32, queue=queue), values)
    with pytest.raises(TypeError):
        queue.write(buffer, 12345)
    with pytest.raises(TypeError):
        queue.write(buffer, np.arange(20, dtype=np.float32)[::2])


def test_map_is_a_view_that_keeps_the_memory(device):
    buffer = device.allocate(32, memory="host")
    assert buffer.memory == "host"
    view = buffer.map()
    assert isinstance(view, memoryview) and not view.readonly and view.nbytes == 32
    array = np.frombuffer(view, np.uint32)
    array[:] = 5
    assert buffer.read(0, 4) == (5).to_bytes(4, "little")
    del buffer, view
    array[0] = 6  # the array keeps the mapping alive after the buffer's handle is gone
    assert array[0] == 6 and isinstance(memoryview(array).obj, np.ndarray)
    with pytest.raises(TypeError):
        hal.HostView()


def test_map_of_device_memory_is_refused(device):
    buffer = device.allocate(16)
    with pytest.raises(hal.HalError) as refused:
        buffer.map()
    assert refused.value.code in ("PERMISSION_DENIED", "INVALID_ARGUMENT", "FAILED_PRECONDITION")


def test_from_numpy_and_to_numpy(device):
    values = np.arange(12, dtype=np.int32).reshape(3, 4)
    host = hal.from_numpy(values, device)
    view = hal.to_numpy(host, np.int32, (3, 4))
    assert np.array_equal(view, values)
    on_device = hal.from_numpy(values, device, memory="device")
    assert np.array_equal(hal.to_numpy(on_device, np.int32, (3, 4), queue=device.queue(0)), values)
    with pytest.raises(ValueError):
        hal.to_numpy(on_device, np.int32)


def test_subspan(device):
    buffer = device.allocate(16, memory="host")
    buffer.write(bytes(range(16)))
    middle = buffer.subspan(4, 8)
    assert middle.size == 8 and middle.read() == bytes(range(4, 12))
    with pytest.raises(hal.OutOfRangeError):
        buffer.subspan(12, 8)


def test_command_buffer_transfers(device):
    source, target = device.allocate(16, memory="host"), device.allocate(16, memory="host")
    cb = device.command_buffer()
    cb.update(source, b"abcdefgh", 0)
    cb.fill(source, 0x2A, 8, 8, width=1)
    cb.barrier()
    cb.copy(source, target)
    assert not cb.ended
    cb.end()
    assert cb.ended
    with pytest.raises(hal.FailedPreconditionError):
        cb.barrier()
    done = device.semaphore()
    device.queue(0).execute(cb, signals=[(done, 1)])
    done.wait(1, timeout=5)
    assert target.read() == b"abcdefgh" + b"*" * 8
    with pytest.raises(hal.HalError) as again:
        device.queue(0).execute(cb, signals=[(done, 2)])
    assert again.value.code == "FAILED_PRECONDITION"


def test_dispatch_example_kernels(device, kernels):
    exe = device.load_executable(str(kernels))
    assert exe.entry_points == ["fill_u32", "add_f32", "scale_offset_f32", "fail_on_purpose"]
    assert exe.entry_point("add_f32") == 1
    n = 1000
    a = hal.from_numpy(np.arange(n, dtype=np.float32), device)
    b = hal.from_numpy(np.full(n, 0.5, dtype=np.float32), device)
    c, d = device.allocate(4 * n, memory="host"), device.allocate(4 * n, memory="host")
    groups = (n + 63) // 64
    cb = device.command_buffer(reusable=True)
    cb.dispatch(exe, "add_f32", groups, bindings=[a, b, c])
    cb.barrier()
    cb.dispatch(exe, 2, (groups, 1, 1), constants=[2.0, -1.0], bindings=[c, (d, 0, 4 * n)])
    cb.end()
    done = device.semaphore()
    queue = device.queue(0)
    queue.execute(cb, signals=[(done, 1)])
    queue.execute(cb, waits=[(done, 1)], signals=[(done, 2)])
    done.wait(2, timeout=10)
    expected = (np.arange(n, dtype=np.float32) + 0.5) * 2.0 - 1.0
    assert np.array_equal(hal.to_numpy(d, np.float32), expected)


def test_dispatch_errors(device, kernels):
    exe = device.load_executable(kernels)  # a pathlib.Path works too
    cb = device.command_buffer()
    with pytest.raises(hal.NotFoundError):
        cb.dispatch(exe, "no_such_kernel", 1)
    with pytest.raises(hal.HalError) as wrong_abi:
        cb.dispatch(exe, "add_f32", 1, bindings=[device.allocate(4)])
    assert wrong_abi.value.code == "INVALID_ARGUMENT"
    cb.dispatch(exe, "fail_on_purpose", 1)
    cb.end()
    failed = device.semaphore()
    device.queue(0).execute(cb, signals=[(failed, 1)])
    with pytest.raises(hal.HalError) as fault:
        failed.wait(1, timeout=10)
    assert "status 42" in fault.value.message
    assert failed.failed and isinstance(failed.failure, hal.HalError)


def test_load_executable_refusals(device, tmp_path):
    with pytest.raises(ValueError):
        device.load_executable(b"\x03\x02\x23\x07" + bytes(16))
    spirv = b"\x03\x02\x23\x07" + bytes(16)
    with pytest.raises(hal.HalError) as refused:
        device.load_executable(spirv, [{"name": "main", "bindings": 1}])
    assert refused.value.code in ("UNIMPLEMENTED", "INVALID_ARGUMENT")
    with pytest.raises(hal.HalError) as missing:
        device.load_executable(tmp_path / "missing.so")
    assert missing.value.code == "UNAVAILABLE"
    with pytest.raises(TypeError):
        device.load_executable(12)


def test_error_classes():
    assert issubclass(hal.DeadlineExceededError, TimeoutError)
    for cls in (hal.InvalidArgumentError, hal.CancelledError, hal.DataLossError, hal.AbortedError):
        assert issubclass(cls, hal.HalError) and cls.code.isupper()
    error = hal.AbortedError("it broke")
    assert (error.code, error.message, str(error)) == ("ABORTED", "it broke", "ABORTED: it broke")


def test_semaphore_values_and_failures(device):
    sem = device.semaphore(3)
    assert sem.value == 3 and not sem.failed and sem.failure is None
    sem.signal(5)
    with pytest.raises(hal.FailedPreconditionError):
        sem.signal(4)
    sem.wait(5, timeout=0)
    with pytest.raises(hal.DeadlineExceededError):
        sem.wait(6, timeout=0.05)
    with pytest.raises(ValueError):
        sem.wait(6, timeout=-1)
    sem.fail("the producer died", code="DATA_LOSS")
    with pytest.raises(hal.DataLossError) as failed:
        sem.wait(6)
    assert failed.value.message == "the producer died"
    with pytest.raises(hal.DataLossError):
        _ = sem.value
    with pytest.raises(ValueError):
        device.semaphore().fail("x", code="NOT_A_CODE")
    assert sem.at(7)[1] == 7


def test_wait_all_and_wait_any(device):
    a, b = device.semaphore(), device.semaphore()
    a.signal(1)
    hal.wait_any([(a, 1), (b, 1)], timeout=1)
    with pytest.raises(hal.DeadlineExceededError):
        hal.wait_all([(a, 1), (b, 1)], timeout=0.05)
    b.signal(2)
    hal.wait_all([a.at(1), b.at(2)], timeout=1)
    with pytest.raises(TypeError):
        hal.wait_all([(a, "one")])
    with pytest.raises(TypeError):
        device.queue(0).barrier(signals=[a])


def test_signal_list_is_checked(device):
    sem = device.semaphore(4)
    with pytest.raises(hal.InvalidArgumentError):
        device.queue(0).barrier(signals=[(sem, 2)])


def test_cuda_streams_need_a_cuda_device(device):
    queue = device.queue(0)
    with pytest.raises(hal.UnimplementedError) as raised:
        queue.wait_stream(1)
    assert "CUDA stream" in raised.value.message
    with pytest.raises(hal.UnimplementedError):
        queue.signal_stream(2)

    class Stream:
        cuda_stream = 1

    with pytest.raises(hal.UnimplementedError):
        queue.wait_stream(Stream())
    with pytest.raises(TypeError):
        queue.wait_stream(object())
    with pytest.raises(ValueError):
        queue.signal_stream(-1)


def test_queue_ordered_allocation(device):
    queue, sem = device.queue(0), device.semaphore()
    gate = device.semaphore()
    buffer = queue.alloca(4096, memory="host", waits=[(gate, 1)], signals=[(sem, 1)])
    assert buffer.size == 4096 and buffer.memory == "host"
    queue.fill(buffer, 0x07070707, waits=[(sem, 1)], signals=[(sem, 2)])
    assert sem.value == 0, "nothing runs before the gate"
    gate.signal(1)
    sem.wait(2, timeout=10)
    assert buffer.read()[:8] == bytes([7]) * 8
    queue.dealloca(buffer, waits=[(sem, 2)], signals=[(sem, 3)])
    sem.wait(3, timeout=10)
    with pytest.raises(hal.FailedPreconditionError):
        queue.dealloca(buffer)
    with pytest.raises(hal.InvalidArgumentError):
        queue.dealloca(device.allocate(64))
