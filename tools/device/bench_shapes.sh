#!/usr/bin/env bash
# (GPU machine, after setup.sh) bench_shapes.sh SHAPE "TYPES" "BENCH FLAGS": random weights of a real
# shape, converted and quantized by cera, then `cera bench --device cuda` per type.
set -euo pipefail
cd "$(dirname "$0")/../.."
shape=$1; types=$2; shift 2
dir=/tmp/models/$shape
if [ ! -f "$dir/BF16.gguf" ]; then
  mkdir -p "$dir"
  python3 .device/tools/random_model.py "$shape" "$dir/hf" >/dev/null 2>&1
  cera convert "$dir/hf" -o "$dir/BF16.gguf" --type bf16 >/dev/null
  rm -rf "$dir/hf"
fi
for t in $types; do
  [ "$t" = BF16 ] || [ -f "$dir/$t.gguf" ] || cera quantize "$dir/BF16.gguf" "$dir/$t.gguf" "$t" >/dev/null
  echo "## $shape $t"
  cera bench -m "$dir/$t.gguf" --device cuda "$@"
done
