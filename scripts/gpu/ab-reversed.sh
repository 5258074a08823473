#!/bin/bash
# Five quick benches each of devbin/bench (after) and devbin/base/bench (before) alternating, the
# after build first in each round (the order producers-check.sh uses, reversed); prints both
# builds' rows (standing_summary.py). Usage: bash devbin/ab-reversed.sh (carry devbin/).
cd "$(dirname "$0")/.."
source devbin/lib.sh
nvidia-smi -L | head -1
quick_ab after before
(cd $OUT && tar czf /tmp/logs.tgz . && find . -mindepth 1 -delete && mv /tmp/logs.tgz .)
echo "done ($(el))"
