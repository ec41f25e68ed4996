#!/bin/bash
# The lead's short H200 call after making rows-ln2's LayerNorm statistics the default text and removing
# rows-qkv2 (after gpu_check_c25a412): the rows form's GPU tests (RowsForm*: the default against the CPU
# engine and the eager path, the default against rows-plain bitwise at nine shapes, the stage trace), the
# codegen tests, then `minigpt compile --device cuda --graph gpt --explain`, the default and rows-plain
# alternated 3 rounds, medians. Builds nothing (minigpt, compile_cuda_test, compile_cuda_codegen_test
# first); ~90 s. Writes $OUT/verify15/tests.log, bench.log.
set -uo pipefail
O=${OUT:?set OUT}/verify15; mkdir -p "$O"
M=build/cuda/minigpt
{
  timeout 70 build/cuda/tests/compile_cuda_test --gtest_filter='CompileCuda.RowsForm*' 2>&1 | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|actual|Which is|probe|texts|stage trace"; echo "rc=${PIPESTATUS[0]}"
  timeout 40 build/cuda/tests/compile_cuda_codegen_test --gtest_filter='*Rows*' 2>&1 | grep -E "^\[ *(OK|FAILED|PASSED) |Failure"; echo "rc=${PIPESTATUS[0]}"
} > "$O/tests.log" 2>&1
cache=$(mktemp -d); tmp=$(mktemp)
for r in 1 2 3; do
  for v in default rows-plain; do
    w=$v; [ "$v" = default ] && w=""
    echo "=== $v.$r" >> "$O/bench.log"
    MINIGPT_CACHE_DIR=$cache MINIGPT_CUDA_VARIANT="$w" timeout 20 "$M" compile --device cuda --graph gpt --explain --mode default > "$tmp" 2>&1
    grep -E "^\| cuda_rows_forward|whole forward as one CUDA graph|^TRACE|rror" "$tmp" | sed -E 's/^\| cuda_rows_forward \|[^|]*\|/| cuda_rows_forward | (ops) |/' >> "$O/bench.log"
    [ "$r" = 1 ] && [ "$v" = default ] && grep -E "^\| (start|stage)" "$tmp" >> "$O/bench.log"
  done
done
rm -rf "$cache" "$tmp"
