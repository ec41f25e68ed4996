#!/usr/bin/env bash
# cubin.sh SRC OUT: gpt_mega_rows.cu of the source folder SRC (a copy of src/) to an sm_90a cubin
# with the build's flags (ptxas' per-kernel registers and spills on stderr), ASLR off as
# rows14f_ptx/ptx.sh; then OUT.sass (cuobjdump -sass) and OUT.res (cuobjdump -res-usage).
set -euo pipefail
setarch "$(uname -m)" -R /usr/local/cuda/bin/nvcc -DFMT_SHARED -I"$1" -I"${GENERATED:-build/default/generated}" \
  -isystem=/usr/local/cuda/include -O3 -DNDEBUG -arch=sm_90a --expt-relaxed-constexpr -std=c++17 \
  -Xptxas -v -x cu -cubin "$1/kernels/cuda/gpt_mega_rows.cu" -o "$2" 2> "$2.ptxas"
/usr/local/cuda/bin/cuobjdump -sass "$2" > "$2.sass"
/usr/local/cuda/bin/cuobjdump -res-usage "$2" > "$2.res"
