"""The peers table: one *call* is N dependent tiny elementwise dispatches and one host wait
(N = 1, 10, 100), run by the HAL, raw CUDA, PyTorch and IREE's release runtime on one GPU, in one
process each, printed as one table with ratios; with `--hal-vulkan`, a second table of the same
calls on Vulkan: this HAL's Vulkan driver, raw Vulkan and IREE's vulkan driver.

    python3 bench/peers/peers.py --hal PATH/peers --vmfb PATH/step_sm80.vmfb --iree-wheel PATH/iree_base_runtime-*.whl \
        [--hal-vulkan --vmfb-vulkan PATH/step_vulkan.vmfb] [--no-cuda] [--no-torch] [--quick]

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

The Vulkan table (`--hal-vulkan`; `--no-cuda` leaves the CUDA table out):
- HAL and raw Vulkan: the same `peers` binary with `--driver vulkan`: the SPIR-V compiled from the
  bench's WGSL `touch` kernel, rows `hal_vulkan_submissions`, `hal_vulkan_command_buffer` (the HAL's
  Vulkan driver), `raw_vulkan_submissions` (N `vkQueueSubmit` chained on a timeline semaphore +
  `vkWaitSemaphores`) and `raw_vulkan_command_buffer` (one N-dispatch command buffer + wait).
- IREE Vulkan: `step.mlir` on 1024 floats (one 4 KiB page: IREE's vulkan driver imports host
  arrays, see `page_aligned_zeros`) compiled with `--iree-hal-target-device=vulkan
  --iree-vulkan-target=ampere` (SPIR-V), run by IREE's `vulkan` driver (`--vmfb-vulkan`), row
  `iree_vulkan_calls`. On NVIDIA its calls take milliseconds each (docs/benchmarks.md#other-workloads), so the full
  plan takes minutes: `--iree-vulkan-quick` (run.sh passes it) gives that row 3 trials of a tenth of the calls.
  On lavapipe `to_host` fails (IREE imports its own, unaligned, host array for the result), so the
  row reads "not run" there.
A peer that cannot run (no device, no module, an error of its runtime) is reported as "not run:
REASON" and the others still run.

`bench/peers/prepare.sh` builds the binary, downloads the IREE wheels and compiles the module into
`devpeers/` (no GPU needed); `bench/peers/run.sh` runs this script on the GPU machine.
"""
import argparse
import faulthandler
import multiprocessing
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

SIZES = (1, 10, 100)
# Trials and the divisor of the calls per trial; `--quick` (3 trials of a tenth) sets both, and
# passes PEERS_QUICK to the HAL binary, which then does the same.
PLAN = {"trials": 7, "scale": 1}


def calls(n):
    return max(1, {1: 2000, 10: 1000}.get(n, 200) // PLAN["scale"])


def timed(call, n):
    """Median, p10 and p90 of microseconds per call over the trials (after a warm-up)."""
    count = calls(n)
    trials = PLAN["trials"]
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


def hal_rows(binary, driver, ordinal):
    """The rows of the `peers` binary on `driver`; its other lines make the label."""
    run = subprocess.run([binary, "--driver", driver, str(ordinal)], capture_output=True, text=True)
    if run.returncode != 0:
        reason = (run.stderr.strip().splitlines() or [f"exit status {run.returncode}"])[-1]
        raise RuntimeError(reason)
    rows, header = {}, []
    for line in run.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == "row":
            rows[(parts[1], int(parts[2]))] = tuple(float(x) for x in parts[3:6])
        else:
            header.append(line)
    return "; ".join(header), rows


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


def page_aligned_zeros(np, count):
    """`count` float32 zeros at a 4 KiB-aligned address: IREE's vulkan driver imports host arrays
    (uploads and `to_host`) and Vulkan asks for page-aligned host pointers and sizes
    (minImportedHostPointerAlignment, 4096 on lavapipe and NVIDIA), hence 1024 floats there."""
    raw = np.zeros(count + 1024, np.float32)
    skip = (-raw.ctypes.data % 4096) // 4
    return raw[skip:skip + count]


UNPACKED = {}


def iree_runtime(wheel):
    """`iree.runtime` from the wheel, unpacked once (the GPU machine has no network to install it)."""
    if wheel not in UNPACKED:
        target = tempfile.mkdtemp(prefix="iree-rt-")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)
        sys.path.insert(0, target)
        UNPACKED[wheel] = target
    import iree.runtime as rt

    return rt


