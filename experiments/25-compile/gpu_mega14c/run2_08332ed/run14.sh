#!/bin/bash
# issue 14 A/B round 2 (mega14c): main's build (the run's root) against this tree's variants.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT; T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $O/steps.txt; }
log build
(cd ../.. && cmake --preset cuda >/dev/null && cmake --build build/cuda -j16 --target minigpt) > $O/build_main.txt 2>&1 &
PM=$!
(cmake --preset cuda >/dev/null && cmake --build build/cuda -j16 --target minigpt model_cuda_test) > $O/build.txt 2>&1 || { log "build failed"; tail -60 $O/build.txt; exit 1; }
log built; wait $PM; log "main built rc=$?"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv >> $O/steps.txt 2>&1
TEST=$(find build/cuda -name model_cuda_test -type f | head -1)
MAIN=../../build/cuda/minigpt; MINE=build/cuda/minigpt
A="bench model --device cuda --no-peers"
bench() { log "bench $1 V$2"; echo "=== $1 V$2" >> $O/bench.txt; MINIGPT_MEGA_VARIANT=$2 timeout 60 $3 $A --runs 1000 --warmup 100 >> $O/bench.txt 2>&1; log "rc=$?"; }
tr() {
  log "trace $1 V$2"; echo "=== $1 V$2" >> $O/trace.txt
  MINIGPT_MEGA_VARIANT=$2 MINIGPT_MEGA_TRACE=1 timeout 30 $3 $A --runs 100 --warmup 10 > $O/tr_raw.txt 2>&1
  grep -A5 "TRACE N=32 cache=0 heads=1 R=16" $O/tr_raw.txt | head -12 >> $O/trace.txt
  grep "forward graph (logits" $O/tr_raw.txt >> $O/trace.txt
}
log test; timeout 60 $TEST > $O/test.txt 2>&1; log "test V97 rc=$?"
for v in 161 353 609 1121 1; do echo "=== V$v" >> $O/test_vars.txt; MINIGPT_MEGA_VARIANT=$v timeout 60 $TEST --gtest_filter='*Megakernel*:*Shipped*:*Forward*:*Graph*' >> $O/test_vars.txt 2>&1; log "test V$v rc=$?"; done
bench main 0 $MAIN; for v in 97 609 353 1121; do bench mine $v $MINE; done
tr main 0 $MAIN
for v in 0 1 32 64 128 256 512 1024 97 161 353 609 1121; do tr mine $v $MINE; done
rm -f $O/tr_raw.txt
bench main 0 $MAIN; for v in 97 609 353 1121; do bench mine $v $MINE; done
log done
