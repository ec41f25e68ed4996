#!/bin/bash
# The H200 check of flip15 (issue 15): attention2_text and the deferred matmuls are now the rows form's
# default text (the words rows-attn2, rows-projh, rows-mlpk removed). First the rows form's GPU tests
# (RowsFormDefaultAndPlainTextsAgreeBitwise: the default against rows-plain, memcmp at nine shapes, with
# the shipped model's deferred count asserted, 8; RowsFormStageTraceCoversEveryStageAndChangesNoOutput:
# the default's trace without the last warp's stamp before a deferred proj; RowsFormMatchesEagerAndEveryProbe),
# then the default against rows-plain alternated 3 rounds (`minigpt compile --device cuda --graph gpt
# --explain`), medians, and round 1's default stage trace. Expect the default's kernel near the merged
# words' figure (gpu_comb15) and every test OK. Builds nothing (the lead builds minigpt and
# compile_cuda_test first); ~80 s. Writes $OUT/flip15/tests.log, bench.log and trace_default.txt.
set -uo pipefail
O=${OUT:?set OUT}/flip15; mkdir -p "$O"
M=build/cuda/minigpt
TEST=build/cuda/tests/compile_cuda_test
{
  echo "=== compile_cuda_test CompileCuda.RowsForm* (the default text)"
  timeout 60 "$TEST" --gtest_filter='CompileCuda.RowsForm*' 2>&1 | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|actual|Which is|probe|deferred|rows form"; echo "rc=${PIPESTATUS[0]}"
} > "$O/tests.log" 2>&1
cache=$(mktemp -d); tmp=$(mktemp)
run() {  # $1 label, $2 words, $3 round
  echo "=== $1.$3 (MINIGPT_CUDA_VARIANT=\"$2\")" >> "$O/bench.log"
  MINIGPT_CACHE_DIR=$cache MINIGPT_CUDA_VARIANT="$2" timeout 20 "$M" compile --device cuda --graph gpt --explain --mode default > "$tmp" 2>&1
  echo "rc=$?" >> "$O/bench.log"
  grep -E "^\| cuda_rows_forward|whole forward as one CUDA graph|rows form|rror" "$tmp" | sed -E 's/^\| cuda_rows_forward \|[^|]*\|/| cuda_rows_forward | (ops) |/' >> "$O/bench.log"
  [ "$3" = 1 ] && [ "$1" = default ] && { grep -E "^\| (start|stage)|^TRACE" "$tmp" > "$O/trace_default.txt"; }
}
for r in 1 2 3; do run default "" $r; run plain rows-plain $r; done
{
  echo "=== medians (us): kernel | replay alone | per replay in 100 back to back"
  for v in default plain; do
    blk=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log")
    k=$(echo "$blk" | grep -E "^\| cuda_rows_forward" | awk -F'|' '{gsub(/ /, "", $(NF-2)); print $(NF-2)}')
    a=$(echo "$blk" | grep -oE "[0-9.]+ us per replay alone" | awk '{print $1}')
    b=$(echo "$blk" | grep -oE "[0-9.]+ us per replay in 100" | awk '{print $1}')
    med() { echo "$1" | grep -E '^[0-9.]+$' | sort -n | awk '{x[NR] = $1} END {if (NR) printf "%s (of %d:", x[int((NR + 1) / 2)], NR; else printf "- (none"; for (i = 1; i <= NR; ++i) printf " %s", x[i]; printf ")"}'; }
    echo "$v: kernel $(med "$k") | alone $(med "$a") | back to back $(med "$b")"
  done
  grep "^TRACE" "$O/trace_default.txt" 2>/dev/null
} >> "$O/bench.log"
rm -rf "$cache" "$tmp"