def iree_rows(vmfb, wheel, ordinal, driver="cuda", row="iree_calls", count=256):
    import numpy as np

    rt = iree_runtime(wheel)
    if driver == "cuda":
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", str(ordinal))
    config = rt.Config(driver)
    context = rt.SystemContext(config=config)
    with open(vmfb, "rb") as f:
        module = rt.VmModule.copy_buffer(context.instance, f.read())
    context.add_vm_module(module)
    step = context.modules.module["step"]
    rows = {}
    for n in SIZES:
        state = {"x": rt.asdevicearray(config.device, page_aligned_zeros(np, count))}

        def call(n=n):
            x = state["x"]
            for _ in range(n):
                x = step(x)
            x.to_host()
            state["x"] = x

        rows[(row, n)] = timed(call, n)
        check = rt.asdevicearray(config.device, page_aligned_zeros(np, count))
        for _ in range(n):
            check = step(check)
        assert float(check.to_host()[0]) == float(n), "IREE's step computed a wrong value"
    version = getattr(rt, "version", None)
    return f"iree.runtime {getattr(version, 'VERSION', '?')} ({driver})", rows


def isolated(fn, timeout):
    """Runs one peer in a child process of its own: ("ok", label, rows), or ("error", reason) for a
    peer that raised, died or gave no answer within `timeout` seconds (it is killed), so one runtime
    that hangs or crashes costs its own rows only. The parent never touches a GPU, so each child
    (forked) starts its runtime fresh."""
    context = multiprocessing.get_context("fork")
    answers = context.Queue()

    def child():
        # On a timeout the parent asks for every thread's stack (where a runtime hangs) before killing.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        try:
            label, found = fn()
            answers.put(("ok", label, found))
        except BaseException as error:  # reported, not fatal
            answers.put(("error", f"{type(error).__name__}: {error}".strip()))

    process = context.Process(target=child)
    process.start()
    deadline = time.monotonic() + timeout
    outcome = None
    while outcome is None:
        try:
            outcome = answers.get(timeout=1)
        except queue.Empty:
            if process.exitcode is not None:
                outcome = ("error", f"the peer's process died without an answer (exit status {process.exitcode})")
            elif time.monotonic() > deadline:
                os.kill(process.pid, signal.SIGUSR1)
                time.sleep(1)
                outcome = ("error", f"no answer in {timeout:.0f} s (its stacks are on stderr; its process was killed)")
    process.join(5)
    if process.is_alive():
        process.kill()
        process.join()
    return outcome


def iree_vulkan_rows(args, ordinal):
    """IREE's vulkan driver; with --iree-vulkan-quick, 3 trials of a tenth of the calls (its calls take
    milliseconds each on NVIDIA: the full plan would take minutes). Runs in its own child process, so
    the plan changes there only."""
    if args.iree_vulkan_quick:
        PLAN.update(trials=3, scale=10)
    label, rows = iree_rows(args.vmfb_vulkan, args.iree_wheel, ordinal, "vulkan", "iree_vulkan_calls", 1024)
    plan = f"median of {PLAN['trials']} trials of {calls(1)}/{calls(10)}/{calls(100)} calls"
    return f"{label}, {plan}", rows


