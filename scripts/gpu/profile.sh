#!/bin/bash
# Where a submission's time goes on the device machine: perf (carried in devperf/, see build.sh) on
# submit_profile_sym. Usage: devbin/profile.sh [chain|hop] [dispatch|empty] [N]. The call-graph data
# stays on the machine (it is large); the reports come back under $OUT. Keep perf's output off a pipe
# that closes early: perf finishes its file only at exit.
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export LD_LIBRARY_PATH=$PWD/devperf/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
P=./devperf/perf; W=${1:-chain}; K=${2:-dispatch}; N=${3:-1000000}
$P record -F 1500 -e cpu-clock --call-graph dwarf,8192 -o /tmp/cg.data ./devbin/submit_profile_sym cuda $W $K $N > $OUT/record-$W-$K.log 2>&1
cat $OUT/record-$W-$K.log
$P record -F 10000 -e cpu-clock -o $OUT/flat-$W-$K.data ./devbin/submit_profile_sym cuda $W $K $((N / 5)) > /dev/null 2>&1
R="$P report -i /tmp/cg.data --stdio"
$R --children --comm submit_profile_ --sort sym -g none --percent-limit 0.3 > $OUT/submitter-children-$W-$K.txt 2>&1
$R --no-children --comm submit_profile_ --sort dso,sym -g caller,0.5,callee,function,percent --percent-limit 1 > $OUT/submitter-callers-$W-$K.txt 2>&1
$R --children --comm hal-completion- --sort sym -g none --percent-limit 0.3 > $OUT/completion-children-$W-$K.txt 2>&1
grep -v "^#" $OUT/submitter-children-$W-$K.txt | grep -v "^$" | grep -E "chain|ping_pong|cuLaunchKernel|cuEventRecord|cuStreamWaitEvent|pthread_mutex|issue|submit|acquire|cover|publish" | head -30
echo "--- completion threads"
grep -v "^#" $OUT/completion-children-$W-$K.txt | grep -v "^$" | grep -E "completion::run|cuEventQuery|retire|synchronize|pthread_mutex" | head -12
rm -f /tmp/cg.data
# Here, afterwards: perf annotate -i <files_at>/flat-$W-$K.data --stdio -s '<symbol>' (same binary path).
