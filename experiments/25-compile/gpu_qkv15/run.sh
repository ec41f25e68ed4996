#!/bin/bash
# qkv15's part of the lead's H200 call (issue 15): rows-qkv2 (MINIGPT_CUDA_VARIANT=rows-qkv2; generate_rows'
# qkv2) against the default text. Both bitwise the same values. What the default's sm_90a SASS of the
# qkv stage showed (nvcc 13.0 -cubin, nvdisasm; layer 0 at the shipped (2, 16)): the dot's LDS.128 are
# already issued ~4 steps ahead of the FFMA chain (8 loads before the first FFMA; bandwidth-bound, no
# sinking); after the dot: UCGABAR_WAIT + CCTL.IVALL (the cluster wait) -> the bias LDS -> FADD -> STS
# -> 3 SHFL.DOWN -> the sends (mapa = 2 PRMTs per st.async: nothing to hoist), each lane's STAS.128 in
# ascending CTA order, so the last CTA (the most keys: the forward's critical row) gets every row last.
# rows-qkv2: the bias loaded before the dot, the local stores and shuffles before the cluster wait, the
# sends from CTA kT - 1 down. Expect a shorter "k, v wait" interval in the trace (the traced CTA is the
# last one), the "(to the k, v wait)" interval about the same.
# Run from the repository root AFTER the lead's build (minigpt, compile_cuda_test, compile_cuda_codegen_test
# in build/cuda); builds nothing, <= 80 s (each step time-boxed; a step starting too late is skipped and
# says so). Writes $OUT/qkv15/:
#   bench.log  `minigpt compile --device cuda --graph gpt --explain --mode default`, the default and
#              rows-qkv2 alternated, 3 rounds, one NVRTC cache: per run the variant line, the kernel's
#              row, the whole-forward line and the trace's qkv lines; then the medians (kernel, replay
#              alone, per replay in 100 back to back) and per text the qkv intervals' medians over the
#              rounds and their sums
#   trace.log  round 1's two stage-trace tables in full (the default's, then rows-qkv2's)
#   tests.log  compile_cuda_test's RowsFormDefaultAndQkv2TextsAgreeBitwise (memcmp of logits and probs,
#              the rows tests' nine shapes), RowsForm* under MINIGPT_CUDA_VARIANT=rows-qkv2 (vs the CPU,
#              the trace test), then the codegen test's Qkv2 text test (NVRTC at every shape)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:?set OUT}/qkv15; mkdir -p "$O"
T0=$(date +%s)
M=build/cuda/minigpt
TEST=build/cuda/tests/compile_cuda_test
CG=build/cuda/tests/compile_cuda_codegen_test
el() { echo $(( $(date +%s) - T0 )); }
late() { [ "$(el)" -gt "${1:-20}" ]; }
left() { local l=$(( $1 - $(el) )); echo $(( l > 1 ? l : 1 )); }  # seconds until $1 s after the start (>= 1)
for f in "$M" "$TEST" "$CG"; do [ -x "$f" ] || echo "missing $f (build first)" | tee -a "$O/bench.log"; done

