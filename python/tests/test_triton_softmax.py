"""The Triton softmax (minigpt.triton_softmax) against the NumPy reference (float64 sums) to
1e-4 and against torch.softmax on the GPU; special values as docs/ARCHITECTURE.md. Skipped, with the
reason printed, when triton, torch or a CUDA GPU is missing. The comparison with the CUDA fused
kernel on the same tensors is in test_softmax_cuda_into.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import require  # noqa: E402

torch = require("torch", "torch is not importable", module_level=True)
if not torch.cuda.is_available():  # before triton: on a CPU machine the GPU is the reason
    pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)", allow_module_level=True)
require("triton", "triton is not importable", module_level=True)

from minigpt import triton_softmax as ts  # noqa: E402
from minigpt.numpy_minigpt import softmax as np_softmax  # noqa: E402
from softmax_cases import check_special_rows, write_special_rows  # noqa: E402

SHAPES = [(64, 600), (512, 600), (4096, 600), (1, 1), (3, 3), (5, 601), (7, 2049), (4, 32000), (2, 50257)]


def _rand(b: int, v: int, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.rand(b, v, generator=gen) * 16 - 8).cuda()


@pytest.mark.parametrize("b,v", SHAPES)
def test_matches_numpy_reference_and_torch(b, v):
    x = _rand(b, v, seed=b * 7 + v)
    y = ts.softmax(x)
    ref = np_softmax(x.cpu().numpy())
    np.testing.assert_allclose(y.cpu().numpy(), ref, rtol=1e-4, atol=1e-4 / v)
    torch.testing.assert_close(y, torch.softmax(x, dim=-1), rtol=1e-4, atol=1e-4 / v)


@pytest.mark.parametrize("v", [3, 600, 5000])  # one block and the looping two-pass path
def test_special_values(v):
    x = _rand(5, v, seed=v)
    write_special_rows(x)
    y = ts.softmax(x).cpu()
    check_special_rows(torch, y, "triton")
    np.testing.assert_allclose(y[4].numpy(), np_softmax(x[4:5].cpu().numpy())[0], rtol=1e-4, atol=1e-7)


def test_empty_batch_and_bad_input():
    assert ts.softmax(torch.empty(0, 600, device="cuda")).shape == (0, 600)
    with pytest.raises(ValueError):
        ts.softmax(torch.zeros(4, 600, device="cuda", dtype=torch.float16))


def test_picked_config_is_in_the_search_space():
    picked = ts.tune()
    assert set(picked) == {"64x600", "512x600", "4096x600"}
    for cfg in picked.values():
        assert cfg is not None
        assert cfg["BLOCK"] in ts.BLOCKS and cfg["num_warps"] in ts.WARPS
