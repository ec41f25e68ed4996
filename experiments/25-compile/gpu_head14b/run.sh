#!/bin/bash
# head14b's H200 step (issue 14): lm1 made the default of the row-split forward (gpt_mega_rows.h;
# head14 call 1: lm1 21.02 us against bitw's 21.54, medians of 3 alternated rounds), bitw kept as
# the A/B baseline; the other head variants removed. Runs in the lead's final call AFTER
# scripts/gpu-check.sh (which builds build/cuda and runs model_cuda_test, whose variants test covers
# lm1 and bitw, bitwise the same). Builds nothing; from the repository root; <= ~40 s (a bench run
# ~7 s; every step time-boxed, skipped past its last start time, saying so).
# Writes $OUT/head14b/ (2 files):
#   bench.log  `minigpt bench model --device cuda --no-peers --runs 1000 --warmup 100`, the default
#              (MINIGPT_MEGA_ROWS_VARIANT unset: lm1) and bitw alternated, 2 rounds: each run's rc,
#              by-rows lines, back-to-back line and max |logit GPU - CPU| line; then per variant the
#              1-row-per-CTA (cluster 16) values and the back-to-back values, sorted (the lower of 2).
#              Expect default ~21.0 us, bitw ~21.5 (back to back ~19.0 and ~19.6), both logit diffs
#              9.54e-06.
#   trace.log  MINIGPT_MEGA_TRACE=1 with the default (run between the two rounds): a header, its rc,
#              then the TRACE lines only (the last CTA's stages; the head line's [chains, max, sum,
#              probs+stores] split: head14 had bitw's 3.2k, 0.25k, 0.56k, 0.58k and lm1s's chains
#              2.5k; lm1's chains should be ~2.5k, its max and sum ~bitw's).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:?set OUT}/head14b; mkdir -p "$O"
T0=$(date +%s)
M=build/cuda/minigpt
A="bench model --device cuda --no-peers --runs 1000 --warmup 100"
ROWS1="forward graph, megakernel by rows, cluster 16 \(1 per CTA\)"
B2B="forward graph, 100 replays back to back"
TMP=$(mktemp -d)
el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "$1" ]; }
[ -x "$M" ] || { echo "missing $M (build first)" | tee "$O/bench.log"; rm -rf "$TMP"; exit 1; }

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
: > "$O/bench.log"
trace() {  # the default's stage trace, between the rounds (so a slow run skips a bench, not it)
  if late 19; then echo "=== trace skipped at $(el)s (time)" > "$O/trace.log"; return; fi
  {
    echo "=== [$(el)s] MINIGPT_MEGA_TRACE=1, MINIGPT_MEGA_ROWS_VARIANT unset (lm1), the same bench command"
    env -u MINIGPT_MEGA_ROWS_VARIANT MINIGPT_MEGA_TRACE=1 timeout 8 "$M" $A > "$TMP/t.txt" 2>&1; echo "rc=$?"
    grep -E "^TRACE" "$TMP/t.txt" | head -14
  } > "$O/trace.log"
}
# ~7 s a run: 0, 7, 14 (trace), 21, 28, done ~35 s; the last starts by 31 s (+ its 9 s timeout)
bench default 1 2; bench bitw 1 10; trace; bench default 2 24; bench bitw 2 31

{
  echo "=== [$(el)s] per variant, us, sorted (round 1-2 values; the first is the lower)"
  for v in default bitw; do
    for what in "$ROWS1" "$B2B"; do
      vals=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log" | grep -E "^\| $what" \
        | awk -F'|' '{print $5}' | tr -d ' ' | sort -n | tr '\n' ' ')
      printf "%-8s %-24s %s\n" "$v" "$( [ "$what" = "$B2B" ] && echo "back to back" || echo "cluster 16 (1 per CTA)")" "${vals:--}"
    done
  done
  echo "=== done at $(el)s"
} >> "$O/bench.log"
rm -rf "$TMP"
