"""minigpt.softmax(x) (python/minigpt/dispatch.py): NumPy arrays and torch CPU tensors through the
CPU kernel, torch CUDA tensors through DLPack on torch's current stream; the same kind comes back.
Checked against the NumPy reference (float64 sums) by relative error, the special rows of
docs/ARCHITECTURE.md, and every bad input as a Python exception naming the cause. The CUDA tests
skip, saying so, without torch's CUDA, a GPU or a CUDA build of the module (scripts/gpu-check.sh
runs them on the GPU host).
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import compare_probs, require  # noqa: E402

core = require("minigpt.core", "the C++ module _minigpt_core is not built", module_level=True)
import minigpt  # noqa: E402
from minigpt.numpy_minigpt import softmax as np_softmax  # noqa: E402
from softmax_cases import check_special_rows, write_special_rows  # noqa: E402

RTOL = 1e-5


def _rand(shape, seed):
    return (np.random.default_rng(seed).random(shape, dtype=np.float32) * 16 - 8).astype(np.float32)


@pytest.mark.parametrize("shape", [(600,), (4, 600), (2, 3, 601), (0, 5)])
def test_numpy(shape):
    x = _rand(shape, seed=sum(shape))
    y = minigpt.softmax(x)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == x.shape
    compare_probs("minigpt.softmax numpy", str(shape), y, np_softmax(x.astype(np.float64)), rtol=RTOL)


def test_numpy_kernel_choice():
    x = _rand((8, 600), seed=1)
    for kernel in core.softmax_kernels("cpu"):
        compare_probs("minigpt.softmax numpy", kernel, minigpt.softmax(x, kernel=kernel),
                      np_softmax(x.astype(np.float64)), rtol=RTOL)


@pytest.mark.parametrize("shape", [(4, 600), (2, 3, 601), (0, 5)])
def test_torch_cpu(torch, shape):
    x = torch.from_numpy(_rand(shape, seed=sum(shape) + 1))
    y = minigpt.softmax(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == x.shape
    assert y.device.type == "cpu"
    compare_probs("minigpt.softmax torch cpu", str(shape), y.numpy(), np_softmax(x.double().numpy()), rtol=RTOL)
    # the same result as torch.softmax
    torch.testing.assert_close(y, torch.softmax(x, dim=-1), rtol=RTOL, atol=1e-7)


def test_special_rows_torch_cpu(torch):
    x = torch.from_numpy(_rand((5, 600), seed=7))
    write_special_rows(x)
    check_special_rows(torch, minigpt.softmax(x), "minigpt.softmax torch cpu")


def test_bad_numpy_inputs():
    with pytest.raises(TypeError, match="float32"):
        minigpt.softmax(np.zeros((2, 3), dtype=np.float64))
    with pytest.raises(ValueError, match="C-contiguous"):
        minigpt.softmax(np.zeros((4, 6), dtype=np.float32)[:, ::2])
    with pytest.raises(ValueError, match="at least 1 dimension"):
        minigpt.softmax(np.array(1.0, dtype=np.float32))
    with pytest.raises(ValueError, match="last dimension must be >= 1"):
        minigpt.softmax(np.zeros((3, 0), dtype=np.float32))
    with pytest.raises(core.Error, match="unknown CPU kernel 'fastest'"):
        minigpt.softmax(np.zeros((3, 4), dtype=np.float32), kernel="fastest")
    with pytest.raises(TypeError, match="numpy.ndarray or a torch.Tensor, got list"):
        minigpt.softmax([[1.0, 2.0]])


def test_bad_torch_inputs(torch):
    x = torch.zeros(4, 6)
    with pytest.raises(TypeError, match=r"torch.float32, got torch.float64; convert with x.float\(\)"):
        minigpt.softmax(x.double())
    with pytest.raises(ValueError, match=r"contiguous tensor; use x.contiguous\(\)"):
        minigpt.softmax(x[:, ::2])
    with pytest.raises(ValueError, match="0-d tensor"):
        minigpt.softmax(torch.tensor(1.0))
    with pytest.raises(ValueError, match="last dimension must be >= 1"):
        minigpt.softmax(torch.zeros(3, 0))
    with pytest.raises(ValueError, match=r"requires grad.*x.detach\(\)"):
        minigpt.softmax(x.requires_grad_())


def test_cuda_tensor_without_gpu_is_a_clear_error(torch):
    """No GPU here: a CUDA tensor cannot even be made, so the module's own CUDA entry must say why."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the CUDA tests below cover this path")
    with pytest.raises(core.Error, match="no CUDA device is visible|built without CUDA"):
        core.softmax(np.zeros((2, 3), dtype=np.float32), device="cuda")


# ------------------------------------------------------------------------------------ CUDA

def _cuda(torch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    if "fused" not in core.softmax_kernels("cuda"):
        pytest.skip("the C++ module was built without CUDA")
    return torch


@pytest.mark.parametrize("shape", [(64, 600), (2, 3, 601), (4, 32000), (0, 600)])
def test_cuda_tensor(torch, shape):
    torch = _cuda(torch)
    x = torch.from_numpy(_rand(shape, seed=sum(shape) + 2)).cuda()
    y = minigpt.softmax(x)
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.device == x.device and y.shape == x.shape
    compare_probs("minigpt.softmax torch cuda", str(shape), y.cpu().numpy(),
                  np_softmax(x.double().cpu().numpy()), rtol=RTOL)


def test_cuda_runs_on_the_current_stream(torch):
    """Enqueued on torch's current stream: on a side stream that first sleeps, then writes x, the
    kernel must see the written values. Launched on any other stream (torch's side streams do
    not synchronise with the default one) it would run during the sleep and read zeros."""
    torch = _cuda(torch)
    src = torch.from_numpy(_rand((256, 4096), seed=3)).cuda()
    x = torch.zeros_like(src)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(100_000_000)  # ~50 ms of GPU cycles on `side` only
        x.copy_(src)
        y = minigpt.softmax(x)
    side.synchronize()
    compare_probs("minigpt.softmax torch cuda", "side stream", y.cpu().numpy(),
                  np_softmax(src.double().cpu().numpy()), rtol=RTOL)


def test_cuda_no_copy_of_the_input(torch):
    """The kernel reads the tensor's own memory: a later write to x changes a new call's result,
    and the output is a fresh tensor from torch's allocator (not a view of x)."""
    torch = _cuda(torch)
    x = torch.from_numpy(_rand((8, 600), seed=4)).cuda()
    y = minigpt.softmax(x)
    assert y.data_ptr() != x.data_ptr()
    x[0].fill_(0.0)
    y2 = minigpt.softmax(x)
    torch.testing.assert_close(y2[0], torch.full((600,), 1 / 600, device="cuda"), rtol=RTOL, atol=0)
    torch.testing.assert_close(y2[1:], y[1:], rtol=0, atol=0)


def test_cuda_special_rows(torch):
    torch = _cuda(torch)
    x = torch.from_numpy(_rand((5, 600), seed=5)).cuda()
    write_special_rows(x)
    check_special_rows(torch, minigpt.softmax(x).cpu(), "minigpt.softmax torch cuda")


def test_cuda_bad_inputs(torch):
    torch = _cuda(torch)
    x = torch.zeros(4, 6, device="cuda")
    with pytest.raises(TypeError, match="torch.float32, got torch.float16"):
        minigpt.softmax(x.half())
    with pytest.raises(ValueError, match="contiguous"):
        minigpt.softmax(x.t())
    with pytest.raises(core.Error, match="unknown CUDA kernel 'fastest'"):
        minigpt.softmax(x, kernel="fastest")
