#!/usr/bin/env bash
# (GPU machine) The packed cera against an older build: tg128 (`-p 0 -n 128 -r 3`, tokens fed from
# the host) and `--parallel 1` (the argmax on the device) of each model, old and new alternating,
# ROUNDS times (default 2), in one machine start: how BENCHMARKS.md's before/after tables are made.
# Usage (after `CERA_PACK_OLD=path/to/old/cera tools/device/pack.sh none` on the dev machine):
#   tools/device/ab.sh OUT [SHAPE:TYPE ...]
# SHAPE: lfm2-1.2b, lfm2-350m (cera-synth), llama-3.2-1b, qwen3-0.6b (random_model.py) or
# qwen2.5-0.5b (random_qwen2.py); TYPE: BF16
# or anything `cera quantize` takes. Default: lfm2-1.2b:BF16 lfm2-1.2b:Q4_0 qwen3-0.6b:BF16
# llama-3.2-1b:BF16. Models are kept in /tmp/ab between calls to a warm machine.
set -uo pipefail
# `source ab.sh --functions-only` (sweep.sh): define model and tg, run nothing.
if [ "${1:-}" != "--functions-only" ]; then
out=${1:?out dir}; shift
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(lfm2-1.2b:BF16 lfm2-1.2b:Q4_0 qwen3-0.6b:BF16 llama-3.2-1b:BF16)
cd "$(dirname "$0")/../.."
eval "$(tools/device/setup.sh 2>/dev/null | tail -1)"
[ -f .device/old/cera.xz ] || { echo "no .device/old/cera.xz: pack with CERA_PACK_OLD=..." >&2; exit 2; }
mkdir -p /tmp/ab/old && xz -dc .device/old/cera.xz > /tmp/ab/old/cera && chmod +x /tmp/ab/old/cera
fi

model() {  # SHAPE TYPE -> the GGUF's path, made once
  local shape=$1 type=$2 bf16=/tmp/ab/$1-BF16.gguf
  mkdir -p /tmp/ab
  if [ ! -f "$bf16" ]; then
    case "$shape" in
      lfm2-*) timeout 120 cera-synth --shape "$shape" --type bf16 -o "$bf16" >/dev/null 2>&1 ;;
      qwen2.5-0.5b) timeout 200 python3 tools/device/random_qwen2.py "/tmp/ab/hf-$shape" >/dev/null 2>&1 &&
           timeout 120 cera convert "/tmp/ab/hf-$shape" -o "$bf16" --type bf16 >/dev/null 2>&1 &&
           rm -rf "/tmp/ab/hf-$shape" ;;
      *) timeout 200 python3 .device/tools/random_model.py "$shape" "/tmp/ab/hf-$shape" >/dev/null 2>&1 &&
           timeout 120 cera convert "/tmp/ab/hf-$shape" -o "$bf16" --type bf16 >/dev/null 2>&1 &&
           rm -rf "/tmp/ab/hf-$shape" ;;
    esac
  fi
  local f=/tmp/ab/$shape-$type.gguf
  [ "$type" = BF16 ] || [ -f "$f" ] || timeout 120 cera quantize "$bf16" "$f" "$type" >/dev/null 2>&1
  echo "$f"
}
# tg128 t/s of one binary, host-fed and --parallel 1 (one `cera bench` prints both rows).
tg() {
  local rows a b
  rows=$(timeout 120 "$1" bench --device cuda -m "$2" -p 0 -n 128 -r 3 --parallel 1 2>&1)
  a=$(grep -E '\| tg128 \|' <<<"$rows" | cut -d'|' -f7)
  b=$(grep -E '\| tg128 x1 seqs \|' <<<"$rows" | cut -d'|' -f7)
  echo "tg128 ${a:-?} | --parallel 1 ${b:-?}"
}
[ "${1:-}" = "--functions-only" ] && return 0
for spec in "${models[@]}"; do
  m=$(model "${spec%%:*}" "${spec##*:}")
  [ -f "$m" ] || { echo "$spec: could not make the model" | tee -a "$out/ab.log"; continue; }
  for round in $(seq "${ROUNDS:-2}"); do
    echo "$spec old: $(tg /tmp/ab/old/cera "$m")" | tee -a "$out/ab.log"
    echo "$spec new: $(tg cera "$m")" | tee -a "$out/ab.log"
  done
done
