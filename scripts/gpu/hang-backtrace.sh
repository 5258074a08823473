#!/bin/bash
# Runs cuda_indirect up to six times; a run still going after 20 s counts as hung: its threads' states
# and a cuda-gdb backtrace of every thread are saved under $OUT (how the free/indirect hang of the
# eleventh session was found; see driver-cuda/src/free_gate.rs). Usage: devbin/hang-backtrace.sh
cd "$(dirname "$0")/.."
source devbin/lib.sh; cuda_test_env
GDB=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)
echo "debugger: $GDB"
for i in 1 2 3 4 5 6; do
  devbin/cuda_indirect --include-ignored > $OUT/ind-$i.txt 2>&1 &
  pid=$!
  for t in $(seq 40); do sleep 0.5; kill -0 $pid 2>/dev/null || break; done
  if kill -0 $pid 2>/dev/null; then
    echo "run $i hung; threads:"
    for d in /proc/$pid/task/*; do echo "$(cat $d/comm) $(awk '{print $3}' $d/stat) $(cat $d/wchan 2>/dev/null)"; done | sort | uniq -c | tee $OUT/threads-$i.txt
    [ -n "$GDB" ] && timeout 60 $GDB -batch -p $pid -ex "thread apply all bt 25" > $OUT/bt-$i.txt 2>&1
    kill -9 $pid; echo "bt lines: $(wc -l < $OUT/bt-$i.txt 2>/dev/null)"
    break
  else
    wait $pid; echo "run $i exit $?: $(grep -E '^test result' $OUT/ind-$i.txt)"
  fi
done
