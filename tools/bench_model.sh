#!/usr/bin/env bash
# From a Hugging Face folder to benchmarkable GGUFs, with cera's own tools:
#   tools/bench_model.sh HF_DIR OUT_PREFIX [TYPES...]      (TYPES default: BF16 Q8_0 Q4_0 Q4_K_M)
# e.g. on the GPU machine: python3 ../shared/tools/device/random_model.py lfm2-1.2b /tmp/lfm2-1.2b
#      then: tools/bench_model.sh /tmp/lfm2-1.2b /tmp/lfm2-1.2b   -> /tmp/lfm2-1.2b-Q4_0.gguf, ...
set -euo pipefail
cera="${CERA:-$(dirname "$0")/../build/cera}"
[ $# -ge 2 ] || { echo "usage: $0 HF_DIR OUT_PREFIX [TYPES...]" >&2; exit 2; }
hf="$1" out="$2"; shift 2
types=("$@"); [ ${#types[@]} -gt 0 ] || types=(BF16 Q8_0 Q4_0 Q4_K_M)
"$cera" convert "$hf" -o "$out-BF16.gguf" --type bf16
for t in "${types[@]}"; do
  [ "$t" = BF16 ] && continue
  "$cera" quantize "$out-BF16.gguf" "$out-$t.gguf" "$t"
done
ls -l "$out"-*.gguf
