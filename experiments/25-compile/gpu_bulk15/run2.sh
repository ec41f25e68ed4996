#!/usr/bin/env bash
# REPORT 7m's second H200 run (branch bulk15), the kept version (weights_plain, ln_weights_early
# and mlp_async on by default): a fresh `cuda` preset build; compile_cuda_codegen_test in the
# background; compile_cuda_test (every test, the bitwise forms first); the CLI with --explain and a
# fresh MINIGPT_CACHE_DIR: the default against 7l's default (MINIGPT_CUDA_VARIANT="weights-restrict
# ln-late mlp-sync": main's generated code before 7m) twice each, interleaved; max-autotune of the
# forward and of the decode step. Logs under $OUT (or ./out).
set -u -o pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$OUT/build.txt" 2>&1
cmake --preset cuda >> "$OUT/build.txt" 2>&1 &&
  cmake --build build/cuda -j16 --target minigpt compile_cuda_test compile_cuda_codegen_test >> "$OUT/build.txt" 2>&1 ||
  { tail -30 "$OUT/build.txt"; exit 1; }
echo "built at ${SECONDS}s"
(timeout 200 ./build/cuda/tests/compile_cuda_codegen_test > "$OUT/compile_cuda_codegen_test.txt" 2>&1; echo "rc=$?" >> "$OUT/compile_cuda_codegen_test.txt") &
cg=$!
export MINIGPT_CACHE_DIR=$(mktemp -d)
M=./build/cuda/minigpt
OLD="weights-restrict ln-late mlp-sync"
{
  for pass in 1 2; do
    echo "=== default (7m), pass $pass"; timeout 40 $M compile --device cuda --explain --runs 200
    echo "=== 7l's default: MINIGPT_CUDA_VARIANT=\"$OLD\", pass $pass"; MINIGPT_CUDA_VARIANT="$OLD" timeout 40 $M compile --device cuda --explain --runs 200
  done
  echo "=== max-autotune"; timeout 110 $M compile --device cuda --explain --mode max-autotune --runs 200
  echo "=== decode, default"; timeout 40 $M compile --device cuda --graph decode --explain --runs 200
  echo "=== decode, 7l's default"; MINIGPT_CUDA_VARIANT="$OLD" timeout 40 $M compile --device cuda --graph decode --explain --runs 200
} > "$OUT/cli.txt" 2>&1
echo "cli done at ${SECONDS}s"
grep -E "^===|per replay|variant:" "$OUT/cli.txt"
timeout 150 ./build/cuda/tests/compile_cuda_test > "$OUT/compile_cuda_test.txt" 2>&1
echo "compile_cuda_test rc=$? at ${SECONDS}s"
wait "$cg"
grep -h "FAILED\|tests ran\|PASSED" "$OUT"/compile_*.txt | head -20
grep -E "max \|diff\| [^0]" "$OUT/compile_cuda_test.txt" | head
date -u
