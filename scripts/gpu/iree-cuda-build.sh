#!/bin/bash
# Here (no GPU needed): builds hal-iree in release and puts what scripts/gpu/iree-cuda.sh runs into
# devbin/iree/ (git-ignored): thal-iree-run, the cuda_programs test and IREE's CTS (iree_cts), stripped.
# Needs what hal-iree/ci.sh installs (CMake 3.26+ on PATH, libclang, gtest).
set -e
cd "$(dirname "$0")/../../hal-iree"
# Where cargo put the release build (target/, or CARGO_TARGET_DIR when set).
release=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)/release
mkdir -p ../devbin/iree
cargo test --release --workspace --no-run --message-format=json 2>/dev/null | python3 -c "
import sys, json, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get('reason') == 'compiler-artifact' and m.get('executable') and m['target']['name'] in ('cuda_programs', 'iree_cts'):
        shutil.copy(m['executable'], '../devbin/iree/' + m['target']['name']); print('devbin/iree/' + m['target']['name'])
"
cargo build --release --bin thal-iree-run 2>&1 | tail -1
cp "$release"/thal-iree-run ../devbin/iree/
strip ../devbin/iree/*
# Where the binaries were built: they find test data by that path (lib.sh's link_build_checkout).
(cd .. && pwd) > ../devbin/CHECKOUT
du -sh ../devbin/iree
