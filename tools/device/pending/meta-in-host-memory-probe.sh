#!/usr/bin/env bash
# (GPU machine) The run for meta-in-host-memory.patch (README.md here): greedy text with the step
# metadata read from host memory against copied (must be identical), the host's time in append()
# per tg128 token, then tg128 / `--parallel 1` / `--parallel 1 --parallel-prompt 1` under
# CERA_EXP_META_HOST=0 and 1, alternating. With the patch applied and built:
#   CERA_BUILD=build-mine CERA_PACK_BINS="cera cera-synth" tools/device/pack.sh none   # 40 MiB
#   cp tools/device/pending/meta-in-host-memory-probe.sh .device/probe.sh
# then run `bash .device/probe.sh` with carry [".device"] (about 4-5 minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tools/device/setup.sh 2>/dev/null | tail -1)"
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
source tools/device/ab.sh --functions-only
specs="llama-3.2-1b:BF16 lfm2-1.2b:Q4_0 qwen3-0.6b:BF16"
# correctness: greedy text identical with the metadata read from host memory
for spec in default llama-3.2-1b:BF16 lfm2-1.2b:Q4_0; do
  if [ $spec = default ]; then m=models/default.gguf; else m=$(model "${spec%%:*}" "${spec##*:}"); fi
  [ -f "$m" ] || { echo "$spec: no model" | tee -a $OUT/ab.log; continue; }
  for v in 0 1; do CERA_EXP_META_HOST=$v timeout 60 cera run --device cuda -m "$m" -p "The capital of France is" -n 48 --temp 0 --ignore-eos > $OUT/run_${spec%%:*}_${spec##*:}_$v.txt 2>/dev/null; done
  cmp -s $OUT/run_${spec%%:*}_${spec##*:}_0.txt $OUT/run_${spec%%:*}_${spec##*:}_1.txt && r=same || r=DIFFERENT
  echo "$spec greedy: $r ($(wc -c < $OUT/run_${spec%%:*}_${spec##*:}_0.txt) bytes)" | tee -a $OUT/ab.log
done
for spec in llama-3.2-1b:BF16 lfm2-1.2b:Q4_0; do
  m=$(model "${spec%%:*}" "${spec##*:}"); [ -f "$m" ] || continue
  for v in 0 1; do echo "$spec META_HOST=$v host: $(CERA_EXP_META_HOST=$v CERA_EXP_HOST_TIMING=1 timeout 60 cera bench --device cuda -m "$m" -p 0 -n 128 -r 3 2>&1 | grep EXP | tail -3 | tr '\n' ' ')" | tee -a $OUT/ab.log; done
done
p1() { local rows; rows=$(timeout 120 "$1" bench --device cuda -m "$2" -p 0 -n 128 -r 3 --parallel 1 --parallel-prompt 1 2>&1); echo "pp1 --parallel 1 $(grep -E '\| tg128 x1 seqs \|' <<<"$rows" | cut -d'|' -f7)"; }
for r in 1 2; do
  for spec in $specs; do
    [ $r = 2 ] && [ $spec = qwen3-0.6b:BF16 ] && continue
    m=$(model "${spec%%:*}" "${spec##*:}"); [ -f "$m" ] || continue
    for v in 0 1; do
      echo "r$r $spec META_HOST=$v: $(CERA_EXP_META_HOST=$v tg cera "$m") | $(CERA_EXP_META_HOST=$v p1 cera "$m")" | tee -a $OUT/ab.log
    done
  done
done
echo done
