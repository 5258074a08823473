"""asyncio: awaiting semaphores and reads, completed from HAL threads without polling."""

import asyncio
import threading

import pytest

import timeline_hal as hal


def test_reach_signalled_from_another_thread(device):
    async def main():
        sem = device.semaphore()
        threading.Timer(0.05, sem.signal, args=(3,)).start()
        await sem.reach(3)
        assert sem.value == 3
        await sem.reach(2)  # reached already: done at once

    asyncio.run(main())


def test_reach_many_at_once(device):
    async def main():
        sems = [device.semaphore() for _ in range(20)]
        waiting = asyncio.gather(*(s.reach(1) for s in sems))
        for s in sems:
            s.signal(1)
        await asyncio.wait_for(waiting, 10)

    asyncio.run(main())


def test_reach_raises_the_failure(device):
    async def main():
        sem = device.semaphore()
        asyncio.get_running_loop().call_later(0.02, sem.fail, "gone")
        with pytest.raises(hal.AbortedError) as failed:
            await sem.reach(1)
        assert failed.value.message == "gone"

    asyncio.run(main())


def test_reach_cancelled_by_a_timeout(device):
    async def main():
        sem = device.semaphore()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(sem.reach(1), 0.05)
        sem.signal(1)  # the cancelled wait is gone; nothing is delivered to it
        await asyncio.sleep(0.01)
        assert "waiting" not in sem.report()

    asyncio.run(main())


def test_await_a_read(device):
    async def main():
        queue, done = device.queue(0), device.semaphore()
        buffer = device.allocate(16)
        readback = queue.read(buffer, waits=[(done, 1)])
        assert not readback.ready
        queue.fill(buffer, 0x11, width=1, signals=[(done, 1)])
        assert await readback == b"\x11" * 16

    asyncio.run(main())


def test_await_a_failed_read(device):
    async def main():
        gate = device.semaphore()
        readback = device.queue(0).read(device.allocate(8), waits=[(gate, 1)])
        gate.fail("upstream failed", code="CANCELLED")
        with pytest.raises(hal.CancelledError):
            await readback

    asyncio.run(main())


def test_reach_needs_a_running_loop(device):
    with pytest.raises(RuntimeError):
        device.semaphore().reach(1)
