#!/usr/bin/env bash
# gpu-check.sh: the one script to run on the GPU machine. Builds the `cuda` preset, runs the GPU
# tests (ctest: the CUDA softmax, autotune and model tests; all tests with GPU_CHECK_ALL_TESTS=1), the
# Triton pytest, `minigpt bench softmax --device cuda -o json` with its peers (torch.softmax,
# torch.compile, Triton; graph mode for small shapes), renders the table as markdown, draws the
# roofline (python -m minigpt.plot roofline), `minigpt bench model --device cuda -o json` (the model
# on the GPU beside the PyTorch port on the GPU) and prints a summary last.
#
# Results go to build/gpu-check/: gpu-check.log, bench_softmax_cuda{,_any}.{json,md} (the sweep
# and issue 19's "any shape" table), bench_model_cuda.{json,md} (issue 14), roofline.png, ctest.log, pytest.log, autotune.json,
# triton_autotune.json, manifest.json (experiment 24). When $OUT is set (the device tool's
# folder) the log, the tables, the roofline, the manifest and results.tar.gz (all of it) are
# copied there: the device tool returns 8 files at most. Knobs: BUILD_TARGETS (build
# only these), GPU_CHECK_ALL_TESTS=1 (every ctest test), BENCH_ARGS (extra `bench softmax`
# options, e.g. --retune or --shapes 64x600), GPU_CHECK_SKIP_PYTEST=1. Every step is time-boxed;
# a failing step prints a FAIL line and the script goes on; the exit status is non-zero if any
# step failed.
set -euo pipefail
export PYTHONUNBUFFERED=1

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Folders given relative to where the script was started become absolute before the cd below.
[[ -n ${OUT:-} ]] && OUT=$(realpath -m -- "$OUT")
[[ -n ${XDG_CACHE_HOME:-} ]] && XDG_CACHE_HOME=$(realpath -m -- "$XDG_CACHE_HOME")
cd "$ROOT"
RESULTS=$ROOT/build/gpu-check
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
# The device tool brings back at most 8 files from $OUT: the log (written there as it goes, so
# a run killed at its limit still returns it), the tables, the roofline, and a tarball of all.
LOG="${OUT:-$RESULTS}/gpu-check.log"
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-$ROOT/build/gpu-check-cache}  # the autotune cache lives here
BUILD=build/cuda
JOBS=${JOBS:-$(nproc)}

declare -a NAMES=() STATUS=() SECS=()
# step NAME TIMEOUT_S COMMAND...: runs the command time-boxed, records PASS/FAIL/TIMEOUT.
step() {
  local name=$1 limit=$2
  shift 2
  echo
  echo "=== [$name] $* (limit ${limit}s) ==="
  local t0=$SECONDS rc=0
  # Functions run in a child bash (timeout cannot call them directly): they are exported below.
  timeout --kill-after=10 "$limit" bash -c 'set -euo pipefail; "$@"' step-"$name" "$@" || rc=$?
  local status=PASS
  if ((rc == 124 || rc == 137)); then status="TIMEOUT"; elif ((rc != 0)); then status="FAIL(rc=$rc)"; fi
  NAMES+=("$name"); STATUS+=("$status"); SECS+=($((SECONDS - t0)))
  [[ $status == PASS ]] || echo "FAIL: step '$name' -> $status"
  return 0
}

probe() {
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv || true
  nvcc --version | tail -1 || true
  cmake --version | head -1
  python3 -c 'import sys, torch, triton, numpy; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "numpy", numpy.__version__, "cuda", torch.cuda.is_available())' || true
}

