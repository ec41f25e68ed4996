#!/bin/bash
# fold14's H200 call (issue 14: the forward at (2, 16) in <= 20 us; variant `fold` of the row-split
# megakernel, gpt_mega_rows.cu's kVarFold: ln1, ln2 and ln_f folded into q/k/v, fc1 and lm_head).
# Run from the repository root AFTER the lead's build (`cmake --preset cuda && cmake --build
# build/cuda --target minigpt model_cuda_test`); it builds nothing and takes ~90-100 s (a bench
# run ~7.5 s; a bench starting past 91 s, the foldw1 trace past 75 s, fold's past 62 s, is
# skipped and says so). Variants (gpt_mega_rows.h): fold (the statistics in every GEMM warp), foldw (by one idle warp, handed
# over by a named barrier), foldw1 (foldw + the head's softmax with one CTA barrier); fold1 (fold
# + that softmax) is tested, not benched. Writes $OUT/fold14/ (3 files):
#   tests.log  model_cuda_test's row-split tests (the variants test runs bitw, w15, fold, fold1,
#              foldw, foldw1: w15 bitwise bitw, the fold ones within 1e-4 of the CPU at random ids
#              and 1e-5 with the same top-1 on the probes, each variant's probe worst printed), then
#              the forward / probe tests with MINIGPT_MEGA_ROWS_VARIANT=fold, then =foldw1
#   bench.log  `minigpt bench model --device cuda --no-peers --runs 1000 --warmup 100`'s by-rows
#              lines, back to back and the logits' diff from the CPU, bitw (the default) / fold /
#              foldw / foldw1 alternated, 2 rounds, then a third as time allows, then the medians
#              of the 1-row-per-CTA line
#   trace.log  MINIGPT_MEGA_TRACE=1 stage traces of foldw1, then fold if time allows (ln1, ln2
#              ~0; the head line split [chains, max, sum, probs+stores]; bitw's:
#              gpu_rows14e/call1/trace.log)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:?set OUT}/fold14; mkdir -p "$O"
T0=$(date +%s)
VARIANTS="bitw fold foldw foldw1"
M=build/cuda/minigpt; TEST=build/cuda/tests/model_cuda_test
A="bench model --device cuda --no-peers --runs 1000 --warmup 100"
ROWS1="forward graph, megakernel by rows, cluster 16 \(1 per CTA\)"
TMP=$(mktemp -d)
el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "${1:-100}" ]; }
for f in "$M" "$TEST"; do [ -x "$f" ] || { echo "missing $f (build first)" | tee "$O/tests.log"; exit 1; }; done

{
  echo "=== [$(el)s] model_cuda_test --gtest_filter='*ByRows*' (every variant in the variants test)"
  timeout 40 "$TEST" --gtest_filter='*ByRows*' 2>&1; echo "rc=$?"
  for v in fold foldw1; do
    echo "=== [$(el)s] MINIGPT_MEGA_ROWS_VARIANT=$v, the forward and probe tests"
    MINIGPT_MEGA_ROWS_VARIANT=$v timeout 20 "$TEST" \
      --gtest_filter='*ForwardMatches*:*GraphReplays*:*MegakernelByRowsMatchesTheCpu*:*Probe*' 2>&1; echo "rc=$?"
  done
} > "$O/tests.log"

bench() {  # $1 variant, $2 round
  late 91 && { echo "=== $1.$2 skipped at $(el)s (time)" >> "$O/bench.log"; return; }
  echo "=== $1.$2 [$(el)s] (MINIGPT_MEGA_ROWS_VARIANT=$1)" >> "$O/bench.log"
  MINIGPT_MEGA_ROWS_VARIANT=$1 timeout 15 "$M" $A > "$TMP/b.txt" 2>&1; echo "rc=$?" >> "$O/bench.log"
  grep -E "^\| forward graph.*(by rows|back to back)|max \|logit" "$TMP/b.txt" >> "$O/bench.log"
  grep -iE "error|fail" "$TMP/b.txt" | head -3 >> "$O/bench.log"
}
for round in 1 2; do for v in $VARIANTS; do bench $v $round; done; done
{
  for v in foldw1 fold; do
    late $([ $v = foldw1 ] && echo 75 || echo 62) && { echo "=== trace $v skipped at $(el)s (time)"; continue; }
    echo "=== [$(el)s] MINIGPT_MEGA_TRACE=1 MINIGPT_MEGA_ROWS_VARIANT=$v"
    MINIGPT_MEGA_TRACE=1 MINIGPT_MEGA_ROWS_VARIANT=$v timeout 15 "$M" $A > "$TMP/t.txt" 2>&1; echo "rc=$?"
    grep -E "TRACE rows rp=1|TRACE  (layer|head)" "$TMP/t.txt" | head -12
  done
} > "$O/trace.log"
for v in $VARIANTS; do bench $v 3; done
{
  echo "=== [$(el)s] medians of '$ROWS1' (us), rounds 1-3"
  for v in $VARIANTS; do
    awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log" | grep -E "$ROWS1" | awk -F'|' '{print $5}' \
      | sort -n | awk -v v=$v '{a[NR] = $1} END {printf "%-8s %s (of %d: ", v, NR ? a[int((NR + 1) / 2)] : "-", NR; for (i = 1; i <= NR; ++i) printf " %s", a[i]; print ")"}'
  done
  echo "=== done at $(el)s"
} >> "$O/bench.log"
rm -rf "$TMP"
