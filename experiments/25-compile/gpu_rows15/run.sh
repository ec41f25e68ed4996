#!/bin/bash
# rows15 GPU call: build the cuda preset (minigpt, compile_cuda_test, compile_cuda_codegen_test),
# run the rows form's CUDA test and a few existing ones, then `minigpt compile --device cuda
# --graph gpt --explain --mode default` alternating today's default and MINIGPT_CUDA_VARIANT=rows
# (twice each, one cache), and if time is left the hand-written row-split forward
# (`bench model`, forward rows only). Logs under $OUT; every step bounded.
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
timeout 100 $TEST --gtest_filter="${GTEST_FILTER:-CompileCuda.RowsForm*:CompileCuda.ShippedModelMatchesEagerAndEveryProbe:CompileCuda.MegakernelMatchesEager}" > $O/test.txt 2>&1
log "test rc=$?"
timeout 40 $CG --gtest_filter='*Rows*' >> $O/test.txt 2>&1; log "codegen test rc=$?"
cache=$(mktemp -d)
explain() {  # $1 label, $2 variant words
  late ${3:-250} && { log "skip explain $1"; return; }
  log "explain $1"; echo "=== $1 (MINIGPT_CUDA_VARIANT=\"$2\")" >> $O/explain.txt
  MINIGPT_CACHE_DIR=$cache MINIGPT_CUDA_VARIANT="$2" timeout 40 $M compile --device cuda --graph gpt --explain --mode default >> $O/explain.txt 2>&1
  log "rc=$?"
}
explain default1 ""
explain rows1 rows
explain default2 ""
explain rows2 rows
explain rows-wide rows-wide 230
late 240 || { log bench; timeout 45 $M bench model --device cuda --no-peers --runs 1000 --warmup 100 > $O/b.txt 2>&1; log "rc=$?"; grep -E "^\| forward|max \|logit" $O/b.txt > $O/bench.txt; rm -f $O/b.txt; }
log done
