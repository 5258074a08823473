"""Writes the deterministic .npy inputs of the programs in this directory.

Every value is a small multiple of 1/8, so the expected results are exact in f32
whatever order a backend sums in.
"""
import os
import sys

import numpy as np


def pattern(shape, modulus, scale, offset):
    n = int(np.prod(shape))
    i = np.arange(n)
    return ((i % modulus) * scale + offset).astype(np.float32).reshape(shape)


INPUTS = {
    "chain": [pattern((1024,), 7, 0.25, -0.5)],
    "matmul": [
        pattern((64, 128), 7, 0.25, -0.5),
        pattern((128, 32), 5, 0.125, -0.25),
    ],
    "mlp": [
        pattern((4, 64), 7, 0.25, -0.5),  # x
        pattern((64, 128), 5, 0.125, -0.25),  # w1
        pattern((128,), 3, 0.5, -0.5),  # b1
        pattern((128, 10), 9, 0.125, -0.5),  # w2
        pattern((10,), 4, 0.25, 0.0),  # b2
    ],
}

if __name__ == "__main__":
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, arrays in INPUTS.items():
        for k, a in enumerate(arrays):
            np.save(os.path.join(out_dir, f"{name}.input{k}.npy"), a)
