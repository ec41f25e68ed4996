#!/bin/bash
# rows14c GPU call 1 (run from the copied tree's root): build minigpt + model_cuda_test (cuda
# preset) with the ring microbenchmark (ringbench.cu, nvcc) beside it; the row-split tests
# (every MINIGPT_MEGA_ROWS_VARIANT); the microbenchmark; `bench model` at B = 1, 2, 4, 8 (T 16,
# the default variant); the stage trace (MINIGPT_MEGA_TRACE=1; a GEMM stage's bracket is its wait
# for its LAST weight piece) of w15 and mc; then `bench model` alternating the variants twice.
# An ncu profile of the default's kernel between the rounds. Everything under $OUT in at most 8 files; every step bounded, later ones skipped past ~270 s.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT; T0=$(date +%s); D=experiments/25-compile/gpu_rows14c
VARIANTS=${VARIANTS:-"w15 mc w15ln mcln"}
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $O/steps.txt; }
late() { [ $(( $(date +%s) - T0 )) -gt ${1:-265} ]; }
log build
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a $D/ringbench.cu -o /tmp/ringbench > $O/ring.txt 2>&1 &
NV=$!
(cmake --preset cuda >/dev/null && cmake --build build/cuda -j16 --target minigpt model_cuda_test) > /tmp/build.txt 2>&1 \
  || { log "build failed"; tail -60 /tmp/build.txt > $O/build_tail.txt; exit 1; }
wait $NV; log "built (nvcc rc=$?)"
M=build/cuda/minigpt; TEST=$(find build/cuda -name model_cuda_test -type f | head -1)
A="bench model --device cuda --no-peers --runs 1000 --warmup 100"
bench() {  # $1: label, $2: variant, rest: more bench arguments
  local name=$1 v=$2; shift 2
  late && { log "skip bench $name"; return; }
  log "bench $name"; echo "=== $name (MINIGPT_MEGA_ROWS_VARIANT=$v) $*" >> $O/bench.txt
  MINIGPT_MEGA_ROWS_VARIANT=$v timeout 25 $M $A "$@" > /tmp/b.txt 2>&1; log "rc=$?"
  grep -E "^\| forward graph.*(by rows|back to back)|max \|logit" /tmp/b.txt >> $O/bench.txt
}
log test; timeout 60 $TEST --gtest_filter='*ByRows*' > $O/test.txt 2>&1; log "test rc=$?"
log ring; timeout 40 /tmp/ringbench >> $O/ring.txt 2>&1; log "ring rc=$?"
for B in 1 2 4 8; do bench "B$B" "" --batch $B --seq 16; done
trace() {  # $1: variant
  late 230 && { log "skip trace $1"; return; }
  log "trace $1"; echo "=== trace $1" >> $O/trace.txt
  MINIGPT_MEGA_TRACE=1 MINIGPT_MEGA_ROWS_VARIANT=$1 timeout 25 $M $A > /tmp/t.txt 2>&1; log "rc=$?"
  grep -E "TRACE rows rp=1|TRACE  (layer|head)" /tmp/t.txt | head -12 >> $O/trace.txt
}
trace w15
trace mc
ncu_prof() {  # the default variant's kernel, one launch, warm L2, clocks as they are
  command -v ncu > /dev/null || { log "no ncu"; return; }
  late 190 && { log "skip ncu"; return; }
  log ncu
  timeout 60 ncu --cache-control none --clock-control none --section SpeedOfLight --section WarpStateStats \
    --section SourceCounters --section MemoryWorkloadAnalysis -k regex:gpt_mega_rows_kernel --launch-skip 20 -c 1 \
    -o /tmp/ncu_rows $M bench model --device cuda --no-peers --runs 30 --warmup 5 > /tmp/ncu_run.txt 2>&1; log "rc=$?"
  ncu -i /tmp/ncu_rows.ncu-rep --page details > $O/ncu.txt 2>&1
  tail -5 /tmp/ncu_run.txt >> $O/ncu.txt
  ncu -i /tmp/ncu_rows.ncu-rep --page source --csv --print-source sass 2> /dev/null | gzip -c > $O/ncu_source.csv.gz
}
for v in $VARIANTS; do bench "$v.1" $v; done
ncu_prof
for v in $VARIANTS; do bench "$v.2" $v; done
log done
