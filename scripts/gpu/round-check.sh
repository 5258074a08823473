#!/bin/bash
# One device call for a round: Vulkan on NVIDIA (CTS, driver tests, `hal run`, the bench beside raw
# Vulkan), the CUDA CTS in both completion modes, the quick bench of the build before
# (devbin/bench_before) and after, alternating, and the C tests on cuda. Each step gets what is
# left of a 585 s budget (the device tool's limit is 600 s). Logs under $OUT; a summary last.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s)
BUDGET=${BUDGET:-585}
left() { local l=$(( BUDGET - ($(date +%s) - start) )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
echo "commit $(cat devbin/COMMIT); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
echo "##### Vulkan: CTS, driver tests, hal run --device vulkan"
timeout "$(left 150)" bash devbin/vulkan-run.sh > "$OUT/vulkan.log" 2>&1; echo "vulkan-run exit $? ($(( $(date +%s) - start )) s)"
grep -E "^== |test result|FAILED|panicked|check:|wall time|^vulkan" "$OUT/vulkan.log" | head -24
# Per area: cases passed (skipped ones included) and failed; then the skipped cases' reasons.
grep -oE "^test vulkan::[a-z_]+::[a-z_0-9]+ \.\.\. (ok|FAILED)" "$OUT/vulkan_cts.log" | awk '{split($2,a,"::"); if ($4=="ok") p[a[2]]++; else f[a[2]]++; n[a[2]]++}
  END {for (k in n) printf "%-16s %4d passed %4d failed\n", k, p[k], f[k]}' | sort
echo "skipped: $(grep -c ' skipped: ' "$OUT/vulkan_cts.log")"
grep -oE " skipped: .{0,60}" "$OUT/vulkan_cts.log" | sort | uniq -c | sort -rn | head -8
echo "##### bench --driver vulkan --quick"
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
timeout "$(left 120)" devbin/bench --driver vulkan --quick > "$OUT/bench-vulkan.txt" 2> "$OUT/bench-vulkan.err"
echo "bench vulkan exit $? ($(( $(date +%s) - start )) s)"; head -40 "$OUT/bench-vulkan.txt"; tail -3 "$OUT/bench-vulkan.err"
echo "##### CUDA CTS, default completion"
OUT=$OUT/default CTS_LIMIT=$(left 120) bash devbin/cts-run.sh cts 2>&1 | grep -E "CTS exit|test result|FAILED|panicked" | head -12
echo "##### bench before/after (quick, 5 processes each, alternating) ($(( $(date +%s) - start )) s)"
timeout "$(left 200)" bash devbin/before-after.sh devbin/bench_before devbin/bench --quick > "$OUT/before-after.txt" 2>&1
tail -60 "$OUT/before-after.txt"
echo "##### CUDA CTS, host-callback ($(( $(date +%s) - start )) s)"
HAL_CUDA_COMPLETION=host-callback OUT=$OUT/callback CTS_LIMIT=$(left 120) bash devbin/cts-run.sh cts 2>&1 | grep -E "CTS exit|test result|FAILED|panicked" | head -12
echo "##### C API on cuda ($(( $(date +%s) - start )) s)"
CAPI_OVERHEAD=${CAPI_OVERHEAD:-1} timeout "$(left 100)" bash devbin/capi-run.sh > "$OUT/capi.log" 2>&1; echo "capi exit $?"; grep -E "FAILED|C tests:|fail" "$OUT/capi.log" | head -12
echo "done in $(( $(date +%s) - start )) s"
(cd "$OUT" && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