def table(title, columns, rows, skipped):
    """One table: the HAL column (`columns[0]`) and each peer with its ratio HAL / peer; a peer with
    no row reads "not run" (its reason is printed under the table)."""
    us = lambda key: rows.get(key, (float("nan"),) * 3)[0]
    print(title)
    print(f"{'N':>4} " + " ".join(f"{label:>22}" for label, _ in columns))
    for n in SIZES:
        hal = us((columns[0][1], n))
        cells = [f"{hal:9.2f}" if (columns[0][1], n) in rows else "not run"]
        for _, key in columns[1:]:
            cells.append(f"{us((key, n)):9.2f} ({hal / us((key, n)):5.2f}x)" if (key, n) in rows else "not run")
        print(f"{n:>4} " + " ".join(f"{c:>22}" for c in cells))
    for label, key in columns:
        if key in skipped:
            print(f"  {label}: not run: {skipped[key]}")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hal", help="the bench crate's `peers` example")
    parser.add_argument("--vmfb", help="step.mlir compiled for IREE's cuda driver")
    parser.add_argument("--iree-wheel")
    parser.add_argument("--hal-vulkan", action="store_true",
                        help="also run the HAL binary on its Vulkan driver and print the Vulkan table")
    parser.add_argument("--vmfb-vulkan", help="step.mlir compiled for IREE's vulkan driver (SPIR-V)")
    parser.add_argument("--no-cuda", action="store_true", help="the Vulkan table only (no CUDA peers)")
    parser.add_argument("--no-hal", action="store_true", help="peers only (no run of the HAL binary)")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--quick", action="store_true", help="3 trials of a tenth of the calls (smoke runs, lavapipe)")
    parser.add_argument("--ordinal", type=int, default=0, help="the GPU (CUDA ordinal)")
    parser.add_argument("--vulkan-ordinal", type=int, help="the GPU in the Vulkan loader's order (--ordinal)")
    parser.add_argument("--iree-vulkan-quick", action="store_true",
                        help="IREE vulkan only: 3 trials of a tenth of the calls (its calls take milliseconds)")
    parser.add_argument("--peer-timeout", type=float, default=120,
                        help="seconds each peer (one child process) may take before it is killed and reported not run")
    args = parser.parse_args()
    if args.quick:
        PLAN.update(trials=3, scale=10)
        os.environ["PEERS_QUICK"] = "1"
    vulkan_ordinal = args.ordinal if args.vulkan_ordinal is None else args.vulkan_ordinal
    rows, peers, skipped = {}, [], {}
    # Why each run is left out, None where it runs: (name, the rows it gives, why not, how).
    first = lambda *reasons: next((why for cond, why in reasons if cond), None)
    runs = [
        ("hal (cuda)", ("hal_submissions", "hal_command_buffer", "raw_launches", "raw_graph"),
         first((args.no_cuda, "--no-cuda"), (args.no_hal, "--no-hal"), (not args.hal, "no --hal")),
         lambda: hal_rows(args.hal, "cuda", args.ordinal)),
        ("torch", ("torch_eager", "torch_graph"), first((args.no_cuda, "--no-cuda"), (args.no_torch, "--no-torch")),
         lambda: torch_rows(args.ordinal)),
        ("iree (cuda)", ("iree_calls",),
         first((args.no_cuda, "--no-cuda"), (not (args.vmfb and args.iree_wheel), "no --vmfb / --iree-wheel")),
         lambda: iree_rows(args.vmfb, args.iree_wheel, args.ordinal)),
        ("hal (vulkan)", ("hal_vulkan_submissions", "hal_vulkan_command_buffer", "raw_vulkan_submissions",
                          "raw_vulkan_command_buffer"),
         first((not args.hal_vulkan, "no --hal-vulkan"), (args.no_hal, "--no-hal"), (not args.hal, "no --hal")),
         lambda: hal_rows(args.hal, "vulkan", vulkan_ordinal)),
        ("iree (vulkan)", ("iree_vulkan_calls",),
         first((not args.hal_vulkan, "no --hal-vulkan"),
               (not (args.vmfb_vulkan and args.iree_wheel), "no --vmfb-vulkan / --iree-wheel")),
         lambda: iree_vulkan_rows(args, vulkan_ordinal)),
    ]
    for name, keys, reason, fn in runs:
        if reason is None:
            started = time.perf_counter()
            outcome = isolated(fn, args.peer_timeout)
            if outcome[0] == "ok":
                _, label, found = outcome
                rows.update(found)
                peers.append(label)
                print(f"{name}: {label} ({time.perf_counter() - started:.1f} s)", flush=True)
                continue
            reason = outcome[1]
        for key in keys:
            skipped[key] = reason
        print(f"{name}: not run: {reason}", flush=True)
    print("peers: " + ", ".join(peers))
    print()
    plan = f"median of {PLAN['trials']}; ratio = HAL / peer"
    if not args.no_cuda:
        table(f"CUDA: N submissions + one host wait, us per call ({plan})",
              [("HAL", "hal_submissions"), ("raw launch+sync", "raw_launches"),
               ("PyTorch eager", "torch_eager"), ("IREE calls", "iree_calls")], rows, skipped)
        table(f"CUDA: one command buffer / graph of N dispatches + one host wait, us per call ({plan})",
              [("HAL", "hal_command_buffer"), ("raw graph+sync", "raw_graph"),
               ("PyTorch CUDA graph", "torch_graph")], rows, skipped)
    if args.hal_vulkan:
        print("Vulkan: HAL Vulkan vs raw Vulkan vs IREE Vulkan")
        table(f"Vulkan: N submissions + one host wait, us per call ({plan})",
              [("HAL Vulkan", "hal_vulkan_submissions"), ("raw vkQueueSubmit+wait", "raw_vulkan_submissions"),
               ("IREE Vulkan calls", "iree_vulkan_calls")], rows, skipped)
        table(f"Vulkan: one command buffer of N dispatches + one host wait, us per call ({plan})",
              [("HAL Vulkan", "hal_vulkan_command_buffer"), ("raw Vulkan cb+wait", "raw_vulkan_command_buffer")],
              rows, skipped)
    print("spread (p10-p90, us):")
    for (name, n), (median, p10, p90) in sorted(rows.items()):
        print(f"  {name:>26} N={n:<4} {median:9.2f} ({p10:.2f}-{p90:.2f})")


if __name__ == "__main__":
    main()
