#!/bin/bash
# Where the host's time goes, on the GPU machine: perf (devperf/, from kit.sh --perf) over the kit's
# *_sym binaries (symbols kept). The call-graph data stays on the machine (it is large); the text reports come
# back under $OUT, with a flat .data file that can be annotated here, where the same unstripped binary
# sits at the same path.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: devbin/profile.sh [TARGET] [ARGS...] [--completion MODE] [--driver D]

targets:
  submit [WORKLOAD] [KIND] [N] [THREADS]
                                 submit_profile_sym DRIVER WORKLOAD KIND N THREADS (default: chain
                                 dispatch 1000000; WORKLOAD chain|hop|roundtrip|release|fanout|alloca|
                                 collective|threads, KIND empty|dispatch|indirect, THREADS for
                                 threads, default 16): the submitting threads' and the completion
                                 threads' costs, by symbol and by caller (the default target)
  bench [BENCH ARGS]             a flat profile of bench_sym (default: --driver cuda --scaling
                                 --max-threads 8), by symbol and by thread
  allreduce [RANKS] [MAX_BYTES]  allreduce_sweep_sym (default 2 ranks, up to 4096 bytes) with call
                                 chains; summarize.py callchains splits the enqueuing threads' samples
                                 into the HAL's path and raw NCCL's, inside and outside ncclAllReduce

options:
  --completion MODE   HAL_CUDA_COMPLETION for the profiled process (see run.sh --help)
  --driver D          submit: the driver submit_profile runs on, cuda (default) or vulkan (needs .gl/
                      carried, as run.sh vulkan does)
  -h, --help          this text

Needs devperf/ carried beside devbin/ and the kit's *_sym binaries (both from kit.sh --perf). Afterwards, here:
  perf annotate -i FILES_AT/flat-submit-chain-dispatch.data --stdio -s 'SYMBOL'
USAGE
}

ARGS=() MODE="" DRIVER=cuda
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --completion) MODE=$2; shift ;;
    --driver) DRIVER=$2; shift ;;
    *) ARGS+=("$1") ;;
  esac
  shift
done
set -- "${ARGS[@]}"
TARGET=submit
case ${1:-} in submit|bench|allreduce) TARGET=$1; shift ;; esac

# shellcheck source=/dev/null
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
[ -x devperf/perf ] || { echo "profile.sh: no devperf/perf (kit.sh --perf, and carry devperf/)" >&2; exit 2; }
export LD_LIBRARY_PATH="$ROOT/devperf/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0
[ -n "$MODE" ] && export HAL_CUDA_COMPLETION=$MODE
# shellcheck source=/dev/null
[ "$DRIVER" = vulkan ] && source "$KIT/vulkan-env.sh"
P=$ROOT/devperf/perf
mkdir -p "$OUT"

case $TARGET in
  submit)
    W=${1:-chain} K=${2:-dispatch} N=${3:-1000000} T=${4:-16} tag=submit-${1:-chain}-${2:-dispatch}
    [ "$DRIVER" = cuda ] || tag=$tag-$DRIVER
    # Keep perf's output off a pipe that closes early: perf finishes its file only at exit.
    timeout "$(left 200)" "$P" record -F 1500 -e cpu-clock --call-graph dwarf,8192 -o /tmp/cg.data \
      "$KIT/submit_profile_sym" "$DRIVER" "$W" "$K" "$N" "$T" > "$OUT/record-$tag.log" 2>&1 || echo "perf record exit $?"
    cat "$OUT/record-$tag.log"
    timeout "$(left 100)" "$P" record -F 10000 -e cpu-clock -o "$OUT/flat-$tag.data" \
      "$KIT/submit_profile_sym" "$DRIVER" "$W" "$K" $((N / 5)) "$T" > /dev/null 2>&1 || echo "flat record exit $?"
    R=("$P" report -i /tmp/cg.data --stdio)
    "${R[@]}" --children --comm submit_profile_ --sort sym -g none --percent-limit 0.3 > "$OUT/submitter-children-$tag.txt" 2>&1 || true
    "${R[@]}" --no-children --comm submit_profile_ --sort dso,sym -g caller,0.5,callee,function,percent --percent-limit 1 \
      > "$OUT/submitter-callers-$tag.txt" 2>&1 || true
    "${R[@]}" --children --comm hal-completion- --sort sym -g none --percent-limit 0.3 > "$OUT/completion-children-$tag.txt" 2>&1 || true
    echo "--- submitting thread (inclusive)"
    grep -vE "^#|^$" "$OUT/submitter-children-$tag.txt" | head -30 || true
    echo "--- completion threads (inclusive)"
    grep -vE "^#|^$" "$OUT/completion-children-$tag.txt" | head -12 || true
    rm -f /tmp/cg.data ;;
  bench)
    [ $# -gt 0 ] || set -- --driver cuda --scaling --max-threads 8
    [ -x "$KIT/bench_sym" ] || { echo "no bench_sym in the kit (kit.sh --perf)" >&2; exit 2; }
    timeout "$(left 200)" "$P" record -F 2000 -g -o /tmp/bench.data "$KIT/bench_sym" "$@" > "$OUT/bench-run.txt" 2>&1 \
      || echo "perf record exit $?"
    "$P" report -i /tmp/bench.data --stdio --no-children --sort dso,sym --percent-limit 0.7 -g none > "$OUT/bench-flat.txt" 2>&1 || true
    "$P" report -i /tmp/bench.data --stdio --no-children --sort comm --percent-limit 0.5 -g none > "$OUT/bench-comm.txt" 2>&1 || true
    "$P" report -i /tmp/bench.data --stdio --children --sort sym --percent-limit 1.5 -g none > "$OUT/bench-children.txt" 2>&1 || true
    grep -vE "^#|^$" "$OUT/bench-flat.txt" | head -40 || true
    grep -vE "^#|^$" "$OUT/bench-comm.txt" | head -12 || true
    rm -f /tmp/bench.data ;;
  allreduce)
    [ -x "$KIT/allreduce_sweep_sym" ] || { echo "no allreduce_sweep_sym in the kit (kit.sh --perf)" >&2; exit 2; }
    timeout "$(left 150)" "$P" record -F 4000 -e cpu-clock --call-graph dwarf,16384 -o /tmp/ar.data \
      "$KIT/allreduce_sweep_sym" "${1:-2}" 20 "${2:-4096}" > "$OUT/allreduce-run.txt" 2>&1 || echo "perf record exit $?"
    head -8 "$OUT/allreduce-run.txt"
    timeout "$(left 240)" "$P" script -i /tmp/ar.data 2> /dev/null | python3 "$KIT/summarize.py" callchains | tee "$OUT/allreduce-split.txt"
    rm -f /tmp/ar.data ;;
esac
echo "done ($(el)); reports under $OUT"
