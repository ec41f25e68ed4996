#!/usr/bin/env bash
# cpu-peers.sh: the CPU performance figures with their PyTorch peers, each measured in one run:
#   - the forward at (2, 16) (bench/peers/torch_model.py: C++ vs torch eager and torch.compile)
#     at 1 and 2 threads;
#   - the training step at B = 64, T = 16 (bench/peers/torch_train.py: C++ vs torch eager,
#     alternating rounds) at 1 and 2 threads;
#   - `minigpt bench softmax --device cpu` at 2 threads (torch.softmax and torch.compile beside
#     every kernel, the copy ceiling measured in the same process).
# Meant for a quiet machine (the GPU host's CPU is one: 16 idle cores), but runs anywhere with
# torch installed. Both sides are pinned to the same cores (CPUS, default the first two), so a
# 2-thread figure means 2 cores, as on the project's 2-core machine.
#
# Builds the `cpu` preset (build/cpu) unless MINIGPT=path/to/minigpt is given (relative paths are
# taken from the directory it is started in). Results go to $OUT when set (the device tool's
# folder), else build/cpu-peers/: forward_t1.md, forward_t2.md, train_t1.md, train_t2.md,
# bench_softmax_cpu.md, bench_softmax_cpu.json, cpu-peers.log.
set -euo pipefail
export PYTHONUNBUFFERED=1

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Paths given relative to where the script was started (MINIGPT=build/cpu/minigpt, OUT=results)
# become absolute before the cd below; a bare MINIGPT name is looked up on PATH.
if [[ -n ${MINIGPT:-} ]]; then
  if [[ $MINIGPT == */* ]]; then MINIGPT=$(realpath -m -- "$MINIGPT"); else MINIGPT=$(command -v -- "$MINIGPT" || true); fi
  [[ -x $MINIGPT ]] || { echo "cpu-peers.sh: MINIGPT=$MINIGPT is not an executable file" >&2; exit 1; }
fi
[[ -n ${OUT:-} ]] && OUT=$(realpath -m -- "$OUT")
cd "$ROOT"
RESULTS=${OUT:-$ROOT/build/cpu-peers}
mkdir -p "$RESULTS"
exec > >(tee "$RESULTS/cpu-peers.log") 2>&1
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
CPUS=${CPUS:-0,1}

lscpu | grep -E "Model name|^CPU\(s\)|Thread|L3" || true
python3 -c 'import torch; print("torch", torch.__version__)' || true

if [[ -z ${MINIGPT:-} ]]; then
  cmake --preset cpu >/dev/null
  cmake --build build/cpu -j"$(nproc)" --target minigpt
  MINIGPT=$ROOT/build/cpu/minigpt
fi
git log -1 --format="commit %h %s" || true

for t in 1 2; do
  echo "=== forward (2, 16), $t thread(s), cores $CPUS ==="
  taskset -c "$CPUS" python3 bench/peers/torch_model.py -t "$t" --minigpt "$MINIGPT" | tee "$RESULTS/forward_t$t.md"
done

for t in 1 2; do
  echo "=== training step, $t thread(s), cores $CPUS ==="
  taskset -c "$CPUS" python3 bench/peers/torch_train.py -t "$t" --steps 40 --rounds 5 \
    --minigpt "$MINIGPT" | tee "$RESULTS/train_t$t.md"
done

echo "=== bench softmax --device cpu, 2 threads, cores $CPUS ==="
taskset -c "$CPUS" "$MINIGPT" bench softmax --device cpu -t 2 -o json >"$RESULTS/bench_softmax_cpu.json"
python3 - "$RESULTS/bench_softmax_cpu.json" >"$RESULTS/bench_softmax_cpu.md" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cols = r["columns"]
cell = lambda v: "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
print(f"# {r.get('title', 'bench softmax')}\n")
for k, v in r.get("meta", {}).items():
    print(f"- {k}: {v}")
print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
for row in r["rows"]:
    vals = [row.get(c) for c in cols] if isinstance(row, dict) else row
    print("| " + " | ".join(cell(v) for v in vals) + " |")
for n in r.get("notes", []):
    print(f"\n- {n}")
PY
echo "=== summary ==="
grep -E "^\| (minigpt|torch eager|torch.compile)" "$RESULTS"/forward_t*.md "$RESULTS"/train_t*.md || true
grep -E "^\| (simd|memcpy|memcpy-stream|torch.softmax) " "$RESULTS/bench_softmax_cpu.md" || true
echo "results in $RESULTS"
