#!/bin/bash
# Runs a suite of the device kit on the GPU machine (the kit built here by kit.sh, carried as
# devbin/): `bash devbin/run.sh SUITE[,SUITE...] [options] [-- ARGS]`. Logs go under $OUT, packed into
# $OUT/logs.tgz beside $OUT/summary.txt (and any bench JSON): the device tool brings back at most 8 files.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: devbin/run.sh SUITE[,SUITE...] [options] [-- ARGS for the suite's main binary]

suites:
  cts           the conformance suite: cuda (cts, one child process per case), vulkan (vulkan_cts),
                cpu-sim (cpu_sim_cts); --sanitizers adds compute-sanitizer runs (cuda)
  driver-tests  the driver's own tests: cuda_device, cuda_completion_modes, cuda_fault, cuda_indirect,
                cuda_stalls (cuda); vulkan_vulkan_device, vulkan_binding_tables, vulkan_spirv_mutants,
                vulkan_vulkan_interop
  fuzz          the contract fuzzer (contract_fuzz, or vulkan_contract_fuzz) for --seconds
  bench         the bench (--json into $OUT); --quick, --scaling; with --gpus 2+ also the
                cross-device hop between GPUs 0 and 1; --examples adds completion_modes, chain_costs,
                submit_profile chains and a traced `hal run`
  peers         the peers tables (devpeers/run.sh from bench/peers/prepare.sh, else devbin/peers);
                with --gpus 2+ the all-reduce sweep and PyTorch's all-reduce on N GPUs
  capi          the C tests (capi/thal_tests) on cpu-sim and cuda, then the C-layer overhead bench
                (--quick leaves the bench out); kernels.cu compiled to PTX with nvcc there
  iree          hal-iree (kit.sh --iree) on thal-cuda or thal-vulkan (--driver): its programs, IREE's
                HAL CTS, and beside IREE's own driver where devpeers/ has IREE's runtime wheel
  vulkan        Vulkan on the GPU: hal devices, vulkan_cts, the driver tests, `hal run --device
                vulkan`, bench --driver vulkan --quick
  stencil       the cpu-sim stencil (hal run, 2048^2 x 300) on 1, 2, 4, ... all cores (taskset)
  probes        builds and runs the C/CUDA probes of bench/probes (--only NAME,... picks some)
  all           driver-tests, cts, fuzz (60 s unless --seconds), bench --quick

options:
  --gpus N          use GPUs 0..N-1 (CUDA_VISIBLE_DEVICES, unless set); N > 1 spreads the CTS's
                    devices over them (CTEST_CUDA_SPREAD=1). NCCL_NVLS_ENABLE=0 is always exported.
  --completion M    the CUDA completion (HAL_CUDA_COMPLETION) for cts, driver-tests, fuzz, bench:
                    default (the driver's: poll), poll, spin, blocking, spin-then-block,
                    host-callback; a comma list runs each in turn; `both` = default,host-callback
  --driver D        cuda (default), vulkan or cpu-sim (cts, driver-tests, fuzz, bench, iree, capi)
  --seconds S       the fuzzer's time per mode (HAL_FUZZ_SECONDS; default 300, cut to the budget)
  --repeat N        run each driver test binary N times (flaky hunts)
  --only A,B        driver-tests: only these binaries; probes: only these probes
  --sanitizers L    cts: also under compute-sanitizer, L a comma list of racecheck, synccheck,
                    memcheck (in-process, without the cases that fault on purpose or hang a tool)
  --quick           bench --quick; capi without the overhead bench
  --scaling         bench --scaling (the submission-rate tables)
  --examples        bench: the CUDA examples as well
  --budget S        the whole call's time budget in seconds (default 580; the tool's limit is 600)
  --no-pack         leave the logs loose under $OUT (running by hand)
  -h, --help        this text

environment: OUT (default /tmp/out); HAL_FUZZ_SEED, HAL_FUZZ_FAMILIES and other HAL_* / CTEST_*
variables pass through to the binaries. Exit status: 0 when every step passed.
USAGE
}

# shellcheck source=/dev/null
source "$(dirname "$0")/lib.sh"

