#!/bin/bash
# gen15c's part of the lead's H200 call (issue 15): the rows form's default text now generates the
# head as the hand-written gpt_mega_rows.cu's lm1 does: lm_head's chains split by warp (warps 0..3
# two chains, 4..15 one: no thread runs a chain on a copy of its first row) and the vocabulary
# softmax fused into lm_head's stage (the logits in registers, stored to global at once; no
# shared-memory round trip, one CTA barrier fewer). Bitwise the previous text's values, which stays
# selectable as MINIGPT_CUDA_VARIANT=rows-plain (the A/B baseline: the head as before).
# Run from the repository root AFTER the lead's build (`cmake --preset cuda && cmake --build
# build/cuda --target minigpt compile_cuda_test compile_cuda_codegen_test`); builds nothing, ~30-40 s
# (every step time-boxed; a step starting too late is skipped and says so). Writes $OUT/gen15c/:
#   bench.log   `minigpt compile --device cuda --graph gpt --explain --mode default`, the default
#               text and rows-plain alternated, 3 rounds, one NVRTC cache: per run the variant line,
#               the kernel's row and the whole-forward line; then the medians of the kernel time,
#               the replay alone and per replay in 100 back to back (the hand-written twin: lm1
#               21.02 against bitw's 21.54 us, gpu_head14/call1)
#   tests.log   compile_cuda_test's RowsForm* tests (RowsFormDefaultAndPlainTextsAgreeBitwise:
#               default vs rows-plain, 0 difference expected at V 611, 50, 300, 660), then
#               RowsFold* if time is left, then the codegen test's *Rows* tests (NVRTC, text checks)
#               (note, after the run: no test is named RowsFold* any more, so that step matches
#               nothing; the script is left as it ran)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:?set OUT}/gen15c; mkdir -p "$O"
T0=$(date +%s)
M=build/cuda/minigpt
TEST=build/cuda/tests/compile_cuda_test
CG=build/cuda/tests/compile_cuda_codegen_test
el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "${1:-20}" ]; }
left() { local l=$(( $1 - $(el) )); echo $(( l > 1 ? l : 1 )); }  # seconds until $1 s after the start (>= 1)
for f in "$M" "$TEST" "$CG"; do [ -x "$f" ] || echo "missing $f (build first)" | tee -a "$O/bench.log"; done

cache=$(mktemp -d); tmp=$(mktemp)
# labels: default = the default text (the head split and fused), plain = MINIGPT_CUDA_VARIANT=rows-plain
explain() {  # $1 label, $2 variant words, $3 round
  late 20 && { echo "=== $1.$3 skipped at $(el)s (time)" >> "$O/bench.log"; return; }
  echo "=== $1.$3 [$(el)s] (MINIGPT_CUDA_VARIANT=\"$2\")" >> "$O/bench.log"
  MINIGPT_CACHE_DIR=$cache MINIGPT_CUDA_VARIANT="$2" timeout 10 "$M" compile --device cuda --graph gpt --explain --mode default > "$tmp" 2>&1
  echo "rc=$?" >> "$O/bench.log"
  grep -E "^variant:|^\| cuda_rows_forward|whole forward as one CUDA graph|rror" "$tmp" \
    | sed -E 's/^\| cuda_rows_forward \|[^|]*\|/| cuda_rows_forward | (ops) |/' | cut -c1-400 >> "$O/bench.log"
}
for round in 1 2 3; do explain default "" $round; explain plain rows-plain $round; done
{
  echo "=== [$(el)s] medians over the rounds (us): kernel (explain's table) | replay alone | per replay in 100 back to back"
  for v in default plain; do
    blk=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log")
    k=$(echo "$blk" | grep -E "^\| cuda_rows_forward" | awk -F'|' '{gsub(/ /, "", $(NF-2)); print $(NF-2)}')
    a=$(echo "$blk" | grep -oE "[0-9.]+ us per replay alone" | awk '{print $1}')
    b=$(echo "$blk" | grep -oE "[0-9.]+ us per replay in 100" | awk '{print $1}')
    med() { echo "$1" | grep -E '^[0-9.]+$' | sort -n | awk '{x[NR] = $1} END {if (NR) printf "%s (of %d:", x[int((NR + 1) / 2)], NR; else printf "- (none"; for (i = 1; i <= NR; ++i) printf " %s", x[i]; printf ")"}'; }
    echo "$v: kernel $(med "$k") | alone $(med "$a") | back to back $(med "$b")"
  done
  echo "=== done at $(el)s"
} >> "$O/bench.log"
rm -rf "$cache" "$tmp"

# the tests after the timings (each step time-boxed; the whole script <= 40 s)
{
  echo "=== [$(el)s] compile_cuda_test RowsForm* (git $(git rev-parse --short HEAD 2>/dev/null))"
  timeout $(left 34) "$TEST" --gtest_filter='CompileCuda.RowsForm*' 2>&1; echo "rc=$? (124: cut at 34 s)"
  if late 26; then echo "=== skipped RowsFold* at $(el)s (time)"; else
    echo "=== [$(el)s] compile_cuda_test RowsFold* (rows-fold: its head split and fused too)"
    timeout $(left 34) "$TEST" --gtest_filter='CompileCuda.RowsFold*' 2>&1 | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|actual|Which is|vs CPU"; echo "rc=${PIPESTATUS[0]}"
  fi
  if late 33; then echo "=== skipped codegen tests at $(el)s (time)"; else
    echo "=== [$(el)s] compile_cuda_codegen_test *Rows* (text checks, NVRTC)"
    timeout $(left 40) "$CG" --gtest_filter='*Rows*' 2>&1 | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|actual|Which is"; echo "rc=${PIPESTATUS[0]}"
  fi
} > "$O/tests.log" 2>&1
echo "=== done at $(el)s" >> "$O/tests.log"
