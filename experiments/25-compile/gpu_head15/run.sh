#!/bin/bash
# head15 (issue 15): the rows form's default text against rows-headw (the head, lm_head + the fused
# softmax, not prewaited: each thread waits for its own chains' pieces right before each chain, a warp's
# two chains run one after the other; codegen_cuda_rows.h's generate_rows), bitwise the default by the
# GPU test RowsFormDefaultAndHeadwTextsAgreeBitwise (run first), then `minigpt compile --device cuda
# --graph gpt --explain` alternated 3 rounds, medians, and the head stage's trace interval ("stage 30:
# matmul softmax -> logits, probs") of each round. Builds nothing (the lead builds minigpt and the test
# binaries); ~50 s. Writes $OUT/head15/tests.log and bench.log.
set -uo pipefail
O=${OUT:?set OUT}/head15; mkdir -p "$O"
M=build/cuda/minigpt
TEST=build/cuda/tests/compile_cuda_test
cache=$(mktemp -d); tmp=$(mktemp)
timeout 40 "$TEST" --gtest_filter='CompileCuda.RowsFormDefaultAndHeadwTextsAgreeBitwise' > "$O/tests.log" 2>&1
echo "rc=$?" >> "$O/tests.log"
run() {  # $1 label, $2 words, $3 round
  echo "=== $1.$3 (MINIGPT_CUDA_VARIANT=\"$2\")" >> "$O/bench.log"
  MINIGPT_CACHE_DIR=$cache MINIGPT_CUDA_VARIANT="$2" timeout 20 "$M" compile --device cuda --graph gpt --explain --mode default > "$tmp" 2>&1
  echo "rc=$?" >> "$O/bench.log"
  grep -E "^\| cuda_rows_forward|whole forward as one CUDA graph|rror|rows form" "$tmp" | sed -E 's/^\| cuda_rows_forward \|[^|]*\|/| cuda_rows_forward | (ops) |/' >> "$O/bench.log"
  grep -E "^\| stage (2[6-9]|3[01]):|^TRACE" "$tmp" | sed "s/^/[$1.$3] /" >> "$O/bench.log"
}
for r in 1 2 3; do run default "" $r; run headw rows-headw $r; done
{
  echo "=== medians (us): kernel | replay alone | per replay in 100 back to back; head stage (cycles)"
  for v in default headw; do
    blk=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log")
    k=$(echo "$blk" | grep -E "^\| cuda_rows_forward" | awk -F'|' '{gsub(/ /, "", $(NF-2)); print $(NF-2)}')
    a=$(echo "$blk" | grep -oE "[0-9.]+ us per replay alone" | awk '{print $1}')
    b=$(echo "$blk" | grep -oE "[0-9.]+ us per replay in 100" | awk '{print $1}')
    h=$(echo "$blk" | grep -E "\| stage [0-9]+: matmul softmax" | awk -F'|' '{gsub(/ /, "", $3); print $3}')
    med() { echo "$1" | grep -E '^[0-9.]+$' | sort -n | awk '{x[NR] = $1} END {if (NR) printf "%s (of %d:", x[int((NR + 1) / 2)], NR; else printf "- (none"; for (i = 1; i <= NR; ++i) printf " %s", x[i]; printf ")"}'; }
    echo "$v: kernel $(med "$k") | alone $(med "$a") | back to back $(med "$b") | head stage $(med "$h")"
  done
} >> "$O/bench.log"
rm -rf "$cache" "$tmp"
