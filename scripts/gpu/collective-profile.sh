#!/bin/bash
# A one-rank chain of all-reduces (submit_profile cuda collective) with the progress word off and
# on, then where its time goes (profile.sh; carry devperf/ and devbin/submit_profile_sym).
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for w in 0 1 0 1 0 1; do
  echo "word=$w: $(HAL_CUDA_COMPLETION_WORD=$w timeout 30 devbin/submit_profile_sym cuda collective empty 100000)"
done
bash devbin/profile.sh collective empty 200000 > "$OUT/prof.txt" 2>&1
grep -vE "^#|^$" "$OUT/submitter-children-collective-empty.txt" | head -45
echo "--- completion"
grep -vE "^#|^$" "$OUT/completion-children-collective-empty.txt" | head -12
