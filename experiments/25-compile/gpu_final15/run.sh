#!/bin/bash
# The lead's last H200 call of the session (issue 15), after scripts/gpu-check.sh in the same call: the
# rows form's default text (now with attention2_text and the deferred matmuls) against rows-plain (the
# A/B baseline), rows-ln2, rows-qkv2 and both (each bitwise the default, by the GPU tests gpu-check's
# ctest ran), alternated 3 rounds (`minigpt compile --device cuda --graph gpt --explain`), medians; the
# default's stage trace of round 1. Builds nothing; ~60 s. Writes $OUT/final15/bench.log, trace_default.txt.
set -uo pipefail
O=${OUT:?set OUT}/final15; mkdir -p "$O"
M=build/cuda/minigpt
TEST=build/cuda/tests/compile_cuda_test
cache=$(mktemp -d); tmp=$(mktemp)
run() {  # $1 label, $2 words, $3 round
  echo "=== $1.$3 (MINIGPT_CUDA_VARIANT=\"$2\")" >> "$O/bench.log"
  MINIGPT_CACHE_DIR=$cache MINIGPT_CUDA_VARIANT="$2" timeout 20 "$M" compile --device cuda --graph gpt --explain --mode default > "$tmp" 2>&1
  echo "rc=$?" >> "$O/bench.log"
  grep -E "^\| cuda_rows_forward|whole forward as one CUDA graph|rror" "$tmp" | sed -E 's/^\| cuda_rows_forward \|[^|]*\|/| cuda_rows_forward | (ops) |/' >> "$O/bench.log"
  [ "$3" = 1 ] && [ "$1" = default ] && { grep -E "^\| (start|stage)|^TRACE" "$tmp" > "$O/trace_default.txt"; }
}
for r in 1 2 3; do run default "" $r; run plain rows-plain $r; run ln2 rows-ln2 $r; run qkv2 rows-qkv2 $r; run both "rows-ln2 rows-qkv2" $r; done
{
  echo "=== medians (us): kernel | replay alone | per replay in 100 back to back"
  for v in default plain ln2 qkv2 both; do
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
