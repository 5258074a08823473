#!/bin/bash
# Builds, here (no GPU needed), the binaries the GPU machine runs, stripped, into devbin/ (git-ignored).
set -e
cd "$(dirname "$0")/../.."
cargo build --release -p bench -p tools --bins --examples 2>&1 | tail -1
cargo build --release -p driver-cuda --examples 2>&1 | tail -1
cargo test --release -p driver-cuda --no-run --message-format=json 2>/dev/null | python3 -c "
import sys,json,shutil
for l in sys.stdin:
    m=json.loads(l)
    if m.get('reason')=='compiler-artifact' and m.get('executable') and m['target']['kind']==['test']:
        shutil.copy(m['executable'], 'devbin/'+m['target']['name']); print('devbin/'+m['target']['name'])
"
cp target/release/examples/completion_modes target/release/examples/submit_profile target/release/bench target/release/hal devbin/
rm -f devbin/cuda_timing; cp scripts/gpu/*.sh devbin/
strip devbin/cuda_fault devbin/cuda_device devbin/cts devbin/cuda_completion_modes devbin/completion_modes devbin/submit_profile devbin/bench devbin/hal
git rev-parse --short HEAD > devbin/COMMIT
du -sh devbin
