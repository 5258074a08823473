#!/bin/bash
# hal-iree's programs (the four small ones and the four of real size, make_programs.py) on thal-cuda
# or thal-vulkan beside IREE's own driver on the same module and GPU, and on thal-cpu-sim beside
# IREE's local-task. Run from the repository root on the GPU machine, with the kit's hal-iree
# binaries in devbin/iree/ (kit.sh --iree) and IREE's iree-base-runtime 3.13 wheel in devpeers/:
#   OUT=/tmp/out bash scripts/device/iree_programs.sh cuda|vulkan|cpu-sim
# Optional: BEFORE=path/to/another/thal-iree-run adds its times, alternating with this build's.
# Columns: exact = bit for bit against IREE's driver; vs-cpu = within tolerance of IREE's CPU
# output (largest |a - b| / (1 + |b|)); us per call, medians (ours: 300 calls of
# iree_runtime_call_invoke; IREE's: iree-benchmark-module, median of 5 repetitions).
# Host CPU per call (host.txt), us, all threads of the process: cpu = ours measured around each
# call (median), before-cpu = the same for BEFORE where its runner reports it; cpu-diff = (CPU of 201 calls - CPU of 1 call) / 200 from getrusage, inputs
# uploaded before every call (--inputs-per-call), so a build without the CPU column (BEFORE) is
# measured the same way; iree = iree-benchmark-module's CPU column (median).
set -u
DEV=${1:?usage: iree_programs.sh cuda|vulkan|cpu-sim}; OUT=${OUT:?set OUT to a directory}
[ "$DEV" = cpu-sim ] && exec bash "$(dirname "$0")/iree_programs_cpu.sh"
P=hal-iree/testdata/programs; O=$OUT/$DEV; mkdir -p "$O"
if [ "$DEV" = vulkan ]; then source devbin/vulkan-env.sh; fi
W=/tmp/iree-wheel
if [ "$DEV" != inputs-only ] && [ ! -d $W/iree ]; then
  mkdir -p $W && python3 -m zipfile -e devpeers/iree_base_runtime-*.whl $W && chmod +x $W/iree/_runtime_libs/*
fi
RUN=$W/iree/_runtime_libs/iree-run-module; BENCH=$W/iree/_runtime_libs/iree-benchmark-module
NEW=devbin/iree/thal-iree-run; OLD=${BEFORE:-}
# inputs of the real programs (numpy, fixed seed), as npy
python3 - <<'PY'
import numpy as np, os
rng = np.random.default_rng(1)
def w(name, specs):
    for i, (shape, scale) in enumerate(specs):
        f = f"/tmp/{name}.input{i}.npy"
        if not os.path.exists(f):
            np.save(f, (rng.uniform(-1, 1, shape) * scale).astype(np.float32))
mlp = [((64, 4096), 1.0)] + [s for _ in range(4) for s in (((4096, 4096), 1 / 64), ((4096,), 0.1))]
blk = [((512, 1024), 1.0)] + [((1024, 1024), 1 / 32)] * 4 + [((1024, 4096), 1 / 32), ((4096, 1024), 1 / 64)]
conv = [((8, 64, 64, 32), 1.0), ((3, 3, 32, 64), 1 / 17), ((64,), 0.1), ((3, 3, 64, 64), 1 / 24), ((64,), 0.1)]
w("mlp4", mlp); w("transformer", blk); w("transformer_f16", blk); w("conv", conv)
PY
[ "$DEV" = inputs-only ] && exit 0
# name function inputs-stem n-inputs tolerance-vs-cpu
PROGS=("chain chain $P/chain 1 0" "chain_split chain $P/chain 1 0" "matmul matmul $P/matmul 2 0" "mlp mlp $P/mlp 5 0"
       "mlp4 mlp4 /tmp/mlp4 9 1e-3" "transformer transformer /tmp/transformer 7 1e-3" "transformer_f16 transformer_f16 /tmp/transformer_f16 7 5e-2" "conv conv /tmp/conv 5 1e-3")
med() { grep "^| thal-$DEV" | awk -F'|' '{gsub(/ /,"",$4); print $4}'; }
cpu() { grep "^| thal-$DEV" | awk -F'|' '{gsub(/ /,"",$6); print $6}'; }
# cpu_diff BINARY ARGS...: host CPU us per call of BINARY ARGS --repeat N, differenced over N.
cpu_diff() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys
def cpu(n):
    t0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(sys.argv[1:] + ["--repeat", str(n)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    t1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (t1.ru_utime + t1.ru_stime) - (t0.ru_utime + t0.ru_stime)
one, many = cpu(1), cpu(201)
print(f"{(many - one) / 200 * 1e6:.1f}")
PY
}
printf "%-16s %10s %10s %10s %10s %10s\n" program cpu before-cpu cpu-diff before-diff iree-cpu > $O/host.txt
printf "%-16s %-9s %-22s %10s %10s %10s %10s %7s %7s\n" program exact "vs-cpu(reldiff)" after1 before1 after2 before2 iree ratio | tee $O/table.txt
for e in "${PROGS[@]}"; do
  read -r name fn stem n tol <<< "$e"
  ins=(); tins=(); for ((k=0;k<n;k++)); do ins+=("--input=@$stem.input$k.npy"); tins+=(--input "@$stem.input$k.npy"); done
  mod=$P/$name.$DEV.vmfb; [ -f $mod ] || { echo "$name: no $DEV module"; continue; }
  timeout 120 $RUN --device=$DEV --module=$mod --function=$fn "${ins[@]}" --output=@/tmp/iree_${DEV}_$name.npy > $O/iree-run-$name.txt 2>&1
  exact=no; timeout 120 $NEW --module $mod --function module.$fn "${tins[@]}" --device thal-$DEV --expected @/tmp/iree_${DEV}_$name.npy > $O/exact-$name.txt 2>&1 && exact=yes
  cpu=$P/$name.vmfb; vs=-
  if [ "$tol" != 0 ]; then
    timeout 300 $NEW --module $cpu --function module.$fn "${tins[@]}" --device local-task --output @/tmp/cpu_$name.npy > $O/cpu-$name.txt 2>&1
    timeout 120 $NEW --module $mod --function module.$fn "${tins[@]}" --device thal-$DEV --expected @/tmp/cpu_$name.npy --tolerance $tol > $O/vscpu-$name.txt 2>&1 && vs=ok || vs=FAIL
    vs="$vs($(grep -o 'difference[^)]*' $O/vscpu-$name.txt | grep -oE '[0-9.]+e[-+][0-9]+' | head -1))"
  fi
  R=300
  a1=$(timeout 120 $NEW --module $mod --function module.$fn "${tins[@]}" --device thal-$DEV --repeat $R 2>$O/a1-$name.err | med)
  b1=; b2=; [ -n "$OLD" ] && b1=$(timeout 120 $OLD --module $mod --function module.$fn "${tins[@]}" --device thal-$DEV --repeat $R 2>$O/b1-$name.err | med)
  a2out=$(timeout 120 $NEW --module $mod --function module.$fn "${tins[@]}" --device thal-$DEV --repeat $R 2>/dev/null)
  a2=$(echo "$a2out" | med); c2=$(echo "$a2out" | cpu)
  cd_new=$(cpu_diff $NEW --module $mod --function module.$fn "${tins[@]}" --device thal-$DEV --inputs-per-call)
  cd_old=-; [ -n "$OLD" ] && cd_old=$(cpu_diff $OLD --module $mod --function module.$fn "${tins[@]}" --device thal-$DEV)
  b2out=; [ -n "$OLD" ] && b2out=$(timeout 120 $OLD --module $mod --function module.$fn "${tins[@]}" --device thal-$DEV --repeat $R 2>/dev/null)
  b2=$(echo "$b2out" | med); cb2=$(echo "$b2out" | cpu); case $cb2 in [0-9]*) ;; *) cb2=- ;; esac
  timeout 120 $BENCH --device=$DEV --module=$mod --function=$fn "${ins[@]}" --benchmark_repetitions=5 --benchmark_min_time=0.3 > $O/iree-bench-$name.txt 2>&1
  th=$(grep -E "_median" $O/iree-bench-$name.txt | head -1 | awk '{v=$2; if ($3=="ms") v*=1000; if ($3=="ns") v/=1000; if (v) printf "%.1f", v}')
  ratio=$(python3 -c "print(f'{min($a1,$a2)/$th:.2f}x')" 2>/dev/null || echo -)
  icpu=$(grep -E "_median" $O/iree-bench-$name.txt | head -1 | awk '{v=$4; if ($5=="ms") v*=1000; if ($5=="ns") v/=1000; if (v) printf "%.1f", v}')
  printf "%-16s %10s %10s %10s %10s %10s\n" $name "${c2:-?}" "${cb2:-?}" "${cd_new:-?}" "${cd_old:-?}" "${icpu:-?}" | tee -a $O/host.txt
  printf "%-16s %-9s %-22s %10s %10s %10s %10s %7s %7s\n" $name $exact "$vs" "${a1:-?}" "${b1:-?}" "${a2:-?}" "${b2:-?}" "${th:-?}" $ratio | tee -a $O/table.txt
done
