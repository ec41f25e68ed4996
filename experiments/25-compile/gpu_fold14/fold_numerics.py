"""Issue 14, variant `fold` of the row-split megakernel (gpt_mega_rows.cu): the numerics of the
LayerNorm folded into the matmul that reads it, estimated on the CPU before the GPU runs it.

For y = LN(x) W^T + b, LN(x)_k = (x_k - mean) rstd g_k + beta_k, the fold computes
    y_n = rstd (sum_k W'_nk x_k - mean s_n) + c_n,
    W'_nk = fl(W_nk g_k), s_n = fl(sum_k W'_nk), c_n = fl(sum_k W_nk beta_k + b_n)  (sums in double)
as the kernel does: fmaf(rstd, fmaf(-mean, s_n, dot_n), c_n), dot_n one float32 FMA chain over k in
order from 0 on the RAW residual row, (mean, rstd) the default's one-pass double statistics with a
float reciprocal square root. Applied to ln1 -> q, k, v, ln2 -> fc1 and ln_f -> lm_head.

Compared, on the shipped model's logits (the grammar probes, one forward per prompt, and random
ids at (2, 16), (1, 16), (3, 12), (4, 16)), each against the float64 reference
(numpy_minigpt.logits_in_precision):
  ref32  the NumPy float32 reference (BLAS matmuls: some summation order)
  chain  the default kernel's form: LayerNorm row in float32, then a float32 FMA chain in k order + b
  fold   the folded form above (everything else as chain)
and fold against chain and ref32 directly. Run from the repository root:
    python3 experiments/25-compile/gpu_fold14/fold_numerics.py
(needs numpy and safetensors). A float32 FMA is emulated as fl32(a * b + c) in double (a * b of
two floats is exact in double; the double rounding of the sum differs from a true FMA in rare
last-bit cases: irrelevant at this scale).
"""
from __future__ import annotations

import math
import os
import re
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "python"))

from minigpt import numpy_minigpt as nm  # noqa: E402
from minigpt.model_io import load_model  # noqa: E402

F32, F64 = np.float32, np.float64


def chain(a: np.ndarray, W: np.ndarray) -> np.ndarray:
    """a (N, K) float32, W (M, K) float32 -> (N, M): per output one float32 FMA chain, k from 0."""
    a64, W64 = a.astype(F64), W.astype(F64)
    acc = np.zeros((a.shape[0], W.shape[0]), dtype=F32)
    for k in range(a.shape[1]):
        acc = (acc.astype(F64) + a64[:, k, None] * W64[None, :, k]).astype(F32)
    return acc


def fma32(a, b, c):
    return (np.asarray(a, F32).astype(F64) * np.asarray(b, F32).astype(F64) + np.asarray(c, F32).astype(F64)).astype(F32)


def row_stats(x: np.ndarray, eps: float):
    """The kernel's one-pass statistics: sums in double, var = E[x^2] - mean^2 (clamped), mean and
    1 / sqrt(var + eps) as floats (rsqrtf: taken correctly rounded here)."""
    x64 = x.astype(F64)
    s, q = x64.sum(axis=-1, keepdims=True), (x64 * x64).sum(axis=-1, keepdims=True)
    m = s / x.shape[-1]
    var = np.maximum(q / x.shape[-1] - m * m, 0.0)
    return m.astype(F32), (1.0 / np.sqrt((var + F64(F32(eps))).astype(F32).astype(F64))).astype(F32)


def ln_chain(x, g, beta, W, b, eps):
    """The default's form: ln = fma((x - mean) * rstd, g, beta) in float32, then chain + b."""
    m, r = row_stats(x, eps)
    ln = fma32(((x - m) * r).astype(F32), g, beta)
    return (chain(ln, W) + b).astype(F32)


def fold_pack(g, beta, W, b):
    """Pack time: W' = fl(W g), s = fl(sum W') and c = fl(sum W beta + b), sums in double."""
    Wp = (W * g[None, :]).astype(F32)
    s = Wp.astype(F64).sum(axis=1).astype(F32)
    c = (W.astype(F64) @ beta.astype(F64) + b.astype(F64)).astype(F32)
    return Wp, s, c


def ln_fold(x, packed, eps):
    Wp, s, c = packed
    m, r = row_stats(x, eps)
    dot = chain(x, Wp)
    return fma32(r, fma32(-m, s[None, :], dot), c[None, :])


