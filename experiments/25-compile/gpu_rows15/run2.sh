#!/bin/bash
# rows15 GPU call 2 (the rows form now the default on sm_90 where plan_rows takes the graph):
# build, the rows test, the default-rule test and two existing ones, then `minigpt compile --device
# cuda --explain` alternating the default (now rows) and MINIGPT_CUDA_VARIANT=no-rows (the 14-kernel
# form) twice, the decode graph (refused by the rows analysis: the fallback and its reason), and
# max-autotune (with its rows candidate) if time is left. Logs under $OUT; every step bounded.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT; T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $O/steps.txt; }
late() { [ $(( $(date +%s) - T0 )) -gt ${1:-240} ]; }
log build
(cmake --preset cuda >/dev/null && cmake --build build/cuda -j16 --target minigpt compile_cuda_test compile_cuda_codegen_test) > $O/build.txt 2>&1 \
  || { log "build failed"; tail -80 $O/build.txt; exit 1; }
log built; rm -f $O/build.txt
M=build/cuda/minigpt
TEST=$(find build/cuda -name compile_cuda_test -type f | head -1)
CG=$(find build/cuda -name compile_cuda_codegen_test -type f | head -1)
log test
timeout 90 $TEST --gtest_filter='CompileCuda.RowsForm*:CompileCuda.ShippedModelMatchesEagerAndEveryProbe:CompileCuda.DecodeStepMatchesTheEagerDecoder:CompileCuda.ShapeGuardCompilesAnewAndTheCacheIsWarm' > $O/test.txt 2>&1
log "test rc=$?"
timeout 40 $CG --gtest_filter='*Rows*:*DefaultVariant*' >> $O/test.txt 2>&1; log "codegen test rc=$?"
cache=$(mktemp -d)
explain() {  # $1 label, $2 variant words, $3 graph, $4 mode
  late ${5:-200} && { log "skip explain $1"; return; }
  log "explain $1"; echo "=== $1 (MINIGPT_CUDA_VARIANT=\"$2\", --graph $3 --mode $4)" >> $O/explain.txt
  MINIGPT_CACHE_DIR=$cache MINIGPT_CUDA_VARIANT="$2" timeout ${6:-40} $M compile --device cuda --graph $3 --explain --mode $4 >> $O/explain.txt 2>&1
  log "rc=$?"
}
explain default1 "" gpt default
explain no-rows1 no-rows gpt default
explain default2 "" gpt default
explain no-rows2 no-rows gpt default
explain decode "" decode default
explain max-autotune "" gpt max-autotune 150 110
log done
