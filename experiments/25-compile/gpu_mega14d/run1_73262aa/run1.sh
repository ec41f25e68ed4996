#!/bin/bash
# mega14d call 1: why does every megakernel stage cost ~1k cycles? ncu warp-state stalls of the
# forward (and the decode step), per-SASS stall samples, the trace of main's form (V0) and of the
# diagnostic V1 (ln1, q k v, ln2, fc1 each run twice: the cost of a warm second pass), the bench.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT; T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $O/steps.txt; }
log build
(cmake --preset cuda >/dev/null && cmake --build build/cuda -j16 --target minigpt model_cuda_test) > $O/build.txt 2>&1 || { log "build failed"; tail -60 $O/build.txt; exit 1; }
log built; rm -f $O/build.txt
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv >> $O/steps.txt 2>&1
M=build/cuda/minigpt; TEST=$(find build/cuda -name model_cuda_test -type f | head -1)
A="bench model --device cuda --no-peers"
NCU="ncu --clock-control none --cache-control none --kernel-name-base mangled --launch-skip 5 --launch-count 1 \
 --section WarpStateStats --section SchedulerStats --section InstructionStats --section SourceCounters --section LaunchStats \
 --import-source yes --warp-sampling-interval 0"
FWD='regex:gpt_mega_kernelINS1_5FixedILi64ELi4ELi256EEELb0ELb0ELb1ELi1E'
DEC='regex:gpt_mega_kernelINS1_5FixedILi64ELi4ELi256EEELb1ELb0ELb0ELi1E'
N=$O/ncu.txt
log ncu fwd; timeout 120 $NCU -k "$FWD" -o $O/fwd -f $M $A --runs 5 --warmup 2 > $O/ncu_log.txt 2>&1; log "rc=$?"
log ncu dec; timeout 60 $NCU -k "$DEC" -o $O/dec -f $M $A --runs 5 --warmup 2 >> $O/ncu_log.txt 2>&1; log "rc=$?"
for r in fwd dec; do
  echo "=== $r details" >> $N; ncu --import $O/$r.ncu-rep --page details >> $N 2>&1
  echo "=== $r raw" >> $N; ncu --import $O/$r.ncu-rep --page raw --csv >> $N 2>&1
done
ncu --import $O/fwd.ncu-rep --page source --csv --print-source sass > $O/fwd_sass.csv 2>$O/src_err.txt \
  || ncu --import $O/fwd.ncu-rep --page source --csv --print-source=sass > $O/fwd_sass.csv 2>>$O/src_err.txt
cat $O/src_err.txt >> $N; rm -f $O/src_err.txt
echo "=== help" >> $N; ncu --help 2>&1 | grep -A4 -E 'print-source|page ' >> $N
echo "=== metrics" >> $N; ncu --query-metrics --chip gh100 2>&1 | grep -i -E 'icc|imc|instruction_cache|no_inst|fetch|branch_resolv' >> $N
rm -f $O/dec.ncu-rep; log "ncu exports done"
tr() {
  log "trace V$1"; echo "=== V$1" >> $O/trace.txt
  MINIGPT_MEGA_VARIANT=$1 MINIGPT_MEGA_TRACE=1 timeout 30 $M $A --runs 100 --warmup 10 > $O/tr_raw.txt 2>&1
  grep -A5 "TRACE N=32 cache=0 heads=1 R=16" $O/tr_raw.txt | head -12 >> $O/trace.txt
  grep "forward graph (logits" $O/tr_raw.txt >> $O/trace.txt
}
tr 0; tr 1; tr 0; tr 1; rm -f $O/tr_raw.txt
log bench; timeout 60 $M $A --runs 1000 --warmup 100 > $O/bench.txt 2>&1; log "rc=$?"
log test; timeout 60 $TEST > $O/test.txt 2>&1; log "test rc=$?"
echo "=== V1" >> $O/test.txt; MINIGPT_MEGA_VARIANT=1 timeout 60 $TEST --gtest_filter='*Megakernel*:*Shipped*:*Forward*' >> $O/test.txt 2>&1; log "test V1 rc=$?"
log done
