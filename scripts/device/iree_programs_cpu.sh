#!/bin/bash
# thal-cpu-sim against IREE's local-task (and local-sync for the small programs) on the same CPU
# modules, bit for bit (iree_programs.sh cpu-sim runs this; it makes the inputs of real size if
# they are missing). BEFORE=path/to/another/thal-iree-run adds its times.
set -u
OUT=${OUT:?set OUT to a directory}
[ -f /tmp/conv.input4.npy ] || { OUT=$OUT bash "$(dirname "$0")/iree_programs.sh" inputs-only; }
P=hal-iree/testdata/programs; O=$OUT/cpu; mkdir -p $O
NEW=devbin/iree/thal-iree-run; OLD=${BEFORE:-}
PROGS=("chain chain $P/chain 1 300" "chain_split chain $P/chain 1 300" "matmul matmul $P/matmul 2 300" "mlp mlp $P/mlp 5 300"
       "mlp4 mlp4 /tmp/mlp4 9 10" "transformer transformer /tmp/transformer 7 5" "conv conv /tmp/conv 5 10")
col() { grep "^| $1 " | awk -F'|' '{gsub(/ /,"",$4); print $4}'; }
printf "%-14s %-6s %12s %12s %12s %12s\n" program exact local-task thal-cpu-sim before-cpu-sim local-sync | tee $O/table.txt
for e in "${PROGS[@]}"; do
  read -r name fn stem n R <<< "$e"
  tins=(); for ((k=0;k<n;k++)); do tins+=(--input "@$stem.input$k.npy"); done
  out=$(timeout 200 $NEW --module $P/$name.vmfb --function module.$fn "${tins[@]}" --device local-task --device thal-cpu-sim --repeat $R 2>$O/$name.err); ok=$?
  echo "$out" > $O/$name.txt
  exact=yes; [ $ok = 0 ] || exact=no
  lt=$(echo "$out" | col local-task); ts=$(echo "$out" | col thal-cpu-sim)
  bs=; [ -n "$OLD" ] && bs=$(timeout 200 $OLD --module $P/$name.vmfb --function module.$fn "${tins[@]}" --device thal-cpu-sim --repeat $R 2>/dev/null | col thal-cpu-sim)
  ls_=-; [ $R -gt 100 ] && ls_=$(timeout 60 $NEW --module $P/$name.vmfb --function module.$fn "${tins[@]}" --device local-sync --repeat $R 2>/dev/null | col local-sync)
  printf "%-14s %-6s %12s %12s %12s %12s\n" $name $exact "${lt:-?}" "${ts:-?}" "${bs:-?}" "$ls_" | tee -a $O/table.txt
done
