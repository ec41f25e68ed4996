"""The NumPy reference GrammarMiniGPT: plain float32 NumPy, one readable function per layer.

This is the oracle the C++ engine and the PyTorch port are tested against (issue 2, the
contract: max abs difference <= 1e-5). It favours clarity over speed and keeps every layer's
output (``ForwardResult.trace``) so a mismatch can be pinned to its layer.

Architecture (pre-LN GPT, src/model/gpt.h):
    x = wte[ids] + wpe[0..T)                                   (B, T, d)
    per block:  x += proj(attention(ln1(x)))                   causal, H heads of dh = d / H
                x += fc2(gelu(fc1(ln2(x))))                    d -> 4d -> d, exact-erf GELU
    logits = lm_head(ln_f(x))                                  (B, T, V), lm_head has a bias
    probs  = softmax(logits)                                   over V

Numerics: activations and weights are float32 and matmuls run in float32. Reductions that set
the scale of everything after them (LayerNorm mean and variance, softmax sums) accumulate in
float64 and cast back, and erf is evaluated in float64 (``erf`` below, accurate to ~1e-15), so
this reference is at least as accurate as any float32 engine it judges.

Not here: training, backward, KV-cache decoding (the C++ engine and the PyTorch port have them),
file parsing (model_io.py).
"""
from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from .model_io import ModelConfig, ModelFile, check_weights, load_model

__all__ = [
    "NumpyMiniGPT",
    "logits_in_precision",
    "ForwardResult",
    "embedding",
    "layer_norm",
    "linear",
    "causal_self_attention",
    "erf",
    "gelu",
    "mlp",
    "softmax",
    "block",
]

_F32 = np.float32


# ----------------------------------------------------------------------------------- layers


