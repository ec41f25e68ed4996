#!/bin/bash
# head14's H200 call (issue 14: the forward at (2, 16) in <= 20 us; the row-split megakernel's head,
# bitw's lm_head + softmax + stores 4.6k cycles). Run from the repository root AFTER the lead's
# build (`cmake --preset cuda && cmake --build build/cuda --target minigpt model_cuda_test`); it
# builds nothing and takes <= ~110 s (a bench run ~7 s; each step skipped past its time, saying so).
# Variants (gpt_mega_rows.h, gpt_mega_rows.cu's kVar comments), on bitw's bits:
#   lm1   the warps with no second vocabulary column (warps 4.. at V 611) run ONE lm_head chain
#         (bitw runs two in every thread, the second on w1 = w0: 1024 chains' shared-memory reads
#         for 611 columns) and the logits stored before the softmax; bitwise bitw
#   lm1s  lm1 + soft1 (the softmax with one CTA barrier; the probs not bitwise)
#   lmqs  the 99 columns past 512 a quarter of k to each of 4 lanes (no thread runs two full
#         chains; not bitwise: held to the CPU) + the early logits' stores + soft1
#   (soft1, lmq, lm1u8 are tested, not benched)
# Writes $OUT/head14/ (3 files):
#   tests.log  model_cuda_test's row-split tests (the variants test runs bitw, w15, soft1, lm1, lm1s,
#              lmq, lmqs, lm1u8: the bitwise ones against bitw's bits, the others within 1e-4 of the
#              CPU at random ids and 1e-5 with the same top-1 on the probes, each variant's probe worst
#              printed), then the forward / probe tests with MINIGPT_MEGA_ROWS_VARIANT=lmqs
#   bench.log  `minigpt bench model --device cuda --no-peers --runs 1000 --warmup 100`'s by-rows lines,
#              back to back and the logits' diff from the CPU; bitw / lm1 / lm1s / lmqs alternated, 2
#              rounds, a third as time allows, then each variant's 1-row-per-CTA values sorted
#              (median of 3, or the lower of 2)
#   trace.log  MINIGPT_MEGA_TRACE=1 stage traces of bitw, then lm1s (the head line split [chains, max,
#              sum, probs+stores]; soft1's max is its one barrier, its sum ~0); then, if time allows,
#              an ncu source-level profile of one launch of bitw's instance (the variants test's first
#              forward: the shipped model at (2, 16)): its 80 hottest SASS lines after the head's first
#              CTA barrier (the third-last BAR.SYNC), in address order, with their samples and any
#              stall-reason columns the source page gives
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O=${OUT:?set OUT}/head14; mkdir -p "$O"
T0=$(date +%s)
VARIANTS="bitw lm1 lm1s lmqs"
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
  echo "=== [$(el)s] MINIGPT_MEGA_ROWS_VARIANT=lmqs, the forward and probe tests"
  MINIGPT_MEGA_ROWS_VARIANT=lmqs timeout 20 "$TEST" \
    --gtest_filter='*ForwardMatches*:*GraphReplays*:*MegakernelByRowsMatchesTheCpu*:*Probe*' 2>&1; echo "rc=$?"
} > "$O/tests.log"

bench() {  # $1 variant, $2 round, $3 the last start (s)
  late "${3:-91}" && { echo "=== $1.$2 skipped at $(el)s (time)" >> "$O/bench.log"; return; }
  echo "=== $1.$2 [$(el)s] (MINIGPT_MEGA_ROWS_VARIANT=$1)" >> "$O/bench.log"
  MINIGPT_MEGA_ROWS_VARIANT=$1 timeout 15 "$M" $A > "$TMP/b.txt" 2>&1; echo "rc=$?" >> "$O/bench.log"
  grep -E "^\| forward graph.*(by rows|back to back)|max \|logit" "$TMP/b.txt" >> "$O/bench.log"
  grep -iE "error|fail" "$TMP/b.txt" | head -3 >> "$O/bench.log"
}
for round in 1 2; do for v in $VARIANTS; do bench $v $round 80; done; done
{
  for v in bitw lm1s; do
    late 88 && { echo "=== trace $v skipped at $(el)s (time)"; continue; }
    echo "=== [$(el)s] MINIGPT_MEGA_TRACE=1 MINIGPT_MEGA_ROWS_VARIANT=$v"
    MINIGPT_MEGA_TRACE=1 MINIGPT_MEGA_ROWS_VARIANT=$v timeout 12 "$M" $A > "$TMP/t.txt" 2>&1; echo "rc=$?"
    grep -E "TRACE rows rp=1|TRACE  (layer|head)" "$TMP/t.txt" | head -12
  done
} > "$O/trace.log"

