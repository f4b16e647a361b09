#!/usr/bin/env bash
# (GPU machine) The whole CUDA check in one call: tests, then benchmarks and a decode profile.
# Usage (from the repo root, after tools/device/pack.sh on the dev machine):
#   tools/device/cuda_suite.sh OUT_DIR [TEST_FILTER]
# Writes ops/model test logs, bench.log and profile.log into OUT_DIR and prints a summary.
set -uo pipefail
out=${1:?out dir}; filter=${2:-*}
cd "$(dirname "$0")/../.."
eval "$(tools/device/setup.sh 2>/dev/null | tail -1)"
repo=$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader

# Dense real shapes in the background (random_model.py + cera convert), while the tests run.
( for s in llama-3.2-1b qwen3-0.6b; do
    timeout 120 python3 .device/tools/random_model.py "$s" "/tmp/hf-$s" >/dev/null 2>&1 &&
      cera convert "/tmp/hf-$s" -o "/tmp/$s-BF16.gguf" --type bf16 >/dev/null 2>&1 &&
      cera quantize "/tmp/$s-BF16.gguf" "/tmp/$s-Q4_0.gguf" Q4_0 >/dev/null 2>&1 && rm -rf "/tmp/hf-$s"
  done; touch /tmp/dense-ready ) &

tools/device/run_tests.sh "$out" "$filter"
grep -h "cuda " "$out/tests.log" | grep -E "decode_batch" | head

m=/tmp/synth; mkdir -p $m
timeout 60 cera-synth --shape lfm2-1.2b --type bf16 -o $m/1.2b-BF16.gguf >/dev/null 2>&1
timeout 30 cera-synth --shape lfm2-350m --type bf16 -o $m/350m-BF16.gguf >/dev/null 2>&1
for t in Q4_0 Q8_0 Q4_K_M; do timeout 60 cera quantize $m/1.2b-BF16.gguf $m/1.2b-$t.gguf $t >/dev/null 2>&1; done
timeout 30 cera quantize $m/350m-BF16.gguf $m/350m-Q4_0.gguf Q4_0 >/dev/null 2>&1
bench() { timeout 150 cera bench --device cuda "$@" 2>&1 | grep -vE -- '^\| (---|model)' | tee -a "$out/bench.log"; }
# Prefill steps are the GPU default (4096 tokens); "-b 512" rows match llama.cpp's ubatch.
for t in BF16 Q4_0; do bench -m $m/1.2b-$t.gguf -p 512,4096 -n 128 -r 3 --parallel 1,8,32,64,128; done
for t in Q8_0 Q4_K_M; do bench -m $m/1.2b-$t.gguf -p 512,4096 -n 128 -r 3; done
# After a 4,096-token context (llama-bench's -d): long-context prefill and decode.
for t in BF16 Q4_0; do bench -m $m/1.2b-$t.gguf -p 512 -n 128 -d 4096 -r 3; done
for t in BF16 Q4_0; do echo "## -b 512" | tee -a "$out/bench.log"; bench -m $m/1.2b-$t.gguf -p 4096 -n 0 -r 3 -b 512; done
for t in BF16 Q4_0; do bench -m $m/350m-$t.gguf -p 4096 -n 128 -r 3; done
# Where a decode step's time goes (eager launches behind a GPU hold, see cuda_backend.cpp).
for t in BF16 Q4_0; do
  echo "## profile: lfm2-1.2b $t, tg32 (decode)" | tee -a "$out/profile.log"
  CERA_CUDA_GRAPHS=0 CERA_CUDA_PROFILE=1 timeout 60 cera bench --device cuda -m $m/1.2b-$t.gguf -p 0 -n 32 -r 1 2>&1 |
    grep -vE '^\|' | tee -a "$out/profile.log"
done
echo "## profile: lfm2-1.2b BF16, pp4096" | tee -a "$out/profile.log"
CERA_CUDA_PROFILE=1 timeout 60 cera bench --device cuda -m $m/1.2b-BF16.gguf -p 4096 -n 0 -r 1 2>&1 |
  grep -vE '^\|' | tee -a "$out/profile.log"
for i in $(seq 60); do [ -f /tmp/dense-ready ] && break; sleep 1; done
for s in llama-3.2-1b qwen3-0.6b; do
  for t in BF16 Q4_0; do [ -f /tmp/$s-$t.gguf ] && bench -m /tmp/$s-$t.gguf -p 512 -n 128 -d 0,4096 -r 3; done
done