def embedding(ids: np.ndarray, wte: np.ndarray, wpe: np.ndarray) -> np.ndarray:
    """Token plus learned position embedding: ids (B, T) -> (B, T, d)."""
    T = ids.shape[1]
    return (wte[ids] + wpe[:T][None, :, :]).astype(_F32)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """nn.LayerNorm over the last dim: biased variance, eps inside the sqrt. (..., C) -> (..., C).

    Mean and variance accumulate in float64; a constant row gives exactly 0 (then + bias).
    """
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    centered = x64 - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)  # biased, as nn.LayerNorm
    xhat = (centered / np.sqrt(var + eps)).astype(_F32)
    return (xhat * weight + bias).astype(_F32)


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """nn.Linear: weight (out, in), x (..., in) -> (..., out)."""
    y = x @ weight.T
    if bias is not None:
        y = y + bias
    return y.astype(_F32)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax with the max subtracted (exp never overflows); sums in float64.

    Follows docs/ARCHITECTURE.md: a row with a NaN or +inf gives a NaN row (inf - inf = NaN), an all -inf
    row gives a NaN row, [1e30, 0, -1e30] gives [1, 0, 0].
    """
    with np.errstate(invalid="ignore"):
        shifted = x - x.max(axis=axis, keepdims=True)
        e = np.exp(shifted.astype(np.float64))
        return (e / e.sum(axis=axis, keepdims=True)).astype(_F32)


def causal_self_attention(x: np.ndarray, qkv_weight: np.ndarray, qkv_bias: np.ndarray,
                          proj_weight: np.ndarray, proj_bias: np.ndarray, n_head: int) -> np.ndarray:
    """Causal multi-head self-attention: x (B, T, d) -> (B, T, d).

    qkv = Linear(d, 3d)(x) is [q | k | v] along the last dim; within each, head h owns
    columns [h*dh, (h+1)*dh). Scores are q k^T / sqrt(dh); position t attends to 0..t.
    """
    B, T, d = x.shape
    dh = d // n_head
    qkv = linear(x, qkv_weight, qkv_bias)                       # (B, T, 3d)
    q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]  # (B, T, d) each

    def heads(t):  # (B, T, d) -> (B, H, T, dh)
        return t.reshape(B, T, n_head, dh).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    scores = (q @ k.transpose(0, 1, 3, 2)) * _F32(1.0 / math.sqrt(dh))  # (B, H, T, T)
    future = np.triu(np.ones((T, T), dtype=bool), k=1)                  # key index > query index
    scores = np.where(future, -np.inf, scores).astype(_F32)
    att = softmax(scores, axis=-1)                                      # (B, H, T, T)
    y = att @ v                                                         # (B, H, T, dh)
    y = y.transpose(0, 2, 1, 3).reshape(B, T, d)                        # heads back side by side
    return linear(y, proj_weight, proj_bias)


# Taylor-type series erf(z) = 2/sqrt(pi) * exp(-z^2) * sum_n (2 z^2)^n z / (2n+1)!!: every term is
# positive, so nothing cancels and the float64 sum is accurate to a few ulp. Terms stop
# shrinking at n ~ z^2, so |z| <= 6 needs < 200 terms; beyond, erf(z) = +-1 in float64.
_ERF_SATURATE = 6.0
_ERF_MAX_TERMS = 200


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorised error function in float64 (accurate to ~1e-15); returns float64."""
    x = np.asarray(x, dtype=np.float64)
    z = np.clip(np.abs(x), 0.0, _ERF_SATURATE)  # NaN stays NaN through clip
    z2 = z * z
    term = z.copy()
    total = z.copy()
    for n in range(_ERF_MAX_TERMS):
        term = term * (2.0 * z2) / (2 * n + 3)
        total += term
        if not np.any(term > 1e-17 * total):
            break
    result = (2.0 / math.sqrt(math.pi)) * np.exp(-z2) * total
    result = np.where(np.abs(x) >= _ERF_SATURATE, 1.0, np.minimum(result, 1.0))
    return np.copysign(result, x)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU as nn.GELU(): x/2 (1 + erf(x/sqrt 2)). GELU(+inf) = +inf, GELU(-inf) = -0."""
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        y = 0.5 * x64 * (1.0 + erf(x64 / math.sqrt(2.0)))
    y = np.where(np.isposinf(x64), np.inf, np.where(np.isneginf(x64), -0.0, y))
    return y.astype(_F32)


def mlp(x: np.ndarray, fc1_weight, fc1_bias, fc2_weight, fc2_bias) -> np.ndarray:
    """Linear(d, 4d) -> GELU -> Linear(4d, d): (B, T, d) -> (B, T, d)."""
    return linear(gelu(linear(x, fc1_weight, fc1_bias)), fc2_weight, fc2_bias)


def block(x: np.ndarray, w: dict[str, np.ndarray], prefix: str, config: ModelConfig) -> np.ndarray:
    """One pre-LN transformer block on the residual stream x (B, T, d)."""
    eps = config.layernorm_eps
    h = layer_norm(x, w[prefix + "ln1.weight"], w[prefix + "ln1.bias"], eps)
    x = x + causal_self_attention(h, w[prefix + "attn.qkv.weight"], w[prefix + "attn.qkv.bias"],
                                  w[prefix + "attn.proj.weight"], w[prefix + "attn.proj.bias"],
                                  config.n_head)
    h = layer_norm(x, w[prefix + "ln2.weight"], w[prefix + "ln2.bias"], eps)
    x = x + mlp(h, w[prefix + "mlp.fc1.weight"], w[prefix + "mlp.fc1.bias"],
                w[prefix + "mlp.fc2.weight"], w[prefix + "mlp.fc2.bias"])
    return x.astype(_F32)


# ------------------------------------------------------------------------------------ model


@dataclasses.dataclass
class ForwardResult:
    """Outputs of one forward. trace holds each layer's output, named as the C++ ForwardTrace:
    "embed" (B,T,d), "blocks.{i}" (residual stream after block i), "ln_f" (B,T,d), "logits"."""

    logits: np.ndarray  # (B, T, V)
    probs: np.ndarray   # (B, T, V)
    trace: dict[str, np.ndarray]


class NumpyMiniGPT:
    """The reference model: holds a config and float32 weights named as the state_dict."""

    def __init__(self, config: ModelConfig, weights: dict[str, np.ndarray],
                 vocab: list[str] | None = None):
        config.validate()
        self.config = config
        self.weights = check_weights(weights, config, "NumpyMiniGPT")
        self.vocab = vocab

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "NumpyMiniGPT":
        """Loads a .safetensors or .npz model file."""
        f = load_model(path)
        return cls(f.config, f.weights, f.vocab)

    @classmethod
    def from_model_file(cls, f: ModelFile) -> "NumpyMiniGPT":
        return cls(f.config, f.weights, f.vocab)

    def forward(self, ids) -> ForwardResult:
        """ids (B, T) integers in [0, V), 1 <= T <= block_size -> logits, probs, trace."""
        ids = np.asarray(ids)
        c, w = self.config, self.weights
        if ids.ndim != 2:
            raise ValueError(f"ids must have shape (B, T), got {ids.shape}")
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"ids must be integers, got dtype {ids.dtype}")
        B, T = ids.shape
        if not 1 <= T <= c.block_size:
            raise ValueError(f"sequence length T = {T} must be in [1, block_size = {c.block_size}]")
        if ids.size and (ids.min() < 0 or ids.max() >= c.vocab_size):
            raise ValueError(f"token ids must be in [0, {c.vocab_size}), got [{ids.min()}, {ids.max()}]")

        trace: dict[str, np.ndarray] = {}
        x = embedding(ids, w["wte.weight"], w["wpe.weight"])  # (B, T, d)
        trace["embed"] = x
        for i in range(c.n_layer):
            x = block(x, w, f"blocks.{i}.", c)
            trace[f"blocks.{i}"] = x
        x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], c.layernorm_eps)
        trace["ln_f"] = x
        logits = linear(x, w["lm_head.weight"], w["lm_head.bias"])  # (B, T, V)
        trace["logits"] = logits
        return ForwardResult(logits, softmax(logits), trace)

    __call__ = forward

    def loss(self, ids, targets) -> float:
        """Mean cross-entropy over targets != -1 (as the C++ forward_train), in float64."""
        targets = np.asarray(targets)
        logits = self.forward(ids).logits.astype(np.float64)
        keep = targets != -1
        if not keep.any():
            raise ValueError("every target is -1: the loss is undefined")
        z = logits[keep]                                   # (N, V)
        m = z.max(axis=-1, keepdims=True)
        logsumexp = (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))[:, 0]
        picked = z[np.arange(z.shape[0]), targets[keep]]
        return float(np.mean(logsumexp - picked))


def logits_in_precision(f: ModelFile, ids, dtype) -> np.ndarray:
    """The reference forward of ids (B, T) with every op and weight in `dtype`, logits (B, T, V)
    as float64. float64 gives the exact result that fp32 implementations (the C++ engine, the
    GPU's summation orders) are set against: bench/forward_accuracy.py,
    experiments/25-compile/decode_conditioning.py."""
    global _F32
    saved = _F32
    _F32 = dtype  # the reference's working precision, read by every layer above
    try:
        m = NumpyMiniGPT.from_model_file(f)  # (checks, and holds, float32 weights)
        m.weights = {k: v.astype(dtype) for k, v in m.weights.items()}
        return m.forward(ids).logits.astype(np.float64)
    finally:
        _F32 = saved
