#!/bin/bash
# Runs the peers table on the GPU machine from devpeers/ (see prepare.sh); one GPU, ORDINAL (0).
cd "$(dirname "$0")"
echo "commit $(cat COMMIT 2>/dev/null)"
python3 peers.py --hal ./peers --vmfb step_sm80.vmfb --iree-wheel iree_base_runtime-*.whl --ordinal "${ORDINAL:-0}"
