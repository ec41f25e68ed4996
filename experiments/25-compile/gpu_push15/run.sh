#!/usr/bin/env bash
# REPORT 7j's H200 run (branch push15), from the repository root on the GPU machine: a fresh `cuda`
# preset build; (when built: the diagnostic commits) the diagnostic test of the pushed partials after the attention stage
# (CompileCuda.Push15Diag: each variant's max |diff| at (2, 16), the SASS of the JIT's own cubins:
# the global loads each kernel issues before ACQBULK = griddepcontrol.wait; run 2: the bitwise
# forms' whole sequence with 7h's source); the three test
# binaries; the CLI's forward (default and max-autotune) and decode step (max-autotune) with
# --explain and a fresh MINIGPT_CACHE_DIR. Logs under $OUT (or ./out).
set -u -o pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$OUT/env.txt" 2>&1
cmake --preset cuda > "$OUT/build.txt" 2>&1 &&
  cmake --build build/cuda -j16 --target minigpt compile_cuda_test compile_cuda_codegen_test compile_autotune_test >> "$OUT/build.txt" 2>&1 ||
  { tail -30 "$OUT/build.txt"; exit 1; }
(./build/cuda/tests/compile_cuda_codegen_test > "$OUT/compile_cuda_codegen_test.txt" 2>&1; echo "rc=$?" >> "$OUT/compile_cuda_codegen_test.txt") &
cg=$!
if ./build/cuda/tests/compile_cuda_test --gtest_list_tests | grep -q Push15Diag; then
  timeout 60 ./build/cuda/tests/compile_cuda_test --gtest_filter='*Push15Diag*' > "$OUT/diag.txt" 2>&1; echo "diag rc=$?" >> "$OUT/diag.txt"
  grep -E "DIAGRESULT" "$OUT/diag.txt"
  OD=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  for v in 1 2 3; do  # the fix; 7h's source; plain pointers: global loads before ACQBULK (griddepcontrol.wait) per kernel
    for c in /tmp/push15_diag/v$v/*.cubin; do
      echo "== SASS, variant $v: $c"
      "$OD" -sass "$c" | awk '/Function :/ {fn=$3; pre=1; n=0} /ACQBULK/ {if (pre) print fn": ACQBULK after " n " global loads"; pre=0}
        /LDG/ {if (pre) {n++; print fn": before the wait: " $0}}' | sed 's#/\* 0x[0-9a-f]* \*/##; s/  */ /g'
    done
  done >> "$OUT/diag.txt" 2>&1
  grep -E "^== SASS|ACQBULK after" "$OUT/diag.txt" | grep -v "after 0 "
  # run 2: the whole sequence of bitwise forms with 7h's source (the context 7h failed in)
  MINIGPT_DIAG_REWRITE=restrict,guard timeout 70 ./build/cuda/tests/compile_cuda_test --gtest_filter='*FusedMlpAndEarlyWeights*' > "$OUT/fusedmlp_7h_source.txt" 2>&1
  echo "FusedMlp with 7h's source rc=$?"; grep -E "max \|diff\| [^0]|FAILED" "$OUT/fusedmlp_7h_source.txt" | head -20
fi
timeout 120 ./build/cuda/tests/compile_cuda_test --gtest_filter='-*Push15Diag*' > "$OUT/compile_cuda_test.txt" 2>&1; echo "compile_cuda_test rc=$?"
grep -E "partials pushed|FAILED" "$OUT/compile_cuda_test.txt" | head -20
export MINIGPT_CACHE_DIR=$(mktemp -d)
{
  timeout 40 ./build/cuda/minigpt compile --device cuda --explain --runs 200
  timeout 80 ./build/cuda/minigpt compile --device cuda --explain --mode max-autotune --runs 200
  timeout 40 ./build/cuda/minigpt compile --device cuda --graph decode --explain --mode max-autotune --runs 200
} > "$OUT/cli.txt" 2>&1
grep -E "per replay|kept:" "$OUT/cli.txt"
timeout 30 ./build/cuda/tests/compile_autotune_test > "$OUT/compile_autotune_test.txt" 2>&1; echo "compile_autotune_test rc=$?"
wait "$cg"
tail -2 "$OUT/compile_cuda_codegen_test.txt"
grep -h "FAILED" "$OUT"/compile_*.txt | head -20
date -u
