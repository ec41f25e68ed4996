#!/bin/bash
# rows14e's part of the lead's shared H200 call (issue 14: the forward at (2, 16) in 20 us). Run
# from the repository root AFTER the lead's build (`cmake --preset cuda && cmake --build build/cuda
# --target minigpt model_cuda_test`); it builds nothing and takes ~95 s (7 s a bench run in
# gpu_rows14d; a bench starting past 100 s is skipped and says so). Writes $OUT/rows14e/ (3 files):
#   tests.log  model_cuda_test's row-split tests (the variants test runs every
#              MINIGPT_MEGA_ROWS_VARIANT: bitwise the default, pwkeys, where kMegaRowsVariantBitwise
#              says so (w15, bitw), every variant's probes within 1e-5, each worst printed), then
#              the forward tests with lnpart and with bwlp (not guaranteed bitwise) as the
#              process's variant
#   bench.log  `minigpt bench model --device cuda --no-peers --runs 1000 --warmup 100`'s by-rows
#              lines (and back to back, and the logits' diff from the CPU), pwkeys (the default) /
#              bitw / lnpart / bwlp alternated, 3 rounds, then the medians of the 1-row-per-CTA line
#   trace.log  MINIGPT_MEGA_TRACE=1 stage trace of the best variant by rounds 1-2 (pwkeys':
#              gpu_rows14d/call1/trace.log)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:?set OUT}/rows14e; mkdir -p "$O"
T0=$(date +%s)
VARIANTS="pwkeys bitw lnpart bwlp"
M=build/cuda/minigpt; TEST=build/cuda/tests/model_cuda_test
A="bench model --device cuda --no-peers --runs 1000 --warmup 100"
ROWS1="forward graph, megakernel by rows, cluster 16 \(1 per CTA\)"
el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "${1:-100}" ]; }
for f in "$M" "$TEST"; do [ -x "$f" ] || { echo "missing $f (build first)" | tee "$O/tests.log"; exit 1; }; done

{
  echo "=== [$(el)s] model_cuda_test --gtest_filter='*ByRows*' (every variant in the variants test)"
  timeout 40 "$TEST" --gtest_filter='*ByRows*' 2>&1; echo "rc=$?"
  for v in lnpart bwlp; do
    echo "=== [$(el)s] MINIGPT_MEGA_ROWS_VARIANT=$v, the forward tests"
    MINIGPT_MEGA_ROWS_VARIANT=$v timeout 30 "$TEST" \
      --gtest_filter='*ForwardMatches*:*GraphReplays*:*MegakernelByRowsMatchesTheCpu*:*Probe*' 2>&1; echo "rc=$?"
  done
} > "$O/tests.log"

bench() {  # $1 variant, $2 round
  late && { echo "=== $1.$2 skipped at $(el)s (time)" >> "$O/bench.log"; return; }
  echo "=== $1.$2 [$(el)s] (MINIGPT_MEGA_ROWS_VARIANT=$1)" >> "$O/bench.log"
  MINIGPT_MEGA_ROWS_VARIANT=$1 timeout 15 "$M" $A > /tmp/rows14e_b.txt 2>&1; echo "rc=$?" >> "$O/bench.log"
  grep -E "^\| forward graph.*(by rows|back to back)|max \|logit" /tmp/rows14e_b.txt >> "$O/bench.log"
}
for round in 1 2; do for v in $VARIANTS; do bench $v $round; done; done
# the best by rounds 1-2: the lowest 1-row-per-CTA time of either round
best=$(for v in $VARIANTS; do
  us=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log" | grep -E "$ROWS1" | awk -F'|' '{print $5}' | sort -n | head -1)
  echo "${us:-999} $v"; done | sort -n | head -1 | awk '{print $2}')
{
  echo "=== [$(el)s] MINIGPT_MEGA_TRACE=1 MINIGPT_MEGA_ROWS_VARIANT=$best (pwkeys': gpu_rows14d/call1/trace.log)"
  MINIGPT_MEGA_TRACE=1 MINIGPT_MEGA_ROWS_VARIANT=$best timeout 15 "$M" $A > /tmp/rows14e_t.txt 2>&1; echo "rc=$?"
  grep -E "TRACE rows rp=1|TRACE  (layer|head)" /tmp/rows14e_t.txt | head -12
} > "$O/trace.log"
for v in $VARIANTS; do bench $v 3; done
{
  echo "=== [$(el)s] medians of '$ROWS1' (us), rounds 1-3; best by rounds 1-2: $best"
  for v in $VARIANTS; do
    awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log" | grep -E "$ROWS1" | awk -F'|' '{print $5}' \
      | sort -n | awk -v v=$v '{a[NR] = $1} END {printf "%-8s %s (of %d: ", v, NR ? a[int((NR + 1) / 2)] : "-", NR; for (i = 1; i <= NR; ++i) printf " %s", a[i]; print ")"}'
  done
  echo "=== done at $(el)s"
} >> "$O/bench.log"
