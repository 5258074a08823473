"""Triton kernels compiled in Python and loaded into a HAL device: the suite's CUDA tests and the
per-call benchmark (hal-python/bench/per_call.py) share them. Needs PyTorch and Triton (the GPU machines have
both)."""

import re
from typing import Any, Dict, List, Optional, Tuple

import torch
import triton
import triton.language as tl

import timeline_hal as hal


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out = x + y (one IEEE add a lane: bit-exact against PyTorch's)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    """x += 1, in place."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1.0, mask=mask)


def _ptx_param_count(ptx: str, entry: str) -> int:
    found = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    assert found, f"entry {entry} not in the PTX"
    return len(re.findall(r"\.param\s+\.\w+", found.group(1)))


def compile_kernel(kernel: Any, args: Tuple[Any, ...], block: int) -> Any:
    """Triton's compiled kernel for `args` (compiled, not launched, where Triton can: `warmup`)."""
    grid = (triton.cdiv(int(args[-1]), block),)
    warmup = getattr(kernel, "warmup", None)
    if warmup is not None:
        return warmup(*args, BLOCK=block, grid=grid)
    return kernel[grid](*args, BLOCK=block)


def load(device: hal.Device, compiled: Any, own: List[Optional[Tuple[str, int]]], bindings: int, constants: int) -> Tuple[hal.Executable, Dict[str, Any]]:
    """Loads Triton's PTX into `device`: `own` is the kernel's parameters in order (pointers as
    ("binding", n), scalars as ("constant32", n)); the scratch pointers Triton appends are passed
    null."""
    ptx: str = compiled.asm["ptx"]
    entry: str = compiled.metadata.name
    total = _ptx_param_count(ptx, entry)
    params = own + [None] * (total - len(own))
    info = {
        "name": entry,
        "bindings": bindings,
        "constants": constants,
        "workgroup_size": 32 * compiled.metadata.num_warps,
        "params": params,
        "dynamic_workgroup_memory": compiled.metadata.shared,
    }
    return device.load_executable(ptx.encode(), [info], format="ptx"), info


def load_add(device: hal.Device, n: int, block: int = 1024) -> hal.Executable:
    """`add` for float32 vectors of `n` (bindings x, y, out; constant n)."""
    x = torch.empty(n, device="cuda")
    compiled = compile_kernel(add, (x, x, x, n), block)
    exe, _ = load(device, compiled, [("binding", 0), ("binding", 1), ("binding", 2), ("constant32", 0)], 3, 1)
    return exe


def load_add_one(device: hal.Device, n: int, block: int = 1024) -> hal.Executable:
    """`add_one` for a float32 vector of `n` (binding x; constant n)."""
    x = torch.empty(n, device="cuda")
    compiled = compile_kernel(add_one, (x, n), block)
    exe, _ = load(device, compiled, [("binding", 0), ("constant32", 0)], 1, 1)
    return exe


def workgroups(n: int, block: int = 1024) -> int:
    return triton.cdiv(n, block)
