#!/bin/bash
# rows14d's part of the lead's shared H200 call (issue 14: the forward at (2, 16) in 20 us). Run
# from the repository root AFTER the lead's build (`cmake --preset cuda && cmake --build build/cuda
# --target minigpt model_cuda_test`); it builds nothing and takes ~100 s (7 s a bench run in
# gpu_rows14c; a bench starting past 100 s is skipped and says so; at most ~115 s). Writes $OUT/rows14d/ (3 files):
#   tests.log  model_cuda_test's row-split tests with each MINIGPT_MEGA_ROWS_VARIANT (the variants
#              test runs them all: bitwise w15 where kMegaRowsVariantBitwise says so, the probes
#              within 1e-5, each variant's worst probe diff printed), then the forward tests with
#              pwsplit (the one not bitwise w15) as the process's variant; and, if the Python
#              module was built (build/cuda/python) and it is before 88 s,
#              bench/forward_accuracy.py's float64 table with a row per variant
#   bench.log  `minigpt bench model --device cuda --no-peers --runs 1000 --warmup 100`'s by-rows
#              lines (and back to back, and the logits' diff from the CPU), w15 / prewait / pwkeys
#              / pwsplit alternated, 3 rounds, then the medians of the 1-row-per-CTA line
#   trace.log  MINIGPT_MEGA_TRACE=1 stage trace of the best variant by rounds 1-2
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:?set OUT}/rows14d; mkdir -p "$O"
T0=$(date +%s)
VARIANTS="w15 prewait pwkeys pwsplit"
M=build/cuda/minigpt; TEST=build/cuda/tests/model_cuda_test
A="bench model --device cuda --no-peers --runs 1000 --warmup 100"
ROWS1="forward graph, megakernel by rows, cluster 16 \(1 per CTA\)"
el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "${1:-100}" ]; }
for f in "$M" "$TEST"; do [ -x "$f" ] || { echo "missing $f (build first)" | tee "$O/tests.log"; exit 1; }; done

{
  echo "=== [$(el)s] model_cuda_test --gtest_filter='*ByRows*' (every variant in the variants test)"
  timeout 40 "$TEST" --gtest_filter='*ByRows*' 2>&1; echo "rc=$?"
  echo "=== [$(el)s] MINIGPT_MEGA_ROWS_VARIANT=pwsplit, the forward tests"
  MINIGPT_MEGA_ROWS_VARIANT=pwsplit timeout 30 "$TEST" \
    --gtest_filter='*ForwardMatches*:*GraphReplays*:*MegakernelByRowsMatchesTheCpu*:*Probe*' 2>&1; echo "rc=$?"
} > "$O/tests.log"

bench() {  # $1 variant, $2 round
  late && { echo "=== $1.$2 skipped at $(el)s (time)" >> "$O/bench.log"; return; }
  echo "=== $1.$2 [$(el)s] (MINIGPT_MEGA_ROWS_VARIANT=$1)" >> "$O/bench.log"
  MINIGPT_MEGA_ROWS_VARIANT=$1 timeout 15 "$M" $A > /tmp/rows14d_b.txt 2>&1; echo "rc=$?" >> "$O/bench.log"
  grep -E "^\| forward graph.*(by rows|back to back)|max \|logit" /tmp/rows14d_b.txt >> "$O/bench.log"
}
for round in 1 2; do for v in $VARIANTS; do bench $v $round; done; done
# the best by rounds 1-2: the lowest 1-row-per-CTA time of either round
best=$(for v in $VARIANTS; do
  us=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log" | grep -E "$ROWS1" | awk -F'|' '{print $5}' | sort -n | head -1)
  echo "${us:-999} $v"; done | sort -n | head -1 | awk '{print $2}')
{
  echo "=== [$(el)s] MINIGPT_MEGA_TRACE=1 MINIGPT_MEGA_ROWS_VARIANT=$best (w15's: gpu_rows14c/call1/trace.txt)"
  MINIGPT_MEGA_TRACE=1 MINIGPT_MEGA_ROWS_VARIANT=$best timeout 15 "$M" $A > /tmp/rows14d_t.txt 2>&1; echo "rc=$?"
  grep -E "TRACE rows rp=1|TRACE  (layer|head)" /tmp/rows14d_t.txt | head -12
} > "$O/trace.log"
for v in $VARIANTS; do bench $v 3; done
{
  echo "=== [$(el)s] medians of '$ROWS1' (us), rounds 1-3; best by rounds 1-2: $best"
  for v in $VARIANTS; do
    awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log" | grep -E "$ROWS1" | awk -F'|' '{print $5}' \
      | sort -n | awk -v v=$v '{a[NR] = $1} END {printf "%-8s %s (of %d: ", v, NR ? a[int((NR + 1) / 2)] : "-", NR; for (i = 1; i <= NR; ++i) printf " %s", a[i]; print ")"}'
  done
} >> "$O/bench.log"
if ls build/cuda/python/_minigpt_core*.so > /dev/null 2>&1 && ! late 88; then
  echo "=== [$(el)s] bench/forward_accuracy.py (FORWARD_ACCURACY_ROWS_VARIANTS=$VARIANTS)" >> "$O/tests.log"
  PYTHONPATH=python:build/cuda/python FORWARD_ACCURACY_ROWS_VARIANTS="$VARIANTS" timeout 25 python3 bench/forward_accuracy.py \
    >> "$O/tests.log" 2>&1; echo "rc=$?" >> "$O/tests.log"
else
  echo "=== forward_accuracy.py not run (no build/cuda/python module, or time): the bench's max |logit GPU - CPU| lines stand in" >> "$O/tests.log"
fi
echo "=== done at $(el)s" >> "$O/bench.log"
