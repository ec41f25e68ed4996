"""minigpt: the Python side of minigpt.cpp.

The C++ engine (needs the compiled module: `pip install .`, or the in-tree build on PYTHONPATH),
loaded on first use so that `import minigpt` itself needs only NumPy:
    minigpt.Model          Model.load(path, device="cpu"|"cuda"): forward, predict, generate
    minigpt.softmax        softmax(x) of a NumPy array or a torch tensor (CPU, or CUDA via DLPack)
    minigpt.Tokenizer      the word tokenizer of a model's vocabulary
    minigpt.Error          what a C++ error raises (a RuntimeError)

Submodules (imported on demand):
    minigpt.model_io       load/save model files (.safetensors, .npz), random test models
    minigpt.numpy_minigpt  the NumPy reference model (the oracle of the contract tests)
    minigpt.torch_minigpt  the PyTorch port (needs torch)
    minigpt.core           the C++ engine through the nanobind module _minigpt_core
    minigpt.dispatch       softmax's dispatch between NumPy, torch CPU and torch CUDA
    minigpt.triton_softmax the Triton softmax kernel (needs triton and a GPU)
    minigpt.plot           plots of benchmark results (needs matplotlib)
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .model_io import ModelConfig, ModelFile, ModelFileError, load_model, save_model

if TYPE_CHECKING:  # what __getattr__ below returns, for type checkers
    from .core import Error, Model, Tokenizer
    from .dispatch import softmax

__all__ = ["Error", "Model", "ModelConfig", "ModelFile", "ModelFileError", "Tokenizer", "load_model",
           "save_model", "softmax"]

_FROM_CORE = ("Error", "Model", "Tokenizer")


def __getattr__(name: str):
    """Model, Tokenizer, Error and softmax, imported from the C++ module on first use (PEP 562)."""
    if name in _FROM_CORE:
        from . import core
        return getattr(core, name)
    if name == "softmax":
        from .dispatch import softmax
        return softmax
    raise AttributeError(f"module 'minigpt' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
