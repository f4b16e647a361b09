#!/usr/bin/env bash
# (GPU machine) tg128 (host-fed) and `--parallel 1` of the packed cera under several environment
# settings, settings alternating within each round (ROUNDS, default 2), one machine start: how a
# run-time switch is tuned before its default is chosen.
# Usage: tools/device/sweep.sh OUT SHAPE:TYPE... -- SETTING...
#   SETTING: space-separated VAR=value pairs, or "-" for none, e.g.
#   tools/device/sweep.sh $OUT lfm2-1.2b:BF16 -- - "CERA_CUDA_FUSE_CONV=0"
# SHAPE:TYPE as in ab.sh (models are made once and kept in /tmp/ab).
set -uo pipefail
out=${1:?out dir}; shift
models=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do models+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
settings=("$@")
[ ${#models[@]} -gt 0 ] && [ ${#settings[@]} -gt 0 ] || { echo "usage: sweep.sh OUT SHAPE:TYPE... -- SETTING..." >&2; exit 2; }
cd "$(dirname "$0")/../.."
eval "$(tools/device/setup.sh 2>/dev/null | tail -1)"
source tools/device/ab.sh --functions-only
for spec in "${models[@]}"; do
  m=$(model "${spec%%:*}" "${spec##*:}")
  [ -f "$m" ] || { echo "$spec: could not make the model" | tee -a "$out/sweep.log"; continue; }
  for round in $(seq "${ROUNDS:-2}"); do
    for s in "${settings[@]}"; do
      vars=(); [ "$s" = "-" ] || read -ra vars <<<"$s"
      echo "$spec | ${s} | $( ( [ ${#vars[@]} -eq 0 ] || export "${vars[@]}"; tg cera "$m") )" | tee -a "$out/sweep.log"
    done
  done
done
