#!/usr/bin/env bash
# (GPU machine) What the int8 hand-off still owes (pending/README.md), in one call of ~6-8 minutes:
# every CUDA test of an lfm2+dense-llama pack, then the hand-off's clean A/B (default against =0),
# the small shapes under =all, and the other goal rows, all on one machine start.
# Here: CERA_BUILD=build-device tools/device/pack.sh lfm2+dense-llama, then move models/default.gguf
# out of the tree for the call (59 MiB with it out; its own tests then fail with "cannot open") and
# back after. There: bash tools/device/owed_call.sh $OUT (carry .device).
set -uo pipefail
out=${1:?out dir}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv | tee "$out/gpu.txt"
eval "$(tools/device/setup.sh | tail -1)" >/dev/null
LIMIT=240 tools/device/run_tests.sh "$out"
ROUNDS=2 timeout 200 tools/device/sweep.sh "$out" lfm2-1.2b:Q4_0 llama-3.2-1b:Q4_0 -- - CERA_CUDA_INT8_HANDOFF=0
ROUNDS=2 timeout 150 tools/device/sweep.sh "$out" qwen3-0.6b:Q4_0 lfm2-350m:Q4_0 -- - CERA_CUDA_INT8_HANDOFF=all
ROUNDS=2 timeout 200 tools/device/sweep.sh "$out" lfm2-1.2b:BF16 llama-3.2-1b:BF16 lfm2-1.2b:Q8_0 lfm2-1.2b:Q4_K_M lfm2-350m:BF16 qwen3-0.6b:BF16 -- -
echo done