def forward(f, ids: np.ndarray, mode: str) -> np.ndarray:
    """Logits (T, V) of one sequence ids (T,) in float32, mode chain or fold."""
    w, cfg = f.weights, f.config
    eps, H = cfg.layernorm_eps, cfg.n_head
    x = nm.embedding(ids[None, :], w["wte.weight"], w["wpe.weight"])[0]  # (T, C)
    T, C = x.shape
    dh = C // H

    def lin_ln(x, gn, bn, Wn, biasn):
        g, beta, W, bias = w[gn], w[bn], w[Wn], w[biasn]
        if mode == "chain":
            return ln_chain(x, g, beta, W, bias, eps)
        return ln_fold(x, fold_pack(g, beta, W, bias), eps)

    for i in range(cfg.n_layer):
        p = f"blocks.{i}."
        qkv = lin_ln(x, p + "ln1.weight", p + "ln1.bias", p + "attn.qkv.weight", p + "attn.qkv.bias")
        q, k, v = (qkv[:, j * C:(j + 1) * C].reshape(T, H, dh).transpose(1, 0, 2) for j in range(3))
        sc = (q @ k.transpose(0, 2, 1)) * F32(1.0 / math.sqrt(dh))
        sc = np.where(np.triu(np.ones((T, T), bool), 1), -np.inf, sc).astype(F32)
        att = (nm.softmax(sc, axis=-1) @ v).transpose(1, 0, 2).reshape(T, C).astype(F32)
        x = (x + nm.linear(att, w[p + "attn.proj.weight"], w[p + "attn.proj.bias"])).astype(F32)
        h = nm.gelu(lin_ln(x, p + "ln2.weight", p + "ln2.bias", p + "mlp.fc1.weight", p + "mlp.fc1.bias"))
        x = (x + nm.linear(h, w[p + "mlp.fc2.weight"], w[p + "mlp.fc2.bias"])).astype(F32)
    return lin_ln(x, "ln_f.weight", "ln_f.bias", "lm_head.weight", "lm_head.bias")


def tokenize(text: str, index: dict[str, int]) -> list[int]:
    """src/data/tokenizer.cpp's split for plain prompts: lower-cased words (with inner
    apostrophes before a letter), every other non-space character a token; <bos> first."""
    ids = [1]
    for tok in re.findall(r"[a-z0-9\x80-\uffff]+(?:'[a-z][a-z0-9\x80-\uffff]*)*|\S", text.lower()):
        if tok not in index:
            raise ValueError(f"probe word {tok!r} not in the vocabulary")
        ids.append(index[tok])
    return ids


def main() -> None:
    f = load_model(os.path.join(ROOT, "models", "grammar-minigpt.safetensors"))
    index = {t: i for i, t in enumerate(f.vocab)}
    prompts = [tokenize("Yesterday I", index)]
    with open(os.path.join(ROOT, "tests", "probes", "grammar_probes.tsv"), encoding="utf-8") as fh:
        for line in fh:
            if line.strip() and not line.startswith("#"):
                prompts.append(tokenize(line.rstrip("\n").split("\t")[1], index))
    V = f.config.vocab_size
    rand = []
    for seed, (B, T) in enumerate([(2, 16), (1, 16), (3, 12), (4, 16), (2, 16), (2, 16)]):
        rng = np.random.default_rng(100 + seed)
        rand += [row for row in rng.integers(0, V, size=(B, T))]
    ref = nm.NumpyMiniGPT.from_model_file(f)
    for name, seqs in (("probes", prompts), ("random ids", rand)):
        worst = {}
        top1 = {"chain": 0, "fold": 0, "ref32": 0}
        last_mismatch = 0
        for ids in seqs:
            ids = np.asarray(ids, dtype=np.int64)
            out = {
                "f64": nm.logits_in_precision(f, ids[None, :], np.float64)[0],
                "ref32": ref.forward(ids[None, :]).logits[0].astype(F64),
                "chain": forward(f, ids, "chain").astype(F64),
                "fold": forward(f, ids, "fold").astype(F64),
            }
            for a, b in (("ref32", "f64"), ("chain", "f64"), ("fold", "f64"), ("fold", "chain"), ("fold", "ref32"),
                         ("chain", "ref32")):
                worst[(a, b)] = max(worst.get((a, b), 0.0), float(np.abs(out[a] - out[b]).max()))
            for m in top1:
                top1[m] += int(np.argmax(out[m][-1]) == np.argmax(out["f64"][-1]))
            last_mismatch += int(np.argmax(out["fold"][-1]) != np.argmax(out["ref32"][-1]))
        print(f"{name}: {len(seqs)} sequences, max |logit diff| (float32 logits):")
        for (a, b), d in worst.items():
            print(f"  {a:>5} vs {b:<5} {d:.3g}")
        print(f"  last position's top-1 = float64's: " + ", ".join(f"{m} {n}/{len(seqs)}" for m, n in top1.items())
              + f"; fold's top-1 != ref32's: {last_mismatch}")


if __name__ == "__main__":
    main()
