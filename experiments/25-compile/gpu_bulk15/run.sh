#!/usr/bin/env bash
# REPORT 7m's H200 runs (branch bulk15), from the repository root on the GPU machine: a fresh
# `cuda` preset build; compile_cuda_codegen_test in the background; the bitwise forms
# (FusedMlpAndEarlyWeightsChangeNoBit: the new weights-plain / ln-early / st.async forms among
# them); the CLI's forward with --explain and a fresh MINIGPT_CACHE_DIR: the default (the rule's:
# main's default) and the new options through MINIGPT_CUDA_VARIANT, then max-autotune (every
# candidate timed in one process); ncu --set full of the MLP kernel, default and new; the rest of
# compile_cuda_test in the time left. Logs under $OUT (or ./out), at most 8 files.
set -u -o pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LIMIT=${LIMIT:-285}
NEW=${NEW:-"weights-plain ln-early"}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1 2>/dev/null; } > "$OUT/build.txt" 2>&1
cmake --preset cuda >> "$OUT/build.txt" 2>&1 &&
  cmake --build build/cuda -j16 --target minigpt compile_cuda_test compile_cuda_codegen_test >> "$OUT/build.txt" 2>&1 ||
  { tail -30 "$OUT/build.txt"; exit 1; }
echo "built at ${SECONDS}s"
(timeout 200 ./build/cuda/tests/compile_cuda_codegen_test > "$OUT/compile_cuda_codegen_test.txt" 2>&1; echo "rc=$?" >> "$OUT/compile_cuda_codegen_test.txt") &
cg=$!
timeout 90 ./build/cuda/tests/compile_cuda_test --gtest_filter='*FusedMlpAndEarlyWeights*' > "$OUT/compile_cuda_test.txt" 2>&1
echo "FusedMlp rc=$? at ${SECONDS}s"; grep -E "FAILED|max \|diff\| [^0]" "$OUT/compile_cuda_test.txt" | head -20
export MINIGPT_CACHE_DIR=$(mktemp -d)
M=./build/cuda/minigpt
{
  echo "=== default (the rule's variant: main's default)"; timeout 40 $M compile --device cuda --explain --runs 200
  for v in "$NEW" "$NEW mlp-async" "$NEW no-cluster rows1" "mlp-async"; do
    echo "=== MINIGPT_CUDA_VARIANT=\"$v\""; MINIGPT_CUDA_VARIANT="$v" timeout 40 $M compile --device cuda --explain --runs 200
  done
  echo "=== default again"; timeout 40 $M compile --device cuda --explain --runs 200
  echo "=== max-autotune"; timeout 110 $M compile --device cuda --explain --mode max-autotune --runs 200
} > "$OUT/cli.txt" 2>&1
echo "cli done at ${SECONDS}s"
grep -E "^===|per replay|variant:" "$OUT/cli.txt"
if command -v ncu > /dev/null; then
  for v in "" "$NEW mlp-async"; do
    echo "=== ncu, MINIGPT_CUDA_VARIANT=\"$v\""
    MINIGPT_CUDA_VARIANT="$v" timeout 60 ncu --set full -k regex:proj_layernorm_mlp -c 1 -o /tmp/ncu_rep_$SECONDS $M compile --device cuda --explain --runs 3 > /dev/null 2>&1
    rep=$(ls -t /tmp/ncu_rep_*.ncu-rep | head -1)
    ncu -i "$rep" --page details
    ncu -i "$rep" --page source --csv --print-source sass 2>&1 | head -2500 > "/tmp/src_$(basename "$rep").csv"
  done > "$OUT/ncu_details.txt" 2>&1
  cat /tmp/src_*.csv > "$OUT/ncu_source.csv" 2>/dev/null
else
  echo "no ncu" > "$OUT/ncu_details.txt"
fi
echo "ncu done at ${SECONDS}s"
left=$((LIMIT - SECONDS))
if [ "$left" -gt 20 ]; then
  timeout "$left" ./build/cuda/tests/compile_cuda_test --gtest_filter='-*FusedMlpAndEarlyWeights*' >> "$OUT/compile_cuda_test.txt" 2>&1
  echo "compile_cuda_test (the rest) rc=$?"
fi
wait "$cg"
tail -3 "$OUT/compile_cuda_codegen_test.txt"
grep -h "FAILED\|tests ran\|PASSED" "$OUT"/compile_*.txt | head -20
date -u
