#!/usr/bin/env python3
"""Reads `perf script` output (call chains) on stdin and splits the samples of the threads that
enqueue collectives by path: the HAL's (a frame in `Queue::collective` or `Queue::execute`) or raw
NCCL's (a frame in the sweep's `raw::Rank`). For each path: samples, how many are inside
`ncclAllReduce` (or its group calls), the leaf symbols that take the most samples inside and
outside NCCL, and our functions on the chains outside NCCL (inclusive). Usage: perf script -i DATA | callchain_split.py"""
import collections
import sys


def samples(stream):
    chain = []
    for line in stream:
        line = line.rstrip("\n")
        if not line:
            if chain:
                yield chain
            chain = []
        elif line.startswith((" ", "\t")):
            parts = line.split(None, 1)
            chain.append(parts[1] if len(parts) > 1 else parts[0])
        else:
            chain = [line]
    if chain:
        yield chain


def main():
    paths = {
        p: {"all": 0, "nccl": 0, "in": collections.Counter(), "out": collections.Counter(), "ours": collections.Counter()}
        for p in ("hal queue", "hal cb", "raw")
    }
    total, threads = 0, collections.Counter()
    for chain in samples(sys.stdin):
        total += 1
        threads[chain[0].split()[0]] += 1
        frames = chain[1:]
        text = "\n".join(frames)
        if "Queue::collective" in text:
            path = paths["hal queue"]
        elif "Queue::execute" in text:
            path = paths["hal cb"]
        elif "raw::Rank" in text or ("ncclAllReduce" in text and "hal::" not in text):
            path = paths["raw"]
        else:
            continue
        path["all"] += 1
        leaf = frames[0].split(" (")[0] if frames else "?"
        leaf = leaf.split("+0x")[0]
        inside = any("ncclAllReduce" in f or "ncclGroupEnd" in f for f in frames)
        if inside:
            path["nccl"] += 1
            path["in"][leaf] += 1
        else:
            path["out"][leaf] += 1
            # Inclusive: each of our functions on the chain once.
            ours = {f.split("+0x")[0].split(" (")[0] for f in frames if "hal::" in f or "driver_cuda::" in f}
            for name in ours:
                path["ours"][name] += 1
    print(f"samples {total}; by thread name: {dict(threads.most_common(6))}")
    for name, p in paths.items():
        print(f"{name}: {p['all']} samples on the enqueuing path, {p['nccl']} inside ncclAllReduce "
              f"({100 * p['nccl'] / max(p['all'], 1):.1f}%)")
        for where in ("in", "out"):
            top = ", ".join(f"{s[:70]} {n}" for s, n in p[where].most_common(12))
            print(f"  {where} NCCL, top leaves: {top}")
        for name, n in p["ours"].most_common(30):
            print(f"    outside NCCL, inclusive: {n:5d} {name[:150]}")


main()
