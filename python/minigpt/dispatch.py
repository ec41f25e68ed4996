"""``minigpt.softmax(x)``: the C++/CUDA softmax for a NumPy array or a torch tensor, returning
the same kind.

- NumPy array, torch CPU tensor: the production CPU kernel (``simd``) on the module's thread
  pool (``minigpt.core.set_num_threads``). The tensor is read in place through DLPack; the result
  is a new array (``torch.from_numpy`` of it for a tensor: no copy either way).
- torch CUDA tensor: the CUDA kernel through DLPack on torch's current stream of the tensor's
  device (``torch.cuda.current_stream(x.device).cuda_stream``), into ``torch.empty_like(x)``
  (torch's caching allocator): no copy, no synchronisation, so it composes with torch's own
  kernels and can be captured in a CUDA graph once the kernel is warm.

Softmax is over the last dimension; any leading dimensions are rows. Bad input is a Python
exception naming the cause, checked before any kernel runs: TypeError for a wrong kind or dtype
(float32 only), ValueError for a 0-d input, an empty last dimension, a non-contiguous tensor or
one that requires grad (this kernel has no backward), ``minigpt.core.Error`` (a RuntimeError)
for a CUDA tensor when the module has no CUDA or no GPU is visible.

Not here: the kernels (src/kernels/), their bindings (python/bindings/softmax*.cpp), autograd.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional, TypeVar, Union

import numpy as np

from . import core

if TYPE_CHECKING:
    import torch

ArrayOrTensor = TypeVar("ArrayOrTensor", bound=Union[np.ndarray, "torch.Tensor"])

CPU_KERNEL = "simd"    # the production kernels (softmax_kernels() lists every one)
CUDA_KERNEL = "fused"  # default config: no tuning run, no autotune cache file written


def softmax(x: ArrayOrTensor, kernel: Optional[str] = None) -> ArrayOrTensor:
    """Softmax over the last dimension of a float32 NumPy array or torch tensor (CPU or CUDA),
    returned as the same kind on the same device.

    kernel: None for the production kernel (simd on the CPU, fused on CUDA), else one of
    ``minigpt.core.softmax_kernels(device)``. Rows with a NaN or +inf, and rows of all -inf, come
    out as NaN rows (as torch.softmax). Not differentiable: pass ``x.detach()`` for a tensor
    that requires grad.
    """
    if isinstance(x, np.ndarray):
        return core.softmax(x, kernel or CPU_KERNEL)
    torch = sys.modules.get("torch")  # a torch tensor implies torch is imported
    if torch is None or not isinstance(x, torch.Tensor):
        raise TypeError(f"softmax: expected a numpy.ndarray or a torch.Tensor, got {type(x).__name__}")
    _check_tensor(torch, x)
    if x.device.type == "cpu":
        return torch.from_numpy(core.softmax(x, kernel or CPU_KERNEL))
    if x.device.type != "cuda":
        raise ValueError(f"softmax: tensors on {x.device.type} are not supported (cpu or cuda)")
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y  # B = 0: no launch (the launcher would not launch either)
    cols = x.shape[-1]
    with torch.cuda.device(x.device):  # the launcher runs on the current device
        stream = torch.cuda.current_stream(x.device).cuda_stream
        core.softmax_cuda_into(x.view(-1, cols), y.view(-1, cols), kernel or CUDA_KERNEL, stream)
    return y


def _check_tensor(torch, x) -> None:
    """The checks nanobind's DLPack conversion would make, as messages that name the fix."""
    if x.dtype != torch.float32:
        raise TypeError(f"softmax: expected dtype torch.float32, got {x.dtype}; convert with x.float()")
    if x.dim() < 1:
        raise ValueError("softmax: expected at least 1 dimension (rows..., cols), got a 0-d tensor")
    if x.shape[-1] < 1:
        raise ValueError(f"softmax: the last dimension must be >= 1, got shape {tuple(x.shape)}")
    if not x.is_contiguous():
        raise ValueError("softmax: expected a contiguous tensor; use x.contiguous()")
    if x.requires_grad:
        raise ValueError("softmax: x requires grad, and this kernel has no backward; pass x.detach()")
