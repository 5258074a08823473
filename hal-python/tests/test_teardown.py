"""Teardown: a device dropped with work pending fails that work's signals with CANCELLED instead of
hanging, and the interpreter exits cleanly with HAL work and callbacks in flight."""

import gc
import subprocess
import sys
import textwrap

import pytest

import timeline_hal as hal


def test_device_dropped_while_an_operation_waits():
    device = hal.device("cpu-sim")
    queue = device.queue(0)
    gate, done = device.semaphore(), device.semaphore()
    queue.barrier(waits=[(gate, 1)], signals=[(done, 1)])
    readback = queue.read(device.allocate(8), waits=[(gate, 1)])
    del queue, device
    gc.collect()
    with pytest.raises(hal.CancelledError):
        done.wait(1, timeout=10)
    with pytest.raises(hal.CancelledError):
        readback.wait(timeout=10)


def _run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=60
    )


def test_exit_with_work_pending():
    result = _run(
        """
        import timeline_hal as hal
        device = hal.device("cpu-sim")
        gate, done = device.semaphore(), device.semaphore()
        device.queue(0).barrier(waits=[(gate, 1)], signals=[(done, 1)])
        device.queue(1).host_call(lambda: None, waits=[(gate, 1)])
        print("exiting")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "exiting"


def test_exit_with_a_host_call_running():
    result = _run(
        """
        import time
        import timeline_hal as hal
        device = hal.device("cpu-sim")
        started = device.semaphore()
        def slow():
            started.signal(1)
            time.sleep(0.3)
        device.queue(0).host_call(slow)
        started.wait(1, timeout=10)
        """
    )
    assert result.returncode == 0, result.stderr


def test_exit_right_after_asyncio_completions():
    result = _run(
        """
        import asyncio
        import timeline_hal as hal
        device = hal.device("cpu-sim")
        async def main():
            queue = device.queue(0)
            buffer = device.allocate(64)
            for _ in range(50):
                await queue.read(buffer, 0, 4)
        asyncio.run(main())
        """
    )
    assert result.returncode == 0, result.stderr
