#!/usr/bin/env bash
# ptx.sh SRC OUT: gpt_mega_rows.cu of the source folder SRC (a copy of src/) to PTX for sm_90a,
# with the build's flags but -lineinfo (no .loc lines), ASLR off: with it on, cicc's output for
# one kernel varied between two runs on the same source (w15's trace instance, 2 lines).
set -euo pipefail
setarch "$(uname -m)" -R /usr/local/cuda/bin/nvcc -DFMT_SHARED -I"$1" -I"${GENERATED:-build/default/generated}" \
  -isystem=/usr/local/cuda/include -O3 -DNDEBUG -arch=sm_90a --expt-relaxed-constexpr -std=c++17 \
  -x cu -ptx "$1/kernels/cuda/gpt_mega_rows.cu" -o "$2"
