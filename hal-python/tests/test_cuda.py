"""CUDA with PyTorch and Triton: tensors lent both ways through DLPack without a copy, a HAL queue
ordered with PyTorch's current stream on the device both ways, a Triton kernel launched through the
HAL between two PyTorch ops with no host synchronisation (bit-exact against PyTorch), and teardown
while the HAL waits on a PyTorch stream. Runs where PyTorch and a CUDA device are present (the GPU
machines); HAL_REQUIRE_CUDA=1 turns a missing CUDA device into a failure."""

import gc
import os
import time

import pytest

import timeline_hal as hal

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import triton_kernels  # noqa: E402  (needs Triton, checked above)

#: GPU clock cycles of `torch.cuda._sleep` that keep PyTorch's stream busy for tens of ms (an
#: H200 runs near 2 GHz), so that an order that is missing would show as stale data.
BUSY_CYCLES = 100_000_000


@pytest.fixture
def cuda():
    listing = {d["name"]: d for d in hal.drivers()}
    driver = listing.get("cuda")
    reason = "this build of timeline_hal has no CUDA driver" if driver is None else driver["reason"]
    if driver is None or not driver["available"] or not torch.cuda.is_available():
        if os.environ.get("HAL_REQUIRE_CUDA") == "1":
            pytest.fail(f"HAL_REQUIRE_CUDA=1 but CUDA cannot run here: {reason}")
        pytest.skip(f"not run: no CUDA device ({reason})")
    torch.cuda.synchronize()
    yield hal.device("cuda:0")
    torch.cuda.synchronize()


def test_tensors_are_lent_both_ways_without_a_copy(cuda):
    queue, done = cuda.queue(0), cuda.semaphore()
    tensor = torch.zeros(1024, dtype=torch.int32, device="cuda")
    lent = hal.from_dlpack(tensor, cuda)
    assert lent.size == 4096 and lent.memory == "device"
    queue.fill(lent, 0x01020304, signals=[(done, 1)])
    done.wait(1, timeout=20)
    assert (tensor == 0x01020304).all().item(), "the HAL wrote the tensor's own memory"

    buffer = cuda.allocate(4096)
    queue.fill(buffer, 7, signals=[(done, 2)])
    done.wait(2, timeout=20)
    view = torch.from_dlpack(buffer)
    assert view.device.type == "cuda" and view.dtype == torch.uint8 and view.numel() == 4096
    assert (view.view(torch.int32) == 7).all().item()
    view.view(torch.int32).fill_(9)
    torch.cuda.synchronize()
    back = cuda.allocate(4096, memory="host")
    queue.copy(buffer, back, signals=[(done, 3)])
    done.wait(3, timeout=20)
    assert set(back.read()[::4]) == {9}, "PyTorch wrote the buffer's own memory"


def test_dlpack_export_orders_the_consumers_stream_after_the_queues(cuda):
    """torch.from_dlpack passes its current stream: PyTorch's reads of the buffer run after the HAL
    work submitted before the export, with no host wait between."""
    queue = cuda.queue(0)
    stream = torch.cuda.current_stream()
    buffer = cuda.allocate(1 << 20)
    # The first pass warms up: CUDA loads each of PyTorch's kernels at its first launch, which
    # synchronizes the GPU.
    for attempt, pattern in enumerate((0x01010101, 0x5A5A5A5A)):
        # The HAL fill waits for a busy PyTorch stream, so it lands late: a consumer that was not
        # ordered after it would read the bytes of the pass before.
        torch.cuda._sleep(BUSY_CYCLES)
        started = time.perf_counter()
        queue.wait_stream(stream)
        queue.fill(buffer, pattern)
        total = torch.from_dlpack(buffer).view(torch.int32).to(torch.int64).sum()
        enqueued = time.perf_counter() - started
        if attempt > 0:
            assert not stream.query(), "the host did not wait: PyTorch's stream is still busy"
            assert enqueued < 0.02, f"the export enqueued in {enqueued * 1e3:.1f} ms (no host wait)"
        assert total.item() == pattern * (1 << 18)


def test_a_triton_kernel_runs_through_the_hal_between_two_pytorch_ops(cuda):
    n = 1 << 20
    exe = triton_kernels.load_add(cuda, n)
    queue, sem = cuda.queue(0), cuda.semaphore()
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    cb = cuda.command_buffer(reusable=True)
    a = torch.empty_like(x)
    lent = [hal.from_dlpack(t, cuda) for t in (a, y, out)]
    cb.dispatch(exe, 0, triton_kernels.workgroups(n), constants=[n], bindings=lent)
    cb.end()
    stream = torch.cuda.current_stream()
    torch.cuda.synchronize()
    # The first pass warms up: CUDA loads each of PyTorch's kernels at its first launch, which
    # synchronizes the GPU.
    for step in range(0, 4):
        started = time.perf_counter()
        torch.cuda._sleep(BUSY_CYCLES)  # a missing order would read stale `a` and `out`
        torch.mul(x, float(step), out=a)  # PyTorch op 1 writes a
        queue.wait_stream(stream)  # the HAL waits for op 1 on the device
        queue.execute(cb, signals=[(sem, step + 1)])  # out = a + y, Triton's PTX through the HAL
        queue.signal_stream(stream, waits=[(sem, step + 1)])  # op 2 waits for the kernel on the device
        result = out * 0.5 + 1.0  # PyTorch op 2 reads out
        enqueued = time.perf_counter() - started
        if step > 0:
            assert not stream.query(), "no host synchronisation: PyTorch's stream is still busy"
            assert enqueued < 0.02, f"step {step}: enqueued in {enqueued * 1e3:.1f} ms"
        expected = (x * float(step) + y) * 0.5 + 1.0
        assert torch.equal(result, expected), f"step {step}: not bit-exact against PyTorch"
        sem.wait(step + 1, timeout=20)  # the HAL's completion is seen on the host a little later


def test_stream_arguments(cuda):
    queue, done = cuda.queue(0), cuda.semaphore()
    stream = torch.cuda.Stream()
    for handle in (stream, stream.cuda_stream, torch.cuda.current_stream(), 1, 2):
        queue.wait_stream(handle)
        queue.signal_stream(handle)
    queue.barrier(signals=[(done, 1)])
    done.wait(1, timeout=20)
    with pytest.raises(TypeError):
        queue.wait_stream("stream 1")
    with pytest.raises(ValueError):
        queue.wait_stream(-5)
    with pytest.raises(BufferError):
        cuda.allocate(64).__dlpack__(stream=0)
    torch.cuda.synchronize()


def test_teardown_while_the_hal_waits_on_a_busy_pytorch_stream(cuda):
    device = hal.device("cuda:0")  # its own, so that the test holds the only reference
    stream = torch.cuda.current_stream()
    queue, done = device.queue(0), device.semaphore()
    torch.cuda._sleep(20 * BUSY_CYCLES)  # about a second
    queue.wait_stream(stream, signals=[(done, 1)])
    started = time.perf_counter()
    del queue, device
    gc.collect()
    with pytest.raises(hal.CancelledError):
        done.wait(1, timeout=20)
    took = time.perf_counter() - started
    assert took < 0.5, f"teardown took {took:.3f} s: it waited for PyTorch's stream"
    torch.cuda.synchronize()
