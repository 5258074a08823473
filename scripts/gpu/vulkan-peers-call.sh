#!/bin/bash
# One device call for the Vulkan issue's open measurements and the many-core stencil: the Vulkan CTS,
# driver tests and `hal run --device vulkan`; `bench --driver vulkan --quick` (every row beside raw
# Vulkan); the peers tables (CUDA: HAL, raw CUDA, PyTorch, IREE cuda; Vulkan: HAL, raw, IREE vulkan);
# then the cpu-sim stencil at 2048^2 x 300 steps on 1, 2, 4, 8 and all cores (taskset), beside the
# single-threaded reference. Run from the repository root with devbin/, devpeers/ and .gl/ present
# (carry devpack/all.tgz made by `tar czf devpack/all.tgz devbin devpeers .gl`). Logs under $OUT.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); BUDGET=${BUDGET:-580}
left() { local l=$(( BUDGET - ($(date +%s) - start) )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
echo "commit $(cat devbin/COMMIT); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $(nproc) cores"
echo "##### Vulkan: CTS, driver tests, hal run --device vulkan"
OUT=$OUT timeout "$(left 150)" bash devbin/vulkan-run.sh > "$OUT/vulkan.log" 2>&1; echo "vulkan-run exit $? ($(( $(date +%s) - start )) s)"
grep -E "test result|FAILED|panicked|check:|wall time" "$OUT/vulkan.log" | head -16
echo "skipped: $(grep -c ' skipped: ' "$OUT/vulkan_cts.log")"
source devbin/vulkan-env.sh
echo "##### bench --driver vulkan --quick ($(( $(date +%s) - start )) s)"
timeout "$(left 120)" devbin/bench --driver vulkan --quick > "$OUT/bench-vulkan.txt" 2> "$OUT/bench-vulkan.err"
echo "bench vulkan exit $?"; head -45 "$OUT/bench-vulkan.txt"; tail -3 "$OUT/bench-vulkan.err"
echo "##### peers, CUDA and Vulkan ($(( $(date +%s) - start )) s)"
timeout "$(left 200)" bash devpeers/run.sh > "$OUT/peers.txt" 2>&1; echo "peers exit $?"; tail -40 "$OUT/peers.txt"
echo "##### cpu-sim stencil 2048^2 x 300 by cores ($(( $(date +%s) - start )) s)"
n=$(nproc)
for c in 1 2 4 8 $n; do
  [ "$c" -gt "$n" ] && continue
  check=--no-check; [ "$c" = "$n" ] && check=
  timeout "$(left 60)" taskset -c 0-$((c - 1)) devbin/hal run --size 2048 --steps 300 $check > "$OUT/stencil-$c.txt" 2>&1
  echo "cores $c: $(grep -E 'wall time|CPU reference|check:' "$OUT/stencil-$c.txt" | tr -s ' ' | tr '\n' ' ')"
done
echo "done in $(( $(date +%s) - start )) s"
(cd "$OUT" && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
