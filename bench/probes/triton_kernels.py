#!/usr/bin/env python3
"""Compiles two Triton kernels to PTX on the device machine and writes, for the HAL's
`triton_kernels` example, each kernel's PTX, its launch facts and inputs, PyTorch's results for the
same inputs (the reference) and Triton's own launch's results. Usage: triton_kernels.py OUT_DIR

Kernels (Triton's calling convention: the arguments that are not constexpr, in order, then trailing
scratch pointers that this Triton version adds):
  scaled_add(x_ptr, alpha: f32, y_ptr, out_ptr, n: i32)  out = alpha * x + y  (a scalar between pointers)
  softmax(out_ptr, in_ptr, in_stride: i32, out_stride: i32, n_cols: i32)  row-wise softmax (shared memory)
"""
import os
import re
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def scaled_add(x_ptr, alpha, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, alpha * x + y, mask=mask)


@triton.jit
def softmax(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * out_stride + cols, e / tl.sum(e, axis=0), mask=mask)


def entry_params(ptx, entry):
    """The PTX entry's parameter types, in order (u64/u32/f32/...)."""
    m = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    return [p.group(1) for p in re.finditer(r"\.param\s+\.(\w+)", m.group(1))]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    lines = []

    n, block = 10000, 1024
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    alpha = 1.75
    res = torch.empty_like(x)
    grid = (triton.cdiv(n, block),)
    k = scaled_add[grid](x, alpha, y, res, n, BLOCK=block)
    ref = alpha * x + y
    write(out, "scaled_add", k, grid, [x, y], ref, res, lines, extra=f"alpha={alpha} n={n}")
    triton_vs_torch = (res - ref).abs().max().item()

    rows, cols = 300, 781
    a = torch.randn(rows, cols, device="cuda")
    res2 = torch.empty_like(a)
    grid2 = (rows,)
    k2 = softmax[grid2](res2, a, a.stride(0), res2.stride(0), cols, BLOCK=triton.next_power_of_2(cols))
    ref2 = torch.softmax(a, dim=1)
    write(out, "softmax", k2, grid2, [a], ref2, res2, lines, extra=f"rows={rows} cols={cols}")
    triton_vs_torch2 = (res2 - ref2).abs().max().item()

    with open(os.path.join(out, "kernels.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"triton {triton.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"Triton's own launch vs PyTorch, max |diff|: scaled_add {triton_vs_torch:.3g}, softmax {triton_vs_torch2:.3g}")
    for line in lines:
        print(line)


def write(out, name, k, grid, inputs, ref, triton_result, lines, extra):
    ptx = k.asm["ptx"]
    entry = k.metadata.name
    with open(os.path.join(out, name + ".ptx"), "w") as f:
        f.write(ptx)
    for i, t in enumerate(inputs):
        t.contiguous().cpu().numpy().astype("<f4").tofile(os.path.join(out, f"{name}.in{i}.bin"))
    ref.contiguous().cpu().numpy().astype("<f4").tofile(os.path.join(out, name + ".ref.bin"))
    triton_result.contiguous().cpu().numpy().astype("<f4").tofile(os.path.join(out, name + ".triton.bin"))
    params = entry_params(ptx, entry)
    lines.append(
        f"{name} entry={entry} threads={32 * k.metadata.num_warps} shared={k.metadata.shared} "
        f"grid={grid[0]} params={','.join(params)} {extra}"
    )


if __name__ == "__main__":
    main()
