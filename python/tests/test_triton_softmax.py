"""The Triton softmax (minigpt.triton_softmax) against the NumPy reference (float64 sums) and
torch.softmax on the GPU: each of its four kernels forced at odd shapes, the tuned path, the
special values of the numerics table. Skipped, with the reason printed, when triton, torch or a
CUDA GPU is missing; the same kernels run on the CPU under Triton's interpreter in
test_triton_softmax_interpreter.py, and the autotune cache in test_triton_autotune.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import require  # noqa: E402

torch = require("torch", "torch is not importable", module_level=True)
if not torch.cuda.is_available():  # before triton: on a CPU machine the GPU is the reason
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
require("triton", "triton is not importable", module_level=True)

from minigpt import triton_softmax as ts  # noqa: E402
from minigpt.numpy_minigpt import softmax as np_softmax  # noqa: E402
from softmax_cases import check_special_rows, write_special_rows  # noqa: E402

# Issue 19's odd shapes: V = 1, 7, 1023, 1025, 100003 and B = 1, 3, 65537.
ODD = [(1, 1), (3, 7), (65537, 7), (3, 1023), (1, 1025), (65537, 128), (3, 100003), (1, 100003)]
SHAPES = ODD + [(64, 600), (512, 600), (4096, 600), (5, 601), (7, 2049), (4, 32000), (2, 50257)]


def _rand(b: int, v: int, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.rand(b, v, generator=gen) * 16 - 8).cuda()


def _check(y: torch.Tensor, x: torch.Tensor) -> None:
    # Relative to each output (the outputs span many decades: an absolute bound would let a
    # kernel that zeroed the small ones pass). exp in fp32 is within a few ulp; the row sum's
    # rounding adds about V * 2^-24 relative at worst: 1e-4 + V * 1e-7 covers both with margin.
    v = x.shape[1]
    ref = np_softmax(x.cpu().numpy())
    np.testing.assert_allclose(y.cpu().numpy(), ref, rtol=1e-5 + v * 1e-7, atol=0)
    torch.testing.assert_close(y, torch.softmax(x, dim=-1), rtol=1e-5 + v * 1e-7, atol=0)


def _forced(b: int, v: int) -> list[dict]:
    block = ts._next_pow2(v)
    cfgs = [{"kernel": "looped", "BLOCK": 1024, "num_warps": 4},
            {"kernel": "looped", "BLOCK": 1024, "num_warps": 4, "PROGRAMS": 3},
            {"kernel": "split", "CHUNK": 2048, "BLOCK": 1024, "num_warps": 4},
            # V > 2048: the row's programs wait for each other (as many per SM as fit, or 4)
            {"kernel": "resident", "CHUNK": 2048, "num_warps": 4},
            {"kernel": "resident", "CHUNK": 1024, "num_warps": 2, "PER_SM": 4},
            {"kernel": "resident", "CHUNK": 1024, "num_warps": 4, "maxnreg": 64}]
    if block <= 32768:  # a whole row per program: no waiting
        cfgs.append({"kernel": "resident", "CHUNK": max(block, 16), "num_warps": 4})
    if block <= ts.MAX_ROW_BLOCK:
        cfgs.append({"kernel": "rows", "ROWS": max(1, min(4096 // block, 64)), "BLOCK": block, "num_warps": 4})
    return cfgs


@pytest.mark.parametrize("b,v", SHAPES)
def test_each_kernel_matches_the_reference(b, v):
    x = _rand(b, v, seed=b * 7 + v)
    for cfg in _forced(b, v):
        _check(ts.softmax(x, config=cfg), x)


@pytest.mark.parametrize("b,v", [(3, 7), (7, 2049), (3, 50257)])
def test_rows_at_other_alignments(b, v):
    # x's rows v + 1 apart (y's v: cut at no boundary, ALIGN 1) and v + 4 apart (cut at x's,
    # which are y's too); every row of x starts at another offset mod 16 bytes
    for pad in (1, 4):
        x = _rand(b, v + pad, seed=v + pad)[:, :v]
        for cfg in _forced(b, v):
            y = torch.empty(b, v, device="cuda")
            ts.launch(x, y, cfg)
            _check(y, x)


def _ptx_accesses(kernel) -> tuple[int, int]:
    """(16-byte, narrower) global loads and stores in a compiled kernel's PTX."""
    import re
    ops = re.findall(r"\b(?:ld|st)\.global\S*", kernel.asm["ptx"])
    wide = sum(".v4." in op for op in ops)
    return wide, len(ops) - wide


