#!/usr/bin/env bash
# Packs what a GPU-machine run needs into .device/ (see README.md).
# Usage: tools/device/pack.sh [lfm2|dense|dense-llama|dense-qwen2|none]  (parts join with '+':
#   lfm2+dense-llama packs both, ~50 MiB with the tracked tree and the three binaries)
set -euo pipefail
cd "$(dirname "$0")/../.."
part=${1:-lfm2}
fx=${CERA_FIXTURES:-../shared/fixtures}
rm -rf .device && mkdir -p .device/bin .device/lib .device/fixtures/models .device/tools
bd=${CERA_BUILD:-build}  # the build folder to take the binaries from
# The GPU machine runs the sm_90a code only; a build that also embeds the portable compute_80 PTX
# (the default, CI's) packs each binary at ~14 MB compressed instead of ~6.4 (README.md).
if grep -q '^CERA_CUDA_GENCODE:.*code=compute_' "$bd/CMakeCache.txt" 2>/dev/null; then
  echo "note: $bd embeds PTX beside sm_90a; binaries of a device build pack ~2x smaller:" >&2
  echo "  cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DCERA_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a" >&2
fi
# CERA_PACK_BINS: which of the build's binaries travel (a bench-only call can leave the ~10 MB test
# binary behind; bench/cera_bench_cuda_matvec can be added).
for b in ${CERA_PACK_BINS:-cera cera-synth tests/test_backend_cuda}; do
  strip -o ".device/bin/$(basename "$b")" "$bd/$b"
  xz -T2 -6 ".device/bin/$(basename "$b")"
done
# CERA_PACK_OLD=path/to/cera: an older build for ab.sh to compare against (.device/old/cera.xz).
if [ -n "${CERA_PACK_OLD:-}" ]; then
  mkdir -p .device/old
  strip -o .device/old/cera "$CERA_PACK_OLD"
  xz -T2 -6 .device/old/cera
fi
cp -L /lib/x86_64-linux-gnu/libpcre2-8.so.0 /lib/x86_64-linux-gnu/libutf8proc.so.2 .device/lib/
cp ../shared/tools/device/*.py .device/tools/
for part in ${part//+/ }; do
case "$part" in
  lfm2)
    mkdir -p .device/fixtures/models/lfm2-tiny
    cp -r "$fx/models/lfm2-tiny/ref" "$fx/models/lfm2-tiny/hf" .device/fixtures/models/lfm2-tiny/
    # CERA_DROP_REFS="F16 Q5_1 ...": leave those llama.cpp reference logits behind (1 MB each), for
    # when the binaries grow past what fits; their parity tests must then be filtered out.
    exclude=""
    for t in ${CERA_DROP_REFS:-}; do
      rm -f ".device/fixtures/models/lfm2-tiny/ref/llamacpp-$t.safetensors"
      exclude="$exclude:*FixtureParity*lfm2_tiny_$t"
    done
    [ -n "$exclude" ] && echo "refs left behind; add to the test filter's exclusions: $exclude" ;;
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
      # xz: ~30 % smaller (setup.sh unpacks it): with the binaries of 4076897 the dense-llama pack
      # then fits beside the tracked tree's models/default.gguf once its ref/*.safetensors are
      # deleted (CudaGraphs.*, the default model's tests), or with them when default.gguf is moved
      # aside for the call (the llama-tiny / qwen3-tiny parity tests).
      xz -T2 -6 -c "$fx/models/$m/gguf/$m-BF16.gguf" > ".device/fixtures/models/$m/gguf/$m-BF16.gguf.xz"
    done ;;
  none) ;;
  *) echo "pack.sh: unknown part '$part' (lfm2, dense, dense-llama, dense-qwen2, none)" >&2; exit 2 ;;
esac
done
chmod -R u+w .device
du -sh .device
# A device call carries the tracked tree too, 64 MiB in all.
# (|| true: with models/default.gguf moved aside for the call, du fails on it and counts the rest.)
tree=$( (git ls-files -z | xargs -0 du -cb 2>/dev/null || true) | tail -1 | cut -f1)
total=$(( $(du -sb .device | cut -f1) + tree ))
echo "with the tracked tree: $((total >> 20)) MiB of the 64 a device call carries"
# A pack measured at 63 MiB here was refused there: keep a margin.
if [ "$total" -gt $((62 << 20)) ]; then
  echo "warning: that is too close to 64 MiB; see CERA_DROP_REFS in tools/device/README.md" >&2
fi
