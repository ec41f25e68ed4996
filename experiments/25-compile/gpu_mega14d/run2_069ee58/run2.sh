#!/bin/bash
# mega14d call 2: the hand-overs' fences. MINIGPT_MEGA_VARIANT (bits; 0 = main's form, one build):
# 2 the start's cluster arrival relaxed (forward and decode step), 4 Net's arrivals relaxed.cta,
# 8 Net's waits acquire.cta. Tests, traces, bench (alternated twice), ncu of V14.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT; T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $O/steps.txt; }
log build
(cmake --preset cuda >/dev/null && cmake --build build/cuda -j16 --target minigpt model_cuda_test) > $O/build.txt 2>&1 || { log "build failed"; tail -60 $O/build.txt; exit 1; }
log built; rm -f $O/build.txt
M=build/cuda/minigpt; TEST=$(find build/cuda -name model_cuda_test -type f | head -1)
A="bench model --device cuda --no-peers"
for v in 0 2 6 14; do echo "=== V$v" >> $O/test.txt; MINIGPT_MEGA_VARIANT=$v timeout 60 $TEST >> $O/test.txt 2>&1; log "test V$v rc=$?"; done
tr() {
  log "trace V$1"; echo "=== V$1" >> $O/trace.txt
  MINIGPT_MEGA_VARIANT=$1 MINIGPT_MEGA_TRACE=1 timeout 30 $M $A --runs 100 --warmup 10 > $O/tr_raw.txt 2>&1
  grep -A5 "TRACE N=32 cache=0 heads=1 R=16" $O/tr_raw.txt | head -12 >> $O/trace.txt
  grep "forward graph (logits" $O/tr_raw.txt >> $O/trace.txt
}
for v in 0 2 6 14; do tr $v; done; rm -f $O/tr_raw.txt
bench() { log "bench V$1"; echo "=== V$1" >> $O/bench.txt; MINIGPT_MEGA_VARIANT=$1 timeout 60 $M $A --runs 1000 --warmup 100 >> $O/bench.txt 2>&1; log "rc=$?"; }
for v in 0 14 6 2 0 14 6 2; do bench $v; done
log ncu
MINIGPT_MEGA_VARIANT=14 timeout 60 ncu --clock-control none --cache-control none --kernel-name-base mangled --launch-skip 5 --launch-count 1 \
 --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters --warp-sampling-interval 0 \
 -k 'regex:gpt_mega_kernelINS1_5FixedILi64ELi4ELi256EEELb0ELb0ELb1ELi14E' -o $O/fwd14 -f $M $A --runs 5 --warmup 2 > $O/ncu_log.txt 2>&1; log "rc=$?"
ncu --import $O/fwd14.ncu-rep --page details > $O/ncu14.txt 2>&1; ncu --import $O/fwd14.ncu-rep --page raw --csv >> $O/ncu14.txt 2>&1
log done