SUITES="" GPUS="" MODES="default" DRIVER=cuda SECONDS_FUZZ="" REPEAT=1 ONLY="" SANITIZERS=""
QUICK=0 SCALING=0 EXAMPLES=0 PACK=1 EXTRA=()
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --gpus) GPUS=$2; shift ;;
    --completion) MODES=$2; shift ;;
    --driver) DRIVER=$2; shift ;;
    --seconds) SECONDS_FUZZ=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --sanitizers) SANITIZERS=$2; shift ;;
    --quick) QUICK=1 ;;
    --scaling) SCALING=1 ;;
    --examples) EXAMPLES=1 ;;
    --budget) BUDGET=$2; export BUDGET; shift ;;
    --no-pack) PACK=0 ;;
    --) shift; EXTRA=("$@"); break ;;
    -*) echo "run.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) [ -z "$SUITES" ] || { echo "run.sh: one suite argument (a comma list for several)" >&2; exit 2; }
       SUITES=$1 ;;
  esac
  shift
done
[ -n "$SUITES" ] || { usage >&2; exit 2; }
IFS=, read -r -a SUITE_LIST <<< "$SUITES"
for s in "${SUITE_LIST[@]}"; do
  case $s in cts|driver-tests|fuzz|bench|peers|capi|iree|vulkan|stencil|probes|all) ;;
    *) echo "run.sh: unknown suite $s (see --help)" >&2; exit 2 ;;
  esac
done
[ "$MODES" = both ] && MODES=default,host-callback
IFS=, read -r -a MODE_LIST <<< "$MODES"
for m in "${MODE_LIST[@]}"; do
  case $m in default|poll|spin|blocking|spin-then-block|host-callback) ;;
    *) echo "run.sh: --completion $m: expected default, poll, spin, blocking, spin-then-block or host-callback" >&2; exit 2 ;;
  esac
done
case $DRIVER in cuda|vulkan|cpu-sim) ;; *) echo "run.sh: --driver $DRIVER: expected cuda, vulkan or cpu-sim" >&2; exit 2 ;; esac

export NCCL_NVLS_ENABLE=0
if [ -n "$GPUS" ]; then
  [ -n "${CUDA_VISIBLE_DEVICES:-}" ] || CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((GPUS - 1)))
  export CUDA_VISIBLE_DEVICES
  [ "$GPUS" -gt 1 ] && export CTEST_CUDA_SPREAD=1
fi
cd "$ROOT"
FAILED=()
# Records a failed step (the call's exit status and the summary list it).
fail() { FAILED+=("$1"); }
# Runs "$@" with HAL_CUDA_COMPLETION=$1 (left unset for `default`).
in_mode() {
  local mode=$1
  shift
  if [ "$mode" = default ]; then "$@"; else HAL_CUDA_COMPLETION=$mode "$@"; fi
}
have() { [ -x "$KIT/$1" ] || { echo "$1: not in the kit (rebuild it with kit.sh)"; return 1; }; }
driver_env() {
  case $DRIVER in
    cuda) cuda_test_env ;;
    vulkan) vulkan_test_env ;;
    cpu-sim) link_build_checkout ;;
  esac
}

