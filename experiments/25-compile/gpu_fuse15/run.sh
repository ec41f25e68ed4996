#!/bin/bash
# fuse15's part of the lead's H200 call (issue 15): the rows form's deferred matmuls, two stages and
# two CTA barriers fewer per layer, bitwise the default text (codegen_cuda_rows.h's generate_rows
# fuse; MINIGPT_CUDA_VARIANT words):
#   rows-projh  proj by heads: the attention warp of head h, once its att columns are stored, computes
#               proj's k-slice h (16 FMAs in k order) for all 64 outputs; ln2 adds the 4 partials in
#               slice order, + bias, + residual (proj's epilogue), stores mid, then its statistics
#   rows-mlpk   fc2 by slices in fc1's stage: warps 2s, 2s+1 (fc1's h[64s..64s+63]) meet at named
#               barrier 1+s and compute fc2's k-slice s (64 FMAs) for the 64 outputs; the next ln1 / ln_f
#               forms x from the partials as fc2's epilogue did
# Run from the repository root AFTER the lead's build (`cmake --preset cuda && cmake --build
# build/cuda --target minigpt compile_cuda_test`); builds nothing, <= ~90 s (every step time-boxed; a
# step starting too late is skipped and says so). Writes $OUT/fuse15/:
#   tests.log   (1) compile_cuda_test RowsFormDeferredMatmulsAgreeBitwiseWithTheDefault (no variant
#               word: each of rows-projh, rows-mlpk, both against the default text at (2,16), (3,5),
#               (1,1) of the shipped model, the tiny model, V 300 / 660, d_model 96 / 32: memcmp of the
#               logits and probs must be 0; "N deferred matmuls" per case: 4 / 4 / 8 at d_model 64,
#               2 for projh at the tiny model, 0 at d_model 96 and d_model 32 V 1100 (stages kept)),
#               then RowsFormMatchesEagerAndEveryProbe, RowsFormDefaultAndPlainTextsAgreeBitwise and
#               RowsFormStageTrace* with MINIGPT_CUDA_VARIANT="rows rows-projh rows-mlpk" (both words
#               vs the CPU: probes < 1e-5, same top-1, 200 replays bitwise; vs rows-plain: 0
#               difference; the traced text's launches change no output)
#   bench.log   (2) `minigpt compile --device cuda --graph gpt --explain --mode default`: default,
#               rows-projh, rows-mlpk and both alternated, 3 rounds, one NVRTC cache: per run the
#               variant line, the kernel's row, the whole-forward line; round 1's stage trace table
#               of each (the deferred stages show as "(deferred: in stages s-1 and s+1)", ~0 cycles;
#               compare the attention and fc1 stages (now carrying the partials) and ln2 / ln1 (now
#               the epilogue) against the default's); then the medians of the kernel, the replay
#               alone and per replay in 100 back to back (default last measured 18.1 us kernel, 20.64
#               per call)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:?set OUT}/fuse15; mkdir -p "$O"
T0=$(date +%s)
M=build/cuda/minigpt
TEST=build/cuda/tests/compile_cuda_test
el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "${1:-20}" ]; }
left() { local l=$(( $1 - $(el) )); echo $(( l > 1 ? l : 1 )); }  # seconds until $1 s after the start (>= 1)
for f in "$M" "$TEST"; do [ -x "$f" ] || echo "missing $f (build first)" | tee -a "$O/tests.log" "$O/bench.log"; done
FILTER='^\[ *(RUN|OK|FAILED|PASSED|SKIPPED) |Failure|Expected|expected|actual|Which is|vs CPU|probe|variant|rows|Skipped|skip'

