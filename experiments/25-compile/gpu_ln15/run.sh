#!/bin/bash
# ln15's part of the lead's H200 call (issue 15): the rows form's LayerNorm stages (~0.51-0.65k cycles
# each, 9 of them at the shipped (2, 16)) against rows-ln2 (MINIGPT_CUDA_VARIANT=rows-ln2; only the
# prelude's LayerNorm texts change: the 16-lane double sums in 2 rounds of 3 gathered lanes instead of a
# 4-step butterfly, rsqrt.approx.ftz instead of rsqrtf's denormal scaling, every lane storing so that
# the gain and bias loads are issued with the row; bitwise the default's values by construction:
# codegen_cuda_rows.cpp's kPreludeLds1 comment says what the default's sm_90a SASS showed).
# Run from the repository root AFTER the lead's build (`cmake --build build/cuda --target minigpt
# compile_cuda_test compile_cuda_codegen_test`); builds nothing, <= 80 s (every step time-boxed; a step
# starting too late is skipped and says so). Writes $OUT/ln15/:
#   tests.log   compile_cuda_test's RowsFormDefaultAndLn2TextsAgreeBitwise (default vs rows-ln2, then
#               rows-projh + rows-mlpk with and without rows-ln2: 0 difference expected at the rows tests'
#               nine shapes), then the codegen test's Ln2 test (text checks, NVRTC)
#   bench.log   `minigpt compile --device cuda --graph gpt --explain --mode default`, the default text and
#               rows-ln2 alternated, 3 rounds, one NVRTC cache: per run the variant line, the kernel's row
#               and the whole-forward line; then the medians (kernel | replay alone | back to back) and
#               each text's LayerNorm intervals from round 1's trace, summed
#   trace.log   round 1's two stage-trace tables in full (the default's, then rows-ln2's)
# What to look for: tests.log all OK (memcmp 0); bench.log's "layernorm intervals" line per text (the
# default ~4.8k cycles over 9 stages in gpu_att15/call1) and the kernel medians.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:?set OUT}/ln15; mkdir -p "$O"
T0=$(date +%s)
M=build/cuda/minigpt
TEST=build/cuda/tests/compile_cuda_test
CG=build/cuda/tests/compile_cuda_codegen_test
el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "${1:-20}" ]; }
left() { local l=$(( $1 - $(el) )); echo $(( l > 1 ? l : 1 )); }  # seconds until $1 s after the start (>= 1)
: > "$O/bench.log"; : > "$O/trace.log"; : > "$O/tests.log"
for f in "$M" "$TEST" "$CG"; do [ -x "$f" ] || echo "missing $f (build first)" | tee -a "$O/bench.log" >> "$O/tests.log"; done

# 1. the bitwise test first (<= 36 s)
{
  echo "=== [$(el)s] compile_cuda_test RowsFormDefaultAndLn2TextsAgreeBitwise (git $(git rev-parse --short HEAD 2>/dev/null))"
  timeout $(left 36) "$TEST" --gtest_filter='CompileCuda.RowsFormDefaultAndLn2TextsAgreeBitwise' 2>&1 | grep -vE "^\[ RUN|^$" | cut -c1-300
  echo "rc=${PIPESTATUS[0]} (124: cut at 36 s)"
} >> "$O/tests.log" 2>&1

# 2. the timings: default and rows-ln2 alternated, 3 rounds (a run starting after 68 s is skipped)
cache=$(mktemp -d); tmp=$(mktemp)
explain() {  # $1 label, $2 variant words, $3 round
  late 68 && { echo "=== $1.$3 skipped at $(el)s (time)" >> "$O/bench.log"; return; }
  echo "=== $1.$3 [$(el)s] (MINIGPT_CUDA_VARIANT=\"$2\")" >> "$O/bench.log"
  MINIGPT_CACHE_DIR=$cache MINIGPT_CUDA_VARIANT="$2" timeout $(left 79) "$M" compile --device cuda --graph gpt --explain --mode default > "$tmp" 2>&1
  echo "rc=$?" >> "$O/bench.log"
  grep -E "^variant:|^\| cuda_rows_forward|whole forward as one CUDA graph|rror" "$tmp" \
    | sed -E 's/^\| cuda_rows_forward \|[^|]*\|/| cuda_rows_forward | (ops) |/' | cut -c1-400 >> "$O/bench.log"
  if [ "$3" = 1 ]; then
    { echo "=== $1 (MINIGPT_CUDA_VARIANT=\"$2\"), round 1"; grep -E "^variant:|^\| cuda_rows_forward" "$tmp" | cut -c1-200
      sed -n '/^stage trace of/,/^TRACE total/p' "$tmp"; grep -E "^stage trace unavailable" "$tmp"; echo; } >> "$O/trace.log"
  fi
}
for round in 1 2 3; do explain default "" $round; explain ln2 rows-ln2 $round; done
{
  echo "=== [$(el)s] medians over the rounds (us): kernel (explain's table) | replay alone | per replay in 100 back to back"
  for v in default ln2; do
    blk=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log")
    k=$(echo "$blk" | grep -E "^\| cuda_rows_forward" | awk -F'|' '{gsub(/ /, "", $(NF-2)); print $(NF-2)}')
    a=$(echo "$blk" | grep -oE "[0-9.]+ us per replay alone" | awk '{print $1}')
    b=$(echo "$blk" | grep -oE "[0-9.]+ us per replay in 100" | awk '{print $1}')
    med() { echo "$1" | grep -E '^[0-9.]+$' | sort -n | awk '{x[NR] = $1} END {if (NR) printf "%s (of %d:", x[int((NR + 1) / 2)], NR; else printf "- (none"; for (i = 1; i <= NR; ++i) printf " %s", x[i]; printf ")"}'; }
    echo "$v: kernel $(med "$k") | alone $(med "$a") | back to back $(med "$b")"
  done
  # the LayerNorm stages' cycles in round 1's traces (each interval "stage s: layernorm -> ..")
  for v in default ln2; do
    awk -v v="=== $v " -v name="$v" 'index($0, v) == 1 {on = 1; next} /^=== /{on = 0} on && /^\| stage [0-9]+: layernorm/ {
        split($0, f, "|"); n = f[2]; sub(/^ *stage /, "", n); s = n + 0; c[s] = f[3] + 0; tot += f[3]; ++k; if (s > mx) mx = s
      } on && /^TRACE total/ {t = $0}
      END {printf "%s: layernorm intervals (round 1 trace, cycles):", name; for (s = 0; s <= mx; ++s) if (s in c) printf " stage %d %d;", s, c[s]; printf " %d stages, sum %d\n  %s\n", k, tot, t}' "$O/trace.log"
  done
  echo "=== done at $(el)s"
} >> "$O/bench.log"
rm -rf "$cache" "$tmp"

# 3. the codegen test's Ln2 test (text checks, NVRTC), if time is left
{
  if late 74; then echo "=== skipped the codegen test at $(el)s (time)"; else
    echo "=== [$(el)s] compile_cuda_codegen_test *Ln2* (text checks, NVRTC)"
    timeout $(left 79) "$CG" --gtest_filter='*Ln2*' 2>&1 | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|actual|Which is"; echo "rc=${PIPESTATUS[0]}"
  fi
  echo "=== done at $(el)s"
} >> "$O/tests.log" 2>&1
