#!/usr/bin/env bash
# REPORT 7h's H200 run (branch cc15f), from the repository root on the GPU machine: a fresh `cuda`
# preset build of the targets it needs, the CLI's forward (default and max-autotune) and decode
# step (max-autotune) with --explain and a fresh MINIGPT_CACHE_DIR, then the three test binaries
# (the codegen test, which needs no GPU, beside the GPU test). Logs under $OUT (or ./out); the
# caller writes the commit to $OUT/commit.txt (the machine gets a git archive: no history).
set -u -o pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$OUT/env.txt" 2>&1
cmake --preset cuda > "$OUT/build.txt" 2>&1 &&
  cmake --build build/cuda -j16 --target minigpt compile_cuda_test compile_cuda_codegen_test compile_autotune_test >> "$OUT/build.txt" 2>&1 ||
  { tail -30 "$OUT/build.txt"; exit 1; }
export MINIGPT_CACHE_DIR=$(mktemp -d)
(./build/cuda/tests/compile_cuda_codegen_test > "$OUT/compile_cuda_codegen_test.txt" 2>&1; echo "rc=$?" >> "$OUT/compile_cuda_codegen_test.txt") &
cg=$!
{
  timeout 60 ./build/cuda/minigpt compile --device cuda --explain --runs 200
  timeout 120 ./build/cuda/minigpt compile --device cuda --explain --mode max-autotune --runs 200
  timeout 60 ./build/cuda/minigpt compile --device cuda --graph decode --explain --mode max-autotune --runs 200
} > "$OUT/cli.txt" 2>&1
tail -4 "$OUT/cli.txt"
timeout 150 ./build/cuda/tests/compile_cuda_test > "$OUT/compile_cuda_test.txt" 2>&1; echo "compile_cuda_test rc=$?"
# the bitwise forms once more (a race between the cluster's CTAs would show as a difference)
timeout 60 ./build/cuda/tests/compile_cuda_test --gtest_filter='*FusedMlpAndEarlyWeights*' > "$OUT/compile_cuda_test_again.txt" 2>&1
echo "compile_cuda_test (FusedMlp again) rc=$?"
timeout 60 ./build/cuda/tests/compile_autotune_test > "$OUT/compile_autotune_test.txt" 2>&1; echo "compile_autotune_test rc=$?"
wait "$cg"
tail -2 "$OUT/compile_cuda_codegen_test.txt"
grep -E "FAILED|per replay|kept:" "$OUT"/*.txt | head -40