suite_cts() {
  local mode bin log s
  driver_env
  case $DRIVER in cuda) bin=cts ;; vulkan) bin=vulkan_cts ;; cpu-sim) bin=cpu_sim_cts ;; esac
  have $bin || { fail "cts: no $bin"; return; }
  for mode in "${MODE_LIST[@]}"; do
    [ "$DRIVER" = cuda ] || [ "$mode" = default ] || continue
    say "cts ($DRIVER, completion $mode)"
    log=$OUT/cts/$DRIVER-$mode.log
    in_mode "$mode" run_logged "${CTS_LIMIT:-200}" "$log" "$KIT/$bin" --include-ignored --test-threads=4 --nocapture \
      "${EXTRA[@]}" || fail "cts $DRIVER $mode"
    python3 "$KIT/summarize.py" areas "$log" || true
  done
  [ -n "$SANITIZERS" ] && [ "$DRIVER" = cuda ] || return 0
  # In-process (CTEST_ISOLATE=0), one test thread, without: the deliberate-fault and bad-input cases;
  # indirect_dispatch (its queue's stream waits for a kernel launched later on a side stream, which a
  # tool that serializes kernels never runs: those cases hang under racecheck and synccheck); the two
  # profiling cases that hold kernels to their lengths (racecheck slows every kernel to ~5 ms).
  local skip=(--skip indirect_dispatch:: --skip profiling::dispatches_recorded_with_command_indices
    --skip profiling::indirect_and_directly_replayed_dispatches --skip failure::fault_
    --skip device_works_after_fault --skip repeated_faults --skip idle_after_failures
    --skip unloadable_sources_refused)
  command -v compute-sanitizer > /dev/null || { echo "no compute-sanitizer on PATH"; fail "sanitizers: no tool"; return; }
  for mode in "${MODE_LIST[@]}"; do
    IFS=, read -r -a sans <<< "$SANITIZERS"
    for s in "${sans[@]}"; do
      # The tools run side by side: each is slow and mostly single-threaded.
      ( in_mode "$mode" env CTEST_ISOLATE=0 timeout "$(left "${SAN_LIMIT:-240}")" compute-sanitizer --tool "$s" \
          --print-limit 50 "$KIT/cts" --include-ignored --test-threads=1 "${skip[@]}" "${EXTRA[@]}" \
          > "$OUT/cts/sanitizer-$s-$mode.log" 2>&1
        echo "=== compute-sanitizer $s exit $?" >> "$OUT/cts/sanitizer-$s-$mode.log" ) &
    done
    wait
    for s in "${sans[@]}"; do
      log=$OUT/cts/sanitizer-$s-$mode.log
      echo "sanitizer $s ($mode): $(grep -E 'ERROR SUMMARY|^test result|=== compute' "$log" | tr '\n' ' ')"
      grep -qE "=== compute-sanitizer $s exit 0" "$log" || fail "sanitizer $s $mode"
    done
  done
}

suite_driver_tests() {
  local names mode t i log
  driver_env
  case $DRIVER in
    cuda) names=(cuda_device cuda_completion_modes cuda_fault cuda_indirect cuda_stalls) ;;
    vulkan) names=(vulkan_vulkan_device vulkan_binding_tables vulkan_spirv_mutants vulkan_vulkan_interop) ;;
    cpu-sim) echo "driver-tests: cpu-sim's tests run here with cargo test"; return ;;
  esac
  [ -n "$ONLY" ] && IFS=, read -r -a names <<< "$ONLY"
  for mode in "${MODE_LIST[@]}"; do
    [ "$DRIVER" = cuda ] || [ "$mode" = default ] || continue
    say "driver tests ($DRIVER, completion $mode)"
    for t in "${names[@]}"; do
      have "$t" || continue
      for i in $(seq "$REPEAT"); do
        log=$OUT/driver-tests/$t-$mode-$i.log
        # CUDA's tests are marked ignored where they were built (no libcuda): run them all. Vulkan's
        # ignored tests are the children its tests start in processes of their own (with their own
        # environment, or without a driver): run alone, they fail by design.
        local all=(--include-ignored); [ "$DRIVER" = vulkan ] && all=()
        in_mode "$mode" run_logged 180 "$log" "$KIT/$t" "${all[@]}" --test-threads=1 --nocapture "${EXTRA[@]}" \
          || fail "$t $mode run $i"
      done
    done
  done
}

suite_fuzz() {
  local bin mode seconds log
  driver_env
  case $DRIVER in cuda) bin=contract_fuzz ;; vulkan) bin=vulkan_contract_fuzz ;; cpu-sim) echo "fuzz: cpu-sim's runs here (cargo test)"; return ;; esac
  have $bin || { fail "fuzz: no $bin"; return; }
  for mode in "${MODE_LIST[@]}"; do
    [ "$DRIVER" = cuda ] || [ "$mode" = default ] || continue
    seconds=${SECONDS_FUZZ:-300}
    # Leave the fuzzer's own wind-down (up to ~2 minutes) inside the budget.
    [ "$seconds" -gt $(($(left 100000) - 120)) ] && seconds=$(($(left 100000) - 120))
    [ "$seconds" -lt 10 ] && { echo "fuzz $mode: no time left"; fail "fuzz $mode: no time"; continue; }
    say "fuzz ($DRIVER, completion $mode, $seconds s)"
    log=$OUT/fuzz/$DRIVER-$mode.log
    # One test at a time: parallel fuzz tests trip its timed latches.
    HAL_FUZZ_SECONDS=$seconds in_mode "$mode" run_logged $((seconds + 120)) "$log" \
      "$KIT/$bin" --include-ignored --test-threads=1 --nocapture "${EXTRA[@]}" || fail "fuzz $DRIVER $mode"
    grep -E "seed|families|not run" "$log" | tail -5 || true
  done
}

