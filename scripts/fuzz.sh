#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`) and runs each for a bounded time.
# FUZZ_SECONDS per target (default 20: three targets, about 60 s in all). Crashes are saved under build/fuzz/crashes/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${FUZZ_SECONDS:-20}
cmake --preset fuzz > /dev/null
cmake --build build/fuzz -j "$(nproc)"
targets=$(find build/fuzz/fuzz -maxdepth 1 -type f -name 'fuzz_*' -executable 2>/dev/null | sort)
if [ -z "$targets" ]; then
  echo "fuzz: error: no fuzz targets were built in build/fuzz/fuzz (expected fuzz_safetensors, fuzz_npy, fuzz_npz; the preset needs clang and libclang-rt-dev)" >&2
  exit 1
fi
mkdir -p build/fuzz/crashes
for t in $targets; do
  name=$(basename "$t")
  corpus="fuzz/corpus/${name#fuzz_}"
  work="build/fuzz/corpus-${name#fuzz_}"
  mkdir -p "$work"
  dict="fuzz/${name#fuzz_}.dict"
  dict_arg=()
  [ -f "$dict" ] && dict_arg=(-dict="$dict")
  echo "fuzz: $name for ${SECONDS_PER_TARGET}s (seeds: $corpus)"
  # A crash, leak or sanitizer report makes libFuzzer exit non-zero; pipefail fails the script.
  "$t" -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=0 -artifact_prefix=build/fuzz/crashes/ \
       "${dict_arg[@]}" "$work" "$corpus" 2>&1 | tail -n 3
done
echo "fuzz: all targets ran clean"
