"""bench/peers/torch_compile_dump.py --quick on TinyHead: torch.compile runs cold in a private
cache, the compiled TinyHead matches eager within the lab's 1e-6, and Inductor's fused softmax
kernel is kept in kernel_inductor.cpp with its call() wrapper and its torch version.

One cold Inductor compile of Linear(64, 600) + softmax: about 20-40 s on 2 idle cores (most of it
g++ on the generated kernel); more when the machine is busy.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "peers" / "torch_compile_dump.py"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch is not installed: torch.compile is the peer under test")


def run_dump(out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *extra],
                          capture_output=True, text=True, env=env, timeout=900)


def test_tinyhead_quick_keeps_the_fused_softmax_kernel(tmp_path):
    proc = run_dump(tmp_path, "--quick", "--models", "tinyhead", "--threads", "1",
                    "--compile-threads", "1", "--no-gpu")
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((tmp_path / "torch_compile.json").read_text())
    import torch
    assert report["torch"] == torch.__version__

    (row,) = report["results"]
    assert row["model"] == "tinyhead" and row["mode"] == "default" and row["threads"] == 1
    assert row["match"]["tolerance"] == 1e-6
    assert 0.0 <= row["match"]["max_abs_diff"] < 1e-6 and row["match"]["passed"]
    assert report["compile_match_passed"] is True
    assert row["first_call_s"] > 0 and row["warm_first_call_s"] > 0
    assert row["eager_median_us"] > 0 and row["compiled_median_us"] > 0
    assert any("softmax" in k for k in row["kernels"]), row["kernels"]

    kernel = (tmp_path / "kernel_inductor.cpp").read_text()
    assert f"torch {torch.__version__}" in kernel.splitlines()[1]
    body = kernel.split("---- call()")[0]
    assert 'extern "C"' in body and "cpp_fused_" in body and "softmax" in body
    # The fused softmax: a max reduction, exp of (x - max), a sum reduction and the division,
    # all in this one kernel.
    for piece in ("at::vec::maximum", ".exp()", "vec_reduce_all", " / "):
        assert piece in body, piece
    # The wrapper: the Linear runs outside the generated code, as an extern addmm.
    wrapper = kernel.split("---- call()")[1]
    assert "extern_kernels.addmm" in wrapper and "cpp_fused_" in wrapper

    # Its source is a file the run left under the output folder, not a global /tmp cache.
    src = (tmp_path / row["output_code"])
    assert src.is_file() and "async_compile" in src.read_text()
    assert any((tmp_path / "inductor_cache").rglob("*.so"))


def test_bad_arguments_fail_with_a_clear_error(tmp_path):
    proc = run_dump(tmp_path, "--models", "resnet")
    assert proc.returncode == 2
    assert "unknown 'resnet'" in proc.stderr
    proc = run_dump(tmp_path, "--threads", "0")
    assert proc.returncode == 2 and "--threads" in proc.stderr


def test_missing_torch_exits_non_zero(tmp_path):
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise ImportError('no torch here (test)')\n")
    env = dict(os.environ, PYTHONPATH=f"{fake}{os.pathsep}{ROOT / 'python'}")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), "--quick"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert "torch is not importable" in proc.stderr and "no torch here" in proc.stderr
