#!/usr/bin/env bash
# Dumps the rows form's texts (default "rows" and "rows-plain") of the shipped model at (B, T) =
# (2, 16), (3, 5), (1, 1) with the given minigpt binary into DIR, and the default text's PTX
# (nvcc -ptx -arch=sm_90a; the same cicc as NVRTC) with .loc/.file lines and comments taken out.
#   bash check.sh BUILD/minigpt DIR
set -u
bin=$1 dir=$2
mkdir -p "$dir"
for s in "2 16" "3 5" "1 1"; do
  set -- $s
  for v in rows rows-plain; do
    d="$dir/b$1_t$2_$v"
    MINIGPT_CUDA_VARIANT=$v "$bin" compile --graph gpt --batch "$1" --seq "$2" --device cuda --dump "$d" > "$d.log" 2>&1 || echo "dump failed: $d"
  done
  d="$dir/b$1_t$2_rows"
  nvcc -ptx -arch=sm_90a -o "$d.ptx" "$d/output_code.cu" || echo "nvcc failed: $d"
  grep -vE '^\s*\.(loc|file)\b|^\s*//' "$d.ptx" > "$d.ptx.code"
done
