#!/usr/bin/env bash
# (GPU machine) Where a replayed decode step's time goes: tg128 of the LFM2-1.2B shape (BF16, Q4_0)
# with each category of ops launching nothing (CERA_CUDA_ABLATE, cuda_backend.cpp: the outputs are
# wrong, the timing is what the category costs inside the graph, PDL overlap included).
# Usage: ablate.sh OUT [model.gguf...]
set -uo pipefail
out=${1:?out dir}; shift
cd "$(dirname "$0")/../.."
eval "$(tools/device/setup.sh 2>/dev/null | tail -1)"
m=/tmp/synth; mkdir -p $m
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  timeout 60 cera-synth --shape lfm2-1.2b --type bf16 -o $m/1.2b-BF16.gguf >/dev/null 2>&1
  timeout 30 cera quantize $m/1.2b-BF16.gguf $m/1.2b-Q4_0.gguf Q4_0 >/dev/null 2>&1
  models=($m/1.2b-BF16.gguf $m/1.2b-Q4_0.gguf)
fi
cats=("" "attention" "matvec (+norm, short_conv);matvec (+short_conv)" "matvec (+residual)"
      "matvec (+norm, swiglu);matvec (+swiglu)" "matmul" "matvec (+norm)" "rms_norm" "embed;gather_output_rows"
      "attention;rms_norm;embed;gather_output_rows")
for f in "${models[@]}"; do
  for round in 1 2; do
    for c in "${cats[@]}"; do
      r=$(CERA_CUDA_ABLATE="$c" timeout 60 cera bench --device cuda -m "$f" -p 0 -n 128 -r 3 2>&1 | grep tg128 | cut -d'|' -f7)
      echo "$(basename "$f" .gguf) | ${c:-(nothing)} | round $round | $r" | tee -a "$out/ablate.log"
    done
  done
done
