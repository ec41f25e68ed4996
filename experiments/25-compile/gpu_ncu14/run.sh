#!/bin/bash
# Where the row-split forward's cycles go, by instruction (issue 14/15): ncu's source page (SASS,
# warp-stall samples per instruction) of one launch of the hand-written kernel's default instance
# (gpt_mega_rows_kernel<1, false, ...>, bitw) and of the compiler's generated rows kernel. Run from
# the repository root after the lead's build of `minigpt` (build/cuda); builds nothing, ~60-90 s.
# Writes $OUT/ncu14/ncu14.tar.gz: details_*.txt (ncu --page details) and sass_*.csv (--page source).
set -uo pipefail
O=${OUT:?set OUT}/ncu14; mkdir -p "$O"; W=/tmp/ncu14; rm -rf "$W"; mkdir -p "$W"
M=build/cuda/minigpt
command -v ncu > /dev/null || { echo "no ncu" > "$O/none.txt"; exit 0; }
prof() {  # $1 name, $2 kernel regex, then the command
  local name=$1 rx=$2; shift 2
  timeout 60 ncu --set full --kernel-name-base demangled -k "regex:$rx" -c 1 -o "$W/$name" "$@" > "$W/run_$name.txt" 2>&1
  ncu -i "$W/$name.ncu-rep" --page details > "$W/details_$name.txt" 2>&1
  ncu -i "$W/$name.ncu-rep" --page source --csv --print-source sass > "$W/sass_$name.csv" 2>&1
}
prof hand 'gpt_mega_rows_kernel<.int.1, .bool.0' $M bench model --device cuda --no-peers --runs 3 --warmup 1
prof gen 'cuda_rows_forward' $M compile --device cuda --graph gpt --explain --runs 3
tar -czf "$O/ncu14.tar.gz" -C "$W" $(cd "$W" && ls *.txt *.csv 2>/dev/null)
