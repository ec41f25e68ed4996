#!/usr/bin/env bash
# gpu-cuda-fwd.sh: issue 14's inference half on the GPU machine, in one call: builds the cuda
# preset's minigpt and the CUDA model tests, runs them (ctest -R '^Cuda'), the CLI's --device cuda
# paths, `minigpt bench model --device cuda` with its PyTorch peer, the ctest pattern for
# gpu-check.sh, and the demo's GPU section. Logs under $OUT (default build/gpu-cuda-fwd).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/build/gpu-cuda-fwd}
mkdir -p "$OUT"
cd "$ROOT"
B=build/cuda
fail=0
run() { echo; echo "=== $* ==="; "$@" || { echo "FAIL($?): $*"; fail=1; }; }
{
  nvidia-smi -L
  T0=$SECONDS
  run cmake --preset cuda
  run cmake --build $B -j"$(nproc)" --target minigpt model_ops_cuda_test model_cuda_test
  echo "build: $((SECONDS - T0)) s"
  run $B/tests/model_ops_cuda_test
  run $B/tests/model_cuda_test
  run $B/minigpt predict --device cuda "Yesterday I"
  run $B/minigpt eval-probes --device cuda
  run $B/minigpt generate --device cuda -p "Yesterday I" -n 8 --temp 0
  run $B/minigpt bench model --device cuda --runs 2000 --warmup 200 -o json --no-peers
  run $B/minigpt bench model --device cuda --runs 1000 --warmup 100
  PYTHONPATH=$ROOT/python MINIGPT_BIN=$ROOT/$B/minigpt run python3 -m pytest -q -x python/tests/test_cli.py -k device
  run ctest --test-dir $B -R '^Cuda' --output-on-failure
  run timeout 180 $B/minigpt demo
  echo "gpu-cuda-fwd: $([ $fail = 0 ] && echo PASS || echo FAIL) in $((SECONDS - T0)) s"
} 2>&1 | tee "$OUT/log.txt"
exit $fail
