"""Threads: waits release the GIL, several threads submit and wait at once, and host calls run
Python on HAL threads (a raised exception fails their signals with its message)."""

import threading
import time

import numpy as np
import pytest

import timeline_hal as hal


def test_threads_submit_and_wait(device):
    count, rounds = 4, 20
    failures = []

    def worker(index):
        try:
            queue = device.queue(index % device.queue_count)
            done = device.semaphore()
            buffer = device.allocate(256)
            for step in range(1, rounds + 1):
                queue.fill(buffer, index * 1000 + step, waits=[(done, step - 1)], signals=[(done, step)])
                words = np.frombuffer(queue.read(buffer, waits=[(done, step)]).wait(timeout=10), np.uint32)
                assert (words == index * 1000 + step).all()
        except Exception as error:  # reported to the main thread
            failures.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures, failures


def test_wait_releases_the_gil(device):
    sem = device.semaphore()
    # The signalling thread runs Python while the main thread waits: it needs the GIL meanwhile.
    signaller = threading.Thread(target=lambda: (time.sleep(0.05), sem.signal(1)))
    signaller.start()
    sem.wait(1, timeout=10)
    signaller.join()


def test_host_call_runs_python_while_the_caller_waits(device):
    queue, done = device.queue(0), device.semaphore()
    seen = []
    queue.host_call(lambda: seen.append(threading.current_thread().ident), signals=[(done, 1)])
    done.wait(1, timeout=10)
    assert seen and seen[0] != threading.get_ident()


def test_host_call_orders_with_queue_work(device):
    queue, done = device.queue(2), device.semaphore()
    buffer = device.allocate(16, memory="host")
    queue.fill(buffer, 9, signals=[(done, 1)])
    observed = []
    queue.host_call(lambda: observed.append(buffer.read()), waits=[(done, 1)], signals=[(done, 2)])
    done.wait(2, timeout=10)
    assert observed == [(9).to_bytes(4, "little") * 4]


def test_host_call_exception_fails_its_signals(device):
    queue, done = device.queue(0), device.semaphore()

    def broken():
        raise ValueError("the input was bad")

    queue.host_call(broken, signals=[(done, 1)])
    with pytest.raises(hal.AbortedError) as failed:
        done.wait(1, timeout=10)
    assert "ValueError: the input was bad" in failed.value.message
    # A HalError keeps its code.
    other = device.semaphore()

    def out_of_range():
        raise hal.OutOfRangeError("index 12 of 4")

    queue.host_call(out_of_range, signals=[(other, 1)])
    with pytest.raises(hal.OutOfRangeError) as kept:
        other.wait(1, timeout=10)
    assert "index 12 of 4" in kept.value.message


def test_host_call_submits_and_waits_inside(device):
    queue, inner, outer = device.queue(0), device.semaphore(), device.semaphore()
    buffer = device.allocate(8, memory="host")

    def nested():
        device.queue(1).fill(buffer, 3, signals=[(inner, 1)])
        inner.wait(1, timeout=10)

    queue.host_call(nested, signals=[(outer, 1)])
    outer.wait(1, timeout=10)
    assert buffer.read() == (3).to_bytes(4, "little") * 2


def test_non_blocking_host_call_lets_later_work_run(device):
    queue, gate, done = device.queue(3), device.semaphore(), device.semaphore()
    release = threading.Event()
    queue.host_call(lambda: release.wait(10), non_blocking=True, signals=[(gate, 1)])
    queue.barrier(signals=[(done, 1)])
    done.wait(1, timeout=10)  # ran while the host call was still blocked
    release.set()
    gate.wait(1, timeout=10)


def test_host_call_takes_a_callable(device):
    with pytest.raises(TypeError):
        device.queue(0).host_call(42)
