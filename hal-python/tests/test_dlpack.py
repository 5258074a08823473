"""DLPack both ways with NumPy: host-visible buffers as arrays, arrays lent to a device."""

import gc
import weakref

import numpy as np
import pytest

import timeline_hal as hal

#: NumPy asks for DLPack 1.x (and so gets a writable array) from 2.1 on; older NumPy takes the
#: legacy capsule, which it makes read-only.
WRITABLE_DLPACK = tuple(int(p) for p in np.__version__.split(".")[:2]) >= (2, 1)


def test_buffer_to_numpy_shares_memory(device):
    buffer = device.allocate(32, memory="host")
    assert buffer.__dlpack_device__() == (1, 0)
    array = np.from_dlpack(buffer)
    assert array.dtype == np.uint8 and array.shape == (32,)
    done = device.semaphore()
    device.queue(0).fill(buffer, 0x5A, width=1, signals=[(done, 1)])
    done.wait(1, timeout=5)
    assert (array == 0x5A).all()
    assert array.flags.writeable == WRITABLE_DLPACK
    if WRITABLE_DLPACK:
        array.view(np.uint32)[:] = 7
        assert buffer.read(0, 4) == (7).to_bytes(4, "little")


def test_device_memory_has_no_cpu_export(device):
    with pytest.raises(BufferError):
        device.allocate(16).__dlpack__()
    with pytest.raises(BufferError):
        device.allocate(16).__dlpack_device__()


def test_numpy_to_buffer_without_a_copy(device):
    values = np.zeros((4, 8), dtype=np.float32)
    buffer = hal.from_dlpack(values, device)
    assert buffer.size == values.nbytes and buffer.memory == "host"
    done = device.semaphore()
    device.queue(0).fill(buffer, 2.5, signals=[(done, 1)])
    done.wait(1, timeout=5)
    assert (values == 2.5).all()


def test_imported_array_lives_until_the_buffer_goes(device):
    values = np.arange(64, dtype=np.uint8)
    alive = weakref.ref(values)
    buffer = hal.from_dlpack(values, device)
    del values
    gc.collect()
    assert alive() is not None
    assert buffer.read(0, 4) == bytes([0, 1, 2, 3])
    del buffer
    gc.collect()
    assert alive() is None


def test_round_trip(device):
    original = np.arange(16, dtype=np.int16)
    buffer = hal.from_dlpack(original, device)
    again = np.from_dlpack(buffer).view(np.int16)
    assert (again == original).all()
    original[1] = -5  # the same memory, seen through the buffer
    assert again[1] == -5
    if WRITABLE_DLPACK:
        again[0] = 99
        assert original[0] == 99


def test_non_contiguous_arrays_are_refused(device):
    with pytest.raises(BufferError):
        hal.from_dlpack(np.zeros((8, 8), dtype=np.float32)[:, ::2], device)
    assert hal.from_dlpack(np.zeros((8, 1), dtype=np.float32)[::1], device).size == 32


def test_empty_arrays_are_refused(device):
    with pytest.raises(hal.InvalidArgumentError):
        hal.from_dlpack(np.zeros(0, dtype=np.float32), device)
