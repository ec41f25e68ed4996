#!/bin/bash
# mega14e's one call: the LayerNorm's statistics and the decode step's cluster barriers, as kernel
# instances of ONE build picked by MINIGPT_MEGA_VARIANT (0 = main's form; bits 1|2 = kLn: 1 float
# two-pass, 2 float one-pass shifted by the row's first value, 3 double sums + float rsqrtf; 4 the
# decode step's / device loop's cluster barriers with one fence per CTA and the loop's start
# arrival relaxed). Binaries prebuilt on the CPU host (prebuilt/, default preset, sm_90a) if they
# run here, else built. Per variant: model_cuda_test, one trace; the bench alternated twice.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=$OUT; T0=$(date +%s); LIMIT=${LIMIT:-190}
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $O/steps.txt; }
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
M=prebuilt/minigpt; TEST=prebuilt/model_cuda_test
gunzip -f prebuilt/*.gz 2>/dev/null; chmod +x $M $TEST 2>/dev/null
# the prebuilt test finds the shipped model and the probes under its MINIGPT_SOURCE_DIR
[ -e /work/wt-mega14e ] || { mkdir -p /work && ln -s "$PWD" /work/wt-mega14e; } || log "no /work/wt-mega14e link"
if ! ( $M --help && $TEST --gtest_list_tests && ls /work/wt-mega14e/models/grammar-minigpt.safetensors ) > $O/prebuilt.txt 2>&1; then
  log "prebuilt binaries do not run: building"
  (cmake --preset cuda >/dev/null && cmake --build build/cuda -j16 --target minigpt model_cuda_test) > $O/build.txt 2>&1 || { log "build failed"; tail -60 $O/build.txt; exit 1; }
  M=build/cuda/minigpt; TEST=$(find build/cuda -name model_cuda_test -type f | head -1); rm -f $O/build.txt
fi
log "binaries: $M $TEST"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv >> $O/steps.txt 2>&1
A="bench model --device cuda --no-peers"
VS="0 1 2 3 4 5 6 7"
for v in $VS; do echo "=== V$v" >> $O/test.txt; MINIGPT_MEGA_VARIANT=$v timeout 60 $TEST >> $O/test.txt 2>&1; log "test V$v rc=$?"; done
for v in $VS; do
  echo "=== V$v" >> $O/trace.txt
  MINIGPT_MEGA_VARIANT=$v MINIGPT_MEGA_TRACE=1 timeout 30 $M $A --runs 100 --warmup 10 > $O/tr_raw.txt 2>&1
  grep "TRACE" $O/tr_raw.txt | head -16 >> $O/trace.txt
  grep "forward graph (logits\|decode graph alone (events), mega 8 heads\|max |logit" $O/tr_raw.txt >> $O/trace.txt
  log "trace V$v"
done
rm -f $O/tr_raw.txt
for round in 1 2; do
  for v in $VS; do
    if [ "$(left)" -lt 10 ]; then log "no time left for bench V$v round $round"; continue; fi
    echo "=== V$v round $round" >> $O/bench.txt
    MINIGPT_MEGA_VARIANT=$v timeout $(left) $M $A --runs 1000 --warmup 100 >> $O/bench.txt 2>&1; log "bench V$v round $round rc=$?"
  done
done
log done