cache=$(mktemp -d); tmp=$(mktemp)
: > "$O/trace.log"
explain() {  # $1 label, $2 variant words, $3 round
  late 35 && { echo "=== $1.$3 skipped at $(el)s (time)" >> "$O/bench.log"; return; }
  echo "=== $1.$3 [$(el)s] (MINIGPT_CUDA_VARIANT=\"$2\")" >> "$O/bench.log"
  MINIGPT_CACHE_DIR=$cache MINIGPT_CUDA_VARIANT="$2" timeout 15 "$M" compile --device cuda --graph gpt --explain --mode default > "$tmp" 2>&1
  echo "rc=$?" >> "$O/bench.log"
  grep -E "^variant:|^\| cuda_rows_forward|whole forward as one CUDA graph|rror" "$tmp" \
    | sed -E 's/^\| cuda_rows_forward \|[^|]*\|/| cuda_rows_forward | (ops) |/' | cut -c1-400 >> "$O/bench.log"
  sed -n '/^stage trace of/,/^TRACE total/p' "$tmp" | grep -E "attn\.qkv\.out|^TRACE total" | cut -c1-200 >> "$O/bench.log"
  if [ "$3" = 1 ]; then
    { echo "=== $1 (MINIGPT_CUDA_VARIANT=\"$2\"), round 1"; grep -E "^variant:|^\| cuda_rows_forward" "$tmp" | cut -c1-200
      sed -n '/^stage trace of/,/^TRACE total/p' "$tmp"; grep -E "^stage trace unavailable" "$tmp"; echo; } >> "$O/trace.log"
  fi
}
for round in 1 2 3; do explain default "" $round; explain qkv2 rows-qkv2 $round; done
{
  echo "=== [$(el)s] medians over the rounds (us): kernel (explain's table) | replay alone | per replay in 100 back to back"
  med() { echo "$1" | grep -E '^-?[0-9.]+$' | sort -n | awk '{x[NR] = $1} END {if (NR) printf "%s (of %d:", x[int((NR + 1) / 2)], NR; else printf "- (none"; for (i = 1; i <= NR; ++i) printf " %s", x[i]; printf ")"}'; }
  for v in default qkv2; do
    blk=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log")
    k=$(echo "$blk" | grep -E "^\| cuda_rows_forward" | awk -F'|' '{gsub(/ /, "", $(NF-2)); print $(NF-2)}')
    a=$(echo "$blk" | grep -oE "[0-9.]+ us per replay alone" | awk '{print $1}')
    b=$(echo "$blk" | grep -oE "[0-9.]+ us per replay in 100" | awk '{print $1}')
    echo "$v: kernel $(med "$k") | alone $(med "$a") | back to back $(med "$b")"
  done
  echo "=== the qkv stages' trace intervals (cycles, thread 0 of the last CTA): per interval the median over the rounds"
  for v in default qkv2; do
    blk=$(awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log" | grep -E "^\| stage [0-9]+: matmul -> .*attn\.qkv\.out")
    sto=0; skv=0
    while IFS= read -r name; do
      [ -n "$name" ] || continue
      vals=$(echo "$blk" | awk -F'|' -v n="$name" '$2 == n {gsub(/ /, "", $3); print $3}')
      m=$(med "$vals"); echo "$v:$name: $m"
      mv=${m%% *}; [[ "$mv" =~ ^-?[0-9]+$ ]] || mv=0
      if [[ "$name" == *"k, v wait (rw_kv_wait)"* ]]; then skv=$((skv + mv)); else sto=$((sto + mv)); fi
    done < <(echo "$blk" | awk -F'|' '{print $2}' | awk '!seen[$0]++')
    echo "$v: sum of the medians: (to the k, v wait) $sto, the k, v waits $skv, both $((sto + skv))"
  done
  echo "=== done at $(el)s"
} >> "$O/bench.log" 2>&1
rm -rf "$cache" "$tmp"

# the tests after the timings (each step time-boxed; the whole script <= 80 s)
{
  echo "=== [$(el)s] compile_cuda_test RowsFormDefaultAndQkv2TextsAgreeBitwise (git $(git rev-parse --short HEAD 2>/dev/null))"
  timeout $(left 50) "$TEST" --gtest_filter='CompileCuda.RowsFormDefaultAndQkv2TextsAgreeBitwise' 2>&1 | grep -vE "^\[ RUN|^$" | cut -c1-300; echo "rc=${PIPESTATUS[0]} (124: cut)"
  if late 55; then echo "=== skipped RowsForm* under rows-qkv2 at $(el)s (time)"; else
    echo "=== [$(el)s] compile_cuda_test RowsForm* under MINIGPT_CUDA_VARIANT=rows-qkv2 (the bitwise tests against other texts skip themselves)"
    MINIGPT_CUDA_VARIANT=rows-qkv2 timeout $(left 70) "$TEST" --gtest_filter='CompileCuda.RowsForm*' 2>&1 | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|actual|Which is|max" | cut -c1-300; echo "rc=${PIPESTATUS[0]} (124: cut at 70 s)"
  fi
  if late 70; then echo "=== skipped the codegen test at $(el)s (time)"; else
    echo "=== [$(el)s] compile_cuda_codegen_test *Qkv2* (text checks, NVRTC)"
    timeout $(left 79) "$CG" --gtest_filter='*Qkv2*' 2>&1 | grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|actual|Which is"; echo "rc=${PIPESTATUS[0]}"
  fi
  echo "=== done at $(el)s"
} > "$O/tests.log" 2>&1
