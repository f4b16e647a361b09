#!/usr/bin/env bash
# (GPU machine) Unpacks the binaries and rebuilds the fixture GGUFs; prints the exports to eval.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p /tmp/cera
for f in .device/bin/*.xz; do xz -dc "$f" > "/tmp/cera/$(basename "$f" .xz)"; done
chmod +x /tmp/cera/*
export LD_LIBRARY_PATH="$PWD/.device/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
CERA=/tmp/cera/cera
rm -rf /tmp/fixtures && cp -r .device/fixtures /tmp/fixtures
shopt -s nullglob  # a pack without fixtures (pack.sh none) has nothing to rebuild
for f in /tmp/fixtures/models/*/gguf/*.gguf.xz; do xz -d "$f"; done  # pack.sh compresses the dense ones
for dir in /tmp/fixtures/models/*; do
  m=$(basename "$dir")
  mkdir -p "$dir/gguf"
  if [ -d "$dir/hf" ]; then
    for t in bf16 f16; do "$CERA" convert "$dir/hf" -o "$dir/gguf/$m-${t^^}.gguf" --type $t >/dev/null; done
    types="Q8_0 Q6_K Q5_K_M Q5_0 Q5_1 Q4_K_M Q4_0 Q4_1 Q3_K_M Q2_K"
  else
    types="Q8_0 Q4_K_M"
  fi
  for t in $types; do "$CERA" quantize "$dir/gguf/$m-BF16.gguf" "$dir/gguf/$m-$t.gguf" $t >/dev/null; done
done
echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH CERA_FIXTURES=/tmp/fixtures PATH=/tmp/cera:\$PATH"
