#!/usr/bin/env bash
# gpu-check.sh: the one script to run on the GPU machine. Builds the `cuda` preset, runs the GPU
# tests (ctest: the CUDA softmax, autotune and model tests; all tests with GPU_CHECK_ALL_TESTS=1), the
# Triton pytest, `minigpt bench softmax --device cuda -o json` with its peers (torch.softmax,
# torch.compile, Triton; graph mode for small shapes), renders the table as markdown, draws the
# roofline (python -m minigpt.plot roofline), `minigpt bench model --device cuda -o json` and
# `bench train --device cuda` (the model and its training step on the GPU beside the PyTorch port
# on the GPU), `minigpt compile --device cuda --explain` (the compiler's CUDA back end), and
# prints a summary last.
#
# Results go to build/gpu-check/: gpu-check.log, bench_softmax_cuda{,_any}.{json,md} (the sweep
# and issue 19's "any shape" table), bench_{model,train}_cuda.{json,md} (issue 14),
# forward_accuracy.txt (issue 14: the logits against float64 and the CPU), compile_cuda_explain.txt (issue 15), roofline.png, ctest.log, pytest.log, autotune.json,
# triton_autotune.json, manifest.json (experiment 24). When $OUT is set (the device tool's
# folder) the log, the tables, the roofline, the manifest and results.tar.gz (all of it) are
# copied there: the device tool returns 8 files at most. Knobs: BUILD_TARGETS (build
# only these), GPU_CHECK_ALL_TESTS=1 (every ctest test), CTEST_TIMEOUT (seconds a test may take), BENCH_ARGS (extra `bench softmax`
# options, e.g. --retune or --shapes 64x600), GPU_CHECK_STEPS (run only these step groups:
# tests, model, train, compile, any, softmax; "benches" is the last five; e.g. "tests" then
# "benches" in two calls of the device tool, which stops a command at 10 minutes; the build is
# kept between them), PYTEST_K (which Python tests run here: by default those
# whose names say cuda, triton or gpu; the CPU ones run in CI; PYTEST_K= runs all),
# TRITON_COMPILE_JOBS (processes compiling Triton's tuning candidates before the any-shape
# bench; 8), ANY_SHAPES (that bench's shapes). Every
# step is time-boxed; a failing step prints a FAIL line and the script goes on; the exit status
# is non-zero if any step failed.
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
  # ^Cuda: the model on the GPU (issue 14); CompileCuda: the compiler's CUDA back end (issue 15);
  # Nccl: data parallel over NCCL (issue 16; a world of one on one GPU)
  local filter=(-R 'SoftmaxCuda|Autotune|FusedConfig|cuda|^Cuda|CompileCuda|Nccl')
  [[ ${GPU_CHECK_ALL_TESTS:-0} == 1 ]] && filter=()
  set -o pipefail
  ctest --test-dir "$BUILD" --output-on-failure -j4 --timeout "${CTEST_TIMEOUT:-300}" "${filter[@]}" 2>&1 | tee "$RESULTS/ctest.log"
}
run_pytest() {
  # Every Python test, against this build's module (CUDA softmax bindings included) and Triton.
  set -o pipefail
  PYTHONPATH="$ROOT/python:$ROOT/$BUILD/python" MINIGPT_BIN="$ROOT/$BUILD/minigpt" \
    python3 -m pytest -q -rs ${PYTEST_K:+-k "$PYTEST_K"} python/tests 2>&1 | tee "$RESULTS/pytest.log"
}
run_bench() {
  "$BUILD/minigpt" bench softmax --device cuda -o json ${BENCH_ARGS:-} >"$RESULTS/bench_softmax_cuda.json"
}
# The model on the GPU (issue 14): graph-replayed forward at (2, 16) on each path, KV-cache decode,
# and the PyTorch port on the GPU (eager, torch.compile, reduce-overhead) in the same run.
run_bench_model() {
  "$BUILD/minigpt" bench model --device cuda --runs 1000 --warmup 100 -o json >"$RESULTS/bench_model_cuda.json"
}
# How far the GPU's logits are from the exact forward and from the CPU engine (issue 14's 1e-5),
# for the default plan and both proj orders of the megakernel: bench/forward_accuracy.py.
run_forward_accuracy() {
  PYTHONPATH="$ROOT/$BUILD/python:$PYTHONPATH" python3 bench/forward_accuracy.py >"$RESULTS/forward_accuracy.txt"
}
# The training step on the GPU (issue 14): tokens/s at B=64, T=16 with AdamW, one CUDA graph a
# step, beside the PyTorch port on the GPU.
run_bench_train() {
  "$BUILD/minigpt" bench train --device cuda --steps 500 --warmup 50 -o json >"$RESULTS/bench_train_cuda.json"
}
# The compiler's CUDA back end (issue 15): cold and warm compile into an empty cache, per-kernel
# time and fraction of the roofline, default and max-autotune.
run_compile_cuda() {
  local cache
  cache=$(mktemp -d)
  for mode in default max-autotune; do
    MINIGPT_CACHE_DIR=$cache "$BUILD/minigpt" compile --device cuda --graph gpt --explain --mode "$mode"
  done 2>&1 | tee "$RESULTS/compile_cuda_explain.txt"
}
# The "any shape" table (issue 19): shapes outside the tuned sweep, every kernel and peer.
ANY_SHAPES=${ANY_SHAPES:-1000x1000,65536x128,8192x4096,100x128256,16x1048576,24576x2048,1024x152064,4096x32000,2048x50257,65537x7,3x100003,128x65536}
# Triton's tuning candidates for those shapes compiled first, in parallel processes (~1 s a
# kernel, ~20 candidates a long-row shape); the bench's tuning, which times them one at a time,
# then only loads them from Triton's cache.
run_triton_compile() {
  python3 -m minigpt.triton_softmax compile --shapes "$ANY_SHAPES" --jobs "${TRITON_COMPILE_JOBS:-8}"
}
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
  local any=()
  [[ -s $RESULTS/bench_softmax_cuda_any.json ]] &&
    any=(--any-json "$RESULTS/bench_softmax_cuda_any.json" --triton-cache "$XDG_CACHE_HOME/minigpt/triton_autotune.json")
  python3 experiments/24-triton-and-pytorch/bench.py --minigpt "$BUILD/minigpt" \
    --bench-json "$RESULTS/bench_softmax_cuda.json" --out "$ROOT/build/exp24" "${any[@]}"
  cp "$ROOT/build/exp24/manifest.json" "$RESULTS/manifest.json"
  [[ ! -f $ROOT/build/exp24/any_shape.md ]] || cp "$ROOT/build/exp24/any_shape.md" "$RESULTS/any_shape.md"
}