# (1) the bitwise tests
{
  echo "=== [$(el)s] compile_cuda_test RowsFormDeferred*, no MINIGPT_CUDA_VARIANT (git $(git rev-parse --short HEAD 2>/dev/null))"
  timeout $(left 32) "$TEST" --gtest_filter='CompileCuda.RowsFormDeferred*' 2>&1 | grep -E "$FILTER"
  echo "rc=${PIPESTATUS[0]} (124: cut at 32 s)"
  if late 36; then echo "=== skipped the MINIGPT_CUDA_VARIANT run at $(el)s (time)"; else
    echo "=== [$(el)s] compile_cuda_test RowsFormMatches*, RowsFormDefaultAndPlain*, MINIGPT_CUDA_VARIANT=\"rows rows-projh rows-mlpk\""
    MINIGPT_CUDA_VARIANT="rows rows-projh rows-mlpk" timeout $(left 44) "$TEST" \
      --gtest_filter='CompileCuda.RowsFormMatches*:CompileCuda.RowsFormDefaultAndPlain*:CompileCuda.RowsFormStageTrace*' 2>&1 | grep -E "$FILTER"
    echo "rc=${PIPESTATUS[0]} (124: cut at 44 s)"
  fi
  echo "=== tests done at $(el)s"
} > "$O/tests.log" 2>&1

# (2) the timings, alternated; round 1's stage trace table of each
cache=$(mktemp -d); tmp=$(mktemp)
explain() {  # $1 label, $2 variant words, $3 round
  late 82 && { echo "=== $1.$3 skipped at $(el)s (time)" >> "$O/bench.log"; return; }
  echo "=== $1.$3 [$(el)s] (MINIGPT_CUDA_VARIANT=\"$2\")" >> "$O/bench.log"
  local lim=$(left 88); [ "$lim" -gt 12 ] && lim=12  # (round 1 compiles the timed and the traced text)
  MINIGPT_CACHE_DIR=$cache MINIGPT_CUDA_VARIANT="$2" timeout $lim "$M" compile --device cuda --graph gpt --explain --mode default > "$tmp" 2>&1
  echo "rc=$?" >> "$O/bench.log"
  grep -E "^variant:|^\| cuda_rows_forward|whole forward as one CUDA graph|rror" "$tmp" \
    | sed -E 's/^\| cuda_rows_forward \|[^|]*\|/| cuda_rows_forward | (ops) |/' | cut -c1-400 >> "$O/bench.log"
  if [ "$3" = 1 ]; then
    { echo "--- $1.$3: stage trace"; awk '/^stage trace/{on = 1} on && /^TRACE total/{print; on = 0} on' "$tmp" | cut -c1-300; } >> "$O/bench.log"
  fi
}
for round in 1 2 3; do
  explain default "rows" $round
  explain projh "rows rows-projh" $round
  explain mlpk "rows rows-mlpk" $round
  explain both "rows rows-projh rows-mlpk" $round
done
{
  echo "=== [$(el)s] medians over the rounds (us): kernel (explain's table) | replay alone | per replay in 100 back to back"
  for v in default projh mlpk both; do
    blk=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log")
    k=$(echo "$blk" | grep -E "^\| cuda_rows_forward" | awk -F'|' '{gsub(/ /, "", $(NF-2)); print $(NF-2)}')
    a=$(echo "$blk" | grep -oE "[0-9.]+ us per replay alone" | awk '{print $1}')
    b=$(echo "$blk" | grep -oE "[0-9.]+ us per replay in 100" | awk '{print $1}')
    med() { echo "$1" | grep -E '^[0-9.]+$' | sort -n | awk '{x[NR] = $1} END {if (NR) printf "%s (of %d:", x[int((NR + 1) / 2)], NR; else printf "- (none"; for (i = 1; i <= NR; ++i) printf " %s", x[i]; printf ")"}'; }
    echo "$v: kernel $(med "$k") | alone $(med "$a") | back to back $(med "$b")"
    echo "$blk" | grep -E "^TRACE total" | head -1 | sed "s/^/$v: /"
  done
  echo "=== bench done at $(el)s"
} >> "$O/bench.log"
rm -rf "$cache" "$tmp"
