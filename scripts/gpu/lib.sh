#!/bin/bash
# Sourced by the one-call device scripts (iree-cuda.sh, iree-vulkan.sh, vulkan-ab-peers.sh,
# ab-vulkan-stencil-peers.sh): a time budget for the call, the Vulkan before/after bench loop and
# hal-iree's test programs.
# Usage: `source devbin/lib.sh` from the repository root on the GPU machine (the scripts cd there
# first; build.sh copies this file into devbin/ with the other scripts).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
start=$(date +%s); BUDGET=${BUDGET:-580}
# The smaller of $1 seconds and what is left of the budget.
left() { local l=$(( BUDGET - ($(date +%s) - start) )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
# Seconds since the call started.
el() { echo "$(( $(date +%s) - start )) s"; }
# `bench --driver vulkan --quick` of devbin/bench_vk_before and devbin/bench alternating, 3 each,
# then the rows side by side (vk_ab.py). Needs the Vulkan environment (vulkan-env.sh) sourced.
vulkan_bench_ab() {
  local i v b
  for i in 1 2 3; do
    for v in before after; do
      b=devbin/bench; [ $v = before ] && b=devbin/bench_vk_before
      timeout "$(left 40)" $b --driver vulkan --quick > "$OUT/bench-vulkan-$v-$i.txt" 2>/dev/null
    done
  done
  python3 devbin/vk_ab.py "$OUT" 2>&1 | head -30
}
# hal-iree's test programs, "name function inputs", and where they are.
P=hal-iree/testdata/programs
PROGRAMS=("chain chain 1" "chain_split chain 1" "matmul matmul 2" "mlp mlp 5")
# Reads one PROGRAMS entry ($1) into name, func, data (whose inputs it takes: chain_split shares
# chain's) and the input arguments: ins for IREE's tools, tins for thal-iree-run.
program() {
  local k nin
  read -r name func nin <<<"$1"; data=$name; [ "$name" = chain_split ] && data=chain
  ins=(); tins=()
  for ((k = 0; k < nin; k++)); do ins+=("--input=@$P/$data.input$k.npy"); tins+=(--input "@$P/$data.input$k.npy"); done
}
# The test binaries find test data by the checkout path they were built at (devbin/CHECKOUT, which
# the build scripts write): that path, made to point here, the checkout's root.
link_build_checkout() {
  local built
  built=$(cat devbin/CHECKOUT)
  [ -e "$built" ] || { mkdir -p "$(dirname "$built")" && ln -s "$PWD" "$built"; }
}
# The environment the CUDA test binaries need there: NVRTC on the loader path as libnvrtc.so, a
# missing GPU failing the tests (HAL_REQUIRE_CUDA=1), and the build's checkout path pointing here.
cuda_test_env() {
  local n
  n=$(ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null | head -1)
  mkdir -p /tmp/nv && ln -sf "$n" /tmp/nv/libnvrtc.so
  export LD_LIBRARY_PATH=/tmp/nv:$(dirname "$n"):$LD_LIBRARY_PATH HAL_REQUIRE_CUDA=1
  link_build_checkout
}
# Runs the CUDA test binary devbin/$1 $2 times (logs $OUT/$1-N.txt), printing each failure's panic
# and then how many failed with the first run's result line. Needs cuda_test_env.
repeat_test() {
  local name=$1 times=$2 f=0 i
  for i in $(seq "$times"); do
    timeout 60 devbin/$name --include-ignored > $OUT/$name-$i.txt 2>&1 || { f=$((f+1)); grep -E "panicked" -A1 $OUT/$name-$i.txt | head -4; }
  done
  echo "$name: $f of $times failed; $(grep -E '^test result' $OUT/$name-1.txt) ($(el))"
}
# The contract fuzz for $1 seconds, one test at a time (parallel fuzz tests trip its timed latches).
fuzz_for() {
  HAL_FUZZ_SECONDS=$1 timeout "$(left $(($1 + 120)))" devbin/contract_fuzz --include-ignored --test-threads=1 > $OUT/fuzz.txt 2>&1
  echo "fuzz exit $?: $(grep -E '^test result' $OUT/fuzz.txt) ($(el))"
}
# Two quick benches with the cross-device hop between GPUs 0 and 1; prints their hop and chain rows.
peer_hop_benches() {
  local i
  for i in 1 2; do
    timeout "$(left 60)" devbin/bench --driver cuda --quick --peer-ordinal 1 > $OUT/bench-peer1-$i.txt 2>/dev/null
    echo "bench $i exit $?"; grep -E "cross-|chain, empty|command buffer, chained|alloca \+ dealloca \(" $OUT/bench-peer1-$i.txt | cut -c1-120
  done
}
# Five quick benches each of devbin/base/bench ("before") and devbin/bench ("after") alternating,
# in the order of $1 and $2 within each round (logs $OUT/before/, $OUT/after/), then both builds'
# issue-34 rows (standing_summary.py).
quick_ab() {
  local i which b
  mkdir -p $OUT/before $OUT/after
  for i in 1 2 3 4 5; do
    for which in "$1" "$2"; do
      b=devbin/bench; [ $which = before ] && b=devbin/base/bench
      timeout "$(left 40)" $b --driver cuda --quick > $OUT/$which/quick-$i.txt 2>/dev/null || echo "bench $which $i exit $?"
    done
  done
  for which in before after; do echo "-- $which"; python3 devbin/standing_summary.py $OUT/$which 2>&1 | sed -n '2,13p'; done
}
