#!/bin/bash
# rows14 GPU call: build the cuda preset (minigpt, model_cuda_test), run model_cuda_test (all),
# then `bench model` alternating the default and the weight-split megakernel (MINIGPT_MEGA_ROWS=0;
# call 1: the old default and MINIGPT_MEGA_ROWS=2),
# the k, v hand-over by cluster barrier (MINIGPT_MEGA_ROWS_KV=barrier), and a stage trace
# (MINIGPT_MEGA_TRACE=1). Logs under $OUT; every step bounded, later steps skipped past ~270 s.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT; T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $O/steps.txt; }
late() { [ $(( $(date +%s) - T0 )) -gt ${1:-240} ]; }
log build
(cmake --preset cuda >/dev/null && cmake --build build/cuda -j16 --target minigpt model_cuda_test) > $O/build.txt 2>&1 \
  || { log "build failed"; tail -60 $O/build.txt; exit 1; }
log built; rm -f $O/build.txt
M=build/cuda/minigpt; TEST=$(find build/cuda -name model_cuda_test -type f | head -1)
A="bench model --device cuda --no-peers --runs 1000 --warmup 100"
bench() {  # $1: label, rest: env assignments
  local name=$1; shift
  late 255 && { log "skip bench $name"; return; }
  log "bench $name ($*)"; echo "=== $name ($*)" >> $O/bench.txt
  env "$@" timeout 45 $M $A > $O/b.txt 2>&1; log "rc=$?"
  grep -E "^\| forward|max \|logit" $O/b.txt >> $O/bench.txt
}
log test; timeout 110 $TEST > $O/test.txt 2>&1; log "test rc=$?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|megakernel|shipped|Failure|Expected|Which is|diff" $O/test.txt | head -80 > $O/test_summary.txt
bench new1
bench old1 MINIGPT_MEGA_ROWS=0
late 200 || { log trace; MINIGPT_MEGA_TRACE=1 timeout 40 $M $A > $O/t.txt 2>&1; log "rc=$?"; grep -E "TRACE|^\| forward" $O/t.txt | head -400 > $O/trace.txt; }
bench kvbarrier MINIGPT_MEGA_ROWS_KV=barrier
bench new2
bench old2 MINIGPT_MEGA_ROWS=0
rm -f $O/b.txt $O/t.txt; log done
