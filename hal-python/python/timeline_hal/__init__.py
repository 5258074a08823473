"""timeline_hal: an IREE-style hardware abstraction layer with timeline semaphores.

Open a device, allocate buffers, record and submit work on its queues ordered by timeline
semaphores, and wait from threads or asyncio::

    import timeline_hal as hal

    device = hal.device("cpu-sim")
    buffer = device.allocate(16, memory="host")
    done = device.semaphore(0)
    device.queue(0).fill(buffer, 7, signals=[(done, 1)])
    done.wait(1)

NumPy views of host-visible buffers (``to_numpy``, ``Buffer.map``), copies in (``from_numpy``)
and DLPack both ways (``numpy.from_dlpack(buffer)``, ``from_dlpack(array, device)``) need no copy
of the memory where the memory allows it. Every failure is a ``HalError`` subclass carrying the
HAL's status ``code`` and ``message``.
"""

import atexit
from typing import Any, Optional, Sequence, Union

from ._errors import (
    AbortedError,
    CancelledError,
    DataLossError,
    DeadlineExceededError,
    FailedPreconditionError,
    HalError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
    UnimplementedError,
)
from ._native import (
    Buffer,
    CommandBuffer,
    Device,
    Executable,
    HostView,
    Invocation,
    Queue,
    Readback,
    Semaphore,
    device,
    devices,
    drivers,
    from_dlpack,
    wait_all,
    wait_any,
)

from ._native import shutdown as _shutdown

# HAL threads stop calling into Python before the interpreter finalizes.
atexit.register(_shutdown)

__all__ = [
    "AbortedError",
    "Buffer",
    "CancelledError",
    "CommandBuffer",
    "DataLossError",
    "DeadlineExceededError",
    "Device",
    "Executable",
    "FailedPreconditionError",
    "HalError",
    "HostView",
    "InternalError",
    "InvalidArgumentError",
    "Invocation",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "Queue",
    "Readback",
    "ResourceExhaustedError",
    "Semaphore",
    "UnavailableError",
    "UnimplementedError",
    "device",
    "devices",
    "drivers",
    "from_dlpack",
    "from_numpy",
    "to_numpy",
    "wait_all",
    "wait_any",
]


def from_numpy(array: Any, device: Device, memory: str = "host", queue: Optional[Queue] = None) -> Buffer:
    """A new buffer on ``device`` holding a copy of ``array``'s bytes (C order).

    ``memory="host"`` writes through a mapping; ``memory="device"`` writes on ``queue`` (queue 0
    when None) and waits for the write. For no copy at all, lend the array's memory with
    ``from_dlpack(array, device)``.
    """
    import numpy

    data = numpy.ascontiguousarray(array)
    buffer = device.allocate(data.nbytes, memory=memory)
    if data.nbytes == 0:
        return buffer
    if memory == "host":
        buffer.write(data)
    else:
        written = device.semaphore(0)
        (queue or device.queue(0)).write(buffer, data, signals=[(written, 1)])
        written.wait(1)
    return buffer


def to_numpy(
    buffer: Buffer,
    dtype: Any = "uint8",
    shape: Union[None, int, Sequence[int]] = None,
    queue: Optional[Queue] = None,
    timeout: Optional[float] = None,
) -> Any:
    """``buffer``'s bytes as a NumPy array of ``dtype`` (and ``shape``, when given).

    A host-visible buffer gives a view of its mapping, without a copy: the array keeps the mapping
    alive and sees later device writes (order them with semaphores). A device buffer is read on
    ``queue`` (a queue of its device), waiting at most ``timeout`` seconds, into a new array.
    """
    import numpy

    if buffer.memory == "host":
        array = numpy.frombuffer(buffer.map(), dtype=dtype)
    else:
        if queue is None:
            raise ValueError("to_numpy of a device buffer needs the queue to read it on: to_numpy(buffer, queue=q)")
        data = queue.read(buffer).wait(timeout)
        array = numpy.frombuffer(bytearray(data), dtype=dtype)
    if shape is not None:
        array = array.reshape(shape)
    return array

