#!/bin/bash
# rows14b GPU call (the coordinator builds `minigpt model_cuda_test` in build/cuda first; no build
# here): the row-split tests (every MINIGPT_MEGA_ROWS_VARIANT), then `bench model` for the
# default (base) and the variants all, head, lnfuse, send4, w15 (w15head left out: time),
# alternating twice, with a stage trace (MINIGPT_MEGA_TRACE=1: each GEMM stage's bracket is the
# wait for its LAST weight piece) of the base and of all between the two rounds. Logs under $OUT/rows14b; bounded to ~110 s (later steps skipped past it).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT/rows14b; mkdir -p $O; T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $O/steps.txt; }
late() { [ $(( $(date +%s) - T0 )) -gt ${1:-95} ]; }
M=build/cuda/minigpt; TEST=$(find build/cuda -name model_cuda_test -type f | head -1)
A="bench model --device cuda --no-peers --runs 1000 --warmup 100"
HUNG=" "  # variants whose bench ran past its timeout: not run again
bench() {  # $1: variant name ("" = the default)
  local name=${1:-default} rc
  late 100 && { log "skip bench $name"; return; }
  [[ "$HUNG" == *" $name "* ]] && { log "skip bench $name (timed out before)"; return; }
  log "bench $name"; echo "=== $name (MINIGPT_MEGA_ROWS_VARIANT=${1:-})" >> $O/bench.txt
  MINIGPT_MEGA_ROWS_VARIANT=${1:-} timeout 20 $M $A > $O/b.txt 2>&1; rc=$?; log "rc=$rc"
  [ $rc = 124 ] && HUNG="$HUNG$name "
  grep -E "^\| forward|max \|logit" $O/b.txt >> $O/bench.txt
  [ $rc = 0 ] || tail -5 $O/b.txt >> $O/bench.txt
}
trace() {  # $1: variant name
  late 70 && { log "skip trace ${1:-default}"; return; }
  [[ "$HUNG" == *" ${1:-default} "* ]] && { log "skip trace ${1:-default} (timed out before)"; return; }
  log "trace ${1:-default}"; echo "=== trace ${1:-default}" >> $O/trace.txt
  MINIGPT_MEGA_TRACE=1 MINIGPT_MEGA_ROWS_VARIANT=${1:-} timeout 15 $M $A > $O/t.txt 2>&1; log "rc=$?"
  grep -E "TRACE rows rp=1|TRACE  (layer|head)" $O/t.txt | head -12 >> $O/trace.txt
}
log test; timeout 30 $TEST --gtest_filter='*ByRows*' > $O/test.txt 2>&1; log "test rc=$?"
grep -E "^\[  (FAILED|PASSED|SKIPPED|     OK) |tests ran|Failure|Expected|Which is|diff|variant" $O/test.txt | head -80 > $O/test_summary.txt
for v in "" all head lnfuse send4 w15; do bench $v; done
trace ""
trace all
for v in "" all head lnfuse send4 w15; do bench $v; done
rm -f $O/b.txt $O/t.txt; log done
