#!/usr/bin/env bash
# (GPU machine, after setup.sh's exports) The CUDA test binary as SHARDS (4) gtest shards at once,
# their logs one after another in OUT/tests.log, then a summary. The CPU references are what take
# the time and the GPU machine has 16 cores: the lfm2 pack's 326 tests took 41 s this way, more
# than 150 s as one process (H100, 2026-12-07).
# Usage: run_tests.sh OUT [GTEST_FILTER]   (LIMIT: seconds per shard, default 300)
set -uo pipefail
out=$(cd "${1:?out dir}" && pwd); filter=${2:-*}  # absolute: the shards run from /tmp
shards=${SHARDS:-4}
start=$(date +%s)
(
  cd /tmp
  for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "${LIMIT:-300}" test_backend_cuda \
      --gtest_filter="$filter" >"$out/tests.$i.log" 2>&1 &
  done
  rc=0
  for job in $(jobs -p); do wait "$job" || rc=1; done
  exit $rc
)
rc=$?
for ((i = 0; i < shards; ++i)); do cat "$out/tests.$i.log"; rm -f "$out/tests.$i.log"; done >"$out/tests.log"
echo "tests rc=$rc ($(( $(date +%s) - start )) s, $shards shards)"
echo "passed: $(grep -c '^\[       OK' "$out/tests.log"), failed: $(grep -cE '^\[  FAILED  \] [A-Za-z].*\([0-9]+ ms\)$' "$out/tests.log")"
grep -hE "^\[  FAILED  \] [A-Za-z].*\([0-9]+ ms\)$|Failure$|exception|margin|Expected|actual|Which is" "$out/tests.log" | head -30
exit $rc
