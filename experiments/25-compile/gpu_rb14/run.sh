#!/bin/bash
# rb14's H200 step (issue 14): register blocking in the row-split forward (gpt_mega_rows.h: rb2,
# rb4 = lm1 with each GEMM thread running several output columns side by side: q, k, v 3 per
# thread, lm_head 5, fc1 and fc2 2 (rb2) or 4 (rb4); bitwise lm1's logits and probs). Runs in the
# lead's final call AFTER scripts/gpu-check.sh (which builds build/cuda's minigpt and
# model_cuda_test). Builds nothing; from the repository root; <= ~60 s (a bench run ~7 s; every
# step time-boxed, skipped past its last start time, saying so).
# Writes $OUT/rb14/ (3 files):
#   tests.log  model_cuda_test --gtest_filter='*ByRows*': the variants test runs lm1, bitw, rb2, rb4
#              (rb2 and rb4 asserted bitwise lm1's logits and probs on 3 models x 7 shapes; each
#              variant's worst probe diff printed: expect 7.15e-06 for all); rc=0 expected.
#   bench.log  `minigpt bench model --device cuda --no-peers --runs 1000 --warmup 100`, the default
#              (MINIGPT_MEGA_ROWS_VARIANT unset: lm1), rb2 and rb4 alternated, 2 rounds: each run's
#              rc, by-rows lines, back-to-back line, max |logit GPU - CPU| line (expect 9.54e-06 for
#              all: the same logits); then per variant the 1-row-per-CTA (cluster 16) and back-to-
#              back values sorted. Expect the default ~21.0 us (back to back ~19.0); rb2 / rb4
#              lower if the GEMM stages are bound by shared-memory delivery (estimated smem cycles
#              of the GEMM stages per forward: lm1 ~14.6k, rb2 ~10.8k, rb4 ~9.7k at 4 cycles per
#              LDS.128; less saved where a stage is bound by its chains instead).
#   trace.log  MINIGPT_MEGA_TRACE=1 with the faster of rb2 / rb4 in round 1 (rb4 if unknown), run
#              between the rounds: a header, its rc, the TRACE lines only (the last CTA's stages;
#              compare qkv+push, fc1, fc2 and the head's [chains ...] with lm1's: gpu_head14/call1
#              and gpu_head14b).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:?set OUT}/rb14; mkdir -p "$O"
T0=$(date +%s)
M=build/cuda/minigpt; TEST=build/cuda/tests/model_cuda_test
A="bench model --device cuda --no-peers --runs 1000 --warmup 100"
ROWS1="forward graph, megakernel by rows, cluster 16 \(1 per CTA\)"
B2B="forward graph, 100 replays back to back"
TMP=$(mktemp -d)
el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "$1" ]; }
: > "$O/bench.log"
{
  if [ -x "$TEST" ]; then
    echo "=== [$(el)s] model_cuda_test --gtest_filter='*ByRows*' (the variants test: lm1, bitw, rb2, rb4)"
    timeout 15 "$TEST" --gtest_filter='*ByRows*' > "$TMP/tests.txt" 2>&1; echo "rc=$?"
    # (a bitwise failure prints whole vectors: the lines cut to 300 characters, 80 at most)
    grep -E "^\[|megakernel by rows|Failure|Expected|Which is|not bitwise|error" "$TMP/tests.txt" | cut -c1-300 | head -80
  else
    echo "missing $TEST (build first)"
  fi
} > "$O/tests.log"
[ -x "$M" ] || { echo "missing $M (build first)" | tee -a "$O/bench.log"; rm -rf "$TMP"; exit 1; }

bench() {  # $1 label (default: the variant unset), $2 round, $3 the last start (s)
  if late "$3"; then echo "=== $1.$2 skipped at $(el)s (time)" >> "$O/bench.log"; return; fi
  if [ "$1" = default ]; then
    echo "=== $1.$2 [$(el)s] (MINIGPT_MEGA_ROWS_VARIANT unset: lm1)" >> "$O/bench.log"
    env -u MINIGPT_MEGA_ROWS_VARIANT timeout 9 "$M" $A > "$TMP/b.txt" 2>&1; echo "rc=$?" >> "$O/bench.log"
  else
    echo "=== $1.$2 [$(el)s] (MINIGPT_MEGA_ROWS_VARIANT=$1)" >> "$O/bench.log"
    MINIGPT_MEGA_ROWS_VARIANT=$1 timeout 9 "$M" $A > "$TMP/b.txt" 2>&1; echo "rc=$?" >> "$O/bench.log"
  fi
  grep -E "^\| forward graph.*(by rows|back to back)|max \|logit" "$TMP/b.txt" >> "$O/bench.log"
  grep -iE "error|fail" "$TMP/b.txt" | head -3 >> "$O/bench.log"
}
val() {  # $1 label, $2 round: its cluster-16 value (us), or empty
  awk -v v="=== $1.$2 " '/^=== /{on = index($0, v) == 1} on' "$O/bench.log" | grep -E "^\| $ROWS1" \
    | awk -F'|' '{print $5}' | tr -d ' ' | head -1
}
trace() {  # the faster rb word's stage trace, between the rounds
  local v=rb4 a b
  a=$(val rb2 1); b=$(val rb4 1)
  if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN{exit !(a + 0 < b + 0)}'; then v=rb2; fi
  if late 30; then echo "=== trace skipped at $(el)s (time)" > "$O/trace.log"; return; fi
  {
    echo "=== [$(el)s] MINIGPT_MEGA_TRACE=1, MINIGPT_MEGA_ROWS_VARIANT=$v (round 1: rb2 ${a:--}, rb4 ${b:--} us), the same bench command"
    MINIGPT_MEGA_TRACE=1 MINIGPT_MEGA_ROWS_VARIANT=$v timeout 8 "$M" $A > "$TMP/t.txt" 2>&1; echo "rc=$?"
    grep -E "^TRACE" "$TMP/t.txt" | head -14
  } > "$O/trace.log"
}
# ~7 s a run after the tests (~3 s): 3, 10, 17, 24 (trace), 31, 38, 45, done ~52 s; the last
# starts by 47 s (+ its 9 s timeout)
bench default 1 8; bench rb2 1 15; bench rb4 1 22; trace; bench default 2 35; bench rb2 2 41; bench rb4 2 47

{
  echo "=== [$(el)s] per variant, us, sorted (round 1-2 values; the first is the lower)"
  for v in default rb2 rb4; do
    for what in "$ROWS1" "$B2B"; do
      vals=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log" | grep -E "^\| $what" \
        | awk -F'|' '{print $5}' | tr -d ' ' | sort -n | tr '\n' ' ')
      printf "%-8s %-24s %s\n" "$v" "$( [ "$what" = "$B2B" ] && echo "back to back" || echo "cluster 16 (1 per CTA)")" "${vals:--}"
    done
  done
  echo "=== done at $(el)s"
} >> "$O/bench.log"
rm -rf "$TMP"