def test_odd_rows_move_16_bytes_at_a_time():
    # (2048, 50257): rows at every offset mod 4 floats. The body of each is loaded and stored
    # with 16-byte accesses (v4); only the head and tail floats (one access each) are narrower.
    x = _rand(3, 50257, seed=1)
    y = torch.empty_like(x)
    part = torch.zeros((3, 13), dtype=torch.int64, device="cuda")
    k = ts._resident_kernel.warmup(x, y, part, 3, 50257, 50257, 50257, 13, CHUNK=4096, CHUNKS_P2=16, ALIGN=4,
                                   num_warps=2, grid=(1,))
    wide, narrow = _ptx_accesses(k)
    assert wide == 2 * 4096 // (32 * 2) // 4 and narrow <= 2, (wide, narrow)  # 16 loads, 16 stores
    k = ts._looped_kernel.warmup(x, y, 3, 50257, 50257, 50257, BLOCK=4096, ALIGN=4, num_warps=8, grid=(1,))
    wide, narrow = _ptx_accesses(k)
    assert wide >= 3 * 4 and narrow <= 2 * 2, (wide, narrow)  # 2 body loads, 1 store; edges
    _check(ts.softmax(x, config={"kernel": "resident", "CHUNK": 4096, "num_warps": 2}), x)


def test_resident_refuses_more_programs_per_sm_than_fit():
    x = _rand(4, 5000, seed=2)
    with pytest.raises(ValueError, match="fit on an SM at once"):
        ts.softmax(x, config={"kernel": "resident", "CHUNK": 2048, "num_warps": 8, "PER_SM": 64})


@pytest.mark.parametrize("b,v", [(1000, 1000), (65536, 128), (100, 128256), (5, 601)])
def test_tuned_path(b, v, tmp_path, monkeypatch):
    monkeypatch.setenv("MINIGPT_TRITON_AUTOTUNE", str(tmp_path / "tune.json"))
    ts._picked.clear()
    x = _rand(b, v, seed=v)
    _check(ts.softmax(x), x)
    cfg = ts.picked_config(b, v)
    assert cfg in ts.candidates(b, v, ts._sm_count()), cfg
    assert (tmp_path / "tune.json").exists()
    ts._picked.clear()  # a new process would read the disk entry instead of tuning again
    assert ts.pick_config(b, v) == cfg


@pytest.mark.parametrize("v", [3, 600, 5000, 40000])
def test_special_values(v):
    x = _rand(5, v, seed=v)
    write_special_rows(x)
    for cfg in _forced(5, v):
        y = ts.softmax(x, config=cfg).cpu()
        check_special_rows(torch, y, f"triton {cfg}")
        np.testing.assert_allclose(y[4].numpy(), np_softmax(x[4:5].cpu().numpy())[0], rtol=1e-5, atol=0)


def test_empty_batch_and_bad_input():
    assert ts.softmax(torch.empty(0, 600, device="cuda")).shape == (0, 600)
    with pytest.raises(ValueError, match=r"softmax expects a \(B, V\) float32 tensor, got \(4, 600\) torch.float16"):
        ts.softmax(torch.zeros(4, 600, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="CUDA tensor"):
        ts.softmax(torch.zeros(4, 600))
    with pytest.raises(ValueError, match="unknown Triton softmax kernel"):
        ts.softmax(torch.zeros(4, 600, device="cuda"), config={"kernel": "nope"})


def test_tune_picks_from_the_candidates():
    picked = ts.tune()
    assert set(picked) == {"64x600", "512x600", "4096x600"}
    for key, cfg in picked.items():
        b, v = (int(t) for t in key.split("x"))
        assert cfg in ts.candidates(b, v, ts._sm_count())
