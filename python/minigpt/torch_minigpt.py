"""The PyTorch port of the grammar MiniGPT: a faithful, layer-by-layer copy of numpy_minigpt.py.

GrammarMiniGPT(nn.Module) with nn.Embedding (wte, wpe), pre-LN blocks (nn.LayerNorm ln1/ln2,
attention written out: qkv nn.Linear(d, 3d) -> heads -> masked softmax -> proj nn.Linear(d, d);
mlp.fc1 nn.Linear(d, 4d) -> nn.GELU() (exact erf) -> mlp.fc2), ln_f and lm_head nn.Linear(d, V)
with bias. Its state_dict names are the model-file tensor names (src/model/weights.h), so a
file loads by name, with every shape checked.

Used as the peer of the C++ engine (bench/peers/torch_model.py, torch_train.py) and as the
autograd oracle of the gradient tests. The LM-head softmax is a hook (set_lm_head_softmax) so
the Triton kernel can replace torch.softmax on CUDA tensors.

Not here: sampling, KV-cache decoding, file parsing (model_io.py), the Triton kernel itself
(triton_softmax.py).
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .model_io import ModelConfig, ModelFile, ModelFileError, check_weights, load_model, save_model

__all__ = ["GrammarMiniGPT", "CausalSelfAttention", "MLP", "Block", "SoftmaxFn"]

# A softmax over the last dim of a 2-D (rows, V) contiguous tensor, returning the same shape.
SoftmaxFn = Callable[[torch.Tensor], torch.Tensor]


def _torch_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


class CausalSelfAttention(nn.Module):
    """x (B, T, d) -> (B, T, d). qkv output is [q | k | v]; head h owns columns [h*dh, (h+1)*dh)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        d = config.d_model
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        # True above the diagonal: key position > query position is the future, masked out.
        # Not persistent: it is derived from block_size, not a parameter of the file.
        future = torch.ones(config.block_size, config.block_size, dtype=torch.bool).triu(1)
        self.register_buffer("future", future, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        H, dh = self.n_head, self.head_dim
        q, k, v = self.qkv(x).split(d, dim=-1)             # (B, T, d) each
        q = q.view(B, T, H, dh).transpose(1, 2)            # (B, H, T, dh)
        k = k.view(B, T, H, dh).transpose(1, 2)
        v = v.view(B, T, H, dh).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))          # (B, H, T, T)
        scores = scores.masked_fill(self.future[:T, :T], float("-inf"))
        att = torch.softmax(scores, dim=-1)
        y = att @ v                                                          # (B, H, T, dh)
        y = y.transpose(1, 2).contiguous().view(B, T, d)                     # heads side by side
        return self.proj(y)


