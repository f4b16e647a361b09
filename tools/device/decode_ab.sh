#!/usr/bin/env bash
# (GPU machine) Tests, then the numbers the speed work is judged by, each next to its A/B switch
# (PDL off, the general quant matvec, 3xTF32 attention, 512-token prefill steps).
# Usage: decode_ab.sh OUT [test filter]   (after tools/device/pack.sh on the dev machine)
set -uo pipefail
out=${1:?out dir}; filter=${2:-*}
cd "$(dirname "$0")/../.."
eval "$(tools/device/setup.sh 2>/dev/null | tail -1)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
m=/tmp/synth; mkdir -p $m
( timeout 60 cera-synth --shape lfm2-1.2b --type bf16 -o $m/1.2b-BF16.gguf >/dev/null 2>&1
  timeout 30 cera quantize $m/1.2b-BF16.gguf $m/1.2b-Q4_0.gguf Q4_0 >/dev/null 2>&1; touch $m/ready
  for s in llama-3.2-1b qwen3-0.6b; do
    timeout 120 python3 .device/tools/random_model.py "$s" "/tmp/hf-$s" >/dev/null 2>&1 &&
      cera convert "/tmp/hf-$s" -o "$m/$s-BF16.gguf" --type bf16 >/dev/null 2>&1 &&
      cera quantize "$m/$s-BF16.gguf" "$m/$s-Q4_0.gguf" Q4_0 >/dev/null 2>&1; rm -rf "/tmp/hf-$s"
  done; touch $m/dense-ready ) &
(cd /tmp && timeout 240 test_backend_cuda --gtest_filter="$filter" >"$out/tests.log" 2>&1)
echo "tests rc=$?"
grep -hE "^\[  FAILED|Failure$|exception|Expected|actual|Which is" "$out/tests.log" | head -40
grep -hE "^\[  PASSED|tests ran" "$out/tests.log"
for i in $(seq 90); do [ -f $m/ready ] && break; sleep 1; done
bench() { timeout 120 cera bench --device cuda "$@" 2>&1 | grep -vE -- '^\| (---|model)' | tee -a "$out/bench.log"; }
for t in BF16 Q4_0; do bench -m $m/1.2b-$t.gguf -p 512,4096 -n 128 -r 3 --parallel 1,32,128; done
echo "## Q4_0 general matvec"; CERA_MATVEC_FAST=0 bench -m $m/1.2b-Q4_0.gguf -p 0 -n 128 -r 3
for t in BF16 Q4_0; do echo "## PDL off $t"; CERA_CUDA_PDL=0 bench -m $m/1.2b-$t.gguf -p 4096 -n 128 -r 3; done
for t in BF16 Q4_0; do echo "## -b 512 $t"; bench -m $m/1.2b-$t.gguf -p 4096 -n 0 -r 3 -b 512; done
echo "## tf32 attention BF16"; CERA_CUDA_ATTENTION=tf32 bench -m $m/1.2b-BF16.gguf -p 4096 -n 0 -r 3
for t in BF16 Q4_0; do
  echo "## profile: lfm2-1.2b $t, tg32 (decode)" | tee -a "$out/profile.log"
  CERA_CUDA_GRAPHS=0 CERA_CUDA_PROFILE=1 timeout 60 cera bench --device cuda -m $m/1.2b-$t.gguf -p 0 -n 32 -r 1 2>&1 |
    grep -vE '^\|' | tee -a "$out/profile.log"
done
echo "## profile: lfm2-1.2b BF16, pp4096" | tee -a "$out/profile.log"
CERA_CUDA_PROFILE=1 timeout 60 cera bench --device cuda -m $m/1.2b-BF16.gguf -p 4096 -n 0 -r 1 2>&1 |
  grep -vE '^\|' | tee -a "$out/profile.log"
for i in $(seq 90); do [ -f $m/dense-ready ] && break; sleep 1; done
for s in llama-3.2-1b qwen3-0.6b; do
  for t in BF16 Q4_0; do [ -f $m/$s-$t.gguf ] && bench -m $m/$s-$t.gguf -p 512 -n 128 -r 3; done
done