configure() { cmake --preset cuda; }
# keep going (-k 0): one broken target does not hide the rest. BUILD_TARGETS="minigpt ..." limits it.
build() { cmake --build "$BUILD" -j"$JOBS" ${BUILD_TARGETS:+--target $BUILD_TARGETS} -- -k 0; }
run_ctest() {
  local filter=(-R 'SoftmaxCuda|Autotune|FusedConfig|cuda|^Cuda')  # ^Cuda: the model on the GPU (issue 14)
  [[ ${GPU_CHECK_ALL_TESTS:-0} == 1 ]] && filter=()
  set -o pipefail
  ctest --test-dir "$BUILD" --output-on-failure -j4 --timeout 300 "${filter[@]}" 2>&1 | tee "$RESULTS/ctest.log"
}
run_pytest() {
  # Every Python test, against this build's module (CUDA softmax bindings included) and Triton.
  set -o pipefail
  PYTHONPATH="$ROOT/python:$ROOT/$BUILD/python" MINIGPT_BIN="$ROOT/$BUILD/minigpt" \
    python3 -m pytest -q -rs python/tests 2>&1 | tee "$RESULTS/pytest.log"
}
run_bench() {
  "$BUILD/minigpt" bench softmax --device cuda -o json ${BENCH_ARGS:-} >"$RESULTS/bench_softmax_cuda.json"
}
# The model on the GPU (issue 14): graph-replayed forward at (2, 16) on each path, KV-cache decode,
# and the PyTorch port on the GPU (eager, torch.compile, reduce-overhead) in the same run.
run_bench_model() {
  "$BUILD/minigpt" bench model --device cuda --runs 1000 --warmup 100 -o json >"$RESULTS/bench_model_cuda.json"
}
# The "any shape" table (issue 19): shapes outside the tuned sweep, every kernel and peer.
ANY_SHAPES=${ANY_SHAPES:-1000x1000,65536x128,8192x4096,100x128256,16x1048576,24576x2048,1024x152064,65537x7,3x100003,128x65536}
run_bench_any() {
  "$BUILD/minigpt" bench softmax --device cuda --shapes "$ANY_SHAPES" -o json >"$RESULTS/bench_softmax_cuda_any.json"
}
render_md() {  # render_md JSON MD
  python3 - "$1" >"$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cols = r["columns"]
def cell(v):
    if v is None: return "-"
    if isinstance(v, float): return f"{v:.4g}"
    return str(v)
print(f"# {r.get('title', 'bench softmax')}\n")
for k, v in r.get("meta", {}).items():
    print(f"- {k}: {json.dumps(v) if isinstance(v, (dict, list)) else v}")
print()
print("| " + " | ".join(cols) + " |")
print("|" + "---|" * len(cols))
for row in r["rows"]:  # rows are objects keyed by column (Report::to_json) or lists
    vals = [row.get(c) for c in cols] if isinstance(row, dict) else row
    print("| " + " | ".join(cell(v) for v in vals) + " |")
print()
for n in r.get("notes", []):
    print(f"- {n}")
PY
}
plot() { python3 -m minigpt.plot roofline "$RESULTS/bench_softmax_cuda.json" -o "$RESULTS/roofline.png"; }
keep_cache() {
  cp "$XDG_CACHE_HOME/minigpt/autotune.json" "$RESULTS/autotune.json"
  cp "$XDG_CACHE_HOME/minigpt/triton_autotune.json" "$RESULTS/triton_autotune.json" || true
}
# Experiment 24 (Triton vs CUDA C, the PyTorch port, the kernel swap) from the same bench JSON;
# its manifest lands beside the other results (the full folder stays in build/exp24).
experiment24() {
  python3 experiments/24-triton-and-pytorch/bench.py --minigpt "$BUILD/minigpt" \
    --bench-json "$RESULTS/bench_softmax_cuda.json" --out "$ROOT/build/exp24"
  cp "$ROOT/build/exp24/manifest.json" "$RESULTS/manifest.json"
}

export RESULTS BUILD JOBS LOG BUILD_TARGETS="${BUILD_TARGETS:-}" BENCH_ARGS="${BENCH_ARGS:-}"
export ROOT
export ANY_SHAPES
export -f probe configure build run_ctest run_pytest run_bench run_bench_model run_bench_any render_md plot keep_cache experiment24

