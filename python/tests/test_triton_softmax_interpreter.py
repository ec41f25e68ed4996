"""The Triton softmax's four kernels run on the CPU under Triton's interpreter
(TRITON_INTERPRET=1, which must be set before triton is imported, so in a child process), at
odd shapes and the special values, against the NumPy reference: CI has no GPU, and this is what
keeps the kernels' index and mask arithmetic under test on every submission."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import require  # noqa: E402

require("torch", "torch is not importable", module_level=True)
require("triton", "triton is not importable (it comes with PyPI's torch)", module_level=True)

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from minigpt import triton_softmax as ts  # noqa: E402

if torch.cuda.is_available():
    # test_triton_softmax.py runs the same kernels compiled; and Triton 3.6's interpreter (the GPU
    # host's) cannot run the persistent loop's range() over a program id, which 3.9's can.
    pytest.skip("a GPU is present: test_triton_softmax.py runs these kernels compiled", allow_module_level=True)

_PY = Path(__file__).resolve().parents[1]

_CHILD = textwrap.dedent("""
    import numpy as np, torch
    from minigpt import triton_softmax as ts
    from minigpt.numpy_minigpt import softmax as ref
    from softmax_cases import write_special_rows, check_special_rows
    def configs(v):
        out = [{"kernel": "looped", "BLOCK": 16, "num_warps": 1},
               {"kernel": "looped", "BLOCK": 16, "num_warps": 1, "PROGRAMS": 2},
               {"kernel": "split", "CHUNK": 32, "BLOCK": 16, "num_warps": 1},
               # a whole row per chunk: the interpreter runs programs in turn, so a row's
               # programs could never wait for each other (the GPU test forces CHUNKS > 1)
               {"kernel": "resident", "CHUNK": max(16, ts._next_pow2(v)), "num_warps": 1}]
        if ts._next_pow2(v) <= ts.MAX_ROW_BLOCK:
            out += [{"kernel": "rows", "ROWS": r, "BLOCK": ts._next_pow2(v), "num_warps": 1} for r in (1, 4)]
        return out
    gen = torch.Generator().manual_seed(0)
    n = 0
    for b, v in [(1, 1), (3, 7), (5, 33), (2, 100), (3, 63), (1, 65)]:  # BLOCK 16, CHUNK 32: every boundary
        x = torch.rand(b, v, generator=gen) * 16 - 8
        for cfg in configs(v):
            y = torch.empty_like(x)
            ts.launch(x, y, cfg)
            np.testing.assert_allclose(y.numpy(), ref(x.numpy()), rtol=1e-5 + v * 1e-7, atol=0,
                                       err_msg=f"{(b, v)} {cfg}")
            n += 1
    # rows of x and y at other alignments: x's stride v + 4 (cut as y's), v + 1 (no cut)
    for pad in (4, 1):
        x = (torch.rand(3, 37 + pad, generator=gen) * 16 - 8)[:, :37]
        for cfg in configs(37):
            y = torch.empty(3, 37)
            ts.launch(x, y, cfg)
            np.testing.assert_allclose(y.numpy(), ref(x.numpy()), rtol=1e-5, atol=0, err_msg=f"pad {pad} {cfg}")
            n += 1
    for v in (3, 40):
        x = torch.rand(5, v, generator=gen) * 16 - 8
        write_special_rows(x)
        for cfg in configs(v):
            y = torch.empty_like(x)
            ts.launch(x, y, cfg)
            check_special_rows(torch, y, f"interpreter {cfg}")
            n += 1
    print("checked", n)
""")


def test_resident_partials_pack_under_the_interpreter():
    # The resident kernel's waiters read a chunk's (max, sum) and its "written" flag from one
    # int64: the fp32 bits must come back exactly and a written value must never be 0.
    r = subprocess.run([sys.executable, "-W", "ignore", "-c",
                        "import test_triton_softmax_interpreter as t; t.pack_roundtrip()"],
                       env=_child_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pack ok" in r.stdout, r.stdout


def _child_env() -> dict:
    return dict(os.environ, TRITON_INTERPRET="1",
                PYTHONPATH=os.pathsep.join([str(_PY), str(_PY / "tests"), os.environ.get("PYTHONPATH", "")]))


def test_kernels_under_the_interpreter():
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", _CHILD], env=_child_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checked 60" in r.stdout, r.stdout


def test_resident_grid_keeps_a_rows_programs_together():
    # The persistent grid is a multiple of the chunks of a row and never more programs than
    # fit on the GPU at once; else a row's programs could wait for one never started.
    assert ts._resident_programs(b=1024, chunks=10, sms=132) == 130
    assert ts._resident_programs(b=1024, chunks=4, sms=132, per_sm=2, fit=3) == 264
    assert ts._resident_programs(b=3, chunks=4, sms=132) == 12  # no more than the tasks
    assert ts._resident_programs(b=5000, chunks=1, sms=132) == 5000  # a row per program waits for no one
    with pytest.raises(ValueError, match="exceed the 132 programs"):
        ts._resident_programs(b=8, chunks=133, sms=132)
    with pytest.raises(ValueError, match="only 2 of the compiled kernel fit"):
        ts._resident_programs(b=8, chunks=2, sms=132, per_sm=4, fit=2)


@triton.jit
def _pack_roundtrip(m_ptr, s_ptr, packed_ptr, m_out, s_out, N: tl.constexpr):
    i = tl.arange(0, N)
    p = ts._pack(tl.load(m_ptr + i), tl.load(s_ptr + i))
    tl.store(packed_ptr + i, p)
    m, s = ts._unpack(p)
    tl.store(m_out + i, m)
    tl.store(s_out + i, s)


def pack_roundtrip():  # run in the interpreter's child process
    inf, nan = float("inf"), float("nan")
    m = torch.tensor([0.0, -0.0, 1.5, -7.25, inf, -inf, nan, 3e38], dtype=torch.float32)
    s = torch.tensor([1.0, 2.0, 1e-30, 4096.0, nan, 0.0, nan, 1.0], dtype=torch.float32)
    packed = torch.zeros(8, dtype=torch.int64)
    m2, s2 = torch.empty(8), torch.empty(8)
    _pack_roundtrip[(1,)](m, s, packed, m2, s2, N=8)
    assert bool((packed != 0).all()), packed  # 0 means "not written yet" to the resident kernel's waiters
    assert m2.view(torch.int32).tolist() == m.view(torch.int32).tolist()  # the exact bits, NaN included
    assert s2.view(torch.int32).tolist() == s.view(torch.int32).tolist()
    print("pack ok")


def test_default_config_without_tuning():
    # MINIGPT_TRITON_TUNE=0: short rows in `rows` tiles, long rows `resident` while a row's chunks
    # fit one program per SM (so its grid is always valid), longer rows `split`
    assert ts.default_config(1000, 1000)["kernel"] == "rows"
    for b, v in [(2048, 50257), (16, 1048576), (3, 100003)]:
        cfg = ts.default_config(b, v)
        assert cfg["kernel"] == "resident", (b, v, cfg)
        chunks = -(-v // cfg["CHUNK"])
        assert ts._resident_programs(b, chunks, 132) % chunks == 0
    assert ts.default_config(4, 4_000_000)["kernel"] == "split"
