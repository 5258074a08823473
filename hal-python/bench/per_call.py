#!/usr/bin/env python3
"""Per-call cost from Python: one small kernel (x += 1 over 4096 floats) called N times in a chain
(each call after the one before), then one host wait, for N = 1, 10 and 100, through

- the HAL, one `Queue.execute` a call (a one-dispatch command buffer recorded once, reused),
- the HAL, one command buffer of N dispatches with barriers between (recorded once, one execute),
- Triton's own launcher (the same compiled kernel),
- PyTorch eager (`x.add_(1)`),
- CuPy (`x += 1`), where CuPy is installed.

Prints a table of the median (over repetitions) of the whole chain, enqueue to host wait, in
microseconds, and that over N; checks each path's result. Needs a CUDA GPU, PyTorch and Triton;
run it with the package installed: python3 hal-python/bench/per_call.py [--reps R]"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import timeline_hal as hal  # noqa: E402
import triton_kernels  # noqa: E402

N_ELEMENTS = 4096
CHAINS = (1, 10, 100)


def median_us(run, reps: int, warmup: int = 20) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def hal_paths(device, x):
    exe = triton_kernels.load_add_one(device, N_ELEMENTS)
    queue, sem = device.queue(0), device.semaphore()
    lent = hal.from_dlpack(x, device)
    groups = triton_kernels.workgroups(N_ELEMENTS)
    one = device.command_buffer(reusable=True)
    one.dispatch(exe, 0, groups, constants=[N_ELEMENTS], bindings=[lent])
    one.end()
    chained = {}
    for n in CHAINS:
        cb = device.command_buffer(reusable=True)
        for i in range(n):
            if i:
                cb.barrier()
            cb.dispatch(exe, 0, groups, constants=[N_ELEMENTS], bindings=[lent])
        cb.end()
        chained[n] = cb
    state = {"value": 0}

    def executes(n):
        def run():
            for _ in range(n - 1):
                queue.execute(one)
            state["value"] += 1
            queue.execute(one, signals=[(sem, state["value"])])
            sem.wait(state["value"])

        return run

    def buffer_of(n):
        cb = chained[n]

        def run():
            state["value"] += 1
            queue.execute(cb, signals=[(sem, state["value"])])
            sem.wait(state["value"])

        return run

    return executes, buffer_of, (lent, one, chained)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    device = hal.device("cuda:0")
    x = torch.zeros(N_ELEMENTS, device="cuda")
    compiled_grid = (triton_kernels.workgroups(N_ELEMENTS),)
    executes, buffer_of, keep = hal_paths(device, x)
    try:
        import cupy
    except ImportError:
        cupy = None
    xc = cupy.zeros(N_ELEMENTS, dtype=cupy.float32) if cupy is not None else None

    def torch_eager(n):
        def run():
            for _ in range(n):
                x.add_(1)
            torch.cuda.synchronize()

        return run

    def triton_launch(n):
        def run():
            for _ in range(n):
                triton_kernels.add_one[compiled_grid](x, N_ELEMENTS, BLOCK=1024)
            torch.cuda.synchronize()

        return run

    def cupy_eager(n):
        def run():
            nonlocal xc
            for _ in range(n):
                xc += 1
            cupy.cuda.get_current_stream().synchronize()

        return run

    paths = [
        ("HAL: N executes of a 1-dispatch command buffer", executes),
        ("HAL: 1 execute of an N-dispatch command buffer", buffer_of),
        ("Triton's launcher", triton_launch),
        ("PyTorch eager (x.add_(1))", torch_eager),
    ]
    if cupy is not None:
        paths.append((f"CuPy {cupy.__version__} (x += 1)", cupy_eager))
    rows = []
    for name, make in paths:
        cells = []
        for n in CHAINS:
            torch.cuda.synchronize()
            before = x.clone() if xc is None or "CuPy" not in name else None
            reps = max(20, args.reps // n * 2) if n > 1 else args.reps
            us = median_us(make(n), reps)
            torch.cuda.synchronize()
            if before is not None:
                calls = (20 + reps) * n
                assert torch.equal(x, before + calls), f"{name}, N={n}: wrong result"
            cells.append(us)
        rows.append((name, cells))
    print(
        f"torch {torch.__version__}, triton {triton_kernels.triton.__version__}, {torch.cuda.get_device_name()}; "
        f"{N_ELEMENTS} floats, median of the chain (enqueue to host wait), us"
    )
    header = "| path | " + " | ".join(f"N={n}" for n in CHAINS) + " | " + " | ".join(f"per call, N={n}" for n in CHAINS) + " |"
    print(header)
    print("|" + " --- |" * (1 + 2 * len(CHAINS)))
    for name, cells in rows:
        per = [c / n for c, n in zip(cells, CHAINS)]
        print(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " | " + " | ".join(f"{p:.2f}" for p in per) + " |")

    # Interleaved with PyTorch on its current stream: each step is a PyTorch op then the kernel
    # (through the HAL, ordered with PyTorch's stream on the device both ways; or Triton's own
    # launch on that stream), 100 steps, then one host wait.
    stream = torch.cuda.current_stream()
    queue, one = device.queue(0), keep[1]

    def hal_interleaved():
        for _ in range(100):
            x.mul_(1.0)
            queue.wait_stream(stream)
            queue.execute(one)
            queue.signal_stream(stream)
        torch.cuda.synchronize()

    def triton_interleaved():
        for _ in range(100):
            x.mul_(1.0)
            triton_kernels.add_one[compiled_grid](x, N_ELEMENTS, BLOCK=1024)
        torch.cuda.synchronize()

    def torch_interleaved():
        for _ in range(100):
            x.mul_(1.0)
            x.add_(1)
        torch.cuda.synchronize()

    print()
    print("| 100 steps of (PyTorch op, then the kernel), one host wait | us per step |")
    print("| --- | --- |")
    for name, run in (
        ("HAL kernel, ordered with torch.cuda.current_stream() both ways", hal_interleaved),
        ("Triton's launcher on the same stream", triton_interleaved),
        ("PyTorch alone (x.add_(1))", torch_interleaved),
    ):
        print(f"| {name} | {median_us(run, 30, warmup=3) / 100:.2f} |")
    del keep


if __name__ == "__main__":
    main()