step probe 60 probe
step configure 300 configure
step build 900 build
step ctest 600 run_ctest
if [[ ${GPU_CHECK_SKIP_PYTEST:-0} == 1 ]]; then echo "pytest skipped (GPU_CHECK_SKIP_PYTEST=1)"; else step pytest 600 run_pytest; fi
if [[ -x $BUILD/minigpt ]]; then
  step bench 900 run_bench
  if [[ -s $RESULTS/bench_softmax_cuda.json ]]; then
    step render-md 60 render_md "$RESULTS/bench_softmax_cuda.json" "$RESULTS/bench_softmax_cuda.md"
    step roofline 120 plot
    step experiment24 300 experiment24
  fi
  step bench-model 300 run_bench_model
  [[ -s $RESULTS/bench_model_cuda.json ]] &&
    step render-md-model 60 render_md "$RESULTS/bench_model_cuda.json" "$RESULTS/bench_model_cuda.md"
  step bench-any-shape 600 run_bench_any
  [[ -s $RESULTS/bench_softmax_cuda_any.json ]] &&
    step render-md-any 60 render_md "$RESULTS/bench_softmax_cuda_any.json" "$RESULTS/bench_softmax_cuda_any.md"
else
  echo "FAIL: $BUILD/minigpt was not built; no benchmark"
  NAMES+=(bench); STATUS+=("FAIL(no binary)"); SECS+=(0)
fi
step keep-autotune-cache 10 keep_cache

echo
echo "=== summary ==="
for table in bench_softmax_cuda.json bench_softmax_cuda_any.json; do
  [[ -s $RESULTS/$table ]] || continue
  echo "--- $table"
  python3 - "$RESULTS/$table" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
m = r.get("meta", {})
print(f"GPU {m.get('gpu', {}).get('model')}, copy {m.get('copy_bandwidth_GBps', 0):.0f} GB/s")
cols = r["columns"]
ix = {c: i for i, c in enumerate(cols)}
print(f"{'kernel':<22}{'B':>8}{'V':>7}{'time_us':>11}{'GB/s':>9}{'copy%':>7}{'vs_torch':>9}")
for row in r["rows"]:
    g = (lambda c: row.get(c)) if isinstance(row, dict) else (lambda c: row[ix[c]] if c in ix else None)
    vs = g("vs_torch")
    print(f"{g('kernel'):<22}{g('B'):>8}{g('V'):>7}{g('time_us'):>11.2f}{g('GB/s'):>9.0f}"
          f"{100 * (g('frac_of_copy') or 0):>6.1f}%{(f'{vs:.2f}' if vs else '-'):>9}")
PY
done
if [[ -s $RESULTS/bench_model_cuda.json ]]; then
  echo "--- bench_model_cuda.json"
  python3 - "$RESULTS/bench_model_cuda.json" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{'case':<56}{'B':>3}{'T':>4}{'median_us':>11}{'tokens/s':>11}{'ratio':>8}")
for row in r["rows"]:
    tps, ratio = row.get("tokens_per_s"), row.get("cpp_speedup")
    print(f"{row['case'][:55]:<56}{row['B']:>3}{row['T']:>4}{row['median_us']:>11.1f}"
          f"{(f'{tps:.0f}' if tps else '-'):>11}{(f'{ratio:.2f}' if ratio else '-'):>8}")
PY
fi
fails=0
for i in "${!NAMES[@]}"; do
  printf '%-22s %-16s %5ss\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}"
  [[ ${STATUS[$i]} == PASS ]] || fails=$((fails + 1))
done
if [[ -n ${OUT:-} ]]; then
  for f in bench_softmax_cuda.md bench_softmax_cuda_any.md bench_model_cuda.md roofline.png manifest.json; do
    [[ -f $RESULTS/$f ]] && cp "$RESULTS/$f" "$OUT/"
  done
  tar -czf "$OUT/results.tar.gz" -C "$RESULTS" .
fi
echo "results in $RESULTS${OUT:+ (and \$OUT: gpu-check.log, the tables, roofline.png, manifest.json, results.tar.gz)}"
((fails == 0)) || { echo "gpu-check: $fails step(s) failed"; exit 1; }
echo "gpu-check: all steps passed"