class MLP(nn.Module):
    """Linear(d, 4d) -> exact GELU -> Linear(4d, d)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.gelu = nn.GELU()  # approximate="none": the erf form
        self.fc2 = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-LN block: x += attn(ln1(x)); x += mlp(ln2(x))."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model, eps=config.layernorm_eps)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.d_model, eps=config.layernorm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GrammarMiniGPT(nn.Module):
    """The grammar MiniGPT. forward(ids) -> (logits, probs); forward_train(ids, targets) -> loss."""

    def __init__(self, config: ModelConfig, vocab: list[str] | None = None):
        super().__init__()
        config.validate()
        self.config = config
        self.vocab = vocab
        d = config.d_model
        self.wte = nn.Embedding(config.vocab_size, d)
        self.wpe = nn.Embedding(config.block_size, d)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(d, eps=config.layernorm_eps)
        self.lm_head = nn.Linear(d, config.vocab_size)
        self._lm_head_softmax: SoftmaxFn | None = None

    # ---------------------------------------------------------------------------- weights

    @torch.no_grad()
    def init_gpt2_(self, seed: int = 0) -> "GrammarMiniGPT":
        """The C++ ModelWeights::init_random scheme (same distributions, not the same numbers):
        normal(0, 0.02) weights, zero biases, unit LayerNorm gains; attn.proj and mlp.fc2
        weights scaled by 1/sqrt(2 n_layer). For training peers that should start alike."""
        g = torch.Generator(device="cpu").manual_seed(seed)
        residual_scale = 1.0 / math.sqrt(2.0 * self.config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif ".ln" in name or name.startswith("ln_f"):
                p.fill_(1.0)
            else:
                w = torch.randn(p.shape, generator=g) * 0.02
                if name.endswith("attn.proj.weight") or name.endswith("mlp.fc2.weight"):
                    w *= residual_scale
                p.copy_(w)
        return self

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "GrammarMiniGPT":
        """Loads a .safetensors or .npz model file, in eval() mode."""
        return cls.from_model_file(load_model(path))

    @classmethod
    def from_model_file(cls, f: ModelFile) -> "GrammarMiniGPT":
        model = cls(f.config, f.vocab)
        model.load_weights(f.weights)
        return model.eval()

    def load_weights(self, weights: Mapping[str, np.ndarray | torch.Tensor]) -> None:
        """Copies every tensor by state_dict name. Raises ModelFileError naming the first
        missing, extra or misshapen tensor (nothing is copied unless every shape matches)."""
        state = self.state_dict()
        extra = sorted(set(weights) - set(state))
        if extra:
            raise ModelFileError(f"GrammarMiniGPT: unexpected tensor '{extra[0]}' (no such parameter)")
        for name, param in state.items():
            if name not in weights:
                raise ModelFileError(f"GrammarMiniGPT: missing tensor '{name}' "
                                     f"(expected shape {tuple(param.shape)})")
            shape = tuple(weights[name].shape)
            if shape != tuple(param.shape):
                raise ModelFileError(f"GrammarMiniGPT: tensor '{name}' has shape {shape}, "
                                     f"expected {tuple(param.shape)}")
        with torch.no_grad():
            for name, param in state.items():
                value = weights[name]
                if isinstance(value, np.ndarray):
                    value = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
                param.copy_(value.to(dtype=param.dtype))

    def numpy_weights(self) -> dict[str, np.ndarray]:
        """The parameters as float32 NumPy arrays, by name, in canonical (file) order."""
        state = {k: v.detach().to("cpu", torch.float32).numpy().copy() for k, v in self.state_dict().items()}
        return check_weights(state, self.config, "GrammarMiniGPT")

    def to_model_file(self) -> ModelFile:
        if self.vocab is None:
            raise ValueError("this model has no vocabulary: pass vocab= to GrammarMiniGPT")
        return ModelFile(self.config, list(self.vocab), self.numpy_weights())

    def save(self, path: str | os.PathLike) -> None:
        """Writes a .safetensors or .npz model file (atomically)."""
        save_model(path, self.to_model_file())

    # ---------------------------------------------------------------------------- softmax hook

    def set_lm_head_softmax(self, fn: SoftmaxFn | None) -> None:
        """Replaces torch.softmax for the LM head's probabilities on CUDA tensors.

        fn receives the logits as a contiguous (B*T, V) tensor and returns probabilities of the
        same shape. It is used only when the logits are on a CUDA device (the Triton kernel's
        case); CPU tensors always use torch.softmax. None restores torch.softmax everywhere.
        """
        self._lm_head_softmax = fn

    def lm_head_softmax(self, logits: torch.Tensor) -> torch.Tensor:
        """softmax over V of logits (..., V), through the hook when it applies."""
        fn = self._lm_head_softmax if (self._lm_head_softmax is not None and logits.is_cuda) else _torch_softmax
        V = logits.shape[-1]
        return fn(logits.reshape(-1, V).contiguous()).view(logits.shape)

    # ---------------------------------------------------------------------------- forward

    def _check_ids(self, ids: torch.Tensor) -> None:
        if ids.dim() != 2:
            raise ValueError(f"ids must have shape (B, T), got {tuple(ids.shape)}")
        T = ids.shape[1]
        if not 1 <= T <= self.config.block_size:
            raise ValueError(f"sequence length T = {T} must be in [1, block_size = {self.config.block_size}]")

    def hidden(self, ids: torch.Tensor, trace: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """ids (B, T) -> ln_f output (B, T, d). trace, if given, receives "embed",
        "blocks.{i}" and "ln_f" (the names of numpy_minigpt.ForwardResult.trace)."""
        self._check_ids(ids)
        T = ids.shape[1]
        pos = torch.arange(T, device=ids.device)
        x = self.wte(ids) + self.wpe(pos)[None]          # (B, T, d)
        if trace is not None:
            trace["embed"] = x
        for i, blk in enumerate(self.blocks):
            x = blk(x)
            if trace is not None:
                trace[f"blocks.{i}"] = x
        x = self.ln_f(x)
        if trace is not None:
            trace["ln_f"] = x
        return x

    def forward(self, ids: torch.Tensor, trace: dict[str, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (B, T) int64 -> (logits, probs), each (B, T, V)."""
        logits = self.lm_head(self.hidden(ids, trace))
        if trace is not None:
            trace["logits"] = logits
        return logits, self.lm_head_softmax(logits)

    def forward_train(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of the next-token logits over targets (B, T) != -1 (as the C++
        GrammarMiniGPT::forward_train). No probabilities are materialised."""
        logits = self.lm_head(self.hidden(ids))
        V = logits.shape[-1]
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1).long(), ignore_index=-1)
