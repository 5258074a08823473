#!/bin/bash
# Catches a hang in the act: runs a CUDA test binary of the kit up to N times; a run still going after
# the limit counts as hung, and its threads' states (name, state, wait channel) and a gdb/cuda-gdb
# backtrace of every thread are saved under $OUT before it is killed.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: devbin/hang-backtrace.sh [--runs N] [--after S] [--completion MODE] [TEST_BINARY [TEST ARGS...]]

  TEST_BINARY        a test binary of the kit (default cuda_indirect), run with --include-ignored
  --runs N           at most N runs (default 6); stops at the first hang
  --after S          seconds after which a run counts as hung (default 20)
  --completion MODE  HAL_CUDA_COMPLETION for the runs (see run.sh --help)
  -h, --help         this text

Logs: $OUT/run-N.txt per run; on a hang $OUT/threads-N.txt and $OUT/bt-N.txt.
USAGE
}

RUNS=6 AFTER=20 BIN=cuda_indirect TEST_ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --runs) RUNS=$2; shift ;;
    --after) AFTER=$2; shift ;;
    --completion) export HAL_CUDA_COMPLETION=$2; shift ;;
    -*) echo "hang-backtrace.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) BIN=$1; shift; TEST_ARGS=("$@"); break ;;
  esac
  shift
done

# shellcheck source=/dev/null
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
cuda_test_env
[ -x "$KIT/$BIN" ] || { echo "hang-backtrace.sh: no $BIN in the kit" >&2; exit 2; }
GDB=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2> /dev/null || true)
echo "debugger: ${GDB:-none, thread states only}"
for i in $(seq "$RUNS"); do
  "$KIT/$BIN" --include-ignored "${TEST_ARGS[@]}" > "$OUT/run-$i.txt" 2>&1 &
  pid=$!
  for _ in $(seq $((AFTER * 2))); do
    sleep 0.5
    kill -0 "$pid" 2> /dev/null || break
  done
  if kill -0 "$pid" 2> /dev/null; then
    echo "run $i hung after ${AFTER} s; threads (count, name, state, wait channel):"
    for d in /proc/"$pid"/task/*; do
      echo "$(cat "$d/comm") $(awk '{print $3}' "$d/stat") $(cat "$d/wchan" 2> /dev/null || true)"
    done | sort | uniq -c | tee "$OUT/threads-$i.txt"
    if [ -n "$GDB" ]; then
      timeout 60 "$GDB" -batch -p "$pid" -ex "thread apply all bt 25" > "$OUT/bt-$i.txt" 2>&1 || true
      echo "backtrace lines: $(wc -l < "$OUT/bt-$i.txt")"
    fi
    kill -9 "$pid"
    exit 1
  fi
  rc=0; wait "$pid" || rc=$?
  echo "run $i exit $rc: $(grep -E '^test result' "$OUT/run-$i.txt" || true)"
done
echo "no hang in $RUNS runs"
