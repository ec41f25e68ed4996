"""Model files in Python: load and save a GrammarMiniGPT's config, vocabulary and weights.

Defines the Python side of the formats in src/model/model_file.h:

* ``.safetensors`` (main format): fp32 tensors named as the PyTorch port's ``state_dict``, and
  in ``__metadata__`` the strings ``"format": "minigpt"``, ``"config"`` (JSON of ModelConfig)
  and ``"vocab"`` (JSON array of tokens, index = token id).
* ``.npz`` (for the NumPy reference): the same tensors as ``.npy`` members, plus
  ``__metadata__.npy``, a 1-D uint8 array holding the UTF-8 JSON ``{"config": ..., "vocab": ...}``.

Loading checks every name, dtype and shape against the config (``expected_parameters``, the
same list as src/model/weights.h) and raises ``ModelFileError`` naming the file and the tensor.
Never pickle: ``.npz`` is read with ``allow_pickle=False``. Saving is atomic (temporary file in
the same folder, fsync, rename).

Not here: the models themselves (numpy_minigpt.py, torch_minigpt.py) and the C++ loader (which
is stricter about bytes; this module relies on numpy and the safetensors package for parsing).
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

__all__ = [
    "ModelConfig",
    "ModelFile",
    "ModelFileError",
    "SPECIAL_TOKENS",
    "expected_parameters",
    "check_weights",
    "load_model",
    "save_model",
    "random_model",
]

# Ids 0..3 of every vocabulary (src/data/tokenizer.h).
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")


class ModelFileError(ValueError):
    """A model file (or a weights dict) that does not match the format or the config."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of the grammar MiniGPT, as src/model/config.h (same JSON keys)."""

    n_layer: int = 4
    n_head: int = 4
    d_model: int = 64
    block_size: int = 64  # longest sequence; position embeddings are (block_size, d_model)
    vocab_size: int = 0
    layernorm_eps: float = 1e-5  # as nn.LayerNorm; held as the float32 value C++ uses

    def __post_init__(self):
        # The C++ config holds a float: keep the same value here so configs compare equal
        # after a trip through C++ (1e-5 -> 9.999999747378752e-06).
        object.__setattr__(self, "layernorm_eps", float(np.float32(self.layernorm_eps)))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def d_ff(self) -> int:
        return 4 * self.d_model

    def validate(self) -> None:
        for key in ("n_layer", "n_head", "d_model", "block_size", "vocab_size"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelFileError(f"config: {key} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head != 0:
            raise ModelFileError(
                f"config: d_model {self.d_model} is not divisible by n_head {self.n_head}")
        if not 0.0 < float(self.layernorm_eps) < 1.0:
            raise ModelFileError(f"config: layernorm_eps must be in (0, 1), got {self.layernorm_eps}")

    def to_json(self) -> dict:
        j = dataclasses.asdict(self)
        # Shortest decimal that reads back as the same float32 ("1e-05", not 9.99999974e-06).
        j["layernorm_eps"] = float(str(np.float32(self.layernorm_eps)))
        return j

    @classmethod
    def from_json(cls, j: Mapping) -> "ModelConfig":
        if not isinstance(j, Mapping):
            raise ModelFileError("config: expected a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(j) - known)
        if unknown:
            raise ModelFileError(f"config: unknown key '{unknown[0]}'")
        kwargs = dict(j)
        if "layernorm_eps" in kwargs:
            kwargs["layernorm_eps"] = float(kwargs["layernorm_eps"])
        config = cls(**kwargs)
        config.validate()
        return config


def expected_parameters(config: ModelConfig) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every parameter, in the canonical order of src/model/weights.h."""
    d, V, F = config.d_model, config.vocab_size, config.d_ff
    out = [("wte.weight", (V, d)), ("wpe.weight", (config.block_size, d))]
    for i in range(config.n_layer):
        p = f"blocks.{i}."
        out += [
            (p + "ln1.weight", (d,)), (p + "ln1.bias", (d,)),
            (p + "attn.qkv.weight", (3 * d, d)), (p + "attn.qkv.bias", (3 * d,)),
            (p + "attn.proj.weight", (d, d)), (p + "attn.proj.bias", (d,)),
            (p + "ln2.weight", (d,)), (p + "ln2.bias", (d,)),
            (p + "mlp.fc1.weight", (F, d)), (p + "mlp.fc1.bias", (F,)),
            (p + "mlp.fc2.weight", (d, F)), (p + "mlp.fc2.bias", (d,)),
        ]
    out += [("ln_f.weight", (d,)), ("ln_f.bias", (d,)),
            ("lm_head.weight", (V, d)), ("lm_head.bias", (V,))]
    return out


@dataclasses.dataclass
class ModelFile:
    """What a model file holds: config, vocabulary (index = id) and fp32 weights by name."""

    config: ModelConfig
    vocab: list[str]
    weights: dict[str, np.ndarray]  # canonical order, float32, C-contiguous


def check_weights(weights: Mapping[str, np.ndarray], config: ModelConfig, where: str = "weights"
                  ) -> dict[str, np.ndarray]:
    """Checks names, dtypes and shapes against the config; returns them in canonical order.

    Raises ModelFileError naming `where` and the first missing, extra, non-fp32 or misshapen
    tensor.
    """
    expected = expected_parameters(config)
    names = {name for name, _ in expected}
    extra = sorted(set(weights) - names)
    if extra:
        raise ModelFileError(f"{where}: unexpected tensor '{extra[0]}' (not a parameter of this config)")
    out = {}
    for name, shape in expected:
        if name not in weights:
            raise ModelFileError(f"{where}: missing tensor '{name}' (expected shape {shape})")
        array = np.asarray(weights[name])
        if array.dtype != np.float32:
            raise ModelFileError(f"{where}: tensor '{name}' has dtype {array.dtype}, expected float32")
        if tuple(array.shape) != shape:
            raise ModelFileError(
                f"{where}: tensor '{name}' has shape {tuple(array.shape)}, expected {shape}")
        out[name] = np.ascontiguousarray(array)
    return out


def _check_vocab(vocab, config: ModelConfig, where: str) -> list[str]:
    if not isinstance(vocab, list) or not all(isinstance(t, str) for t in vocab):
        raise ModelFileError(f"{where}: vocab must be a list of strings")
    if len(vocab) != config.vocab_size:
        raise ModelFileError(
            f"{where}: vocab has {len(vocab)} tokens, config says vocab_size = {config.vocab_size}")
    return list(vocab)


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in (".safetensors", ".npz"):
        raise ModelFileError(f"{path}: unknown model file extension '{suffix}' "
                             "(expected .safetensors or .npz)")
    return suffix


def load_model(path: str | os.PathLike) -> ModelFile:
    """Loads a .safetensors or .npz model file (by extension), checking everything."""
    path = Path(path)
    suffix = _suffix(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: no such file")
    if suffix == ".safetensors":
        config_json, vocab, tensors = _read_safetensors(path)
    else:
        config_json, vocab, tensors = _read_npz(path)
    try:
        config = ModelConfig.from_json(config_json)
    except (ModelFileError, TypeError, ValueError) as e:
        raise ModelFileError(f"{path}: {e}") from None
    vocab = _check_vocab(vocab, config, str(path))
    return ModelFile(config, vocab, check_weights(tensors, config, str(path)))


def _parse_json(text, path: Path, what: str):
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelFileError(f"{path}: {what} is not valid JSON: {e}") from None


def _read_safetensors(path: Path):
    from safetensors import safe_open  # the pip package's NumPy API

    try:
        with safe_open(str(path), framework="numpy") as f:
            metadata = f.metadata() or {}
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except Exception as e:  # the Rust parser raises its own error types
        raise ModelFileError(f"{path}: not a valid safetensors file: {e}") from None
    if metadata.get("format") != "minigpt":
        raise ModelFileError(f"{path}: __metadata__ 'format' is {metadata.get('format')!r}, expected 'minigpt'")
    for key in ("config", "vocab"):
        if key not in metadata:
            raise ModelFileError(f"{path}: __metadata__ has no '{key}'")
    config = _parse_json(metadata["config"], path, "__metadata__ 'config'")
    vocab = _parse_json(metadata["vocab"], path, "__metadata__ 'vocab'")
    return config, vocab, tensors


def _read_npz(path: Path):
    try:
        with np.load(path, allow_pickle=False) as archive:
            members = {name: archive[name] for name in archive.files}
    except Exception as e:  # zipfile / format errors, object arrays refused by allow_pickle=False
        raise ModelFileError(f"{path}: not a valid .npz file: {e}") from None
    meta = members.pop("__metadata__", None)
    if meta is None:
        raise ModelFileError(f"{path}: no __metadata__.npy member")
    if meta.dtype != np.uint8 or meta.ndim != 1:
        raise ModelFileError(f"{path}: __metadata__ must be a 1-D uint8 array, got {meta.dtype} {meta.shape}")
    j = _parse_json(meta.tobytes(), path, "__metadata__")  # json.loads decodes UTF-8 bytes
    if not isinstance(j, dict) or "config" not in j or "vocab" not in j:
        raise ModelFileError(f"{path}: __metadata__ must be a JSON object with 'config' and 'vocab'")
    return j["config"], j["vocab"], members


def save_model(path: str | os.PathLike, model: ModelFile) -> None:
    """Writes a .safetensors or .npz model file (by extension), atomically."""
    path = Path(path)
    suffix = _suffix(path)
    model.config.validate()
    vocab = _check_vocab(list(model.vocab), model.config, "save_model")
    weights = check_weights(model.weights, model.config, "save_model")
    config_json = json.dumps(model.config.to_json())
    vocab_json = json.dumps(vocab, ensure_ascii=False)

    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp" + suffix,
                               dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "wb") as f:
            if suffix == ".safetensors":
                from safetensors.numpy import save

                f.write(save(weights, metadata={"format": "minigpt", "config": config_json,
                                                "vocab": vocab_json}))
            else:
                meta = json.dumps({"config": model.config.to_json(), "vocab": vocab},
                                  ensure_ascii=False).encode("utf-8")
                # Uncompressed members: the C++ reader and np.load both take them directly.
                np.savez(f, __metadata__=np.frombuffer(meta, dtype=np.uint8), **weights)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def random_model(config: ModelConfig | None = None, seed: int = 42, vocab: list[str] | None = None
                 ) -> ModelFile:
    """A model with random weights for tests and benchmarks, deterministic for a seed.

    Drawn from numpy's default_rng(seed) in canonical order. Unlike a training initialisation
    every tensor is non-trivial, so a bug that swaps or drops a gain, a bias or a transpose
    changes the output visibly: Linear weights normal(0, 0.1) (large enough that attention
    scores and the vocabulary softmax are far from uniform), Linear biases normal(0, 0.02),
    LayerNorm gains 1 + normal(0, 0.1) and biases normal(0, 0.05), embeddings normal(0, 0.5). vocab defaults to the specials then "w4", "w5", ...
    """
    if config is None:
        config = ModelConfig(vocab_size=600)
    config.validate()
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in expected_parameters(config):
        leaf = name.rsplit(".", 1)[-1]
        is_norm = ".ln" in name or name.startswith("ln_f")
        if is_norm and leaf == "weight":
            w = 1.0 + rng.normal(0.0, 0.1, shape)
        elif is_norm:
            w = rng.normal(0.0, 0.05, shape)
        elif name in ("wte.weight", "wpe.weight"):
            w = rng.normal(0.0, 0.5, shape)
        else:
            w = rng.normal(0.0, 0.02 if leaf == "bias" else 0.1, shape)
        weights[name] = w.astype(np.float32)
    if vocab is None:
        vocab = list(SPECIAL_TOKENS) + [f"w{i}" for i in range(len(SPECIAL_TOKENS), config.vocab_size)]
    return ModelFile(config, _check_vocab(list(vocab), config, "random_model"), weights)
