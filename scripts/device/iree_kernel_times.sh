#!/bin/bash
# Per-kernel GPU durations (Nsight Compute, gpu__time_duration) of IREE's programs on thal-cuda and
# on IREE's own cuda driver, five calls each, and the median of each kernel side by side. Run from
# the repository root on the GPU machine, with the kit's hal-iree binaries in devbin/iree/ and IREE's
# iree-base-runtime 3.13 wheel in devpeers/:  OUT=/tmp/out bash scripts/device/iree_kernel_times.sh
set -u
export PATH=$PATH:/usr/local/cuda/bin
NCU=$(command -v ncu)
P=hal-iree/testdata/programs
W=/tmp/iree-wheel
mkdir -p $W && python3 -m zipfile -e devpeers/iree_base_runtime-*.whl $W && chmod +x $W/iree/_runtime_libs/*
BENCH=$W/iree/_runtime_libs/iree-benchmark-module
NEW=devbin/iree/thal-iree-run
OUT=${OUT:?set OUT to a directory} bash scripts/device/iree_programs.sh inputs-only
for prog in conv mlp transformer transformer_f16; do
  case $prog in conv) n=5; fn=conv; stem=/tmp/conv;; mlp) n=5; fn=mlp; stem=$P/mlp;; transformer_f16) n=7; fn=transformer_f16; stem=/tmp/transformer_f16;; transformer) n=7; fn=transformer; stem=/tmp/transformer;; esac
  ins=(); tins=(); for ((k=0;k<n;k++)); do ins+=("--input=@$stem.input$k.npy"); tins+=(--input "@$stem.input$k.npy"); done
  mod=$P/$prog.cuda.vmfb
  timeout 300 $NCU --csv --metrics gpu__time_duration.sum --cache-control none --clock-control none $NEW --module $mod --function module.$fn "${tins[@]}" --device thal-cuda --repeat 5 > $OUT/ncu-thal-$prog.csv 2>$OUT/ncu-thal-$prog.err
  timeout 300 $NCU --csv --metrics gpu__time_duration.sum --cache-control none --clock-control none $BENCH --device=cuda --module=$mod --function=$fn "${ins[@]}" --benchmark_min_time=5x --benchmark_repetitions=1 > $OUT/ncu-iree-$prog.csv 2>$OUT/ncu-iree-$prog.err
done
python3 - <<'PY' | tee $OUT/ncu_summary.txt
import csv, io, os, statistics
out = os.environ["OUT"]
for prog in ["conv", "mlp", "transformer", "transformer_f16"]:
    rows = {}
    for who in ["thal", "iree"]:
        text = open(f"{out}/ncu-{who}-{prog}.csv").read()
        start = text.find('"ID"')
        if start < 0:
            print(prog, who, "no csv"); continue
        d = {}
        for r in csv.DictReader(io.StringIO(text[start:])):
            if r.get("Metric Name") != "gpu__time_duration.sum": continue
            v = float(r["Metric Value"].replace(",", ""))
            if r["Metric Unit"] == "usecond": v *= 1000
            if r["Metric Unit"] == "msecond": v *= 1e6
            d.setdefault(r["Kernel Name"][:60], []).append(v)
        rows[who] = d
    print(f"== {prog}: kernel, count thal, median ns thal, count iree, median ns iree")
    names = sorted(set(rows.get("thal", {})) | set(rows.get("iree", {})))
    tt = ti = 0.0
    for n in names:
        a = rows.get("thal", {}).get(n, []); b = rows.get("iree", {}).get(n, [])
        ma = statistics.median(a) if a else 0; mb = statistics.median(b) if b else 0
        tt += ma; ti += mb
        print(f"{n:60s} {len(a):5d} {ma:10.0f} {len(b):5d} {mb:10.0f} {ma/mb if mb else 0:6.2f}")
    print(f"{'sum of medians (one of each kernel)':60s} {'':5s} {tt:10.0f} {'':5s} {ti:10.0f} {tt/ti if ti else 0:6.2f}")
PY
cd "$OUT" && tar czf ncu.tgz ncu-*.csv ncu-*.err && rm -f ncu-*.csv ncu-*.err
