#!/bin/bash
# Builds, here (no GPU needed), the binaries the GPU machine runs, stripped, into devbin/ (git-ignored).
set -e
cd "$(dirname "$0")/../.."
# Where cargo put the release build (target/, or CARGO_TARGET_DIR when set).
release=$(cargo metadata --format-version 1 --no-deps | grep -o '"target_directory":"[^"]*"' | cut -d'"' -f4)/release
cargo build --release -p bench -p tools --bins --examples 2>&1 | tail -1
cargo build --release -p timeline-hal-cuda --examples 2>&1 | tail -1
cargo test --release -p timeline-hal-cuda --no-run --message-format=json 2>/dev/null | python3 -c "
import sys,json,shutil
for l in sys.stdin:
    m=json.loads(l)
    if m.get('reason')=='compiler-artifact' and m.get('executable') and m['target']['kind']==['test']:
        shutil.copy(m['executable'], 'devbin/'+m['target']['name']); print('devbin/'+m['target']['name'])
"
# The Vulkan test binaries, as vulkan_<name> (their names would clash with CUDA's cts).
cargo test --release -p timeline-hal-vulkan --no-run --message-format=json 2>/dev/null | python3 -c "
import sys,json,shutil
for l in sys.stdin:
    m=json.loads(l)
    if m.get('reason')=='compiler-artifact' and m.get('executable') and m['target']['kind']==['test']:
        shutil.copy(m['executable'], 'devbin/vulkan_'+m['target']['name']); print('devbin/vulkan_'+m['target']['name'])
"
cp "$release"/examples/completion_modes "$release"/examples/chain_costs "$release"/examples/submit_profile \
   "$release"/bench "$release"/hal devbin/
# not_run checks the no-GPU behaviour here (cargo test); on the GPU the other binaries cover it.
rm -f devbin/cuda_timing devbin/not_run; cp scripts/gpu/*.sh scripts/gpu/vk_ab.py devbin/
strip devbin/cuda_fault devbin/cuda_device devbin/cts devbin/contract_fuzz devbin/cuda_completion_modes devbin/completion_modes \
   devbin/chain_costs devbin/submit_profile devbin/bench devbin/hal devbin/vulkan_cts devbin/vulkan_vulkan_device
# Unstripped (symbols and line tables) for perf on the device machine; reports are read here too,
# since the binary's path is the same.
cp "$release"/examples/submit_profile devbin/submit_profile_sym
git rev-parse --short HEAD > devbin/COMMIT
# Where the binaries were built: they find test data by that path (lib.sh's link_build_checkout).
pwd > devbin/CHECKOUT
du -sh devbin
# perf and the libraries it needs, for profile.sh (the device machine has no perf). Carry devperf/
# beside devbin/ (together about 56 MiB of the 64 MiB a run may carry).
if [ -x /usr/bin/perf ]; then
  mkdir -p devperf/lib && cp /usr/bin/perf devperf/
  for lib in $(ldd /usr/bin/perf | awk '/=>/ {print $3}'); do
    case $(basename "$lib") in libc.so.6|libm.so.6|libstdc++.so.6|libgcc_s.so.1) ;; *) cp -L "$lib" devperf/lib/ ;; esac
  done
  du -sh devperf
fi
