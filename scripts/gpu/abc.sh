#!/bin/bash
# Quick bench processes of several builds on one machine, alternating (A, B, C, A, B, C, ...), five
# rounds, so every build sees the same GPU and host. Usage: devbin/abc.sh BENCH... ; logs under
# $OUT/abc/<n>-<round>.txt (n: the build's position), summarised by scripts/gpu/abc_summary.py here.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/abc
for round in 1 2 3 4 5; do
  n=0
  for bin in "$@"; do
    n=$((n + 1))
    timeout 100 $bin --driver cuda --quick > $OUT/abc/$n-$round.txt 2>/dev/null || echo "$bin round $round exit $?"
  done
done
