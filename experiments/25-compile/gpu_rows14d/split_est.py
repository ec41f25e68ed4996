"""Estimate (CPU, before the GPU call): how far the row-split kernel's GEMM summation orders move
the logits from k-in-order fmaf chains (the CPU engine's order); LayerNorm, attention and softmax
are numpy_minigpt's in every mode, so only the orders differ. Modes: cpu (k in order), w15 (proj
by heads, fc2 as 4 slices of 64), split2 (w15 + q, k, v and fc1 as two 32-term halves), pwsplit
(split2 + each fc2 slice as two halves). fmaf emulated in float64 (the product exact) rounded to
float32.

    PYTHONPATH=python python3 experiments/25-compile/gpu_rows14d/split_est.py [model]
"""
import sys
import numpy as np
import minigpt.numpy_minigpt as nm
from minigpt.model_io import load_model

F32 = np.float32

def chain(x, W, k0, k1):
    # fmaf chain in k order: acc = round32(acc + x_k * w_k), x (..., K), W (N, K) -> (..., N)
    acc = np.zeros(x.shape[:-1] + (W.shape[0],), dtype=F32)
    for k in range(k0, k1):
        acc = (acc.astype(np.float64) + x[..., k:k + 1].astype(np.float64) * W[:, k].astype(np.float64)).astype(F32)
    return acc

MODE = "cpu"
def ordered_linear(x, W, b):
    N, K = W.shape
    x = x.astype(F32)
    kind = {(192, 64): "qkv", (64, 64): "proj", (256, 64): "fc1", (64, 256): "fc2"}.get((N, K), "lm")
    if MODE == "cpu" or kind == "lm":
        y = chain(x, W, 0, K)
    elif kind == "proj":  # every GPU mode: by heads, 4 x 16, summed in head order
        p = [chain(x, W, 16 * h, 16 * h + 16) for h in range(4)]
        y = ((p[0] + p[1]) + p[2]) + p[3]
    elif kind == "fc2":
        if MODE == "pwsplit":
            s = [chain(x, W, 64 * j, 64 * j + 32) + chain(x, W, 64 * j + 32, 64 * j + 64) for j in range(4)]
        else:
            s = [chain(x, W, 64 * j, 64 * j + 64) for j in range(4)]
        y = ((s[0] + s[1]) + s[2]) + s[3]
    else:  # qkv, fc1
        y = chain(x, W, 0, 32) + chain(x, W, 32, 64) if MODE in ("pwsplit", "split2") else chain(x, W, 0, K)
    if b is not None:
        y = (y + b).astype(F32)
    return y.astype(F32)

nm.linear = ordered_linear
f = load_model(sys.argv[1] if len(sys.argv) > 1 else "models/grammar-minigpt.safetensors")
model = nm.NumpyMiniGPT.from_model_file(f)
V = f.config.vocab_size
rng = np.random.default_rng(5)
batches = [np.array([482, 307, 480, 526, 370, 277, 185, 10, 333, 362, 288, 459, 12, 345, 412, 116,
                     363, 542, 233, 494, 271, 568, 24, 98, 299, 85, 219, 525, 270, 609, 24, 483]).reshape(2, 16)]
batches += [rng.integers(0, V, size=(8, T)) for T in (16, 12, 5)]
exact = []
res = {}
for MODE in ("cpu", "w15", "split2", "pwsplit"):
    res[MODE] = [model.forward(ids) for ids in batches]
ex = [nm.logits_in_precision(f, ids, np.float64) for ids in batches]
print("max |logit diff| (probs in brackets) per batch: bench ids (2,16), random (8,16), (8,12), (8,5)")
for m in ("w15", "split2", "pwsplit"):
    d = [float(np.abs(a.logits - c.logits).max()) for a, c in zip(res[m], res["cpu"])]
    dp = [float(np.abs(a.probs - c.probs).max()) for a, c in zip(res[m], res["cpu"])]
    e = [float(np.abs(a.logits - x).max()) for a, x in zip(res[m], ex)]
    print(f"{m:8} vs cpu-order {['%.3g' % v for v in d]} [{', '.join('%.3g' % v for v in dp)}]  vs float64 {['%.3g' % v for v in e]}")
e = [float(np.abs(a.logits - x).max()) for a, x in zip(res["cpu"], ex)]
print(f"{'cpu':8} vs float64 {['%.3g' % v for v in e]}")
