#!/usr/bin/env bash
# REPORT 7n's H200 run (branch bulk15b), the coordinator's one shared call. NO build step: the
# caller has built `minigpt compile_cuda_test compile_cuda_codegen_test` in build/cuda. In order:
# compile_cuda_codegen_test's 7m/7n NVRTC tests in the background (CPU only); the CLI with --explain
# and a fresh MINIGPT_CACHE_DIR for the default (7m) and each variant (MINIGPT_CUDA_VARIANT=mlp-next,
# ="mlp-next next-all", =rows8, =pad-launches, =mbar-cta), alternating, twice; then compile_cuda_test's
# bitwise forms (FusedMlpAndEarlyWeightsChangeNoBit: mlp-next, rows8, mbar-cta and pad-launches
# are forms of it) and two quick default checks. About 110 s. Logs under $OUT/bulk15b (or
# ./out/bulk15b).
set -u -o pipefail
OUT=${OUT:-out}
L="$OUT/bulk15b"
mkdir -p "$L"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1 2>/dev/null; } > "$L/env.txt" 2>&1
M=./build/cuda/minigpt
[ -x "$M" ] && [ -x ./build/cuda/tests/compile_cuda_test ] || { echo "build/cuda is not built" | tee -a "$L/env.txt"; exit 1; }
(timeout 100 ./build/cuda/tests/compile_cuda_codegen_test \
   --gtest_filter='*MlpWithTheNextLayerNormAndQkvCompiles*:*PadLaunchesAndCtaScopeMbarrierWaitCompile*:*WeightsPlainLayerNormWeightsEarlyAndAsyncPushCompile*' \
   > "$L/compile_cuda_codegen_test.txt" 2>&1; echo "rc=$?" >> "$L/compile_cuda_codegen_test.txt") &
cg=$!
export MINIGPT_CACHE_DIR=$(mktemp -d)  # fresh: every variant compiles cold on pass 1, hits on pass 2
{
  for pass in 1 2; do
    echo "=== default (7m), pass $pass"; timeout 15 $M compile --device cuda --explain --runs 200
    for v in mlp-next "mlp-next next-all" rows8 pad-launches mbar-cta; do
      echo "=== MINIGPT_CUDA_VARIANT=\"$v\", pass $pass"; MINIGPT_CUDA_VARIANT="$v" timeout 15 $M compile --device cuda --explain --runs 200
    done
  done
} > "$L/cli.txt" 2>&1
echo "cli done at ${SECONDS}s" | tee -a "$L/env.txt"
grep -E "^===|per replay|variant:" "$L/cli.txt"
timeout 75 ./build/cuda/tests/compile_cuda_test \
  --gtest_filter='*FusedMlpAndEarlyWeightsChangeNoBit*:*ProgrammaticDependentLaunchVariantMatchesEager*:*ShippedModelMatchesEagerAndEveryProbe*' \
  > "$L/compile_cuda_test.txt" 2>&1
echo "compile_cuda_test rc=$? at ${SECONDS}s" | tee -a "$L/env.txt"
wait "$cg"
grep -h "FAILED\|tests ran\|PASSED\|^rc=" "$L"/compile_*.txt | head -20
grep -E "rows 8|CTA scope|empty kernel|next layernorm|Failure|Expected" "$L/compile_cuda_test.txt" | head -24
date -u | tee -a "$L/env.txt"