# ncu: one launch of bitw's instance (gpt_mega_rows_kernel<1, false, 111>), sampled every 32 cycles:
# the variants test's first, bitw on the shipped model at (2, 16) (a short process: the bench's
# many paths under ncu would not fit the time)
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -z "$NCU" ]; then
  echo "=== ncu: not found" >> "$O/trace.log"
elif late 78; then
  echo "=== ncu skipped at $(el)s (time)" >> "$O/trace.log"
else
  {
    echo "=== [$(el)s] ncu ($NCU) --set full --sampling-interval 0, one launch of bitw's instance"
    timeout 24 "$NCU" --set full --sampling-interval 0 --kernel-name-base mangled \
      -k "regex:gpt_mega_rows_kernelILi1ELb0ELi111E" -c 1 -o "$TMP/prof" \
      "$TEST" --gtest_filter='*MegakernelByRowsVariantsMatchTheCpu*' > "$TMP/ncu.txt" 2>&1
    echo "rc=$? [$(el)s]"; grep -E "^==PROF==|==ERROR|==WARNING" "$TMP/ncu.txt" | head -5
    if [ -f "$TMP/prof.ncu-rep" ]; then
      timeout 6 "$NCU" -i "$TMP/prof.ncu-rep" --page source --csv --print-source sass > "$TMP/src.csv" 2> "$TMP/src.err"
      echo "source page rc=$? lines=$(wc -l < "$TMP/src.csv")"; head -c 300 "$TMP/src.err"
      timeout 4 python3 - "$TMP/src.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hi = next((i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r)), None)
if hi is None:
    print("no header with a Source column; first lines:", rows[:3]); sys.exit()
hdr = [c.strip() for c in rows[hi]]
print("columns:", " | ".join(hdr))
src = hdr.index("Source")
addr = next((i for i, c in enumerate(hdr) if "Address" in c), 0)
samp = [i for i, c in enumerate(hdr) if "Sampl" in c]
stall = [i for i, c in enumerate(hdr) if c.lower().startswith("stall") or ("Stall" in c and i not in samp)]
exe = next((i for i, c in enumerate(hdr) if c.startswith("Instructions Executed")), None)
def num(r, i):
    try: return float(r[i].replace(",", ""))
    except (ValueError, IndexError): return 0.0
body = [r for r in rows[hi + 1:] if len(r) > src]
bars = [k for k, r in enumerate(body) if "BAR.SYNC" in r[src]]
print("rows", len(body), "BAR.SYNC at rows", bars)
start = bars[-3] if len(bars) >= 3 else 0
main = samp[0] if samp else None
tot = sum(num(r, main) for r in body) if main is not None else 0
head = body[start:]
print("samples (%s): kernel %.0f, from the head's barrier on %.0f" % (hdr[main] if main is not None else "-", tot, sum(num(r, main) for r in head) if main is not None else 0))
hot = sorted(range(len(head)), key=lambda k: -num(head[k], main))[:80] if main is not None else []
for k in sorted(hot):
    r = head[k]
    st = " ".join("%s=%g" % (hdr[i].replace("stall_", ""), num(r, i)) for i in stall if num(r, i) > 0)
    print("%5d %-8s %6.0f %s| %-44s %s" % (start + k, r[addr], num(r, main), ("ex=%g " % num(r, exe)) if exe is not None else "", r[src].strip()[:44], st))
PY
      echo "python rc=$?"
    fi
    echo "=== ncu done at $(el)s"
  } >> "$O/trace.log" 2>&1
fi
for v in $VARIANTS; do bench $v 3 100; done
{
  echo "=== [$(el)s] '$ROWS1' (us) per variant, sorted, rounds 1-3: median (of 3), or the lower of 2"
  for v in $VARIANTS; do
    awk -v v="=== $v." '/^=== /{on = index($0, v) == 1} on' "$O/bench.log" | grep -E "$ROWS1" | awk -F'|' '{print $5}' \
      | sort -n | awk -v v=$v '{a[NR] = $1} END {printf "%-6s %s (of %d: ", v, NR ? a[int((NR + 1) / 2)] : "-", NR; for (i = 1; i <= NR; ++i) printf " %s", a[i]; print ")"}'
  done
  echo "=== done at $(el)s"
} >> "$O/bench.log"
rm -rf "$TMP"
