#!/usr/bin/env python3
"""Summarises scripts/gpu/abc.sh logs: per issue-18 row and build, the median of the five processes'
medians (range over processes) and the median ratio to the raw baseline (range).
Usage: abc_summary.py DIR NAME1 NAME2 ..."""
import re
import statistics as st
import sys

ROWS = [
    ("empty execute", "dependent chain, empty execute"),
    ("1 dispatch chain", "dependent chain, 1 dispatch ("),
    ("1-dispatch cb chained", "1-dispatch command buffer, chained"),
    ("round trip", "host round trip, 1 dispatch (no"),
    ("fan-out/fan-in", "fan-out/fan-in"),
    ("alloca+dealloca vs event/op", "vs an event per op"),
    ("cross-queue hop", "cross-queue ping-pong"),
    ("10-dispatch cb", "10-dispatch command buffer, chained"),
]
CELL = re.compile(r"\s(\d+\.\d+) \((\d+\.\d+)-(\d+\.\d+)\)\s+(\d+\.\d+)\s.*?\s(\d+\.\d+)x")


def main():
    folder, names = sys.argv[1], sys.argv[2:]
    print("| row | " + " | ".join(names) + " |")
    print("| --- |" + " --- |" * len(names))
    for label, key in ROWS:
        cells = []
        for n, _ in enumerate(names, 1):
            vals, ratios = [], []
            for rnd in range(1, 6):
                try:
                    lines = open(f"{folder}/{n}-{rnd}.txt").read().splitlines()
                except OSError:
                    continue
                for line in lines:
                    m = CELL.search(line) if key in line else None
                    if m:
                        vals.append(float(m.group(1)))
                        ratios.append(float(m.group(5)))
                        break
            if vals:
                cells.append(f"{st.median(vals):.2f} ({min(vals):.2f}-{max(vals):.2f}); "
                             f"{st.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
            else:
                cells.append("-")
        print(f"| {label} | " + " | ".join(cells) + " |")


main()
