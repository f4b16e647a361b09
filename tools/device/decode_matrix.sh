#!/usr/bin/env bash
# (GPU machine) Decode speed (tg128) under A/B switches of the CUDA backend, after the given tests.
# Usage: decode_matrix.sh OUT [test filter] [switch settings...]
#   e.g. decode_matrix.sh $OUT '*Fused*' "" "CERA_CUDA_FUSE_CONV=0" "CERA_CUDA_PDL=0"
# Models: the LFM2-1.2B shape (BF16, Q4_0) and, with DENSE=1, Qwen3-0.6B (BF16, Q4_0). Each setting
# runs twice, the settings alternating, so the spread between machine states shows in the table.
set -uo pipefail
out=${1:?out dir}; filter=${2:-*}; shift 2 || shift $#
cfgs=("$@"); [ ${#cfgs[@]} -eq 0 ] && cfgs=("" "CERA_CUDA_EARLY_WEIGHTS=0" "CERA_CUDA_FUSE_CONV=0"
  "CERA_CUDA_FUSE_ATTENTION=0" "CERA_CUDA_PDL=0" "CERA_CUDA_FUSE=0")
cd "$(dirname "$0")/../.."
eval "$(tools/device/setup.sh 2>/dev/null | tail -1)"
m=/tmp/synth; mkdir -p $m
models="$m/1.2b-BF16.gguf $m/1.2b-Q4_0.gguf"
( timeout 60 cera-synth --shape lfm2-1.2b --type bf16 -o $m/1.2b-BF16.gguf >/dev/null 2>&1
  timeout 30 cera quantize $m/1.2b-BF16.gguf $m/1.2b-Q4_0.gguf Q4_0 >/dev/null 2>&1
  if [ "${DENSE:-0}" = 1 ]; then
    timeout 120 python3 .device/tools/random_model.py qwen3-0.6b /tmp/hf-q3 >/dev/null 2>&1 &&
      cera convert /tmp/hf-q3 -o $m/qwen3-0.6b-BF16.gguf --type bf16 >/dev/null 2>&1 &&
      cera quantize $m/qwen3-0.6b-BF16.gguf $m/qwen3-0.6b-Q4_0.gguf Q4_0 >/dev/null 2>&1
  fi; touch $m/ready ) &
if [ "$filter" != "-" ]; then
  tools/device/run_tests.sh "$out" "$filter"
fi
for i in $(seq 150); do [ -f $m/ready ] && break; sleep 1; done
[ "${DENSE:-0}" = 1 ] && models="$models $m/qwen3-0.6b-BF16.gguf $m/qwen3-0.6b-Q4_0.gguf"
for f in $models; do
  [ -f "$f" ] || { echo "missing $f"; continue; }
  for round in 1 2; do
    for cfg in "${cfgs[@]}"; do
      r=$(env $cfg timeout 60 cera bench --device cuda -m "$f" -p 0 -n 128 -r 3 2>&1 | grep tg128 | cut -d'|' -f7,8)
      echo "$(basename "$f" .gguf) ${cfg:-default} (round $round): $r" | tee -a "$out/matrix.log"
    done
  done
done
