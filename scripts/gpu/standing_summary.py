#!/usr/bin/env python3
"""Summarises scripts/gpu/standing.sh logs (DIR holds quick-N.txt, peers-N.txt, probe-N.txt,
scaling.txt): per issue-34 row, the median of the quick benches' medians (range over processes) and
the median ratio to its raw baseline; the one-call rows of `peers`; the probe's lines side by side.
Usage: standing_summary.py DIR"""
import glob
import re
import statistics as st
import sys

ROWS = [
    ("empty execute, us", "dependent chain, empty execute"),
    ("dependent chain, 1 dispatch / launch + record", "dependent chain, 1 dispatch ("),
    ("dependent chain, 1 dispatch / graph + record", "dependent chain, 1 dispatch vs graph"),
    ("1-dispatch command buffer, chained / graph launch", "1-dispatch command buffer, chained"),
    ("cross-queue hop / raw", "cross-queue ping-pong hop"),
    ("host round trip / launch + sync", "host round trip, 1 dispatch (no"),
    ("alloca + dealloca / event per op", "queue_alloca + queue_dealloca vs"),
    ("indirect dispatch / direct", "1 indirect dispatch"),
    ("10-dispatch command buffer / graph", "10-dispatch command buffer, chained"),
    ("fan-out/fan-in / raw", "fan-out/fan-in"),
]
CELL = re.compile(r"\s(\d+\.\d+) \((\d+\.\d+)-(\d+\.\d+)\)\s+(\d+\.\d+) \[\d+\]\s+(\d+\.\d+)x")


def quick(folder):
    files = sorted(glob.glob(f"{folder}/quick-*.txt"))
    print(f"quick benches: {len(files)}")
    print("| row | HAL us, median of medians (range) | raw us | ratio (range) |")
    print("| --- | --- | --- | --- |")
    for label, key in ROWS:
        vals, raws, ratios = [], [], []
        for path in files:
            for line in open(path).read().splitlines():
                m = CELL.search(line) if line.startswith(key) else None
                if m:
                    vals.append(float(m.group(1)))
                    raws.append(float(m.group(4)))
                    ratios.append(float(m.group(5)))
                    break
        if vals:
            print(f"| {label} | {st.median(vals):.2f} ({min(vals):.2f}-{max(vals):.2f}) | {st.median(raws):.2f} | "
                  f"{st.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")


def peers(folder):
    rows = {}
    for path in sorted(glob.glob(f"{folder}/peers-*.txt")):
        for line in open(path):
            parts = line.split()
            if len(parts) == 6 and parts[0] == "row" and parts[2] == "1":
                rows.setdefault(parts[1], []).append(float(parts[3]))
    if "hal_command_buffer" in rows and "raw_graph" in rows:
        ratios = [h / r for h, r in zip(rows["hal_command_buffer"], rows["raw_graph"])]
        print("one call (1 dispatch + host wait), per peers process, us: HAL command buffer "
              f"{rows['hal_command_buffer']}, raw graph + sync {rows['raw_graph']}, ratios "
              f"{[round(x, 2) for x in ratios]}, median {st.median(ratios):.2f}x")
    if "hal_submissions" in rows and "raw_launches" in rows:
        ratios = [h / r for h, r in zip(rows["hal_submissions"], rows["raw_launches"])]
        print(f"one submission + host wait / raw launch + sync: median {st.median(ratios):.2f}x")


def probe(folder):
    for path in sorted(glob.glob(f"{folder}/probe-*.txt")):
        print(f"-- {path.split('/')[-1]}")
        print(open(path).read().rstrip())


def main():
    folder = sys.argv[1]
    quick(folder)
    peers(folder)
    probe(folder)
    try:
        print(open(f"{folder}/scaling.txt").read().rstrip())
    except OSError:
        print("no scaling.txt")


main()