suite_bench() {
  local mode args=() tag rc
  driver_env
  [ "$QUICK" = 1 ] && args+=(--quick)
  [ "$SCALING" = 1 ] && args+=(--scaling)
  for mode in "${MODE_LIST[@]}"; do
    [ "$DRIVER" = cuda ] || [ "$mode" = default ] || continue
    tag=$DRIVER-$mode
    say "bench --driver $DRIVER ${args[*]} (completion $mode)"
    mkdir -p "$OUT/bench"
    rc=0
    in_mode "$mode" timeout "$(left 300)" "$KIT/bench" --driver "$DRIVER" "${args[@]}" --json "$OUT/bench-$tag.json" \
      --svg "$OUT/bench/bench-$tag.svg" "${EXTRA[@]}" > "$OUT/bench/bench-$tag.txt" 2> "$OUT/bench/bench-$tag.err" || rc=$?
    echo "bench exit $rc ($(el))"; [ "$rc" -eq 0 ] || fail "bench $tag"
    cut -c1-160 "$OUT/bench/bench-$tag.txt"; tail -3 "$OUT/bench/bench-$tag.err"
  done
  if [ "$DRIVER" = cuda ] && [ "${GPUS:-1}" -gt 1 ]; then
    say "bench --quick with the cross-device hop between GPUs 0 and 1"
    timeout "$(left 120)" "$KIT/bench" --driver cuda --quick --peer-ordinal 1 > "$OUT/bench/bench-peer1.txt" 2>&1 \
      || fail "bench peer-ordinal 1"
    grep -iE "cross-device|cross-queue" "$OUT/bench/bench-peer1.txt" | cut -c1-200 || true
  fi
  [ "$EXAMPLES" = 1 ] && [ "$DRIVER" = cuda ] || return 0
  local cfg w
  say "completion_modes"; timeout "$(left 200)" "$KIT/completion_modes" > "$OUT/bench/completion_modes.txt" 2>&1 || fail completion_modes
  grep -E "^(PollThenSleep|HostCallback|Spin)" "$OUT/bench/completion_modes.txt" || true
  say "chain_costs"; timeout "$(left 200)" "$KIT/chain_costs" > "$OUT/bench/chain_costs.txt" 2>&1 || fail chain_costs
  grep -E "neighbour|PollThenSleep|Spin" "$OUT/bench/chain_costs.txt" || true
  say "submit_profile chains by completion"
  for cfg in poll:10 poll:50 host-callback:10 spin:10; do
    for w in "chain dispatch" "hop dispatch" "chain empty"; do
      # shellcheck disable=SC2086  # $w is two words
      HAL_CUDA_COMPLETION=${cfg%:*} HAL_CUDA_POLL_US=${cfg#*:} timeout "$(left 30)" "$KIT/submit_profile" cuda $w 100000 2>&1 \
        | sed "s/^/$cfg: /" || true
    done
  done | tee "$OUT/bench/submit_profile.txt"
  say "hal run --trace"
  timeout "$(left 60)" "$KIT/hal" run --driver cuda --trace "$OUT/bench/trace.json" > "$OUT/bench/hal-run.txt" 2>&1 || fail "hal run --trace"
  tail -12 "$OUT/bench/hal-run.txt"
  [ -f "$OUT/bench/trace.json" ] && python3 "$KIT/summarize.py" trace "$OUT/bench/trace.json" && rm -f "$OUT/bench/trace.json"
  return 0
}

suite_peers() {
  mkdir -p "$OUT/peers"
  if [ -f devpeers/run.sh ]; then
    say "peers tables (devpeers/run.sh)"
    timeout "$(left 330)" bash devpeers/run.sh --peer-timeout 90 "${EXTRA[@]}" > "$OUT/peers/peers.txt" 2>&1 || fail peers
    grep -vE "^  File|^Thread|^Current thread|^$" "$OUT/peers/peers.txt" | tail -45 | cut -c1-180
  else
    say "peers rows, HAL and raw (devbin/peers; devpeers/ absent: no PyTorch or IREE columns)"
    driver_env
    timeout "$(left 150)" "$KIT/peers" --driver "$DRIVER" 0 > "$OUT/peers/peers.txt" 2>&1 || fail peers
    python3 "$KIT/summarize.py" peers "$OUT/peers/peers.txt" || true
  fi
  if [ "${GPUS:-1}" -gt 1 ]; then
    cuda_test_env
    say "all-reduce sweep on $GPUS GPUs (HAL beside raw NCCL)"
    timeout "$(left 150)" "$KIT/allreduce_sweep" "$GPUS" 3 > "$OUT/peers/allreduce-$GPUS.txt" 2>&1 || fail "allreduce_sweep $GPUS"
    tail -14 "$OUT/peers/allreduce-$GPUS.txt"
    say "PyTorch all-reduce on $GPUS GPUs"
    timeout "$(left 120)" python3 bench/peers/allreduce_torch.py "$GPUS" 3 > "$OUT/peers/torch-$GPUS.txt" 2>&1 || fail "allreduce_torch $GPUS"
    tail -14 "$OUT/peers/torch-$GPUS.txt"
  fi
}

suite_capi() {
  local ptx nvcc d t kernels pass=0 nfail=0 drivers=(cpu-sim cuda) tests
  [ -x "$KIT/capi/thal_tests" ] || { echo "capi/: not in the kit (kit.sh without --no-capi)"; fail "capi: no kit"; return; }
  [ "$DRIVER" != cuda ] && drivers=("$DRIVER")
  mkdir -p "$OUT/capi"
  mapfile -t tests < "$KIT/capi/TESTS"
  ptx=$OUT/capi/kernels.ptx
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2> /dev/null || true)
  if [ -n "$nvcc" ]; then "$nvcc" -ptx -arch=sm_80 "$KIT/capi/kernels.cu" -o "$ptx" || echo "nvcc failed"
  else echo "no nvcc: the cuda kernel tests will fail"; fi
  say "C tests (${#tests[@]}) on ${drivers[*]}"
  for d in "${drivers[@]}"; do
    case $d in cuda) kernels=$ptx ;; cpu-sim) kernels=$KIT/capi/libthal_test_kernels.so ;; vulkan) kernels=$ROOT/hal-c/tests/c/kernels.wgsl ;; esac
    for t in "${tests[@]}"; do
      if timeout "$(left 60)" "$KIT/capi/thal_tests" "$d" "$kernels" "$t" > "$OUT/capi/$d-$t.log" 2>&1; then
        pass=$((pass + 1)); echo "ok $d $t$(grep -o ' not run.*' "$OUT/capi/$d-$t.log" | head -1 || true)"
      else
        nfail=$((nfail + 1)); fail "capi $d $t"; echo "FAILED $d $t:"; tail -5 "$OUT/capi/$d-$t.log"
      fi
    done
  done
  echo "C tests: $pass passed, $nfail failed ($(el))"
  [ "$QUICK" = 1 ] && return 0
  for d in "${drivers[@]}"; do
    [ "$d" = vulkan ] && continue
    say "C layer overhead ($d)"
    timeout "$(left 240)" "$KIT/capi/c_overhead" --driver "$d" --ops 20000 --trials "$([ "$d" = cuda ] && echo 15 || echo 9)" \
      > "$OUT/capi/overhead-$d.txt" 2>&1 || fail "c_overhead $d"
    cat "$OUT/capi/overhead-$d.txt"
  done
}

