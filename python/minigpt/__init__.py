"""minigpt: the Python side of minigpt.cpp.

Submodules (imported on demand, so `import minigpt` needs only NumPy):
    minigpt.model_io       load/save model files (.safetensors, .npz), random test models
    minigpt.numpy_minigpt  the NumPy reference model (the oracle of the contract tests)
    minigpt.torch_minigpt  the PyTorch port (needs torch)
    minigpt.core           the C++ engine through the nanobind module _minigpt_core
    minigpt.triton_softmax the Triton softmax kernel (needs triton and a GPU)
    minigpt.plot           plots of benchmark results (needs matplotlib)
"""
from .model_io import ModelConfig, ModelFile, ModelFileError, load_model, save_model

__all__ = ["ModelConfig", "ModelFile", "ModelFileError", "load_model", "save_model"]
