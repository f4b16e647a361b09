#!/usr/bin/env bash
# Packs what a GPU-machine run needs into .device/ (see README.md).
# Usage: tools/device/pack.sh [lfm2|dense|dense-llama|dense-qwen2|none]
set -euo pipefail
cd "$(dirname "$0")/../.."
part=${1:-lfm2}
fx=${CERA_FIXTURES:-../shared/fixtures}
rm -rf .device && mkdir -p .device/bin .device/lib .device/fixtures/models .device/tools
bd=${CERA_BUILD:-build}  # the build folder to take the binaries from
for b in $bd/cera $bd/cera-synth $bd/tests/test_backend_cuda; do
  strip -o ".device/bin/$(basename "$b")" "$b"
  xz -T2 -6 ".device/bin/$(basename "$b")"
done
cp -L /lib/x86_64-linux-gnu/libpcre2-8.so.0 /lib/x86_64-linux-gnu/libutf8proc.so.2 .device/lib/
cp ../shared/tools/device/*.py .device/tools/
case "$part" in
  lfm2)
    mkdir -p .device/fixtures/models/lfm2-tiny
    cp -r "$fx/models/lfm2-tiny/ref" "$fx/models/lfm2-tiny/hf" .device/fixtures/models/lfm2-tiny/ ;;
  dense|dense-llama|dense-qwen2)
    # The three dense fixtures and the binaries together pass the 64 MiB a device call carries
    # once the test binary is ~6 MB compressed: dense-llama (llama + qwen3) and dense-qwen2 halve it.
    case "$part" in
      dense) models="llama-tiny qwen2-tiny qwen3-tiny" ;;
      dense-llama) models="llama-tiny qwen3-tiny" ;;
      dense-qwen2) models="qwen2-tiny" ;;
    esac
    for m in $models; do
      mkdir -p ".device/fixtures/models/$m/gguf"
      cp -r "$fx/models/$m/ref" ".device/fixtures/models/$m/"
      cp "$fx/models/$m/gguf/$m-BF16.gguf" ".device/fixtures/models/$m/gguf/"
    done ;;
  none) ;;
esac
chmod -R u+w .device
du -sh .device
