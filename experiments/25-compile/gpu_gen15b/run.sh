#!/bin/bash
# gen15b's part of the lead's H200 call (issue 15): the rows form's stage trace (CudaCodegenOptions::
# rows_trace, CudaCompiledGraph::trace_rows): `minigpt compile --device cuda --explain` now prints,
# after the timings, a table of the generated kernel's intervals (the start, then every stage as the
# generated plan comment names it: "stage 2: matmul -> blocks.0.attn.qkv.out") in clock64 cycles of
# thread 0 of cluster 0's last CTA (the row with the most keys), taken from a traced text compiled
# and launched apart from the timed one, and a TRACE line: the total cycles, the same span by
# %globaltimer against the kernel's measured time, and whether the traced launches left every
# output bitwise as it was. rows-fold is gone (MINIGPT_CUDA_VARIANT=rows-fold now an error).
# Run from the repository root AFTER the lead's build (`cmake --preset cuda && cmake --build
# build/cuda --target minigpt compile_cuda_test compile_cuda_codegen_test`); builds nothing, ~40-50 s,
# every step time-boxed (a step starting too late is skipped and says so). Writes $OUT/gen15b/:
#   explain.log            `minigpt compile --device cuda --graph gpt --explain` (default mode: the
#                          rule's rows form) twice, one NVRTC cache (the second a cache hit for both
#                          texts), each whole: the kernel table, the whole-forward line, the stage trace
#   tests.log              compile_cuda_test's rows tests (RowsForm*: the probes, default vs rows-plain
#                          bitwise, and the new RowsFormStageTraceCoversEveryStageAndChangesNoOutput:
#                          every interval > 0, their sum the total, outputs bitwise unchanged, for the
#                          default and the plain text); the codegen test's *Rows* tests (text + NVRTC)
#   output_code_trace.cu   the traced text as the runner generated it on the GPU (--dump of run 1)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:?set OUT}/gen15b; mkdir -p "$O"
T0=$(date +%s)
M=build/cuda/minigpt
TEST=build/cuda/tests/compile_cuda_test
CG=build/cuda/tests/compile_cuda_codegen_test
el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "${1:-40}" ]; }
left() { local l=$(( $1 - $(el) )); echo $(( l > 1 ? l : 1 )); }  # seconds until $1 s after the start (>= 1)
for f in "$M" "$TEST" "$CG"; do [ -x "$f" ] || echo "missing $f (build first)" | tee -a "$O/explain.log"; done

cache=$(mktemp -d); dump=$(mktemp -d)
for run in 1 2; do
  if late 20; then echo "=== explain run $run skipped at $(el)s (time)" >> "$O/explain.log"; continue; fi
  echo "=== explain run $run [$(el)s] (git $(git rev-parse --short HEAD 2>/dev/null))" >> "$O/explain.log"
  extra=""; [ "$run" = 1 ] && extra="--dump $dump"
  MINIGPT_CACHE_DIR=$cache timeout 15 "$M" compile --device cuda --graph gpt --explain $extra >> "$O/explain.log" 2>&1
  echo "rc=$?" >> "$O/explain.log"
done
[ -f "$dump/output_code_trace.cu" ] && cp "$dump/output_code_trace.cu" "$O/output_code_trace.cu"
[ -f "$dump/trace.txt" ] && { echo "=== trace.txt of run 1 (--dump)"; cat "$dump/trace.txt"; } >> "$O/explain.log"
{
  echo "=== [$(el)s] summary: per run the variant, the kernel's time and the TRACE line"
  grep -E "^variant:|^\| cuda_rows_forward|^TRACE|^sum of kernels" "$O/explain.log" | cut -c1-300
} >> "$O/explain.log"
rm -rf "$cache" "$dump"

{
  echo "=== [$(el)s] compile_cuda_test RowsForm* (the default text; the trace test runs both texts)"
  timeout $(left 45) "$TEST" --gtest_filter='CompileCuda.RowsForm*' 2>&1; echo "rc=$? (124: cut at 45 s)"
  if late 46; then echo "=== skipped codegen tests at $(el)s (time)"; else
    echo "=== [$(el)s] compile_cuda_codegen_test *Rows* (text checks, NVRTC)"
    timeout $(left 58) "$CG" --gtest_filter='*Rows*' 2>&1 | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|actual|Which is|Value of"
    echo "rc=${PIPESTATUS[0]}"
  fi
} > "$O/tests.log" 2>&1
echo "=== done at $(el)s" >> "$O/tests.log"