# hal-iree's test programs: "name function inputs" (chain_split takes chain's inputs).
IREE_PROGRAMS=("chain chain 1" "chain_split chain 1" "matmul matmul 2" "mlp mlp 5")
suite_iree() {
  local dev fmt P=hal-iree/testdata/programs wheel W RUN="" BENCH="" entry name func nin data k ins tins ours theirs tus
  [ -d "$KIT/iree" ] || { echo "iree/: not in the kit (kit.sh --iree)"; fail "iree: no kit"; return; }
  case $DRIVER in
    cuda) cuda_test_env; dev=cuda; fmt=PTXE ;;
    vulkan) vulkan_test_env; dev=vulkan; fmt=vulkan-spirv-fb ;;
    *) echo "iree: --driver cuda or vulkan"; fail "iree: driver"; return ;;
  esac
  mkdir -p "$OUT/iree"
  if [ "$dev" = cuda ]; then
    say "hal-iree's CUDA programs against IREE's CPU output"
    run_logged 120 "$OUT/iree/cuda_programs.log" "$KIT/iree/cuda_programs" --include-ignored --test-threads=1 --nocapture \
      || fail "iree cuda_programs"
  fi
  say "IREE's HAL CTS on thal-$dev"
  IREE_CTS_DRIVER=thal-$dev IREE_CTS_EXECUTABLE_FORMAT=$fmt IREE_CTS_TESTDATA=$ROOT/hal-iree/testdata/cts/executables-$dev \
    timeout "$(left 200)" "$KIT/iree/iree_cts" > "$OUT/iree/iree_cts_$dev.log" 2>&1 || fail "iree_cts $dev"
  grep -E "iree-cts:|^total|FAILED  \]" "$OUT/iree/iree_cts_$dev.log" | head -20 || true
  wheel=$(find devpeers -maxdepth 1 -name 'iree_base_runtime-*.whl' 2> /dev/null | head -1 || true)
  [ -n "$wheel" ] || { echo "no devpeers/iree_base_runtime-*.whl: IREE's own $dev driver not compared"; return 0; }
  W=/tmp/iree-wheel; mkdir -p $W && python3 -m zipfile -e "$wheel" $W
  chmod +x $W/iree/_runtime_libs/*; RUN=$W/iree/_runtime_libs/iree-run-module; BENCH=$W/iree/_runtime_libs/iree-benchmark-module
  say "thal-$dev against IREE's $dev driver, bit for bit; then us per call of the same module"
  printf "%-12s %10s %14s %14s %8s\n" module bit-exact "thal-$dev" "iree-$dev" ratio
  for entry in "${IREE_PROGRAMS[@]}"; do
    read -r name func nin <<< "$entry"; data=$name; [ "$name" = chain_split ] && data=chain
    ins=(); tins=()
    for ((k = 0; k < nin; k++)); do ins+=("--input=@$P/$data.input$k.npy"); tins+=(--input "@$P/$data.input$k.npy"); done
    timeout "$(left 30)" "$RUN" --device="$dev" --module="$P/$name.$dev.vmfb" --function="$func" "${ins[@]}" \
      --output="@/tmp/iree_$name.npy" > "$OUT/iree/iree-run-$name.txt" 2>&1 || true
    local exact=yes
    timeout "$(left 30)" "$KIT/iree/thal-iree-run" --module "$P/$name.$dev.vmfb" --function "module.$func" "${tins[@]}" \
      --device "thal-$dev" --expected "@/tmp/iree_$name.npy" > "$OUT/iree/thal-$name.txt" 2>&1 || { exact=no; fail "iree $name differs"; }
    ours=$(timeout "$(left 30)" "$KIT/iree/thal-iree-run" --module "$P/$name.$dev.vmfb" --function "module.$func" "${tins[@]}" \
      --device "thal-$dev" --repeat 1000 2> /dev/null | grep "^| thal-$dev" | awk -F'|' '{gsub(/ /,"",$4); print $4}' || true)
    timeout "$(left 40)" "$BENCH" --device="$dev" --module="$P/$name.$dev.vmfb" --function="$func" "${ins[@]}" \
      --benchmark_repetitions=5 --benchmark_min_time=0.3 > "$OUT/iree/iree-bench-$name.txt" 2>&1 || true
    theirs=$(grep -E "_median" "$OUT/iree/iree-bench-$name.txt" | head -1 | awk '{print $2, $3}' || true)
    tus=$(echo "$theirs" | awk '{v=$1; if ($2=="ms") v*=1000; if ($2=="ns") v/=1000; if (v) printf "%.1f", v}')
    printf "%-12s %10s %14s %14s %8s\n" "$name" "$exact" "${ours:-?}" "${tus:-?}" \
      "$(python3 -c "print(f'{$ours/$tus:.2f}x')" 2> /dev/null || echo -)"
  done
}

suite_vulkan() {
  vulkan_test_env
  mkdir -p "$OUT/vulkan"
  say "hal devices"
  "$KIT/hal" devices 2>&1 | sed -n '/^vulkan/,$p' || true
  local saved=$DRIVER; DRIVER=vulkan
  suite_cts
  suite_driver_tests
  DRIVER=$saved
  say "hal run --device vulkan (the stencil, bit-exact against the CPU)"
  timeout "$(left 120)" "$KIT/hal" run --device vulkan > "$OUT/vulkan/hal-run.txt" 2>&1 || fail "hal run --device vulkan"
  grep -E "check|wall time" "$OUT/vulkan/hal-run.txt" || tail -5 "$OUT/vulkan/hal-run.txt"
  say "bench --driver vulkan --quick"
  timeout "$(left 150)" "$KIT/bench" --driver vulkan --quick > "$OUT/vulkan/bench-vulkan.txt" 2> "$OUT/vulkan/bench-vulkan.err" \
    || fail "bench vulkan"
  cut -c1-160 "$OUT/vulkan/bench-vulkan.txt"
}

suite_stencil() {
  local n c w line
  n=$(nproc)
  say "cpu-sim stencil 2048^2 x 300, wall s (two runs per core count)"
  for c in 1 2 4 8 16 32 64 128 "$n"; do
    [ "$c" -gt "$n" ] && continue
    line="$c:"
    for _ in 1 2; do
      w=$(timeout "$(left 60)" taskset -c 0-$((c - 1)) "$KIT/hal" run --size 2048 --steps 300 --no-check 2>&1 \
        | grep -oE "wall time: +[0-9.]+" | grep -oE "[0-9.]+$" || true)
      line="$line ${w:-?}"
    done
    echo "$line"
    [ "$c" = "$n" ] && break
  done
  mkdir -p "$OUT/stencil"
  timeout "$(left 60)" "$KIT/hal" run --size 2048 --steps 300 > "$OUT/stencil/check.txt" 2>&1 || fail "stencil check"
  grep -E "check|wall time" "$OUT/stencil/check.txt" || true
}

suite_probes() {
  local src=$ROOT/bench/probes p names=(submit_cost_probe round_trip_probe free_stall_probe h2h_probe host_gate_probe) inc=/usr/local/cuda/include lib=/usr/local/cuda/lib64
  [ -n "$ONLY" ] && IFS=, read -r -a names <<< "$ONLY"
  mkdir -p "$OUT/probes" /tmp/probes
  export PATH="$PATH:/usr/local/cuda/bin"
  for p in "${names[@]}"; do
    say "probe $p"
    if [ -f "$src/$p.c" ]; then
      gcc -O2 "$src/$p.c" -I"$inc" -L"$lib" -lcuda -lpthread -o "/tmp/probes/$p" || { fail "probe $p build"; continue; }
    elif [ -f "$src/$p.cu" ]; then
      nvcc -O2 "$src/$p.cu" -lcuda -o "/tmp/probes/$p" || { fail "probe $p build"; continue; }
    else
      echo "no $p in bench/probes"; fail "probe $p"; continue
    fi
    timeout "$(left 120)" "/tmp/probes/$p" "${EXTRA[@]}" 2>&1 | tee "$OUT/probes/$p.txt" || fail "probe $p"
  done
}

suite_all() {
  suite_driver_tests
  suite_cts
  SECONDS_FUZZ=${SECONDS_FUZZ:-60} suite_fuzz
  QUICK=1 suite_bench
}

machine_info
for s in "${SUITE_LIST[@]}"; do
  "suite_${s//-/_}"
done
say "done"
{
  echo "suites $SUITES; completion $MODES; driver $DRIVER; gpus ${GPUS:-all}; kit $(cat "$KIT/COMMIT" 2> /dev/null || echo '?')"
  python3 "$KIT/summarize.py" tests "$OUT" || true
  if [ ${#FAILED[@]} -eq 0 ]; then echo "all steps passed"; else printf 'FAILED: %s\n' "${FAILED[@]}"; fi
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
[ "$PACK" = 1 ] && pack_out summary.txt 'bench-*.json'
[ ${#FAILED[@]} -eq 0 ]