export RESULTS BUILD JOBS LOG BUILD_TARGETS="${BUILD_TARGETS:-}" BENCH_ARGS="${BENCH_ARGS:-}"
export ROOT CTEST_TIMEOUT="${CTEST_TIMEOUT:-300}"
export ANY_SHAPES
export PYTEST_K="${PYTEST_K-cuda or triton or gpu}"
export -f probe configure build run_ctest run_pytest run_bench run_bench_model run_forward_accuracy run_bench_train run_compile_cuda
export -f run_triton_compile run_bench_any render_md plot keep_cache experiment24

# Step groups: tests (ctest, pytest), then the benches: model, train, compile, any (issue 19's
# shapes), softmax (the sweep, the roofline and experiment 24). "benches" names them all.
STEPS=" ${GPU_CHECK_STEPS:-tests benches} "
[[ $STEPS == *" benches "* ]] && STEPS+="model train compile any softmax "
want() { [[ $STEPS == *" $1 "* ]]; }

step probe 60 probe
step configure 300 configure
step build 900 build
if want tests; then
  step ctest 600 run_ctest
  step pytest 600 run_pytest
fi
if [[ -x $BUILD/minigpt ]]; then
  if want model; then
    step bench-model 300 run_bench_model  # ~1 min: the model on the GPU and the PyTorch port on the GPU
    [[ -s $RESULTS/bench_model_cuda.json ]] &&
      step render-md-model 60 render_md "$RESULTS/bench_model_cuda.json" "$RESULTS/bench_model_cuda.md"
    step forward-accuracy 120 run_forward_accuracy
  fi
  if want train; then
    step bench-train 300 run_bench_train
    [[ -s $RESULTS/bench_train_cuda.json ]] &&
      step render-md-train 60 render_md "$RESULTS/bench_train_cuda.json" "$RESULTS/bench_train_cuda.md"
  fi
  want compile && step compile-cuda 300 run_compile_cuda
  if want any; then
    step triton-compile 300 run_triton_compile
    step bench-any-shape 600 run_bench_any
    [[ -s $RESULTS/bench_softmax_cuda_any.json ]] &&
      step render-md-any 60 render_md "$RESULTS/bench_softmax_cuda_any.json" "$RESULTS/bench_softmax_cuda_any.md"
  fi
  if want softmax; then
    step bench 900 run_bench
    if [[ -s $RESULTS/bench_softmax_cuda.json ]]; then
      step render-md 60 render_md "$RESULTS/bench_softmax_cuda.json" "$RESULTS/bench_softmax_cuda.md"
      step roofline 120 plot
      step experiment24 300 experiment24  # after bench-any-shape: it renders any_shape.md from it
    fi
  fi
  if [[ $STEPS != " tests " ]]; then step keep-autotune-cache 10 keep_cache; fi  # the benches fill the cache
