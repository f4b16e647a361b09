#!/usr/bin/env bash
# (GPU machine) Decode speed of the LFM2-1.2B shape under each A/B switch of the CUDA backend, after
# the given tests. Usage: decode_matrix.sh OUT [test filter]
set -uo pipefail
out=${1:?out dir}; filter=${2:-*}
cd "$(dirname "$0")/../.."
eval "$(tools/device/setup.sh 2>/dev/null | tail -1)"
m=/tmp/synth; mkdir -p $m
( timeout 60 cera-synth --shape lfm2-1.2b --type bf16 -o $m/1.2b-BF16.gguf >/dev/null 2>&1
  timeout 30 cera quantize $m/1.2b-BF16.gguf $m/1.2b-Q4_0.gguf Q4_0 >/dev/null 2>&1; touch $m/ready ) &
(cd /tmp && timeout 200 test_backend_cuda --gtest_filter="$filter" >"$out/tests.log" 2>&1)
echo "tests rc=$?"
grep -hE "^\[  FAILED|Failure$|exception|Expected|actual|Which is" "$out/tests.log" | head -30
grep -hE "^\[  PASSED|tests ran" "$out/tests.log"
for i in $(seq 90); do [ -f $m/ready ] && break; sleep 1; done
for t in BF16 Q4_0; do
  for cfg in "" "CERA_CUDA_PDL=0" "CERA_CUDA_FUSE_NORM=1" "CERA_CUDA_FUSE=0" "CERA_CUDA_FUSE=0 CERA_CUDA_PDL=0" \
             "CERA_MATVEC_FAST=0" "CERA_MATVEC_FAST=0 CERA_CUDA_PDL=0"; do
    r=$(env $cfg timeout 60 cera bench --device cuda -m $m/1.2b-$t.gguf -p 0 -n 128 -r 3 2>&1 | grep tg128 | cut -d'|' -f7,8)
    echo "$t ${cfg:-default}: $r" | tee -a "$out/matrix.log"
  done
done
