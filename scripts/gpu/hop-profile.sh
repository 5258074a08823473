#!/bin/bash
# Where a cross-queue hop's time goes: perf of `submit_profile cuda hop dispatch` (profile.sh), the
# reports brought back as text only (a call returns at most eight files). Usage: bash
# devbin/hop-profile.sh (carry devbin/, devperf/).
cd "$(dirname "$0")/.."
source devbin/lib.sh
OUT_ALL=$OUT; export OUT=/tmp/prof; mkdir -p $OUT
timeout "$(left 200)" bash devbin/profile.sh hop dispatch 300000 2>&1 | tail -40
timeout "$(left 100)" bash devbin/profile.sh chain dispatch 300000 > /dev/null 2>&1
for f in submitter-children-hop-dispatch submitter-callers-hop-dispatch completion-children-hop-dispatch submitter-children-chain-dispatch; do
  cp $OUT/$f.txt $OUT_ALL/ 2>/dev/null
done
echo "done ($(el))"
