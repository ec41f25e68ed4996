#!/bin/bash
# rows14c GPU call 2 (run from the copied tree's root): build minigpt + model_cuda_test (cuda
# preset) and ringbench.cu; the row-split tests (the variants test runs every
# MINIGPT_MEGA_ROWS_VARIANT, bitwise against the base); ringbench's bursts and bigger pieces
# (17-102 KB); the stage trace of pair; `bench model` alternating w15 (the default), pair, w15ln
# and pairln, two rounds; all of model_cuda_test, then its forward tests with pair; a third round. Everything under $OUT in at most 6 files; later steps skipped past ~270 s.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT; T0=$(date +%s); D=experiments/25-compile/gpu_rows14c
VARIANTS=${VARIANTS:-"w15 pair w15ln pairln"}
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $O/steps.txt; }
late() { [ $(( $(date +%s) - T0 )) -gt ${1:-268} ]; }
log build
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a $D/ringbench.cu -o /tmp/ringbench > $O/ring.txt 2>&1 &
NV=$!
(cmake --preset cuda >/dev/null && cmake --build build/cuda -j16 --target minigpt model_cuda_test) > /tmp/build.txt 2>&1 \
  || { log "build failed"; tail -60 /tmp/build.txt > $O/build_tail.txt; exit 1; }
wait $NV; log "built (nvcc rc=$?)"
M=build/cuda/minigpt; TEST=$(find build/cuda -name model_cuda_test -type f | head -1)
A="bench model --device cuda --no-peers --runs 1000 --warmup 100"
bench() {  # $1: label, $2: variant
  local name=$1 v=$2
  late && { log "skip bench $name"; return; }
  log "bench $name"; echo "=== $name (MINIGPT_MEGA_ROWS_VARIANT=$v)" >> $O/bench.txt
  MINIGPT_MEGA_ROWS_VARIANT=$v timeout 25 $M $A > /tmp/b.txt 2>&1; log "rc=$?"
  grep -E "^\| forward graph.*(by rows|back to back)|max \|logit" /tmp/b.txt >> $O/bench.txt
}
log "test ByRows"; timeout 30 $TEST --gtest_filter='*ByRows*' > $O/test.txt 2>&1; log "test rc=$?"
log ring; timeout 30 /tmp/ringbench 964608 b >> $O/ring.txt 2>&1; log "ring rc=$?"
log "trace pair"; echo "=== trace pair" >> $O/trace.txt
MINIGPT_MEGA_TRACE=1 MINIGPT_MEGA_ROWS_VARIANT=pair timeout 25 $M $A > /tmp/t.txt 2>&1; log "rc=$?"
grep -E "TRACE rows rp=1|TRACE  (layer|head)" /tmp/t.txt | head -12 >> $O/trace.txt
for round in 1 2; do for v in $VARIANTS; do bench "$v.$round" $v; done; done
log "test all"; echo "=== model_cuda_test, all (the default)" >> $O/test.txt
timeout 100 $TEST >> $O/test.txt 2>&1; log "test rc=$?"
if ! late 215; then
  log "test pair"; echo "=== model_cuda_test, MINIGPT_MEGA_ROWS_VARIANT=pair, the forward tests" >> $O/test.txt
  MINIGPT_MEGA_ROWS_VARIANT=pair timeout 45 $TEST \
    --gtest_filter='*ForwardMatches*:*GraphReplays*:*MegakernelByRowsMatchesTheCpu*:*Probe*' >> $O/test.txt 2>&1
  log "test rc=$?"
fi
for v in $VARIANTS; do bench "$v.3" $v; done
log done