elif [[ $STEPS != " tests " ]]; then
  echo "FAIL: $BUILD/minigpt was not built; no benchmark"
  NAMES+=(bench); STATUS+=("FAIL(no binary)"); SECS+=(0)
fi

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
for table in bench_model_cuda.json bench_train_cuda.json; do
  [[ -s $RESULTS/$table ]] || continue
  echo "--- $table"
  python3 - "$RESULTS/$table" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
first = "case" if "case" in r["columns"] else "impl"
print(f"{first:<56}{'B':>4}{'T':>4}{'median':>11}{'tokens/s':>12}{'ratio':>8}")
for row in r["rows"]:
    med = row.get("median_us", row.get("median_ms"))
    unit = "us" if "median_us" in row else "ms"
    if med is not None and unit == "us" and med >= 1e5:  # a first call (compile): seconds
        med, unit = med / 1e6, "s"
    tps, ratio = row.get("tokens_per_s"), row.get("cpp_speedup")
    print(f"{str(row.get(first))[:55]:<56}{row.get('B'):>4}{row.get('T'):>4}"
          f"{(f' {med:.4g} {unit}' if med is not None else '-'):>11}"
          f"{(f'{tps:.0f}' if tps else '-'):>12}{(f'{ratio:.2f}' if ratio else '-'):>8}")
PY
done
[[ -s $RESULTS/forward_accuracy.txt ]] && echo "--- forward_accuracy.txt" && cat "$RESULTS/forward_accuracy.txt"
# issue 15's figures: per mode, the graph, the compile times, the forward as one graph, the softmax
[[ -s $RESULTS/compile_cuda_explain.txt ]] && echo "--- compile_cuda_explain.txt" &&
  grep -E "^graph |^compile: |per replay|generated / best" "$RESULTS/compile_cuda_explain.txt"
fails=0
for i in "${!NAMES[@]}"; do
  printf '%-22s %-16s %5ss\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}"
  [[ ${STATUS[$i]} == PASS ]] || fails=$((fails + 1))
done
if [[ -n ${OUT:-} ]]; then
  for f in bench_softmax_cuda.md bench_softmax_cuda_any.md bench_model_cuda.md bench_train_cuda.md roofline.png manifest.json; do
    [[ -f $RESULTS/$f ]] && cp "$RESULTS/$f" "$OUT/"
  done
  tar -czf "$OUT/results.tar.gz" -C "$RESULTS" .
fi
echo "results in $RESULTS${OUT:+ (and \$OUT: gpu-check.log, the tables, roofline.png, manifest.json, results.tar.gz)}"
((fails == 0)) || { echo "gpu-check: $fails step(s) failed"; exit 1; }
echo "gpu-check: all steps passed"
