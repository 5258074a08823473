"""The peers table: one *call* is N dependent tiny elementwise dispatches and one host wait
(N = 1, 10, 100), run by the HAL, raw CUDA, PyTorch and IREE's release runtime on one GPU, in one
process each, printed as one table with ratios.

    python3 bench/peers/peers.py --hal PATH/peers --vmfb PATH/step_sm80.vmfb --iree-wheel PATH/iree_base_runtime-*.whl

- HAL and raw CUDA: the `peers` example of the bench crate (`cargo build --release -p bench
  --example peers`), the one-thread `touch` kernel; rows `hal_submissions` (N executes of a
  one-dispatch command buffer chained by a semaphore, one wait), `hal_command_buffer` (one execute
  of an N-dispatch command buffer, one wait), `raw_launches` (N cuLaunchKernel + cuStreamSynchronize)
  and `raw_graph` (an N-kernel graph + cuStreamSynchronize).
- PyTorch: N `x.add_(1)` on a 256-float tensor + `torch.cuda.synchronize()` (eager), and a CUDA
  graph of the N adds replayed + synchronize.
- IREE: `step.mlir` (the same add, compiled by `iree-compile --iree-hal-target-device=cuda
  --iree-cuda-target=sm_80`, PTX the driver JITs for the GPU), called N times on device arrays
  through `iree.runtime`, then the result read back (the host wait). IREE's compiler would fuse N
  adds in one function into one dispatch, so it has no one-command-buffer row.

`bench/peers/prepare.sh` builds the binary, downloads the IREE wheels and compiles the module into
`devpeers/` (no GPU needed); `bench/peers/run.sh` runs this script on the GPU machine.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

SIZES = (1, 10, 100)
TRIALS = 7


def calls(n):
    return {1: 2000, 10: 1000}.get(n, 200)


def timed(call, n, trials=TRIALS):
    """Median, p10 and p90 of microseconds per call over `trials` trials (after a warm-up)."""
    count = calls(n)
    for _ in range(max(1, count // 10)):
        call()
    samples = []
    for _ in range(trials):
        start = time.perf_counter()
        for _ in range(count):
            call()
        samples.append((time.perf_counter() - start) * 1e6 / count)
    samples.sort()
    at = lambda q: samples[round((len(samples) - 1) * q)]
    return statistics.median(samples), at(0.1), at(0.9)


def hal_rows(binary, ordinal):
    out = subprocess.run([binary, str(ordinal)], check=True, capture_output=True, text=True).stdout
    rows, header = {}, ""
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "row":
            rows[(parts[1], int(parts[2]))] = tuple(float(x) for x in parts[3:6])
        else:
            header = line
    return header, rows


def torch_rows(ordinal):
    import torch

    torch.cuda.set_device(ordinal)
    rows = {}
    x = torch.zeros(256, device="cuda")
    for n in SIZES:
        def eager(n=n):
            for _ in range(n):
                x.add_(1)
            torch.cuda.synchronize()

        rows[("torch_eager", n)] = timed(eager, n)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                x.add_(1)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                x.add_(1)

        def replay(graph=graph):
            graph.replay()
            torch.cuda.synchronize()

        rows[("torch_graph", n)] = timed(replay, n)
    return f"pytorch {torch.__version__}", rows


def iree_rows(vmfb, wheel, ordinal):
    target = tempfile.mkdtemp(prefix="iree-rt-")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    sys.path.insert(0, target)
    import numpy as np
    import iree.runtime as rt

    os.environ.setdefault("CUDA_VISIBLE_DEVICES", str(ordinal))
    config = rt.Config("cuda")
    context = rt.SystemContext(config=config)
    with open(vmfb, "rb") as f:
        module = rt.VmModule.copy_buffer(context.instance, f.read())
    context.add_vm_module(module)
    step = context.modules.module["step"]
    rows = {}
    for n in SIZES:
        state = {"x": rt.asdevicearray(config.device, np.zeros(256, np.float32))}

        def call(n=n):
            x = state["x"]
            for _ in range(n):
                x = step(x)
            x.to_host()
            state["x"] = x

        rows[("iree_calls", n)] = timed(call, n)
        check = rt.asdevicearray(config.device, np.zeros(256, np.float32))
        for _ in range(n):
            check = step(check)
        assert float(check.to_host()[0]) == float(n), "IREE's step computed a wrong value"
    version = getattr(rt, "version", None)
    return f"iree.runtime {getattr(version, 'VERSION', '?')}", rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hal", required=True)
    parser.add_argument("--vmfb")
    parser.add_argument("--iree-wheel")
    parser.add_argument("--ordinal", type=int, default=0)
    args = parser.parse_args()
    header, rows = hal_rows(args.hal, args.ordinal)
    print(header)
    peers = []
    for name, fn in (("torch", lambda: torch_rows(args.ordinal)),
                     ("iree", lambda: iree_rows(args.vmfb, args.iree_wheel, args.ordinal))):
        if name == "iree" and not (args.vmfb and args.iree_wheel):
            print("iree: not run (no --vmfb / --iree-wheel)")
            continue
        try:
            label, found = fn()
            rows.update(found)
            peers.append(label)
        except Exception as error:  # a peer that cannot run is reported, not fatal
            print(f"{name}: not run ({type(error).__name__}: {error})")
    print("peers: " + ", ".join(peers))
    us = lambda key: rows.get(key, (float("nan"),) * 3)[0]
    print()
    print("N submissions + one host wait, us per call (median of 7; ratio = HAL / peer)")
    print(f"{'N':>4} {'HAL':>9} {'raw launch+sync':>22} {'PyTorch eager':>22} {'IREE calls':>22}")
    for n in SIZES:
        hal = us(("hal_submissions", n))
        cells = [f"{us((k, n)):9.2f} ({hal / us((k, n)):5.2f}x)" for k in ("raw_launches", "torch_eager", "iree_calls")]
        print(f"{n:>4} {hal:9.2f} " + " ".join(f"{c:>22}" for c in cells))
    print()
    print("one command buffer / graph of N dispatches + one host wait, us per call (ratio = HAL / peer)")
    print(f"{'N':>4} {'HAL':>9} {'raw graph+sync':>22} {'PyTorch CUDA graph':>22}")
    for n in SIZES:
        hal = us(("hal_command_buffer", n))
        cells = [f"{us((k, n)):9.2f} ({hal / us((k, n)):5.2f}x)" for k in ("raw_graph", "torch_graph")]
        print(f"{n:>4} {hal:9.2f} " + " ".join(f"{c:>22}" for c in cells))
    print()
    print("spread (p10-p90, us):")
    for (name, n), (median, p10, p90) in sorted(rows.items()):
        print(f"  {name:>20} N={n:<4} {median:9.2f} ({p10:.2f}-{p90:.2f})")


if __name__ == "__main__":
    main()
