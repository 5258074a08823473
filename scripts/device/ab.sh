#!/bin/bash
# A/B (or A/B/C...) runs on one machine: the same command for several builds, alternating round by
# round so every build sees the same GPU and host, then per build the median, min and max of each
# bench row (and peers `row` lines, `wall time` lines, the scaling tables' rows) over its processes
# (summarize.py ab).
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: devbin/ab.sh [options] BUILD BUILD... [-- COMMAND...]

BUILD     [LABEL=]PATH: a kit folder (devbin, devbin/base, a before-kit carried beside it) or one
          binary; LABEL defaults to the path. The same PATH may appear twice with --env to compare
          settings rather than builds.
COMMAND   the command each process runs, `{}` standing for the build's PATH. Default: a quick CUDA
          bench, `{}/bench --driver cuda --quick` for a folder, `{} --driver cuda --quick` for a binary.
          Examples: `-- {}/peers 0`, `-- {}/bench --driver cuda --quick --peer-ordinal 1`,
          `-- taskset -c 0-7 {}/hal run --size 2048 --steps 300 --no-check`.

options:
  --rounds N         processes per build (default 5)
  --rotate           start each round with the next build (order effects even out; default: the
                     order given, every round)
  --env LABEL VAR=V  set VAR=V for LABEL's processes (repeatable), e.g. --env word
                     HAL_CUDA_COMPLETION_WORD=1
  --timeout S        limit per process (default 150, cut to the budget)
  --rows REGEX       summary: only the rows whose names match (ratios to the baseline included)
  --vulkan           set up the Vulkan loader first (vulkan-env.sh), for --driver vulkan commands
  --budget S         the call's time budget (default 580)
  -h, --help         this text

Logs: $OUT/ab/LABEL/N.txt, packed into $OUT/ab.tgz; the summary is printed and kept as
$OUT/ab-summary.txt. Here, on logs brought back: python3 scripts/device/summarize.py ab DIR [REGEX].
USAGE
}

# shellcheck source=/dev/null
source "$(dirname "$0")/lib.sh"

ROUNDS=5 ROTATE=0 LIMIT=150 ROWS="" VK=0 BUILDS=() CMD=()
declare -A ENVS=()
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --rounds) ROUNDS=$2; shift ;;
    --rotate) ROTATE=1 ;;
    --env) ENVS[$2]="${ENVS[$2]:-} $3"; shift 2 ;;
    --timeout) LIMIT=$2; shift ;;
    --rows) ROWS=$2; shift ;;
    --vulkan) VK=1 ;;
    --budget) BUDGET=$2; export BUDGET; shift ;;
    --) shift; CMD=("$@"); break ;;
    -*) echo "ab.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) BUILDS+=("$1") ;;
  esac
  shift
done
[ ${#BUILDS[@]} -ge 1 ] || { usage >&2; exit 2; }

cd "$ROOT"
nvrtc_env > /dev/null
link_build_checkout
[ "$VK" = 1 ] && vulkan_test_env
export NCCL_NVLS_ENABLE=0
LABELS=() PATHS=()
for b in "${BUILDS[@]}"; do
  if [[ $b == *=* ]]; then label=${b%%=*}; path=${b#*=}; else label=${b//\//_}; path=$b; fi
  [ -e "$path" ] || { echo "ab.sh: $path: no such kit or binary" >&2; exit 2; }
  for l in "${LABELS[@]}"; do [ "$l" != "$label" ] || { echo "ab.sh: label $label twice (use LABEL=PATH)" >&2; exit 2; }; done
  LABELS+=("$label"); PATHS+=("$path")
done
rm -rf "$OUT/ab"; mkdir -p "$OUT/ab"
echo "${LABELS[*]}" > "$OUT/ab/ORDER"
machine_info
n=${#LABELS[@]}
for round in $(seq "$ROUNDS"); do
  for k in $(seq 0 $((n - 1))); do
    i=$k; [ "$ROTATE" = 1 ] && i=$(((k + round - 1) % n))
    label=${LABELS[$i]} path=${PATHS[$i]}
    if [ ${#CMD[@]} -eq 0 ]; then
      if [ -d "$path" ]; then cmd=("$path/bench" --driver cuda --quick); else cmd=("$path" --driver cuda --quick); fi
    else
      cmd=("${CMD[@]//\{\}/$path}")
    fi
    mkdir -p "$OUT/ab/$label"
    read -r -a env_words <<< "${ENVS[$label]:-}"
    rc=0
    env "${env_words[@]}" timeout "$(left "$LIMIT")" "${cmd[@]}" > "$OUT/ab/$label/$round.txt" 2> "$OUT/ab/$label/$round.err" || rc=$?
    echo "round $round $label: exit $rc ($(el))"
    [ "$rc" -eq 0 ] || tail -3 "$OUT/ab/$label/$round.err"
  done
done
python3 "$KIT/summarize.py" ab "$OUT/ab" ${ROWS:+"$ROWS"} | tee "$OUT/ab-summary.txt"
tar czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$OUT/ab"
