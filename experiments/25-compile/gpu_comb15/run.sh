#!/bin/bash
# The lead's H200 call after merging att15 and fuse15 (issue 15): the rows form's default text against
# rows-attn2 and against rows-attn2 + rows-projh + rows-mlpk (all three bitwise the default's values),
# alternated 3 rounds (`minigpt compile --device cuda --graph gpt --explain`), medians; the combined
# words' stage trace; then the rows form's GPU tests under the combined words (RowsFormDefaultAndPlain-
# TextsAgreeBitwise compares them with rows-plain: 0 expected). Builds nothing (the lead builds minigpt
# and compile_cuda_test first); ~90 s. Writes $OUT/comb15/bench.log and tests.log.
set -uo pipefail
O=${OUT:?set OUT}/comb15; mkdir -p "$O"
M=build/cuda/minigpt
TEST=build/cuda/tests/compile_cuda_test
cache=$(mktemp -d); tmp=$(mktemp)
ALL="rows-attn2 rows-projh rows-mlpk"
run() {  # $1 label, $2 words, $3 round
  echo "=== $1.$3 (MINIGPT_CUDA_VARIANT=\"$2\")" >> "$O/bench.log"
  MINIGPT_CACHE_DIR=$cache MINIGPT_CUDA_VARIANT="$2" timeout 20 "$M" compile --device cuda --graph gpt --explain --mode default > "$tmp" 2>&1
  echo "rc=$?" >> "$O/bench.log"
  grep -E "^\| cuda_rows_forward|whole forward as one CUDA graph|rror" "$tmp" | sed -E 's/^\| cuda_rows_forward \|[^|]*\|/| cuda_rows_forward | (ops) |/' >> "$O/bench.log"
  [ "$3" = 1 ] && [ "$1" = all ] && { grep -E "^\| (start|stage)|^TRACE" "$tmp" > "$O/trace_all.txt"; }
}
for r in 1 2 3; do run default "" $r; run attn2 rows-attn2 $r; run all "$ALL" $r; done
{
  echo "=== medians (us): kernel | replay alone | per replay in 100 back to back"
  for v in default attn2 all; do
    blk=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log")
    k=$(echo "$blk" | grep -E "^\| cuda_rows_forward" | awk -F'|' '{gsub(/ /, "", $(NF-2)); print $(NF-2)}')
    a=$(echo "$blk" | grep -oE "[0-9.]+ us per replay alone" | awk '{print $1}')
    b=$(echo "$blk" | grep -oE "[0-9.]+ us per replay in 100" | awk '{print $1}')
    med() { echo "$1" | grep -E '^[0-9.]+$' | sort -n | awk '{x[NR] = $1} END {if (NR) printf "%s (of %d:", x[int((NR + 1) / 2)], NR; else printf "- (none"; for (i = 1; i <= NR; ++i) printf " %s", x[i]; printf ")"}'; }
    echo "$v: kernel $(med "$k") | alone $(med "$a") | back to back $(med "$b")"
  done
  grep "^TRACE" "$O/trace_all.txt" 2>/dev/null
} >> "$O/bench.log"
rm -rf "$cache" "$tmp"
{
  echo "=== compile_cuda_test RowsForm* under MINIGPT_CUDA_VARIANT=\"rows $ALL\""
  MINIGPT_CUDA_VARIANT="rows $ALL" timeout 60 "$TEST" --gtest_filter='CompileCuda.RowsForm*' 2>&1 | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|actual|Which is|probe|plain|rows form"; echo "rc=${PIPESTATUS[0]}"
} > "$O/tests.log" 2>&1
