#!/bin/bash
# A/B of the Vulkan driver's host waits on the GPU machine: devbin/sp_before and devbin/sp_after
# (submit_profile builds before and after a change), alternating, three rounds; then the CUDA CTS
# and the Vulkan bench of the after build. Logs under $OUT.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ -d .gl ] && ! ldconfig -p | grep -q libvulkan.so.1; then for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
echo "commit $(cat devbin/COMMIT); $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
for round in 1 2 3; do
  for which in before after; do
    for w in "roundtrip dispatch 3000" "roundtrip empty 3000" "chain empty 20000" "chain dispatch 20000"; do
      echo "$which $round: $(timeout 30 devbin/sp_$which vulkan $w 2>&1 | tail -1)"
    done
  done
done | tee "$OUT/ab.txt" | sort -t: -k2 | sed 's/ [0-9]*: /: /' | sort | uniq -c | head -0
cat "$OUT/ab.txt"
echo "##### CUDA CTS, default completion"
OUT=$OUT/cts CTS_LIMIT=75 bash devbin/cts-run.sh cts 2>&1 | grep -E "CTS exit|test result|FAILED|panicked" | head -8
echo "##### bench --driver vulkan --quick (after)"
timeout 115 devbin/bench --driver vulkan --quick > "$OUT/bench-vulkan.txt" 2>/dev/null; echo "exit $?"; sed -n 3,30p "$OUT/bench-vulkan.txt"
