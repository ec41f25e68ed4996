"""core.softmax_cuda_into: the CUDA kernels on torch tensors that are already on the GPU (DLPack,
no copy), on the caller's stream, capturable into a CUDA graph. Checked against the NumPy
reference (float64 sums), against the Triton kernel to 1e-4 (issue 4), and for the special
values of docs/ARCHITECTURE.md. The GPU tests skip, with the reason, without torch, a CUDA build of the
module or a GPU. What can be checked without a GPU runs everywhere: arrays on the host are
refused (a TypeError from nanobind's device check). The shape, dtype, layout and kernel-name
checks come after that device check, so they need CUDA tensors and run with the GPU tests.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import require  # noqa: E402

core = require("minigpt.core", "the C++ module _minigpt_core is not built", module_level=True)
from minigpt.numpy_minigpt import softmax as np_softmax  # noqa: E402
from softmax_cases import check_special_rows, write_special_rows  # noqa: E402

SHAPES = [(64, 600), (512, 600), (1, 1), (3, 3), (5, 601), (7, 2049), (4, 32000), (2, 50257)]


def test_host_arrays_are_rejected():
    """No GPU needed: NumPy arrays (and torch CPU tensors, if torch is here) are refused."""
    x = np.zeros((4, 600), dtype=np.float32)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        core.softmax_cuda_into(x, x.copy())  # NumPy arrays live on the CPU
    try:
        import torch
    except ImportError:
        return
    t = torch.zeros(4, 600)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        core.softmax_cuda_into(t, t.clone())


def _cuda_torch():
    torch = require("torch", "torch is not importable")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    if "fused_tuned" not in core.softmax_kernels("cuda"):
        pytest.skip("the C++ module was built without CUDA")
    return torch


def _rand(torch, b: int, v: int, seed: int):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.rand(b, v, generator=gen) * 16 - 8).cuda()


def _run(torch, x, kernel):
    y = torch.full_like(x, float("nan"))  # poisoned: every element must be written
    core.softmax_cuda_into(x, y, kernel, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return y


@pytest.mark.parametrize("b,v", SHAPES)
@pytest.mark.parametrize("kernel", ["naive", "smem", "fused", "fused_tuned"])
def test_matches_numpy_reference(kernel, b, v):
    torch = _cuda_torch()
    x = _rand(torch, b, v, seed=b * 31 + v)
    y = _run(torch, x, kernel).cpu().numpy()
    assert np.isfinite(y).all()
    # naive sums a row in float, one thread in order: 5e-5 relative at V = 50257 (measured)
    rtol = 1e-4 if kernel == "naive" else 1e-5
    np.testing.assert_allclose(y, np_softmax(x.cpu().numpy()), rtol=rtol, atol=0)


@pytest.mark.parametrize("b,v", [(64, 600), (512, 600), (4096, 600), (7, 2049), (4, 32000)])
def test_fused_matches_triton(b, v):
    torch = _cuda_torch()
    ts = pytest.importorskip("minigpt.triton_softmax", reason="triton is not installed")
    x = _rand(torch, b, v, seed=v)
    torch.testing.assert_close(_run(torch, x, "fused_tuned"), ts.softmax(x), rtol=1e-4, atol=1e-4 / v)


@pytest.mark.parametrize("v", [3, 600, 50257])
def test_special_values(v):
    torch = _cuda_torch()
    x = _rand(torch, 5, v, seed=v)
    write_special_rows(x)
    for kernel in ("fused", "fused_tuned"):
        check_special_rows(torch, _run(torch, x, kernel).cpu(), kernel)


def test_captured_in_a_cuda_graph():
    torch = _cuda_torch()
    x = _rand(torch, 64, 600, seed=1)
    y = torch.empty_like(x)
    core.softmax_cuda_into(x, y)  # the first call per shape tunes (and synchronises): not in a capture
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        core.softmax_cuda_into(x, y, "fused_tuned", s.cuda_stream)
    y.fill_(float("nan"))
    x.copy_(_rand(torch, 64, 600, seed=2))  # the replay reads the new values
    g.replay()
    torch.cuda.synchronize()
    np.testing.assert_allclose(y.cpu().numpy(), np_softmax(x.cpu().numpy()), rtol=1e-5, atol=0)


def test_bad_arguments_on_the_gpu():
    torch = _cuda_torch()
    x = _rand(torch, 4, 600, seed=3)
    with pytest.raises(ValueError, match=r"\(4, 600\) but y is \(4, 601\)"):
        core.softmax_cuda_into(x, torch.empty(4, 601, device="cuda"))
    with pytest.raises(TypeError, match="incompatible function arguments"):
        core.softmax_cuda_into(x.double(), x.double())
    with pytest.raises(TypeError, match="incompatible function arguments"):
        core.softmax_cuda_into(x.cpu(), x.cpu())
    with pytest.raises(TypeError, match="incompatible function arguments"):
        core.softmax_cuda_into(x[:, ::2], torch.empty(4, 300, device="cuda"))  # not contiguous
    with pytest.raises(core.Error, match="unknown CUDA kernel"):
        core.softmax_cuda_into(x, torch.empty_like(x), "fastest")
    empty = torch.empty(0, 600, device="cuda")
    core.softmax_cuda_into(empty, empty)  # B = 0: nothing launched, no error
