#!/bin/bash
# att15's part of the lead's H200 call (issue 15): where the rows form's attention stage's ~2k cycles
# go, and rows-attn2 (MINIGPT_CUDA_VARIANT=rows-attn2: the attention's k and v rows loaded by
# volatile-asm ld.shared before the scores, no branch before the rcp, the exps gathered once by 16
# shuffles and summed in the default butterfly's tree; bitwise the default's values).
# The default's sm_90a SASS (nvcc 13.0, nvdisasm): the key loop's v loads, written unconditional, are
# sunk by the compiler into each key's `k < nk` branch, so 15 keys run LDS.128 -> 4 FFMA in series.
# Run from the repository root AFTER the lead's build (`cmake --preset cuda && cmake --build
# build/cuda --target minigpt compile_cuda_test compile_cuda_codegen_test`); builds nothing, <= 90 s
# (every step time-boxed; a step starting too late is skipped and says so). Writes $OUT/att15/:
#   bench.log   `minigpt compile --device cuda --graph gpt --explain --mode default`, the default
#               text and rows-attn2 alternated, 3 rounds, one NVRTC cache: per run the variant line,
#               the kernel's row and the whole-forward line; then the medians of the kernel time,
#               the replay alone and per replay in 100 back to back
#   trace.log   round 1's two stage-trace tables in full (the default's, then rows-attn2's), with the
#               finer intervals: each qkv stage's k, v wait; each attention's scores, max, exp + sum +
#               1/sum, probabilities x v, store, the last warp's prewait (< 0: off the barrier's path)
#               and the barrier + cluster arrive
#               (bench.log ends with each text's attention stages' cycles summed from these tables)
#   tests.log   compile_cuda_test's RowsForm* (the bitwise tests: default vs rows-plain and default vs
#               rows-attn2, 0 difference expected at (2,16), (3,5), (1,1), tiny, V 300/660, d_model
#               96/32; the trace test for the three texts), then the codegen test's *Rows* tests
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:?set OUT}/att15; mkdir -p "$O"
T0=$(date +%s)
M=build/cuda/minigpt
TEST=build/cuda/tests/compile_cuda_test
CG=build/cuda/tests/compile_cuda_codegen_test
el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "${1:-20}" ]; }
left() { local l=$(( $1 - $(el) )); echo $(( l > 1 ? l : 1 )); }  # seconds until $1 s after the start (>= 1)
for f in "$M" "$TEST" "$CG"; do [ -x "$f" ] || echo "missing $f (build first)" | tee -a "$O/bench.log"; done

cache=$(mktemp -d); tmp=$(mktemp)
: > "$O/trace.log"
# labels: default = the default text, attn2 = MINIGPT_CUDA_VARIANT=rows-attn2
explain() {  # $1 label, $2 variant words, $3 round
  late 45 && { echo "=== $1.$3 skipped at $(el)s (time)" >> "$O/bench.log"; return; }
  echo "=== $1.$3 [$(el)s] (MINIGPT_CUDA_VARIANT=\"$2\")" >> "$O/bench.log"
  MINIGPT_CACHE_DIR=$cache MINIGPT_CUDA_VARIANT="$2" timeout 15 "$M" compile --device cuda --graph gpt --explain --mode default > "$tmp" 2>&1
  echo "rc=$?" >> "$O/bench.log"
  grep -E "^variant:|^\| cuda_rows_forward|whole forward as one CUDA graph|rror" "$tmp" \
    | sed -E 's/^\| cuda_rows_forward \|[^|]*\|/| cuda_rows_forward | (ops) |/' | cut -c1-400 >> "$O/bench.log"
  if [ "$3" = 1 ]; then
    { echo "=== $1 (MINIGPT_CUDA_VARIANT=\"$2\"), round 1"; grep -E "^variant:|^\| cuda_rows_forward" "$tmp" | cut -c1-200
      sed -n '/^stage trace of/,/^TRACE total/p' "$tmp"; grep -E "^stage trace unavailable" "$tmp"; echo; } >> "$O/trace.log"
  fi
}
for round in 1 2 3; do explain default "" $round; explain attn2 rows-attn2 $round; done
{
  echo "=== [$(el)s] medians over the rounds (us): kernel (explain's table) | replay alone | per replay in 100 back to back"
  for v in default attn2; do
    blk=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log")
    k=$(echo "$blk" | grep -E "^\| cuda_rows_forward" | awk -F'|' '{gsub(/ /, "", $(NF-2)); print $(NF-2)}')
    a=$(echo "$blk" | grep -oE "[0-9.]+ us per replay alone" | awk '{print $1}')
    b=$(echo "$blk" | grep -oE "[0-9.]+ us per replay in 100" | awk '{print $1}')
    med() { echo "$1" | grep -E '^[0-9.]+$' | sort -n | awk '{x[NR] = $1} END {if (NR) printf "%s (of %d:", x[int((NR + 1) / 2)], NR; else printf "- (none"; for (i = 1; i <= NR; ++i) printf " %s", x[i]; printf ")"}'; }
    echo "$v: kernel $(med "$k") | alone $(med "$a") | back to back $(med "$b")"
  done
  # the attention stages' cycles in round 1's traces: per stage, its intervals summed (kv wait apart)
  for v in default attn2; do
    awk -v v="=== $v " -v name="$v" 'index($0, v) == 1 {on = 1; next} /^=== /{on = 0} on && /^\| stage [0-9]+: attention/ {
        split($0, f, "|"); n = f[2]; sub(/^ *stage /, "", n); s = n + 0; c[s] += f[3]; tot += f[3]
      } on && /rw_kv_wait/ {split($0, f, "|"); kv += f[3]}
      END {printf "%s: attention stages (round 1 trace, cycles; the k, v waits apart):", name; for (s in c) printf " stage %d %d;", s, c[s]; printf " sum %d; the k, v waits %d\n", tot, kv}' "$O/trace.log"
  done
  echo "=== done at $(el)s"
} >> "$O/bench.log"
rm -rf "$cache" "$tmp"

# the tests after the timings (each step time-boxed; the whole script <= 90 s)
{
  echo "=== [$(el)s] compile_cuda_test RowsForm* (git $(git rev-parse --short HEAD 2>/dev/null))"
  timeout $(left 80) "$TEST" --gtest_filter='CompileCuda.RowsForm*' 2>&1 | grep -vE "^\[ RUN|^$" | cut -c1-300; echo "rc=${PIPESTATUS[0]} (124: cut at 80 s)"
  if late 80; then echo "=== skipped codegen tests at $(el)s (time)"; else
    echo "=== [$(el)s] compile_cuda_codegen_test *Rows* (text checks, NVRTC)"
    timeout $(left 89) "$CG" --gtest_filter='*Rows*' 2>&1 | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|actual|Which is"; echo "rc=${PIPESTATUS[0]}"
  fi
} > "$O/tests.log" 2>&1
echo "=== done at $(el)s" >> "$O/tests.log"
